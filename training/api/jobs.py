"""What the SFT and RL job endpoints share: researchers create and cancel, everyone with a
role reads; a create's input checked by its serializer for types and by the service for the
rest, whose TrainingJobError answers 400 on the field it names, and a job whose task the
broker did not take 503 with the reason; the job's state errors."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from harness_app.api import ResearcherWrites, not_queued
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
    """Each kind names its serializers and how it creates and cancels a job; its `create`
    and `cancel` carry their own schema and docstring and answer through these."""

    permission_classes = [ResearcherWrites]
    input_serializer: ClassVar[type[serializers.Serializer[Any]]]
    output_serializer: ClassVar[type[serializers.ModelSerializer[Any]]]
    detail_serializer: ClassVar[type[serializers.ModelSerializer[Any]]]

    def get_serializer_class(self) -> Any:
        return self.detail_serializer if self.action == "retrieve" else self.output_serializer

    def job_create(self, request: Request, data: dict[str, Any]) -> Job:
        raise NotImplementedError

    def job_cancel(self, job: Job) -> None:
        raise NotImplementedError

    def created(self, request: Request) -> Response:
        form = self.input_serializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            job = self.job_create(request, dict(form.validated_data))
        except TrainingJobError as exc:
            raise ValidationError({exc.field or "non_field_errors": [str(exc)]}) from None
        body = self.output_serializer(job).data
        return not_queued(job, body) or Response(body, status=status.HTTP_201_CREATED)

    def cancelled(self) -> Response:
        job = self.get_object()
        self.job_cancel(job)
        job.refresh_from_db()
        return Response(self.output_serializer(job).data)

    def answer(self, job: Job) -> Response:
        return Response(self.output_serializer(job).data)
