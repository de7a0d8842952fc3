"""The statistics every latency claim goes through: bench, tune, the report, the MCP tools and the search.

A percentile is claimed by order statistics, never by a model of the distribution: at confidence c
with no violation, the q-quantile is bounded above by the largest of n samples once q^n <= 1 - c,
i.e. n >= ln(1 - c) / ln(q) (MLPerf's rule, REFERENCE.md section 7: P90 44, P95 90, P99 459 at 99%).
With more samples a lower order statistic does: X_(k) for the smallest k with
P(Binomial(n, q) <= k - 1) >= c. With fewer samples the percentile is "not claimable (n=.. < .. at ..% confidence)".

Where the agent must judge a percentile from fewer samples it may use a parametric bound, and then it
says so by name: `p95_upper_95conf_normal` is the one-sided normal tolerance bound (noncentral t) on
the 95th percentile at 95% confidence, which assumes the latencies are normally distributed; it is a
modelled bound, never a measured p95.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

CLAIM_CONFIDENCE = 0.99  # percentile claims (MLPerf)
CI_LEVEL = 0.95  # confidence intervals
TOLERANCE_CONFIDENCE = 0.95  # the parametric bound's confidence
GOAL_CONFIDENCE = 0.95  # a tuning goal's claim and stopping rule unless it says otherwise ("at 99% confidence")
NORMAL_ASSUMPTION = "assumes normally distributed latencies (one-sided tolerance bound, noncentral t)"


class Interval(BaseModel):
    """A two-sided confidence interval; a side is null when the data cannot bound it."""

    low: float | None
    high: float | None
    level: float = CI_LEVEL


def samples_needed(q: float, confidence: float = CLAIM_CONFIDENCE) -> int:
    """Samples needed to claim the q-quantile at `confidence` with no violation: the smallest n with
    1 - q^n >= confidence (at 99%: P50 -> 7, P90 -> 44, P95 -> 90, P99 -> 459; at 95%: P50 -> 5, P95 -> 59)."""
    if not 0.0 < q < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"quantile {q} and confidence {confidence} must lie strictly between 0 and 1")
    return math.ceil(math.log(1.0 - confidence) / math.log(q))


def quantile_interval(sorted_data: np.ndarray, q: float, level: float = CI_LEVEL) -> Interval:
    """Distribution-free interval for the q-quantile from order statistics (binomial ranks)."""
    n = int(sorted_data.size)
    lo_rank, hi_rank = _interval_ranks(n, q, level)
    low = float(sorted_data[lo_rank - 1]) if lo_rank >= 1 else None
    high = float(sorted_data[hi_rank - 1]) if hi_rank <= n else None
    return Interval(low=low, high=high, level=level)


def order_statistic_upper(values: Sequence[float], q: float, confidence: float = CLAIM_CONFIDENCE) -> float | None:
    """Distribution-free upper bound on the q-quantile at `confidence`: X_(k), the smallest k with
    P(Binomial(n, q) <= k - 1) >= confidence. None when n < samples_needed(q, confidence)."""
    data = np.sort(np.asarray([v for v in values if math.isfinite(v)], dtype=float))
    n = int(data.size)
    if n == 0 or n < samples_needed(q, confidence):
        return None
    rank = _upper_rank(n, q, confidence)
    return None if rank is None else float(data[rank - 1])


@functools.lru_cache(maxsize=4096)
def _interval_ranks(n: int, q: float, level: float) -> tuple[int, int]:
    """1-based ranks of the order statistics bounding the q-quantile of n samples at `level` (binomial ranks).
    A function of (n, q, level) alone, so kept: scipy's binom.ppf costs ~0.1 ms a call and the search asks for
    the same few ranks at every decision."""
    from scipy import stats

    alpha = 1.0 - level
    return int(stats.binom.ppf(alpha / 2, n, q)), int(stats.binom.ppf(1 - alpha / 2, n, q)) + 1


@functools.lru_cache(maxsize=4096)
def _upper_rank(n: int, q: float, confidence: float) -> int | None:
    """The smallest 1-based k with P(Binomial(n, q) <= k - 1) >= confidence, None when no k <= n is (kept as
    _interval_ranks is)."""
    from scipy import stats

    ok = stats.binom.cdf(np.arange(n), n, q) >= confidence - 1e-12
    return int(np.argmax(ok)) + 1 if ok.any() else None


def parametric_name(percentile: int, confidence: float = TOLERANCE_CONFIDENCE) -> str:
    """The name a parametric bound is printed under, e.g. p95_upper_95conf_normal."""
    return f"p{percentile}_upper_{round(confidence * 100)}conf_normal"


def normal_tolerance_upper(values: Sequence[float], q: float, confidence: float = TOLERANCE_CONFIDENCE) -> float | None:
    """One-sided normal tolerance bound on the q-quantile: mean + k sd, k = t'_c(n-1, z_q sqrt(n)) / sqrt(n).

    Assumes normal latencies (NORMAL_ASSUMPTION). One sample has no spread: None.
    """
    from scipy.stats import nct, norm

    data = [v for v in values if math.isfinite(v)]
    n = len(data)
    if n < 2:
        return None
    mean = sum(data) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in data) / (n - 1))
    z = float(norm.ppf(q))
    k = float(nct.ppf(confidence, n - 1, z * math.sqrt(n))) / math.sqrt(n)
    return mean + k * sd


class PercentileVerdict(BaseModel):
    """What a set of samples supports about one percentile, said the way a report must say it."""

    percentile: int
    n: int
    needed: int = Field(description="samples an order-statistic claim needs at claim_confidence")
    claim_confidence: float = CLAIM_CONFIDENCE
    claimable: bool
    upper: float | None = Field(description="order-statistic upper bound on the percentile; null unless claimable")
    estimate: float | None = Field(description="the sample quantile, whatever n is (diagnosis only, not a claim)")
    parametric_name: str
    parametric_upper: float | None = Field(description="the normal tolerance bound (a model, not a measurement)")
    parametric_assumption: str = NORMAL_ASSUMPTION
    note: str = ""

    def bound(self) -> tuple[float | None, str]:
        """The bound a decision may use and what it is: the claim when claimable, else the named parametric one."""
        if self.claimable and self.upper is not None:
            return self.upper, (
                f"p{self.percentile} <= {self.upper:.1f} s at {self.claim_confidence * 100:g}% confidence "
                f"(order statistics, n={self.n})"
            )
        if self.parametric_upper is not None:
            return self.parametric_upper, (
                f"{self.parametric_name} {self.parametric_upper:.1f} s ({self.parametric_assumption}); "
                f"p{self.percentile} not claimable ({self._short()})"
            )
        return None, f"p{self.percentile} not claimable ({self._short()})"

    def _short(self) -> str:
        """n against the samples needed, at the confidence that needs them (bench claims at 99%, a goal at 95%)."""
        return f"n={self.n} < {self.needed} at {self.claim_confidence * 100:g}% confidence"


def percentile_verdict(
    values: Sequence[float], percentile: int, confidence: float = CLAIM_CONFIDENCE
) -> PercentileVerdict:
    """The order-statistic claim at `confidence` (when n allows it) and the named parametric bound of one
    percentile (at the same confidence when it is not the default claim's)."""
    data = [float(v) for v in values if math.isfinite(v)]
    q = percentile / 100.0
    needed = samples_needed(q, confidence)
    upper = order_statistic_upper(data, q, confidence)
    claimable = upper is not None
    tolerance = TOLERANCE_CONFIDENCE if confidence == CLAIM_CONFIDENCE else confidence
    return PercentileVerdict(
        percentile=percentile,
        n=len(data),
        needed=needed,
        claim_confidence=confidence,
        claimable=claimable,
        upper=upper,
        estimate=float(np.percentile(np.asarray(data), percentile)) if data else None,
        parametric_name=parametric_name(percentile, tolerance),
        parametric_upper=normal_tolerance_upper(data, q, tolerance),
        note="" if claimable else f"not claimable (n={len(data)} < {needed} at {confidence * 100:g}% confidence)",
    )


class ClaimCheck(BaseModel):
    """Where a percentile claim against a bound stands as its samples arrive (the full run's stopping rule)."""

    state: Literal["met", "failed", "open"]
    needed: int = Field(description="samples the order-statistic claim needs at this confidence")
    n: int
    above: int = Field(description="samples above the bound so far")
    allowed_above: int = Field(description="most samples above the bound that the claim over `needed` survives")
    reason: str


def check_claim(values: Sequence[float], percentile: int, confidence: float, bound: float) -> ClaimCheck:
    """The claim "p<percentile> <= bound at `confidence`" over the first samples of a run of samples_needed:
    failed once more samples lie above the bound than the order statistic X_(k) of `needed` samples can leave
    above it (whatever the rest measure, the claim's bound would exceed `bound`); met once `needed` samples are
    in and X_(k) <= bound; else open."""
    from scipy import stats

    data = [float(v) for v in values if math.isfinite(v)]
    q = percentile / 100.0
    needed = samples_needed(q, confidence)
    ranks = np.arange(1, needed + 1)
    k = int(np.argmax(stats.binom.cdf(ranks - 1, needed, q) >= confidence - 1e-12)) + 1
    allowed = needed - k
    above = sum(1 for v in data if v > bound)
    where = f"{above} of {len(data)} samples above {bound:g} s"

    def verdict(state: Literal["met", "failed", "open"], reason: str) -> ClaimCheck:
        return ClaimCheck(state=state, needed=needed, n=len(data), above=above, allowed_above=allowed, reason=reason)

    if above > allowed:
        return verdict(
            "failed",
            f"decided: p{percentile} <= {bound:g} s cannot hold at {confidence * 100:g}% confidence: {where}, "
            f"and a claim over {needed} samples allows at most {allowed}",
        )
    if len(data) >= needed:
        upper = order_statistic_upper(data, q, confidence)
        if upper is not None and upper <= bound:
            return verdict(
                "met",
                f"decided: p{percentile} <= {upper:.1f} s at {confidence * 100:g}% confidence meets {bound:g} s "
                f"(order statistics, n={len(data)})",
            )
    return verdict("open", f"open: {where}, {len(data)} of {needed} samples in")
