"""The shared filter vocabulary: format errors is a range filter like the metrics."""

from __future__ import annotations

import pytest

from trajectories.episode_filters import (
    EpisodeFilterError,
    episode_filters_clean,
    episodes_matching,
)
from trajectories.models import Episode
from trajectories.rollout import episode_run
from trajectories.services.rollouts import batch_create

pytestmark = pytest.mark.django_db


def test_format_errors_filter_selects_clean_episodes(
    demo_benchmark, baseline_policy, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():
        batch = batch_create(benchmark=demo_benchmark, policy=baseline_policy, query_limit=3)
    for episode_id in batch.episodes.values_list("pk", flat=True):
        episode_run(episode_id=episode_id)
    Episode.objects.filter(pk=batch.episodes.first().pk).update(format_errors=2)
    clean = episodes_matching(filters=episode_filters_clean({"format_errors_max": "0"}))
    assert clean.count() == 2
    assert all(e.format_errors == 0 for e in clean)
    with pytest.raises(EpisodeFilterError, match="format_errors_min"):
        episode_filters_clean({"format_errors_min": "3", "format_errors_max": "1"})
