"""Which measurements a decision buys, from the posterior draws acquisition.decide made: each candidate the search
would measure is a Pick (why, and its value per dollar where that orders it), taken best first; each is priced
(its full run dealt over lanes, the lanes a probe launches for the run after it) and kept only if it fits the
budget, is worth its cost once an answer is verified (before, when bought beside the decision's first), and ends
before the goal's time to answer.

Picks in order: retries; the likeliest optimum's full run (`lead`), or a probe worth more before it (`displace`,
priced with the lanes its time adds to that run: worth_first, probe_first_gain); then every open candidate by its
value per expected dollar, net of the later probe it spares when it is the optimum (`value`, _Round._net_usd).
Nothing bought: the decision says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np

from worldtune.policies import belief
from worldtune.policies.search.candidates import (
    action_cost,
    full_requests,
    hardware_key,
    held_offers,
    objective_value,
    start_seconds,
)
from worldtune.policies.search.draws import Draws, nearest_options, p_stop_if_verified
from worldtune.policies.search.lanes import SAFETY, EarlyLanes, LanePlan, early_lanes, run_after
from worldtune.policies.search.lanes import choose as deal_lanes
from worldtune.policies.search.words import (
    FULL_REQUESTS,
    STOP_LEVEL,
    Action,
    ActionKind,
    Candidate,
    CandidateKey,
    Decision,
    SearchState,
    StopKind,
    offer_of,
)
from worldtune.tools.words.goal import Goal

Why = Literal["retry", "lead", "displace", "value"]
BINS = 8  # what a probe may show, one step ahead (Worth.informed): 512 draws in groups of 64
RANK: dict[Why, int] = {"retry": 0, "lead": 1, "displace": 1, "value": 2}  # the order picks are taken in


class Pick(NamedTuple):
    """A candidate the search would measure next, and why: a retry, the likeliest optimum's full run (`lead`), a
    probe that could displace it first, or its value per expected dollar (`per_usd`, which orders `value` picks)."""

    i: int  # the candidate's position in the draws
    why: Why
    per_usd: float = 0.0


class Worth(NamedTuple):
    """What measuring each candidate is worth once an answer is verified (before: beside a decision's first
    measurement, against the plan in view as predicted): `share` of the production's cost."""

    usd: float  # the production's cost under the verified answer: its cost per clip x the clips it will make
    share: np.ndarray  # per candidate: the expected improvement it may find, as a share of the answer's value
    says: str
    gains: np.ndarray | None = None  # once verified, per candidate and draw: its own improvement (share of value)
    objective: np.ndarray | None = None  # once verified, per candidate and draw: the objective drawn

    def informed(self, i: int, acting: Callable[[int], tuple[float, float]], probed: np.ndarray) -> float:
        """What probing candidate i is worth once an answer is verified, one step ahead: a better plan replaces the
        answer only through its own claim (a plan not yet probed, through its probe and claim: `acting(j)` gives
        both, USD), so what the probe is worth is how much better the search can then act, in expectation over
        what it may show, than it can now. What it may show: the draws split by i's objective into BINS equal
        groups (a probe pins its plan); in each group the search acts on the plan of the largest expected
        saving net of acting (the production's improvement beyond the margin, less the claim and any probe it
        still needs), or on none. Less: the same with i already probed but nothing learned (the groups drawn at
        random, which also takes out what the maximum over noisy group means adds by itself), and what acting
        now is worth (i's probe then counted in acting on i). Draws move together, so what it tells about the
        others is counted once, not once per correlated rival."""
        assert self.gains is not None and self.objective is not None, "a Worth against a verified answer"
        saved = self.gains * self.usd
        live = [j for j in range(len(saved)) if saved[j].max() > 0.0 or j == i]
        priced = {j: acting(j) for j in live}
        rows = [j for j in live if saved[j].max() > priced[j][0]]  # a plan that cannot repay its claim never acts
        if not rows:
            return 0.0
        net = saved[rows] - np.asarray([[priced[j][0]] for j in rows])
        probe = np.asarray([0.0 if probed[j] else priced[j][1] for j in rows])
        after = probe * np.asarray([j != i for j in rows])  # once i is probed, acting on i needs only its claim

        def acted(groups: list[np.ndarray], extra: np.ndarray) -> float:
            return float(np.mean([max(0.0, float((net[:, g].mean(axis=1) - extra).max())) for g in groups]))

        n = saved.shape[1]
        shown = np.array_split(np.argsort(self.objective[i], kind="stable"), BINS)
        blind = np.array_split(np.random.default_rng(i).permutation(n), BINS)
        everything = [np.arange(n)]
        noise = acted(blind, after) - acted(everything, after)  # what the maximum over group means adds by itself
        return max(0.0, acted(shown, after) - noise - acted(everything, probe))


