"""Celery tasks for rollouts: thin wrappers that take ids and call one service each."""

from __future__ import annotations

import logging
import traceback
from typing import Any

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_ready
from django.conf import settings
from django.db import OperationalError, transaction

from trajectories import services
from trajectories.models import Episode, EpisodeStatus

log = logging.getLogger(__name__)


@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError,),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=5,
    soft_time_limit=settings.EPISODE_SOFT_TIME_LIMIT_S,
    time_limit=settings.EPISODE_SOFT_TIME_LIMIT_S + 60,
)
def episode_run_task(self: Any, episode_id: int) -> str:
    from trajectories.rollout import episode_run

    try:
        return episode_run(episode_id=episode_id)
    except OperationalError:
        raise  # the database blinked: retried with backoff, the claim restarts the episode
    except SoftTimeLimitExceeded:
        _fail(episode_id, "time_limit", "the episode ran past its soft time limit")
        return "time_limit"
    except Exception as exc:
        log.exception("episode %s failed", episode_id)
        _fail(episode_id, "error", "".join(traceback.format_exception_only(exc)).strip())
        return "error"


def _fail(episode_id: int, reason: str, message: str) -> None:
    with transaction.atomic():
        episode = Episode.objects.select_for_update().filter(pk=episode_id).first()
        if episode is None or episode.status != EpisodeStatus.RUNNING:
            return
        claim = services.Claim(episode=episode, attempt=episode.attempts)
        outcome = services.EpisodeOutcome(
            termination_reason=reason,
            metrics={},
            reward=None,
            reward_components={},
            timings={},
            policy_version="",
            error=message,
        )
        services.episode_finish(claim=claim, outcome=outcome)


@worker_ready.connect
def _recover_on_start(**_: Any) -> None:
    try:
        services.episodes_recover_stale()
    except Exception:  # a worker must start even if the database is not migrated yet
        log.exception("could not recover stale episodes at worker start")
