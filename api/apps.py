from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "JSON API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from accounts.signals import membership_ended
        from api.keys import revoke_keys_of_ended_membership

        membership_ended.connect(revoke_keys_of_ended_membership, dispatch_uid="api.revoke_keys_of_ended_membership")
