"""Read a rollout batch from the database into RL training sequences.

Two queries, whatever the batch size: the episodes, then their successful model calls
(token blobs only; the request and response JSON are never loaded). The maths is the pure
`batch_build`; this module only decides which episodes are candidates.

Only completed episodes with a reward are candidates. A failed episode (model timeout,
server error, worker time limit) stopped for reasons the policy did not choose, so its
reward says more about the infrastructure than about the policy; it is excluded with its
termination reason rather than scored as a bad trajectory.
"""

from __future__ import annotations

from django.db.models import Q

from harness_app.harness.llm.reconstruct import PREFIX_MERGE, CallTokens, strategy_clean
from training.rl.advantages import AdvantageSettings
from training.rl.batches import BatchBuild, EpisodeCalls, Exclusion, batch_build
from trajectories.models import (
    Episode,
    EpisodeStatus,
    HarnessGroup,
    ModelCall,
    RecordingSession,
    RolloutBatch,
)
from trajectories.selectors.calls import call_tokens_by_episode


def _calls_by_episode(episodes: Q) -> dict[int, list[CallTokens]]:
    calls = ModelCall.objects.filter(episodes, error="")
    return call_tokens_by_episode(calls.order_by("episode_id", "pk"))


def _candidate_problem(status: str, reason: str, reward: float | None) -> str:
    if status != EpisodeStatus.COMPLETED:
        return f"not_completed: status {status} ({reason or 'no reason'})"
    if reward is None:
        return "no_reward: the episode has no reward"
    return ""


def _rollout_episodes(episodes: Q, calls_of: Q) -> tuple[list[EpisodeCalls], list[Exclusion]]:
    calls = _calls_by_episode(calls_of)
    rows = (
        Episode.objects.filter(episodes)
        .order_by("group_id", "sample_index")
        .values_list("pk", "group_id", "status", "termination_reason", "reward")
    )
    candidates: list[EpisodeCalls] = []
    excluded: list[Exclusion] = []
    for pk, group_id, status, reason, reward in rows:
        problem = _candidate_problem(status, reason, reward)
        if problem:
            excluded.append(Exclusion(pk, problem))
            continue
        assert reward is not None  # checked by _candidate_problem
        candidates.append(EpisodeCalls(pk, group_id, reward, reason, calls.get(pk, [])))
    return candidates, excluded


def rl_episodes_for_batch(
    *, batch: RolloutBatch | int
) -> tuple[list[EpisodeCalls], list[Exclusion]]:
    """The batch's candidate episodes with their calls, and the non-candidates with why."""
    batch_id = batch if isinstance(batch, int) else batch.pk
    return _rollout_episodes(Q(batch_id=batch_id), Q(episode__batch_id=batch_id))


def rl_episodes_for_groups(*, group_ids: list[int]) -> tuple[list[EpisodeCalls], list[Exclusion]]:
    """The same for some rollout groups (the rollout service delivers group by group)."""
    return _rollout_episodes(Q(group_id__in=group_ids), Q(episode__group_id__in=group_ids))


def rl_samples_for_batch(
    *,
    batch: RolloutBatch | int,
    settings: AdvantageSettings | None = None,
    mode: str = PREFIX_MERGE,
) -> BatchBuild:
    """The batch's training sequences with rewards and group-relative advantages."""
    candidates, excluded = rl_episodes_for_batch(batch=batch)
    build = batch_build(candidates, settings, mode=mode)
    build.exclusions = excluded + build.exclusions
    return build


# --- recorded sessions (trajectories/services/recording.py) --------------------------------


def rl_episodes_for_recordings(*, task: str) -> tuple[list[EpisodeCalls], list[Exclusion]]:
    """The closed recording sessions of one task as candidates: they form one RL group.

    The group id is the smallest episode id among them (recorded episodes have no
    RolloutGroup). A session marked non-trainable (an aborted call, two policy versions)
    is excluded with its reason.
    """
    sessions = list(
        RecordingSession.objects.filter(task=task)
        .order_by("episode_id")
        .values_list("episode_id", "untrainable_reason", "episode__status", "episode__reward")
    )
    group_id = sessions[0][0] if sessions else 0
    calls = _recorded_calls([episode_id for episode_id, *_ in sessions])
    candidates: list[EpisodeCalls] = []
    excluded: list[Exclusion] = []
    for episode_id, untrainable, status, reward in sessions:
        problem = untrainable or _candidate_problem(status, "", reward)
        if problem:
            excluded.append(Exclusion(episode_id, problem))
            continue
        assert reward is not None  # checked by _candidate_problem
        candidates.append(
            EpisodeCalls(episode_id, group_id, reward, "session_closed", calls.get(episode_id, []))
        )
    return candidates, excluded


def _recorded_calls(episode_ids: list[int]) -> dict[int, list[CallTokens]]:
    calls = ModelCall.objects.filter(episode_id__in=episode_ids, error="")
    return call_tokens_by_episode(calls.order_by("episode_id", "turn_index", "pk"))


def rl_samples_for_recordings(
    *,
    task: str,
    settings: AdvantageSettings | None = None,
    reconstruction: str = PREFIX_MERGE,
) -> BatchBuild:
    """One task's recorded sessions as training sequences with group-relative advantages.

    `reconstruction` is the strategy: prefix_merge (one sequence per chain) or per_request
    (one per call); an unknown name is a ValueError naming the setting, raised before any
    query."""
    reconstruction = strategy_clean(reconstruction, field="reconstruction")
    candidates, excluded = rl_episodes_for_recordings(task=task)
    build = batch_build(candidates, settings, mode=reconstruction)
    build.exclusions = excluded + build.exclusions
    return build


def rl_samples_for_harness_group(
    *,
    group: HarnessGroup,
    settings: AdvantageSettings | None = None,
    reconstruction: str = PREFIX_MERGE,
) -> BatchBuild:
    """A harness group's runs (trajectories/services/harness_runs.py) as one GRPO group:
    their sessions share the group's task key, each closed with its evaluation's reward."""
    return rl_samples_for_recordings(
        task=group.task_key, settings=settings, reconstruction=reconstruction
    )
