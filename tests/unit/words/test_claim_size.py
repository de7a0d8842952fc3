"""The claim sized to the goal: one confidence drives the order-statistic sample count and the stopping rule."""

from __future__ import annotations

import math

import pytest

from worldtune.tools.words import stats
from worldtune.tools.words.goal import Goal


def smallest_n(q: float, confidence: float) -> int:
    """The rule spelled out: the smallest n with 1 - q^n >= confidence, found by counting up."""
    n = 1
    while 1 - q**n < confidence - 1e-12:
        n += 1
    return n


@pytest.mark.parametrize(("percentile", "confidence", "expected"), [
    (95, 0.95, 59), (95, 0.99, 90), (99, 0.95, 299), (99, 0.99, 459), (50, 0.95, 5), (50, 0.99, 7), (90, 0.99, 44),
])  # fmt: skip
def test_sample_count_is_the_order_statistic_rule(percentile: int, confidence: float, expected: int) -> None:
    q = percentile / 100
    assert stats.samples_needed(q, confidence) == expected == smallest_n(q, confidence)
    # n samples all under a bound claim it at that confidence; one fewer does not
    assert stats.order_statistic_upper([1.0] * expected, q, confidence) == 1.0
    assert stats.order_statistic_upper([1.0] * (expected - 1), q, confidence) is None


def test_the_goal_carries_one_confidence_and_refuses_a_bad_one() -> None:
    assert Goal().confidence == 0.95
    assert "at 99% confidence" in Goal(latency_bound_s=150, confidence=0.99).describe()
    for bad in (0.4, 1.0, 95.0):
        with pytest.raises(ValueError, match=r"confidence=.* is not valid"):
            Goal(confidence=bad)


def test_the_claim_is_decided_as_samples_arrive() -> None:
    # p95 at 95% over 59 samples is their maximum: one sample above the bound decides it
    ok = [100.0] * 30
    assert stats.check_claim(ok, 95, 0.95, 150).state == "open"
    failed = stats.check_claim([*ok, 151.0], 95, 0.95, 150)
    assert failed.state == "failed" and failed.allowed_above == 0 and "cannot hold" in failed.reason
    assert stats.check_claim([100.0] * 59, 95, 0.95, 150).state == "met"
    # with more samples than needed a lower order statistic claims it, so some may lie above the bound
    big = stats.check_claim([100.0] * 58 + [151.0], 95, 0.95, 150)
    assert big.state == "failed"
    n = stats.samples_needed(0.95, 0.99)
    assert stats.check_claim([100.0] * (n - 1), 95, 0.99, 150).state == "open"
    assert math.isclose(stats.percentile_verdict([100.0] * 59, 95, 0.95).upper or 0, 100.0)
    assert not stats.percentile_verdict([100.0] * 59, 95, 0.99).claimable
