"""Builders for the rollout service's tests: a request, and its groups played on paper."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from training.models import RolloutDelivery, RolloutRequest
from training.services.rollout_service import rollout_request_create
from trajectories.models import (
    BatchStatus,
    Episode,
    EpisodeStatus,
    ModelCall,
    RolloutBatch,
    pack_floats,
    pack_ints,
)


def request_create(benchmark, policy, **spec: Any) -> RolloutRequest:
    defaults: dict[str, Any] = {"group_size": 2, "groups_wanted": 2, "lease_s": 60}
    return rollout_request_create(benchmark=benchmark, policy=policy, **{**defaults, **spec})


def deliveries(request: RolloutRequest) -> list[RolloutDelivery]:
    return list(request.deliveries.order_by("pk"))


def group_play(delivery: RolloutDelivery, rewards: list[float]) -> list[int]:
    """Finish the delivery's episodes with these rewards (in sample order), each with two
    prefix-merging model calls; returns the episode ids."""
    episodes = list(Episode.objects.filter(group_id=delivery.group_id).order_by("sample_index"))
    for episode, reward in zip(episodes, rewards, strict=True):
        Episode.objects.filter(pk=episode.pk).update(
            status=EpisodeStatus.COMPLETED,
            reward=reward,
            termination_reason="end_search",
            finished_at=timezone.now(),
        )
        n = episode.pk % 50
        ModelCall.objects.bulk_create(
            ModelCall(
                episode=episode,
                turn_index=turn,
                request={},
                prompt_token_ids_blob=pack_ints(prompt),
                completion_token_ids_blob=pack_ints(completion),
                completion_logprobs_blob=pack_floats([-0.5] * len(completion)),
                policy_version="v0",
            )
            for turn, (prompt, completion) in enumerate(
                [([1, 504, 33], [288 + n, 4521]), ([1, 504, 33, 288 + n, 4521, 30], [77 + n, 2])]
            )
        )
    batch = RolloutBatch.objects.get(pk=episodes[0].batch_id)
    batch.episodes_completed += len(episodes)
    if batch.episodes_completed + batch.episodes_failed >= batch.episodes_total:
        batch.status = BatchStatus.COMPLETED
    batch.save()
    return [e.pk for e in episodes]