def ready_for_full(state: SearchState, cands: list[Candidate]) -> set[str]:
    """Candidates whose next measurement is a full run: probed, or measured without a verdict."""
    return {c.key for c in cands if c.stage == "probed" or c.key in state.inconclusive}


def worth_first(
    state: SearchState,
    d: Draws,
    full: int,
    ready: set[str],
    open_: np.ndarray,
    held: set[str],
    requests: int,
    margin: float,
) -> list[tuple[float, int]]:
    """(gain, index) of each unprobed open candidate worth probing before a full run of `full`, in the candidates'
    order: what the search expects to pay with the probe first, against the full run now.

    - Probe first: the probe, then the full run, which starts later by the probe's time and so may need more
      lanes (each a start and a load) to answer in time (lanes.choose prices both).
    - Full run now: it, and where it is not the answer (some open candidate is feasible and beats it by the margin,
      or it is infeasible) the run was spent on a plan the search does not end on: a probe and another full run
      follow, after the first run, with that much less time (so more lanes, or a later answer).

    What a probe first spares is that second run in the draws where it alone settles which plan the search ends
    on: the chance the run now is not the answer, less the chance that, the candidate probed first (the run then
    goes to the better of the two), the plan run is still not the answer (`_unsettled`). Without `answer within`,
    each run is priced with its lateness past the default aim (lanes.late_usd): the second run, after the first,
    mostly ends past the hour."""
    cands = d.cands
    target = cands[full]
    deployed, on_node = target.key in state.deployed, target.offer.id in held
    left = state.goal.budget_usd - state.spent_usd
    now = deal_lanes(state, target, requests, deployed, on_node, left)
    unsettled = _unsettled(d, open_, full, margin)
    worth: list[tuple[float, int]] = []
    for i, c in enumerate(cands):
        if i == full or not open_[i] or c.key in ready:
            continue
        p = unsettled(None) - unsettled(i)
        if p <= 0.0:
            continue
        replans = c.offer.id in held and c.key not in state.deployed  # the probe moves a held node to its plan
        probe_s, probe_usd = action_cost(c, "probe", c.key in state.deployed, node_held=replans)
        head = probe_s / SAFETY  # the probe's modelled seconds (action_cost's carry the safety factor)
        # the run's own node, replanned for the probe, loads the run's plan again (warm)
        moved = replans and deployed and c.offer.id == target.offer.id
        after_probe = deal_lanes(
            state, target, requests, deployed and not moved, on_node or moved, left - probe_usd,
            elapsed_s=state.elapsed_s + head,
        )  # fmt: skip
        rest = left - now.usd - probe_usd
        second = deal_lanes(state, c, requests, True, False, rest, elapsed_s=state.elapsed_s + now.seconds + head)
        gain = probe_first_gain(
            p, probe_usd, now.usd + now.late_usd, after_probe.usd + after_probe.late_usd, second.usd + second.late_usd
        )
        if gain > 0.0:
            worth.append((gain, i))
    return worth


def _unsettled(d: Draws, open_: np.ndarray, full: int, margin: float) -> Callable[[int | None], float]:
    """P(the full run of `full` is not the search's answer): in a draw, `full` infeasible or beaten by more than
    the margin by another open feasible candidate; given a candidate i probed first, of the better of `full` and i
    (the one then run) beaten by one of the others. A probe pins its plan, so in a draw it is known as drawn."""
    obj = np.where(d.feasible & open_[:, None], d.objective, np.inf)
    obj[full] = np.where(d.feasible[full], d.objective[full], np.inf)
    order = np.argsort(obj, axis=0)[:3]  # the three best per draw: the best other than two excluded is among them
    ranked = np.take_along_axis(obj, order, axis=0)

    def beaten(lead: np.ndarray, excluded: tuple[int, ...]) -> float:
        other = np.where(~np.isin(order[0], excluded), ranked[0], np.where(~np.isin(order[1], excluded), ranked[1],
                                                                             ranked[2]))  # fmt: skip
        lost = ~np.isfinite(lead) | (other < lead - margin * np.abs(np.where(np.isfinite(lead), lead, 0.0)))
        return float(lost.mean())

    def p(i: int | None) -> float:
        if i is None:
            return beaten(obj[full], (full,))
        return beaten(np.minimum(obj[full], obj[i]), (full, i))

    return p


