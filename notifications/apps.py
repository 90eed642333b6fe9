from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from accounts.signals import invitation_created
        from notifications import context  # noqa: F401  (registers the billing and invitation email contexts)
        from notifications.receivers import email_invitation

        invitation_created.connect(email_invitation, dispatch_uid="notifications.email_invitation")
