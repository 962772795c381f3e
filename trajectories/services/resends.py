"""Sending a batch's episodes again: a batch whose sends the broker refused (`batch_resend`,
from its page, the API and `run_batch --resend`), and episodes whose worker died
(`episodes_recover_stale`, the job kernel's sweep at worker start). Either way each
episode runs once: `rollouts.episode_claim` skips one that is finished or held."""

from __future__ import annotations

import logging
from functools import partial

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from harness_app import jobs
from trajectories.models import (
    BatchStatus,
    Episode,
    EpisodeKind,
    EpisodeStatus,
    EvaluationRun,
    EvaluationStatus,
    RolloutBatch,
)
from trajectories.services.rollouts import batch_enqueue, stale_after

log = logging.getLogger(__name__)


class BatchNotResendable(ValueError):
    """A batch whose episodes were all sent: re-sending would only duplicate them."""


@transaction.atomic
def batch_resend(*, batch: RolloutBatch) -> int:
    """Send again a batch whose sends failed (the broker was down): its pending episodes,
    once the transaction commits. Each episode runs once, even one whose task got through
    before the broker failed: a second task finds it taken or finished (`episode_claim`).
    Returns how many episodes are pending; a broker still down fails it again, saying so
    (`jobs.send_error`)."""
    batch = RolloutBatch.objects.select_for_update().get(pk=batch.pk)
    if not jobs.send_error(batch):
        raise BatchNotResendable(
            f"batch {batch.pk} is {batch.status} and was sent; only a batch whose sends "
            "failed can be re-sent"
        )
    episodes = Episode.objects.filter(batch=batch)
    started = episodes.exclude(status=EpisodeStatus.PENDING).exists()
    RolloutBatch.objects.filter(pk=batch.pk).update(
        status=BatchStatus.RUNNING if started else BatchStatus.QUEUED,
        error="",
        finished_at=None,
        attempt=F("attempt") + 1,
    )
    if batch.evaluation_id is not None:  # it finished with this batch: it runs again
        EvaluationRun.objects.filter(pk=batch.evaluation_id, status=EvaluationStatus.DONE).update(
            status=EvaluationStatus.RUNNING, finished_at=None
        )
    jobs.send(batch, lambda: batch_enqueue(batch_id=batch.pk))
    return episodes.filter(status=EpisodeStatus.PENDING).count()


@jobs.sweeps("trajectories.Episode")
def _episodes_recover(_in_hand: object) -> int:
    return episodes_recover_stale()


def episodes_recover_stale() -> int:
    """Put episodes whose worker died (no heartbeat for EPISODE_STALE_AFTER_S) back in the
    queue. Runs when a worker starts, so a restarted worker picks up what a killed one held;
    with Redis, acks_late redelivery covers the same case from the broker's side."""
    cutoff = timezone.now() - stale_after()
    stale = Episode.objects.filter(
        kind=EpisodeKind.ROLLOUT, status=EpisodeStatus.RUNNING, heartbeat_at__lt=cutoff
    )
    batch_ids = set(stale.values_list("batch_id", flat=True))
    count = stale.update(status=EpisodeStatus.PENDING)
    for batch in RolloutBatch.objects.filter(pk__in=batch_ids):
        jobs.send_now(batch, partial(batch_enqueue, batch_id=batch.pk))
    if count:
        log.warning("re-queued %d stale episodes from batches %s", count, sorted(batch_ids))
    return count