def probe_first_gain(
    p: float, probe_usd: float, run_now_usd: float, run_after_probe_usd: float, second_usd: float
) -> float:
    """What probing a rival before the full run saves (USD, expected; negative: it costs): the full run now, and
    with P(the rival beats it by the margin) `p` the rival's probe and its own full run after it (`second_usd`),
    against the probe and the full run after it (`run_after_probe_usd`: later, so perhaps in more lanes)."""
    return run_now_usd + p * (probe_usd + second_usd) - (probe_usd + run_after_probe_usd)


@dataclass
class _Round:
    """One decision's buying: the draws and what they say of each candidate, and what is bought so far."""

    state: SearchState
    d: Draws
    ei: np.ndarray
    value: np.ndarray
    open_: np.ndarray
    best: Candidate | None
    margin: float
    worth: Worth | None
    p_stop: float | None  # before anything is verified: P(the lead's verification ends the search)
    p_best: np.ndarray = field(init=False)
    ready: set[str] = field(init=False)
    probed: np.ndarray = field(init=False)  # per candidate: probed or measured (Worth.informed: no probe to act on it)
    requests: int = field(init=False)
    held: set[str] = field(init=False)  # nodes the search holds: a candidate there pays a warm load
    left: float = field(init=False)  # USD left of the budget after what is bought
    actions: list[Action] = field(default_factory=list)
    used: set[str] = field(default_factory=set)  # hardware already measured in this decision
    skipped: int = 0  # over the budget left
    late: int = 0  # past the goal's time to answer
    unworthy: list[tuple[float, float, int]] = field(default_factory=list)  # (value $, cost $, index)
    _acting_usd: dict[int, tuple[float, float]] = field(default_factory=dict)  # _acting's, per candidate
    _informed_usd: dict[int, float] = field(default_factory=dict)  # _informed's, per candidate

    def __post_init__(self) -> None:
        masked = np.where(self.d.feasible, self.d.objective, np.inf)
        winner = np.argmin(masked, axis=0)
        draws = self.d.objective.shape[1]
        self.p_best = np.bincount(winner[np.isfinite(masked.min(axis=0))], minlength=len(self.d.cands)) / draws
        self.ready = ready_for_full(self.state, self.d.cands)
        self.probed = np.asarray([c.key in self.ready or c.stage == "measured" for c in self.d.cands])
        self.requests = full_requests(self.state.goal)
        self.held = held_offers(self.state)
        self.left = self.state.goal.budget_usd - self.state.spent_usd

    # ---- what to measure, best first ------------------------------------------------------------------------
    def picks(self, lead: int | None) -> tuple[list[Pick], int | None]:
        """Retries; the likeliest optimum's full run (or a probe worth more before it); then every open candidate
        by its value per expected dollar. Also the likeliest optimum's index (or None)."""
        cands = self.d.cands
        picks = [Pick(i, "retry") for i, c in enumerate(cands) if c.key in self.state.retry]
        full = lead if self.best is None else self._challenger()
        if full is not None:
            ahead = worth_first(self.state, self.d, full, self.ready, self.open_, self.held, self.requests, self.margin)
            # a probe that could spare the full run goes first, and the full run waits for what it says
            picks.append(Pick(max(ahead, key=lambda g: g[0])[1], "displace") if ahead else Pick(full, "lead"))
        for i, c in enumerate(cands):
            if self.open_[i] and self.value[i] > 0:
                picks.append(Pick(i, "value", self._per_usd(i, c)))
        picks.sort(key=lambda p: (RANK[p.why], -p.per_usd))
        return picks, full

    def _per_usd(self, i: int, c: Candidate) -> float:
        """What orders the `value` picks: worth per expected dollar (net of what it spares, _net_usd). Once an answer
        is verified, the worth buy() checks it against: a probe's one step ahead (Worth.informed), a full run's
        share of the production; before, the acquisition's value (the decision's own units)."""
        usd = max(self._net_usd(i, c), 1e-6)
        w = self.worth
        if w is None or w.gains is None:
            return float(self.value[i] / usd)
        if c.key in self.ready or c.stage == "measured":
            return float(w.share[i]) * w.usd / usd
        return self._informed(i) / usd

    def _net_usd(self, i: int, c: Candidate) -> float:
        """What measuring candidate i costs, net of what it spares: a probe is also the probe its own full run
        needs, so with P(it is the optimum) the search does not pay that probe later (on a node it holds then)."""
        ready = c.key in self.ready
        deployed, on_node = c.key in self.state.deployed, c.offer.id in self.held
        _, usd = action_cost(c, "full" if ready else "probe", deployed, requests=self.requests, node_held=on_node)
        if ready:
            return usd
        _, later = action_cost(c, "probe", deployed, node_held=True)
        return usd - float(self.p_best[i]) * later

    def _acting(self, j: int) -> tuple[float, float]:
        """What replacing the answer by candidate j costs (USD): its claim (on its own node, deployed by its probe)
        and the probe it needs first if not yet probed (once a round: Worth.informed asks each live candidate)."""
        if j not in self._acting_usd:
            c = self.d.cands[j]
            claim = self._priced(c, "full", True, False)[2]
            probe = action_cost(c, "probe", c.key in self.state.deployed, node_held=c.offer.id in self.held)[1]
            self._acting_usd[j] = (claim, probe)
        return self._acting_usd[j]

    def _informed(self, i: int) -> float:
        """What probing candidate i is worth against the verified answer, one step ahead (Worth.informed), once a
        round: picks() orders the probes by it and buy() checks the one it prices against it."""
        assert self.worth is not None
        if i not in self._informed_usd:
            self._informed_usd[i] = self.worth.informed(i, self._acting, self.probed)
        return self._informed_usd[i]

    def _challenger(self) -> int | None:
        """Once something is verified, only a probed challenger that wins at least as many draws displaces it, and
        only when it alone could keep the search from stopping: P(it beats the best by more than the margin) at
        least STOP_LEVEL. A challenger within the margin is no better an answer; its full run buys nothing the
        stop needs (the probes of the others resolve the rest, and its value per dollar still ranks it). Ties
        (hundreds of near-equal plans share the draws' wins, so each may win none) go to the best mean."""
        assert self.best is not None
        d, cands = self.d, self.d.cands
        mean_objective = np.where(d.feasible, d.objective, np.inf).mean(axis=1)
        pool = [i for i in range(len(cands)) if self.open_[i]]
        top = max(pool, key=lambda i: (self.p_best[i], -mean_objective[i]), default=None)
        best_share = self.p_best[[i for i, c in enumerate(cands) if c.key == self.best.key]].sum()
        if top is None or cands[top].key not in self.ready or self.p_best[top] <= 0 or self.p_best[top] < best_share:
            return None
        value_best = objective_value(self.state.goal, self.best)
        beats = d.feasible[top] & (d.objective[top] < value_best - self.margin * abs(value_best))
        return top if float(beats.mean()) >= STOP_LEVEL else None

    # ---- one pick, priced and checked ---------------------------------------------------------------------
    def buy(self, pick: Pick, cheapest: dict[str, int], lead_full: int | None) -> None:
        """Price `pick` (on the cheapest offer of its hardware unless a retry) and buy it when it fits the budget,
        is worth its cost (once an answer is verified) and ends in time; else count why not."""
        cands = self.d.cands
        retry = pick.why == "retry"
        i = pick.i if retry else cheapest.get(hardware_key(cands[pick.i].key), pick.i)
        cand = cands[i]
        if hardware_key(cand.key) in self.used:
            return
        rejected_full = any(r.key == cand.key and r.kind == "full" for r in self.state.rejected)
        full = cand.key in self.ready or cand.stage == "measured" or (retry and rejected_full)
        kind: ActionKind = "full" if full else "probe"
        deployed = cand.key in self.state.deployed and not retry
        on_node = not deployed and not retry and cand.offer.id in self.held
        n, seconds, usd, lane, note = self._priced(cand, kind, deployed, on_node)
        if usd > self.left:
            self.skipped += 1
            return
        if self.worth is not None and not retry and (self.best is not None or self.actions):
            gain = max(float(self.worth.share[i]), float(self.worth.share[pick.i])) * self.worth.usd
            acting = ""
            if kind == "probe" and self.worth.gains is not None:  # verified: a better plan needs its own claim
                gain = self._informed(i)
                claim_usd = self._acting(i)[0]
                acting = (
                    f", one step ahead, net of the claims acting on what it shows needs (${claim_usd:,.2f} its own)"
                )
            if gain <= usd:
                self.unworthy.append((gain, usd, i))
                return
            note += f"; worth ${gain:,.2f}{acting} against its ${usd:,.2f} ({self.worth.says})"
        early = None
        # the first measurement of a search (nothing probed, so no run in view yet) is in view of the run likely on
        # its offer (run_after): that run's lanes may start with it too
        opening = self.best is None and lead_full is None and not self.ready
        if kind == "probe" and not self.actions and (opening or (lead_full is not None and pick.why != "value")):
            early = self._early(i, cand, seconds, usd, lead_full)
            if early is not None:
                seconds, usd = seconds + early.seconds, usd + early.usd
        if self._late(seconds):
            self.late += 1  # it would finish after the time the goal allows for an answer
            return
        self.left -= usd
        self.used.add(hardware_key(cand.key))
        if on_node:
            self.held.discard(cand.offer.id)  # one node runs one plan at a time
        reason = _why(self, i, pick.why, kind, n) + note + (f"; {early.why}" if early else "")
        new = early.lanes.lanes - 1 - early.spare if early else 0
        rider = self._rider(i, early) if early and new > 0 else None
        if rider is not None:  # one of the new nodes probes a rival first: its start is billed with that probe
            assert early is not None
            usd -= early.node_usd
            reason += f"; one of them probes {CandidateKey.of(rider.key).plan} first, then joins the run"
        self.actions.append(
            Action(
                key=cand.key,
                kind=kind,
                expected_usd=usd,
                expected_s=seconds,
                needs_deploy=not deployed,
                reason=reason,
                requests=n if kind == "full" else 0,
                lanes=lane.lanes if lane else 1,
                lane_requests=lane.requests if lane else [],
                redeploy=retry,
                value=float(self.value[i]),
                early_lanes=new - (rider is not None),
                early_plan=early.plan if early else None,
                spares_held=early.spare if early else 0,
                early_after_s=early.after_s if early else 0.0,
            )
        )
        if rider is not None:  # its node's start was taken off with the first probe's lanes: not again
            assert early is not None
            self.actions.append(rider)
            self.left -= rider.expected_usd - early.node_usd
            self.used.add(hardware_key(rider.key))

    def _late(self, seconds: float) -> bool:
        """Whether an action of `seconds` started now would end after the time the goal allows for an answer."""
        bound = self.state.goal.answer_within_s
        return bound is not None and self.state.elapsed_s + seconds > bound

    def _rider(self, i: int, early: EarlyLanes) -> Action | None:
        """A rival probed on one of the nodes launched with the first probe for the claim's run, at once with it:
        the run then takes that node replanned (a warm load) instead of a node that only waited for it. Bought
        when what it may find against the plan in view (Worth, as a measurement beside a decision's first) is
        worth more than what it adds: its probe and the warm load that replans its node for the run (its node's
        start, `early.node_usd`, the run pays anyway). The rival is on the run's offer, not yet probed, and not the
        run's plan; the one worth most net of that; its probe ends no later than the goal allows."""
        if self.worth is None:
            return None
        probed, run = self.d.cands[i], early.run
        # the warm load for the run, priced as every start is (this run's start factor included)
        replan_usd = run.offer.usd_per_hour * start_seconds(run, False, node_held=True) * SAFETY / 3600.0
        best: tuple[float, Action] | None = None
        for j, c in enumerate(self.d.cands):
            if (
                c.offer.id != probed.offer.id
                or not self.open_[j]
                or c.key in self.ready
                or c.key in (probed.key, run.key)
                or hardware_key(c.key) in self.used
            ):
                continue
            seconds, usd = action_cost(c, "probe", False)  # a new node: provisioning, a cold load, the probe
            adds = usd - early.node_usd + replan_usd
            gain = float(self.worth.share[j]) * self.worth.usd
            # its node's start is in what the round has already taken off the budget (the first probe's lanes)
            fits = usd - early.node_usd <= self.left
            if gain <= adds or not fits or self._late(seconds) or (best is not None and gain - adds <= best[0]):
                continue
            why = (
                _why(self, j, "value", "probe", 0)
                + f"; on a node launched for the claim's run of {run.plan} with the probe of {probed.plan}, at "
                f"once with it (the run then takes it, replanned): worth ${gain:,.2f} against the ${adds:,.2f} it "
                f"adds ({self.worth.says})"
            )
            action = Action(key=c.key, kind="probe", expected_usd=usd, expected_s=seconds, needs_deploy=True,
                            reason=why, value=float(self.value[j]), rides=True)  # fmt: skip
            best = (gain - adds, action)
        return best[1] if best else None

    def _priced(
        self, cand: Candidate, kind: ActionKind, deployed: bool, on_node: bool
    ) -> tuple[int, float, float, LanePlan | None, str]:
        """Requests, modelled seconds and USD of measuring `cand`, the lanes a full run is dealt over, a note."""
        n = self.requests
        seconds, usd = action_cost(cand, kind, deployed, requests=n, node_held=on_node)
        note = ""
        if kind == "full" and usd > self.left:
            n = FULL_REQUESTS  # the claim's count does not fit: a short run, and the claim will say so
            seconds, usd = action_cost(cand, kind, deployed, requests=n, node_held=on_node)
            note = f"; only {n} requests fit the budget, so p{self.state.goal.latency_percentile} will not be claimable"
        lane = None
        if kind == "full" and n > FULL_REQUESTS:  # the claim's run dealt over lanes (lanes.py)
            # live nodes of its offer under another plan (a rival probed beside the first probe) become its lanes
            # (one of them is its first lane when it is not deployed itself: on_node)
            freed = [k for k in self.state.deployed if offer_of(k) == cand.offer.id and k != cand.key][on_node:]
            lane = deal_lanes(self.state, cand, n, deployed, on_node, self.left, freed=freed)
            seconds, usd = lane.seconds, lane.usd
            note += f"; {lane.why}" if lane.lanes > 1 else ""
        return n, seconds, usd, lane, note

    def _early(self, i: int, cand: Candidate, seconds: float, usd: float, lead_full: int | None) -> EarlyLanes | None:
        """The probe the search makes just before the full run it has in view: that run's lanes start with it.
        Nodes are launched only with the last probe worth making before that run: with another challenger still
        worth a probe, they would wait through its probe too (kept spares only if that is cheaper)."""
        cands = self.d.cands
        run = run_after(i, cands, self.p_best, lead_full)
        rivals = [
            j
            for _, j in worth_first(
                self.state, self.d, run, self.ready, self.open_, self.held, self.requests, self.margin
            )
            if j != i
        ]
        # how likely the run follows this probe directly: its verification would end the search
        follows = float(p_stop_if_verified(self.d, self.open_, [run], self.margin)[0])
        return early_lanes(
            self.state, cand, cands[run], seconds, self.left - usd, self.requests, self.p_best, cands,
            launch=not rivals, follows=follows,
        )  # fmt: skip


