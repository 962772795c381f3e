"""The evaluation statistics: spread over runs and the paired bootstrap comparison."""

from __future__ import annotations

import random

import pytest

from harness_app.harness.stats import paired_bootstrap, spread


def test_spread_is_the_mean_and_population_std_over_runs():
    result = spread([0.5, 0.7, 0.9])
    assert result is not None
    assert result.mean == pytest.approx(0.7)
    assert result.std == pytest.approx((0.08 / 3) ** 0.5)  # population std, as `ablate`
    assert result.runs == 3
    assert spread([]) is None


def test_the_bootstrap_ci_contains_the_true_difference_and_excludes_zero():
    rng = random.Random(7)
    a = {q: rng.uniform(0.2, 0.6) for q in range(300)}
    b = {q: a[q] + 0.1 + rng.gauss(0, 0.05) for q in range(300)}  # B is better by 0.1
    result = paired_bootstrap(a, b)
    assert result is not None
    assert result.n == 300 and result.resamples == 2000 and result.confidence == 0.95
    assert result.ci_low < 0.1 < result.ci_high
    assert result.ci_low > 0  # the improvement is significant
    assert result.ci_high - result.ci_low < 0.03
    assert result.mean_difference == pytest.approx(result.mean_b - result.mean_a)


def test_the_bootstrap_is_deterministic_with_its_seed():
    rng = random.Random(3)
    a = {q: rng.random() for q in range(40)}
    b = {q: rng.random() for q in range(40)}
    assert paired_bootstrap(a, b) == paired_bootstrap(a, b)
    other = paired_bootstrap(a, b, seed=1)
    assert other is not None and other != paired_bootstrap(a, b)


def test_only_queries_both_configurations_ran_are_paired():
    a = {"q1": 0.0, "q2": 0.5, "q3": 1.0}
    b = {"q2": 1.0, "q3": 1.0, "q4": 0.0}
    result = paired_bootstrap(a, b)
    assert result is not None
    assert (result.n, result.wins, result.ties, result.losses) == (2, 1, 1, 0)
    assert result.mean_difference == pytest.approx(0.25)
    assert 0.0 <= result.ci_low <= result.ci_high <= 0.5
    assert paired_bootstrap({"q1": 1.0}, {"q2": 1.0}) is None


def test_a_constant_difference_has_a_zero_width_interval():
    result = paired_bootstrap({i: 0.2 for i in range(10)}, {i: 0.5 for i in range(10)})
    assert result is not None
    assert result.ci_low == pytest.approx(0.3) and result.ci_high == pytest.approx(0.3)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="resamples"):
        paired_bootstrap({1: 0.0}, {1: 1.0}, resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap({1: 0.0}, {1: 1.0}, confidence=1.5)
