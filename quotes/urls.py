from django.urls import path

from quotes import views

app_name = "quotes"
urlpatterns = [
    path("", views.quote_request, name="request"),
    path("thanks/", views.quote_thanks, name="thanks"),
]