def choose(
    state: SearchState,
    d: Draws,
    ei: np.ndarray,
    value: np.ndarray,
    open_: np.ndarray,
    best: Candidate | None,
    parallel: int,
    p_beaten: float | None,
    p_any: float,
    margin: float = 0.03,
    lead: tuple[int, float] | None = None,
    worth: Worth | None = None,
) -> Decision:
    """At most `parallel` actions on distinct hardware, picks taken best first; or why nothing is bought."""
    p_stop = lead[1] if lead is not None else None  # decide gives a lead only while nothing is verified
    r = _Round(state, d, ei, value, open_, best, margin, worth, p_stop)
    picks, lead_full = r.picks(lead[0] if lead is not None else None)
    cheapest: dict[str, int] = {}  # the same measurement on the cheapest offer of that hardware
    for i, c in enumerate(d.cands):
        hw = hardware_key(c.key)
        if open_[i] and (hw not in cheapest or c.offer.usd_per_hour < d.cands[cheapest[hw]].offer.usd_per_hour):
            cheapest[hw] = i
    for pick in picks:
        if len(r.actions) >= parallel:
            break
        r.buy(pick, cheapest, lead_full)
    if r.actions:
        return Decision(actions=r.actions, best=best.key if best else None, p_beaten=p_beaten, p_feasible=p_any)
    if best is not None and worth is not None and r.unworthy:
        return _not_worth(best, p_beaten, r.unworthy, d.cands, worth, margin)
    return _nothing_fits(state, d, best, p_beaten, p_any, r.skipped, r.late, bool(picks))


