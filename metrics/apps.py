from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "metrics"
    verbose_name = "Node metrics"

    def ready(self) -> None:
        from metrics import idle  # noqa: F401  (registers its email context)
