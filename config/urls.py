from allauth.account import views as allauth_views
from allauth.account.decorators import secure_admin_login
from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

admin.site.site_header = "Runcrate Clusters operations"
admin.site.site_title = "Runcrate operations"
admin.site.index_title = "Operations"
# Operators sign in through allauth too: the same rate limits and two-factor step.
admin.site.login = secure_admin_login(admin.site.login)  # type: ignore[method-assign]


class FaviconView(RedirectView):
    """/favicon.ico, which a browser asks for on a page that names no icon (a JSON answer, the
    admin): the product's own, from its static files."""

    def get_redirect_url(self, *args: object, **kwargs: object) -> str:
        return static("img/favicon.svg")


urlpatterns = [
    path("", RedirectView.as_view(pattern_name="clusters:list", permanent=False)),
    path("favicon.ico", FaviconView.as_view()),
    # allauth's sign-in and sign-out under the names the rest of the product uses.
    path("login/", allauth_views.login, name="login"),
    path("logout/", allauth_views.logout, name="logout"),
    # Before allauth's: its view that starts a sign-in at a workspace's provider, wrapped.
    path("", include("accounts.sso_urls")),
    path("", include("allauth.urls")),
    path("clusters/", include("clusters.urls")),
    path("clusters/", include("metrics.urls")),
    path("offers/", include("offers.urls")),
    path("account/", include("accounts.urls")),
    path("billing/", include("billing.urls")),
    path("quote/", include("quotes.urls")),
    path("account/notifications/", include("notifications.urls")),
    path("account/webhooks/", include("webhooks.urls")),
    path("account/audit/", include("audit.urls")),
    path("", include("api.urls")),
    path("admin/", admin.site.urls),
]
