"""Reads over rollouts: aggregates and progress, as plain data."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Avg, Count, Q, QuerySet, StdDev

from harness_app.harness import jsondelta
from harness_app.harness.llm.reconstruct import (
    CallTokens,
    ChainBreak,
    Segment,
    reconstruct_per_request,
    reconstruct_prefix_merged,
)
from trajectories.models import (
    Episode,
    EpisodeStatus,
    ModelCall,
    RolloutBatch,
    Turn,
    unpack_floats,
    unpack_ints,
)

AGGREGATE_FIELDS = (
    "curated_recall",
    "trajectory_recall",
    "final_answer_recall",
    "tool_diversity",
    "turns",
    "format_errors",
    "reward",
)


def batch_summary(*, batch: RolloutBatch) -> dict[str, Any]:
    """Progress and the mean of each metric over the batch's completed episodes."""
    batch.refresh_from_db()
    completed = Episode.objects.filter(batch=batch, status=EpisodeStatus.COMPLETED)
    # Aliases must not shadow the model's field names, or StdDev("reward") would see the
    # Avg aggregate instead of the column.
    raw = completed.aggregate(
        n=Count("pk"),
        **{f"mean_{name}": Avg(name) for name in AGGREGATE_FIELDS},
        std_reward=StdDev("reward"),
    )
    means = {key.removeprefix("mean_"): value for key, value in raw.items()}
    means["reward_std"] = means.pop("std_reward")
    reasons = dict(
        Episode.objects.filter(batch=batch)
        .exclude(termination_reason="")
        .values_list("termination_reason")
        .annotate(n=Count("pk"))
        .values_list("termination_reason", "n")
    )
    failed = Episode.objects.filter(batch=batch).filter(
        Q(status=EpisodeStatus.FAILED) | Q(status=EpisodeStatus.CANCELLED)
    )
    return {
        "batch": batch.pk,
        "status": batch.status,
        "benchmark": batch.benchmark.name,
        "policy": batch.policy.name,
        "ablation": batch.ablation_label,
        "episodes_total": batch.episodes_total,
        "episodes_completed": batch.episodes_completed,
        "episodes_failed": batch.episodes_failed,
        "termination_reasons": reasons,
        "errors": list(failed.exclude(error="").values_list("error", flat=True)[:5]),
        "metrics": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in means.items()},
    }


def episode_segments(
    *, episode: Episode, mode: str = "prefix"
) -> tuple[list[Segment], list[ChainBreak]]:
    """Training sequences rebuilt from the episode's successful model calls.

    `mode` is "prefix" (merge calls whose prompts extend the chain) or "request" (one
    sequence per call). Failed calls carry no completion and are left out.
    """
    calls = [
        call.call_tokens()
        for call in ModelCall.objects.filter(episode=episode, error="").order_by("pk")
    ]
    if mode == "request":
        return reconstruct_per_request(calls), []
    if mode != "prefix":
        raise ValueError(f"unknown reconstruction mode {mode!r}; use prefix or request")
    return reconstruct_prefix_merged(calls)


def turn_states(*, episode: Episode, upto: int | None = None) -> list[dict[str, Any]]:
    """The full harness state after each turn (0..upto), rebuilt from snapshots and deltas."""
    rows = Turn.objects.filter(episode=episode).order_by("index")
    if upto is not None:
        rows = rows.filter(index__lte=upto)
    states: list[dict[str, Any]] = []
    for state, is_delta in rows.values_list("state", "state_is_delta"):
        states.append(jsondelta.apply(states[-1], state) if is_delta else state)
    return states


def turn_state(*, episode: Episode, index: int) -> dict[str, Any]:
    """The state after one turn, reading only from its last full snapshot onwards."""
    start = (
        Turn.objects.filter(episode=episode, index__lte=index, state_is_delta=False)
        .order_by("-index")
        .values_list("index", flat=True)
        .first()
    )
    if start is None:
        raise Turn.DoesNotExist(f"episode {episode.pk} has no turn {index}")
    rows = Turn.objects.filter(episode=episode, index__gte=start, index__lte=index)
    state: dict[str, Any] = {}
    for delta, is_delta in rows.order_by("index").values_list("state", "state_is_delta"):
        state = jsondelta.apply(state, delta) if is_delta else delta
    return state


_CALL_TOKEN_COLUMNS = (
    "episode_id",
    "pk",
    "prompt_token_ids_blob",
    "completion_token_ids_blob",
    "completion_logprobs_blob",
    "policy_version",
    "agent",
)


def call_tokens_by_episode(calls: QuerySet[ModelCall]) -> dict[int, list[CallTokens]]:
    """The token data of `calls`, per episode, in the queryset's order: one query that
    reads the token blobs only, never the request and response JSON."""
    out: dict[int, list[CallTokens]] = defaultdict(list)
    rows = calls.values_list(*_CALL_TOKEN_COLUMNS).iterator(chunk_size=200)
    for episode_id, pk, prompt, completion, logprobs, version, agent in rows:
        out[episode_id].append(
            CallTokens(
                pk,
                unpack_ints(prompt),
                unpack_ints(completion),
                unpack_floats(logprobs),
                version,
                agent,
            )
        )
    return out
