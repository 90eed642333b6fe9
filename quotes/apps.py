from django.apps import AppConfig


class QuotesConfig(AppConfig):
    name = "quotes"
    verbose_name = "Quote requests"

    def ready(self) -> None:
        from quotes import emails  # noqa: F401  (registers its email context)