def _not_worth(
    best: Candidate,
    p_beaten: float | None,
    unworthy: list[tuple[float, float, int]],
    cands: list[Candidate],
    worth: Worth,
    margin: float,
) -> Decision:
    """A verified answer, and every measurement left would cost more than what it may find is worth: stop."""
    gain, usd, i = max(unworthy, key=lambda u: u[0] - u[1])
    top = cands[i]
    beaten = f"P(an unverified candidate beats it by more than {margin:.0%}) = {p_beaten:.1%}; " if p_beaten else ""
    return Decision(
        stop_reason=f"converged: {best.plan} on {best.offer.id} meets the goal ({best.evidence}); {beaten}nothing "
        f"left is worth its cost: the most valuable, {top.plan} on {top.offer.id}, is worth ${gain:,.2f} against "
        f"its ${usd:,.2f} ({len(unworthy)} such measurement(s); {worth.says})",
        stop_kind="converged",
        best=best.key,
        p_beaten=p_beaten,
        p_feasible=1.0,
    )


def _nothing_fits(
    state: SearchState,
    d: Draws,
    best: Candidate | None,
    p_beaten: float | None,
    p_any: float,
    skipped: int,
    late: int,
    ordered: bool,
) -> Decision:
    """No measurement fits what is left of the budget (or of the time to answer): stop, and say which."""
    goal = state.goal
    reason = (
        f"budget reached: ${state.spent_usd:.2f} of ${goal.budget_usd:g} spent and the next of "
        f"{max(skipped, 1)} candidate measurement(s) would not fit in what is left"
    )
    stop: StopKind = "budget"
    if late and not skipped:
        stop = "deadline"
        reason = (
            f"time to answer reached: {state.elapsed_s / 3600:.2f} h of "
            f"{(goal.answer_within_s or 0) / 3600:g} h used and the next of {late} candidate measurement(s) "
            "would end after it"
        )
    if not ordered:
        reason = "nothing left worth measuring, yet no candidate is verified"
    return Decision(
        stop_reason=reason,
        stop_kind=stop,
        best=best.key if best else None,
        p_beaten=p_beaten,
        p_feasible=p_any,
        nearest=nearest_options(state, d),
    )


