from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from config.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", include("config.api_urls")),
    path("", include("harness_app.urls")),
    path("", include("trajectories.urls")),
    path("training/", include("training.urls")),
    # The episode list's Export action links here (?episodes=<ids>).
    path(
        "exports/new/",
        RedirectView.as_view(pattern_name="sft_export_create", query_string=True),
    ),
]

handler400 = "config.errors.bad_request"
handler403 = "config.errors.permission_denied"
handler404 = "config.errors.page_not_found"
handler500 = "config.errors.server_error"
