from django.apps import AppConfig


class OffersConfig(AppConfig):
    name = "offers"
    verbose_name = "Offers and inventory"

    def ready(self) -> None:
        from offers import emails, inventory  # noqa: F401  (register their email contexts)
