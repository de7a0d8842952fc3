"""How sure the model is of one plan's latency before anything is measured, and which assumed terms it rests on.

`estimate` and `plans` show it: the profile's prior uncertainty (Profile.uncertainty) carried through the
performance model's sensitivities (policies/belief.py), the variance share of each parameter, and the
assumed parameters among them. It is a model of the model's error, never a measurement.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, Field

from worldtune.policies import families
from worldtune.policies.belief import COLLECTIVES, Posterior, predictive, prior_posterior
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import Workload


class Uncertainty(BaseModel):
    """How sure the model is of one plan's latency, and which of the terms it relies on are assumed."""

    sigma: float = Field(description="relative (log-space) one-sigma of the predicted latency")
    low_s: float = Field(description="5th percentile of the latency under the belief")
    high_s: float = Field(description="95th percentile of the latency under the belief")
    shares: dict[str, float] = Field(description="parameter -> share of the variance it explains (>= 1%)")
    assumed: list[str] = Field(description="assumed parameters (not fitted or measured) this plan's latency rests on")
    relies_on_assumed: bool = Field(description="assumed terms explain at least ASSUMED_SHARE of the variance")
    unmeasured_family: bool = Field(default=False, description="no measured cell of this plan's family (issue 26)")


ASSUMED_SHARE = 0.25


def uncertainty(profile: Profile, workload: Workload, plan: Plan, post: Posterior | None = None) -> Uncertainty:
    """The plan's predicted latency spread under the prior (or a posterior) and what explains it."""
    post = post or prior_posterior(profile)
    pred = predictive(post, profile, workload, plan)
    cov = np.asarray(post.cov)
    parts = (pred.grad_latency @ cov) * pred.grad_latency  # each coordinate's share (the diagonal's view)
    family = families.family_sigma(profile, plan)  # leave-family-out's spread where no cell of its family was fitted
    total = float(parts.sum()) + post.model_error**2 + family**2
    sigma = math.sqrt(max(total, 0.0))
    shares = {n: float(v / total) for n, v in zip(post.names, parts, strict=True) if total > 0 and v / total >= 0.01}
    assumed = [n for n in shares if _is_assumed(profile, n)]
    latency = pred.prediction.latency_s
    return Uncertainty(
        sigma=sigma,
        low_s=latency * math.exp(-1.645 * sigma),
        high_s=latency * math.exp(1.645 * sigma),
        shares=shares,
        assumed=assumed,
        relies_on_assumed=sum(shares[n] for n in assumed) >= ASSUMED_SHARE,
        unmeasured_family=family > 0,
    )


def _is_assumed(profile: Profile, name: str) -> bool:
    if name in COLLECTIVES and getattr(profile, name) is None and name not in profile.basis:
        name = "link_gbps"  # an unset collective follows the link
    return profile.basis_of(name).kind == "assumed"
