"""Signing in through a workspace's identity provider (accounts.sso): the address form, and
allauth's view that starts a sign-in at a provider, wrapped to say when the provider does not
answer. allauth's other provider views (the callback) come with allauth.urls."""

from django.urls import path

from accounts import views

app_name = "sso"
urlpatterns = [
    path("login/sso/", views.sso_sign_in, name="sign_in"),
    path("sso/<str:provider_id>/login/", views.sso_start),
]
