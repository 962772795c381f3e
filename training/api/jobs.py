"""What the SFT and RL job endpoints share: researchers create and cancel, everyone with a
role reads; a create's input checked by its serializer for types and by the service for the
rest, whose TrainingJobError answers 400 on the field it names, and a job whose task the
broker did not take 503 with the reason; the job's state errors.

A kind names its serializers, the docs of its create and cancel (its schema is drawn from
them) and how its service creates and cancels a job."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import NOT_QUEUED_ANSWER, ResearcherWrites, not_queued, request_user
from training.models import TrainingJob
from training.services.jobs import TrainingJobError

Job = TypeVar("Job", bound=TrainingJob)


class ServerRefused(APIException):
    status_code = status.HTTP_502_BAD_GATEWAY
    default_detail = "the model server refused the adapter"
    default_code = "server_refused"


class JobStateConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "the job is not in a state for that"
    default_code = "job_state"


class TrainingJobViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Job]
):
    permission_classes = [ResearcherWrites]
    input_serializer: ClassVar[type[serializers.Serializer[Any]]]
    output_serializer: ClassVar[type[serializers.ModelSerializer[Any]]]
    detail_serializer: ClassVar[type[serializers.ModelSerializer[Any]]]
    create_doc: ClassVar[str]
    cancel_doc: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        extend_schema_view(
            create=extend_schema(
                description=cls.create_doc,
                request=cls.input_serializer,
                responses={201: cls.output_serializer, 503: NOT_QUEUED_ANSWER},
            ),
            cancel=extend_schema(
                description=cls.cancel_doc, request=None, responses={200: cls.output_serializer}
            ),
        )(cls)

    def get_serializer_class(self) -> Any:
        return self.detail_serializer if self.action == "retrieve" else self.output_serializer

    def job_create(self, request: Request, data: dict[str, Any], **common: Any) -> Job:
        """The kind's service call: `data` holds the kind's own input, `common` the base
        policy, the weights folder, the name and the creator."""
        raise NotImplementedError

    def job_cancel(self, job: Job) -> None:
        raise NotImplementedError

    def create(self, request: Request) -> Response:
        form = self.input_serializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        common = {key: data.pop(key) for key in ("base_policy", "base_model_dir", "name")}
        try:
            job = self.job_create(request, data, created_by=request_user(request), **common)
        except TrainingJobError as exc:
            raise ValidationError({exc.field or "non_field_errors": [str(exc)]}) from None
        body = self.output_serializer(job).data
        return not_queued(job, body) or Response(body, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        job = self.get_object()
        self.job_cancel(job)
        job.refresh_from_db()
        return Response(self.output_serializer(job).data)
