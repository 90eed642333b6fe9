from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Workspaces and members"

    def ready(self) -> None:
        from accounts import sso

        sso.connect()
