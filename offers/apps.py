from django.apps import AppConfig


class OffersConfig(AppConfig):
    name = "offers"
    verbose_name = "Offers and inventory"
