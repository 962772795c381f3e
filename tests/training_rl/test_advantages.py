"""Group-relative advantages against hand-computed values."""

from __future__ import annotations

import math

import pytest

from training.rl.advantages import AdvantageSettings, group_advantage_values, group_advantages


def test_harness1_default_subtracts_the_group_mean_only():
    # Rewards 1.0, 0.0, 0.5: mean 0.5.
    assert group_advantage_values([1.0, 0.0, 0.5]) == [0.5, -0.5, 0.0]


def test_std_normalisation_divides_by_the_population_std_plus_eps():
    settings = AdvantageSettings(normalize_std=True, std_eps=1e-6)
    # Deviations ±0.5, 0; population std = sqrt((0.25 + 0.25 + 0) / 3) = sqrt(1/6).
    std = math.sqrt(1 / 6)
    values = group_advantage_values([1.0, 0.0, 0.5], settings)
    assert values == pytest.approx([0.5 / (std + 1e-6), -0.5 / (std + 1e-6), 0.0], abs=1e-12)


def test_groups_with_equal_rewards_are_dropped_and_reported():
    result = group_advantages(
        {
            10: {1: 0.8, 2: 0.2},
            11: {3: 0.3, 4: 0.3, 5: 0.3},  # all equal: no signal
            12: {6: 0.1 + 0.2, 7: 0.3},  # equal up to float noise
            13: {8: 0.9},  # a group of one has nothing to compare against
        }
    )
    assert result.kept_groups == [10]
    assert result.dropped_groups == [11, 12, 13]
    assert result.advantages == pytest.approx({1: 0.3, 2: -0.3})


def test_keeping_zero_variance_groups_gives_zero_advantages_not_nan():
    settings = AdvantageSettings(normalize_std=True, drop_zero_variance=False)
    result = group_advantages({11: {3: 0.3, 4: 0.3}}, settings)
    assert result.kept_groups == [11]
    assert result.advantages == {3: 0.0, 4: 0.0}


def test_advantages_within_a_kept_group_sum_to_zero():
    values = group_advantage_values([0.9, 0.1, 0.4, 0.35])
    assert values is not None
    assert sum(values) == pytest.approx(0.0, abs=1e-12)
    assert values[0] > 0 > values[1]


def test_a_non_positive_eps_is_refused():
    with pytest.raises(ValueError, match="std_eps"):
        AdvantageSettings(std_eps=0.0)