def _why(r: _Round, i: int, why: Why, kind: str, requests: int) -> str:
    """What the event log says: the value, the chance it is the optimum, what it would teach and could change."""
    state, d, best, margin, p_stop = r.state, r.d, r.best, r.margin, r.p_stop
    ei, value, p_best = r.ei, r.value, r.p_best
    cand = d.cands[i]
    if why == "retry":
        last = next(r.reason for r in reversed(state.rejected) if r.key == cand.key)
        return f"retry on a fresh deployment: the last measurement was not evidence ({last})"
    a = d.assessed[i]
    post = state.posterior(cand.gpu)
    learns = belief.informs(post, np.asarray(a.grad_latency), max(a.own_sigma, 1e-3)) if kind == "probe" else []
    against = "the best verified by the margin" if best is not None else "the plan it would verify now by the margin"
    if best is None and p_stop is None:
        against = "the best predicted"
    text = (
        f"predicted {_fmt(state.goal, cand)} (±{cand.sigma:.1%}), P(feasible) "
        f"{float(d.feasible[i].mean()):.0%}, P(optimum) {p_best[i]:.0%}; expected improvement over {against} "
        f"{ei[i]:.1%} of the objective, {value[i]:.1%} with what it tells about the others"
    )
    if why == "lead" and best is None and p_stop is not None:
        text = (
            f"the likeliest optimum, pinned by its probe: verified, P(no open candidate beats it by more than "
            f"{margin:.0%}) = {p_stop:.0%}, so a full run of {requests} requests most likely ends the search; " + text
        )
    elif why == "lead":
        text = f"the likeliest optimum, pinned by its probe: a full run of {requests} requests verifies it; " + text
    elif why == "displace":
        text = (
            "probed before the likeliest optimum's full run: the chance it beats that plan by more than the "
            "margin, times the full run's cost, is more than this probe costs; " + text
        )
    if learns:
        text += "; would narrow " + ", ".join(learns)
    if best is not None:
        text += f"; could replace {best.plan} on {best.offer.id} ({_fmt(state.goal, best)})"
    return text


def _fmt(goal: Goal, cand: Candidate) -> str:
    if goal.objective == "min_cost_per_clip":
        return f"${cand.usd_per_clip:.3f}/clip"
    if goal.objective == "min_latency":
        return f"p{goal.latency_percentile} {cand.latency_q_s:.1f} s"
    return f"{cand.clips_per_hour_per_node:.1f} clips/h/node"
