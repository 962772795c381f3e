"""The API's roles, and its benchmark, import and policy-config endpoints.

Roles are the pages' (harness_app.roles): researchers do everything; annotators read and
annotate but launch nothing. Every viewset names its permission classes from here.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.decorators import action
from rest_framework.exceptions import Throttled, ValidationError
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from harness_app import jobs
from harness_app.importers.records import ImportRejected
from harness_app.models import Benchmark, ImportJob, PolicyConfig
from harness_app.roles import BROWSE_ROLES, Role, user_has_role
from harness_app.serializers import (
    BenchmarkImportSerializer,
    BenchmarkSerializer,
    ImportJobSerializer,
    PolicyConfigSavedSerializer,
    PolicyConfigSerializer,
    PolicyInUseSerializer,
)
from harness_app.services.import_jobs import import_job_create
from harness_app.services.policies import (
    PolicyConfigError,
    PolicySaved,
    policy_config_create,
    policy_config_delete,
    policy_config_update,
)
from harness_app.services.users import api_token_obtain


class CanBrowse(BasePermission):
    """Researchers and annotators."""

    message = "this needs the researcher or annotator role"

    def has_permission(self, request: Request, view: APIView) -> bool:
        return user_has_role(request.user, *BROWSE_ROLES)


class ResearcherWrites(BasePermission):
    """Anyone with a role reads; only researchers create, change or launch."""

    message = "this needs the researcher role; annotators can read and annotate only"

    def has_permission(self, request: Request, view: APIView) -> bool:
        if request.method in SAFE_METHODS:
            return user_has_role(request.user, *BROWSE_ROLES)
        return user_has_role(request.user, Role.RESEARCHER)


class IsResearcher(BasePermission):
    message = "this needs the researcher role"

    def has_permission(self, request: Request, view: APIView) -> bool:
        return user_has_role(request.user, Role.RESEARCHER)


NOT_QUEUED_ANSWER = OpenApiResponse(
    description="created, but its task could not be sent (the task broker is unreachable): "
    "the row failed, `detail` says why"
)


def not_queued(job: jobs.Job, body: dict[str, Any]) -> Response | None:
    """A 503 naming the reason when the job's task could not be sent (the broker is down;
    the row is kept, failed, with `body` describing it); None when it was sent."""
    reason = jobs.send_error(job)
    if not reason:
        return None
    return Response({**body, "detail": reason}, status=status.HTTP_503_SERVICE_UNAVAILABLE)


def request_user(request: Request) -> User | None:
    return request.user if isinstance(request.user, User) else None


class BenchmarkViewSet(viewsets.ReadOnlyModelViewSet[Benchmark]):
    """Benchmarks with their query and judgement counts; researchers import new ones."""

    serializer_class = BenchmarkSerializer
    permission_classes = [ResearcherWrites]

    def get_queryset(self) -> QuerySet[Benchmark]:
        return Benchmark.objects.for_list()

    @extend_schema(
        request={"multipart/form-data": BenchmarkImportSerializer},
        responses={202: ImportJobSerializer, 503: NOT_QUEUED_ANSWER},
    )
    @action(detail=False, methods=["post"], url_path="import")
    def import_upload(self, request: Request) -> Response:
        """Upload a benchmark file; a worker imports it (poll /imports/{id}/)."""
        form = BenchmarkImportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        try:
            job = import_job_create(
                upload=data["file"],
                name=data["name"],
                split=data["split"],
                replace=data["replace"],
                fmt=data["format"],
                created_by=request_user(request),
            )
        except ImportRejected as exc:
            raise ValidationError({"file": [str(exc)]}) from None
        body = ImportJobSerializer(job).data
        return not_queued(job, body) or Response(body, status=status.HTTP_202_ACCEPTED)


class ImportJobViewSet(viewsets.ReadOnlyModelViewSet[ImportJob]):
    """Uploaded imports: status, live progress while running, and the outcome."""

    serializer_class = ImportJobSerializer
    permission_classes = [CanBrowse]
    queryset = ImportJob.objects.order_by("-created_at", "-pk")


def _saved(saved: PolicySaved, code: int) -> Response:
    body = {**PolicyConfigSerializer(saved.policy).data, "warnings": saved.warnings}
    headers = {"Location": f"/api/policies/{saved.policy.pk}/"} if code == 201 else None
    return Response(body, status=code, headers=headers)


def _refused(exc: PolicyConfigError) -> ValidationError:
    return ValidationError({exc.field or "non_field_errors": [str(exc)]})


class PolicyConfigViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[PolicyConfig],
):
    """How a policy is called: the baseline, or a model behind an OpenAI-compatible server.

    Writes go through harness_app/services/policies.py: an OpenAI-compatible config's
    server is asked for its models; an edit of a config in use answers its new version
    (201, a new id); a config in use is not deleted (409).
    """

    serializer_class = PolicyConfigSerializer
    permission_classes = [ResearcherWrites]
    queryset = PolicyConfig.objects.order_by("name")

    @extend_schema(responses={201: PolicyConfigSavedSerializer})
    def create(self, request: Request) -> Response:
        """A new config; a model its server does not list is refused (400, on `model`)."""
        form = PolicyConfigSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            saved = policy_config_create(data=form.validated_data)
        except PolicyConfigError as exc:
            raise _refused(exc) from None
        return _saved(saved, status.HTTP_201_CREATED)

    @extend_schema(responses={200: PolicyConfigSavedSerializer, 201: PolicyConfigSavedSerializer})
    def update(self, request: Request, pk: str | None = None) -> Response:
        """Edit a config: in place (200) while nothing uses it, else as its next version
        (201 with the new row; the used one is left as it is)."""
        policy = self.get_object()
        partial = request.method == "PATCH"
        form = PolicyConfigSerializer(policy, data=request.data, partial=partial)
        form.is_valid(raise_exception=True)
        try:
            saved = policy_config_update(policy=policy, data=form.validated_data)
        except PolicyConfigError as exc:
            raise _refused(exc) from None
        return _saved(saved, status.HTTP_201_CREATED if saved.new_version else status.HTTP_200_OK)

    @extend_schema(responses={200: PolicyConfigSavedSerializer, 201: PolicyConfigSavedSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Edit some fields of a config, as PUT does."""
        return self.update(request, pk)

    @extend_schema(responses={204: None, 409: PolicyInUseSerializer})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete a config nothing uses; one in use is refused (409, saying what uses it)."""
        try:
            policy_config_delete(policy=self.get_object())
        except PolicyConfigError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ObtainExpiringAuthToken(ObtainAuthToken):
    """POST /api/token/: the user's token, a new one when the old one has expired.

    Failures count toward the login lockout (django-axes); a locked-out caller gets 429.
    """

    # ObtainAuthToken names DRF's plain parsers; these are the API's (the JSON depth limit).
    parser_classes = APIView.parser_classes  # DEFAULT_PARSER_CLASSES

    @extend_schema(auth=[])  # open to anyone: it is how a client gets credentials
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        if not serializer.is_valid():
            # django-axes marks the request it refused (config/settings.py, lockout).
            if getattr(request, "axes_locked_out", False):
                raise Throttled(
                    detail="Too many failed logins: this account or address is "
                    "locked out for a while."
                )
            raise ValidationError(serializer.errors)
        token = api_token_obtain(user=serializer.validated_data["user"])
        return Response({"token": token.key})
