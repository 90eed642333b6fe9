from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

admin.site.site_header = "Runcrate Clusters operations"
admin.site.site_title = "Runcrate operations"
admin.site.index_title = "Operations"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="clusters:list", permanent=False)),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("clusters/", include("clusters.urls")),
    path("offers/", include("offers.urls")),
    path("account/", include("accounts.urls")),
    path("billing/", include("billing.urls")),
    path("quote/", include("quotes.urls")),
    path("account/notifications/", include("notifications.urls")),
    path("", include("api.urls")),
    path("admin/", admin.site.urls),
]
