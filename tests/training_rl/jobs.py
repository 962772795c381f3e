"""Builders for the RL job tests: a job on a benchmark, and its rollouts written on paper."""

from __future__ import annotations

from typing import Any

from training.models import RLJob
from training.services.rl_jobs import RLJobSettings, rl_job_create
from trajectories.models import (
    BatchStatus,
    EpisodeStatus,
    ModelCall,
    RolloutBatch,
    pack_floats,
    pack_ints,
)


def job_create(benchmark, policy, model_dir, **settings: Any) -> RLJob:
    defaults: dict[str, Any] = {"group_size": 2, "queries_per_step": 2, "steps": 2}
    return rl_job_create(
        benchmark=benchmark,
        base_policy=policy,
        base_model_dir=str(model_dir),
        job_settings=RLJobSettings(**{**defaults, **settings}),
        enqueue=False,
    )


def rollouts_finish(
    batch: RolloutBatch, rewards: list[float], *, status=EpisodeStatus.COMPLETED
) -> None:
    """Play the batch's episodes on paper: each gets a reward (in order of group, then
    sample) and two prefix-merging model calls with SmolLM2-sized token ids."""
    episodes = list(batch.episodes.order_by("group_id", "sample_index"))
    for i, (episode, reward) in enumerate(zip(episodes, rewards, strict=True)):
        episode.status, episode.reward = status, reward
        episode.termination_reason = "end_search" if status == EpisodeStatus.COMPLETED else "x"
        episode.error = "" if status == EpisodeStatus.COMPLETED else "vLLM answered 500"
        episode.curated_recall = reward / 2
        episode.reward_components = {"f_beta": reward / 3, "diversity": 0.1}
        episode.save()
        version = batch.policy.name
        ModelCall.objects.bulk_create(
            ModelCall(
                episode=episode,
                turn_index=turn,
                request={},
                prompt_token_ids_blob=pack_ints(prompt),
                completion_token_ids_blob=pack_ints(completion),
                completion_logprobs_blob=pack_floats([-2.0] * len(completion)),
                policy_version=version,
            )
            for turn, (prompt, completion) in enumerate(
                # Each episode samples different tokens, so their gradients do not cancel.
                [([1, 504, 33], [288 + i, 4521]), ([1, 504, 33, 288 + i, 4521, 30], [77 + i, 2])]
            )
        )
    completed = sum(1 for _ in episodes) if status == EpisodeStatus.COMPLETED else 0
    RolloutBatch.objects.filter(pk=batch.pk).update(
        status=BatchStatus.COMPLETED if completed else BatchStatus.FAILED,
        episodes_completed=completed,
        episodes_failed=len(episodes) - completed,
    )


def step_batch(job: RLJob, index: int) -> RolloutBatch:
    batch = job.step_rows.get(index=index).batch
    assert batch is not None
    return batch
