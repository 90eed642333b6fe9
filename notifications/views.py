from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render

from accounts.http import AuthenticatedHttpRequest
from notifications import services
from notifications.kinds import OPTIONAL_KINDS, SPECS, USER_FACING_CRITICAL_KINDS, Kind


@login_required
def notification_settings(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The signed-in user's own choices: optional kinds on or off; critical ones always on."""
    if request.method == "POST":
        chosen = [kind for kind in request.POST.getlist("enabled") if kind in OPTIONAL_KINDS]
        services.set_preferences(request.user, chosen)
        messages.success(request, "Notification settings saved.")
        return redirect("notifications:settings")
    enabled = services.enabled_kinds(request.user)
    optional = [(kind, Kind(kind).label, SPECS[kind].help, kind in enabled) for kind in OPTIONAL_KINDS]
    critical = [(kind, Kind(kind).label) for kind in USER_FACING_CRITICAL_KINDS]
    return render(request, "notifications/settings.html", {"optional": optional, "critical": critical})
