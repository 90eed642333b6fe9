from django.urls import path

from accounts import views

app_name = "accounts"
urlpatterns = [
    path("workspace/switch/", views.switch_workspace, name="switch_workspace"),
    path("environment/switch/", views.switch_environment, name="switch_environment"),
    path("members/", views.members, name="members"),
    path("members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("members/<int:membership_id>/remove/", views.member_remove, name="member_remove"),
    path("invitations/<int:invitation_id>/revoke/", views.invitation_revoke, name="invitation_revoke"),
    path("invitations/<str:token>/", views.invitation, name="invitation"),
    path("sso/", views.single_sign_on, name="sso"),
    path("welcome/", views.welcome, name="welcome"),
    path("workspaces/", views.workspaces, name="workspaces"),
    path("workspaces/<int:workspace_id>/leave/", views.workspace_leave, name="workspace_leave"),
    path("ssh-keys/", views.ssh_keys, name="ssh_keys"),
    path("ssh-keys/<int:key_id>/delete/", views.ssh_key_delete, name="ssh_key_delete"),
    path("environments/", views.environments, name="environments"),
    path("environments/<int:environment_id>/budget/", views.environment_budget, name="environment_budget"),
    path("environments/<int:environment_id>/idle-notice/", views.environment_idle_notice, name="environment_idle_notice"),
]
