"""The API under /api/: one router for every app's viewsets, the schema and its docs.

The docs page (Swagger UI) is served from the drf-spectacular-sidecar wheel's static
files, so it loads nothing from another host, and is started by static/js/api_docs.js
rather than drf-spectacular's inline script, which the Content-Security-Policy
(script-src 'self') blocks.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from drf_spectacular.settings import patched_settings, spectacular_settings
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from harness_app.api import (
    BenchmarkViewSet,
    ImportJobViewSet,
    ObtainExpiringAuthToken,
    PolicyConfigViewSet,
)
from training.api.exports import ExportViewSet
from training.api.rl_jobs import RLJobViewSet
from training.api.rollout_requests import RolloutRequestViewSet
from training.api.sft_jobs import SFTJobViewSet
from trajectories.api.ablations import AblationMatrixViewSet
from trajectories.api.annotations import AnnotationViewSet
from trajectories.api.batches import BatchViewSet
from trajectories.api.episodes import EpisodeViewSet
from trajectories.api.evaluations import EvaluationRunViewSet
from trajectories.api.harness_tasks import HarnessGroupViewSet, HarnessTaskViewSet
from trajectories.api.recording import RecordingViewSet

OFFLINE_DOCS = {"SWAGGER_UI_DIST": "SIDECAR", "SWAGGER_UI_FAVICON_HREF": "SIDECAR"}


class OfflineSwaggerView(SpectacularSwaggerView):
    """Swagger UI with its JavaScript and CSS from our own static files, and no inline
    script (templates/api_docs.html)."""

    schema = None  # the page itself is not part of the API
    template_name = "api_docs.html"

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        with patched_settings(OFFLINE_DOCS):
            response = super().get(request, *args, **kwargs)
            response.data["swagger_settings"] = spectacular_settings.SWAGGER_UI_SETTINGS
        return response


router = DefaultRouter()
router.register("benchmarks", BenchmarkViewSet, basename="benchmark")
router.register("imports", ImportJobViewSet, basename="import")
router.register("policies", PolicyConfigViewSet, basename="policy")
router.register("batches", BatchViewSet, basename="batch")
router.register("ablation-matrices", AblationMatrixViewSet, basename="ablation-matrix")
router.register("evaluation-runs", EvaluationRunViewSet, basename="evaluation-run")
router.register("episodes", EpisodeViewSet, basename="episode")
router.register("annotations", AnnotationViewSet, basename="annotation")
router.register("exports", ExportViewSet, basename="export")
router.register("sft-jobs", SFTJobViewSet, basename="sft-job")
router.register("rl-jobs", RLJobViewSet, basename="rl-job")
router.register("rollout-requests", RolloutRequestViewSet, basename="rollout-request")
router.register("recordings", RecordingViewSet, basename="recording")
router.register("harness-tasks", HarnessTaskViewSet, basename="harness-task")
router.register("harness-groups", HarnessGroupViewSet, basename="harness-group")

urlpatterns = [
    path("token/", ObtainExpiringAuthToken.as_view(), name="api-token"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", OfflineSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include(router.urls)),
]
