"""A discrete-event model (simpy) of a fleet serving a day of traffic: queueing, autoscaling, cold starts, spot.

Requests arrive at a balancer that sends each to the least-loaded ready server (fewest outstanding), where
it waits FIFO; with no ready server it is held until one starts ("central" dispatch holds every request
until a server is idle: one shared FIFO, the M/G/c queue). A server is busy for the plan's service time
(lognormal spread around the model's mean); the answer leaves after the request's own latency.
Nodes start cold: provisioning + model load, billed from launch. The autoscaler decides every interval:
SkyServe's rule (nodes = ceil(QPS over the window / target QPS per node)) or worldtune's queue rule
(nodes = ceil(outstanding / (servers per node x target per server))), clamped to [min, max], acting only
after the target has stayed above (below) the current count for the upscale (downscale) delay. A spot
node is preempted at the stated rate (exponential lifetimes): its requests go back to the balancer and a
replacement launches at once; the first `base_ondemand_fallback` nodes are on-demand.
The day starts with `min_replicas` nodes warm (yesterday's) and runs until every arrival is answered.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from worldtune.tools.words.fleet import Fleet, FleetDay, FleetMoment

SAMPLE_EVERY_S = 300.0
Gen = Generator[simpy.Event, Any, None]


@dataclass
class _Request:
    arrival: float
    start: float = -1.0
    done: float = -1.0
    held: bool = False


@dataclass
class _Server:
    node: _Node
    queue: deque[_Request] = field(default_factory=deque)
    current: _Request | None = None
    wake: simpy.Event | None = None
    proc: simpy.Process | None = None

    @property
    def outstanding(self) -> int:
        return len(self.queue) + (self.current is not None)


@dataclass
class _Node:
    launched: float
    spot: bool
    servers: list[_Server] = field(default_factory=list)
    ready: bool = False
    draining: bool = False
    ended: float | None = None

    @property
    def outstanding(self) -> int:
        return sum(s.outstanding for s in self.servers)


class _Sim:
    def __init__(self, fleet: Fleet, arrivals: list[float], seed: int) -> None:
        self.f, self.arrivals = fleet, sorted(arrivals)
        self.env = simpy.Environment()
        self.rng = random.Random(seed)
        self.nodes: list[_Node] = []
        self.pending: deque[_Request] = deque()
        self.requests: list[_Request] = []
        self.recent: deque[float] = deque()
        self.cold_starts = self.preemptions = self.answered = 0
        self.timeline: list[FleetMoment] = []
        self.up_since: float | None = None
        self.down_since: float | None = None
        cv = fleet.service_cv
        self.sigma = math.sqrt(math.log(1 + cv * cv)) if cv > 0 else 0.0

    # ---- nodes ----
    def alive(self) -> list[_Node]:
        return [n for n in self.nodes if n.ended is None and not n.draining]

    def launch(self, warm: bool = False) -> None:
        on_demand = sum(1 for n in self.alive() if not n.spot)
        spot = self.f.capacity == "spot" and on_demand >= self.f.base_ondemand_fallback
        node = _Node(launched=self.env.now, spot=spot)
        self.nodes.append(node)
        self.env.process(self._node(node, warm))

    def _node(self, node: _Node, warm: bool) -> Gen:
        if not warm:
            self.cold_starts += 1
            yield self.env.timeout(self.f.cold_start_s)
        if node.ended is not None:
            return
        node.ready = True
        for _ in range(self.f.servers_per_node):
            server = _Server(node)
            node.servers.append(server)
            server.proc = self.env.process(self._serve(server))
        if node.spot and self.f.preemptions_per_node_hour > 0:
            self.env.process(self._preempt(node, self.rng.expovariate(self.f.preemptions_per_node_hour / 3600)))

    def end(self, node: _Node, requeue: bool) -> None:
        node.ended, node.ready = self.env.now, False
        lost: list[_Request] = []
        for server in node.servers:
            lost += ([server.current] if server.current else []) + list(server.queue)
            server.queue.clear()
            if server.proc is not None and server.proc.is_alive and server.proc is not self.env.active_process:
                server.proc.interrupt()
        if requeue:
            for req in sorted(lost, key=lambda r: r.arrival):
                req.start = -1.0
                self.dispatch(req)

    def _preempt(self, node: _Node, after: float) -> Gen:
        yield self.env.timeout(after)
        if node.ended is None:
            self.preemptions += 1
            was_draining = node.draining
            self.end(node, requeue=True)
            if not was_draining:
                self.launch()

    # ---- servers and the balancer ----
    def _serve(self, server: _Server) -> Gen:
        node = server.node
        while True:
            if not server.queue and self.pending and not node.draining:
                server.queue.append(self.pending.popleft())
            if not server.queue:
                if node.draining and node.outstanding == 0:
                    self.end(node, requeue=False)
                    return
                server.wake = self.env.event()
                try:
                    yield server.wake
                except simpy.Interrupt:
                    return
                continue
            req = server.queue.popleft()
            server.current, req.start = req, self.env.now
            noise = self.noise()
            busy = self.f.service_s * noise
            own = (self.f.latency_s or self.f.service_s) * noise
            try:
                yield self.env.timeout(busy)
            except simpy.Interrupt:
                return
            req.done = req.start + max(own, busy)
            self.answered += 1
            server.current = None

    def noise(self) -> float:
        """A request's service time over the mean: lognormal with the fleet's spread (mean 1), or exponential."""
        if self.f.service_distribution == "exponential":
            return self.rng.expovariate(1.0)
        return self.rng.lognormvariate(-self.sigma * self.sigma / 2, self.sigma) if self.sigma else 1.0

    def ready_servers(self) -> list[_Server]:
        return [s for n in self.nodes if n.ready and not n.draining and n.ended is None for s in n.servers]

    def dispatch(self, req: _Request) -> None:
        servers = self.ready_servers()
        if self.f.dispatch == "central":
            servers = [s for s in servers if s.outstanding == 0]
        if not servers:
            req.held = req.held or not self.ready_servers()
            self.pending.append(req)
            return
        target = min(servers, key=lambda s: s.outstanding)
        target.queue.append(req)
        if target.wake is not None and not target.wake.triggered:
            target.wake.succeed()

    def _arrivals(self) -> Gen:
        for t in self.arrivals:
            yield self.env.timeout(max(0.0, t - self.env.now))
            req = _Request(arrival=self.env.now)
            self.requests.append(req)
            self.recent.append(self.env.now)
            self.dispatch(req)

    def wake_idle(self) -> None:
        for s in self.ready_servers():
            if self.pending and s.outstanding == 0 and s.wake is not None and not s.wake.triggered:
                s.wake.succeed()

    # ---- the autoscaler ----
    def target(self) -> int:
        a = self.f.autoscaler
        if a.policy == "fixed":
            return a.min_replicas
        if a.policy == "qps":
            while self.recent and self.recent[0] < self.env.now - a.qps_window_s:
                self.recent.popleft()
            qps = len(self.recent) / a.qps_window_s
            want = math.ceil(qps / float(a.target_qps_per_replica or 1.0) - 1e-9)
        else:
            outstanding = len(self.requests) - self.answered  # in the system: held, queued or in service
            per_node = self.f.servers_per_node * float(a.target_queue_per_server or 1.0)
            want = math.ceil(outstanding / per_node - 1e-9)
        return max(a.min_replicas, min(a.max_replicas, want))

    def _autoscale(self, until: float) -> Gen:
        a = self.f.autoscaler
        while self.env.now < until or self.answered < len(self.requests):
            yield self.env.timeout(a.decision_interval_s)
            if a.policy == "fixed" and not self.pending:
                continue  # nothing to decide; preempted nodes are replaced where they fall
            want, have = self.target(), len(self.alive())
            now = self.env.now
            if have == 0 and self.pending:  # scale from zero: a held request launches a node at once
                self.launch()
                continue
            self.up_since = (self.up_since if self.up_since is not None else now) if want > have else None
            self.down_since = (self.down_since if self.down_since is not None else now) if want < have else None
            if self.up_since is not None and now - self.up_since >= a.upscale_delay_s:
                for _ in range(want - have):
                    self.launch()
                self.up_since = None
            if self.down_since is not None and now - self.down_since >= a.downscale_delay_s:
                self.shrink(have - want)
                self.down_since = None
            self.wake_idle()

    def shrink(self, count: int) -> None:
        """Cancel launching nodes first, then drain the least-loaded ready ones (newest first on ties)."""
        order = sorted(self.alive(), key=lambda n: (n.ready, n.outstanding, -n.launched))
        for node in order[:count]:
            if node.outstanding == 0:
                self.end(node, requeue=False)
            else:
                node.draining = True
                for s in node.servers:
                    if s.wake is not None and not s.wake.triggered:
                        s.wake.succeed()

    def _sampler(self, until: float) -> Gen:
        while self.env.now <= until:
            billed = [n for n in self.nodes if n.ended is None]
            queued = len(self.pending) + sum(len(s.queue) for n in billed for s in n.servers)
            self.timeline.append(
                FleetMoment(t_s=self.env.now, nodes=len(billed), ready=sum(n.ready for n in billed), queued=queued)
            )
            yield self.env.timeout(SAMPLE_EVERY_S)

    def run(self, horizon_s: float) -> None:
        for _ in range(self.f.autoscaler.min_replicas):
            self.launch(warm=True)
        self.env.process(self._arrivals())
        self.env.process(self._sampler(horizon_s))
        done = self.env.process(self._autoscale(horizon_s))
        self.env.run(until=done)


def simulate_day(fleet: Fleet, arrivals: list[float], seed: int = 0, horizon_s: float = 86400.0) -> FleetDay:
    """One simulated day of `fleet` under `arrivals` (s); deterministic for a seed. Cost billed to the last answer."""
    sim = _Sim(fleet, arrivals, seed)
    sim.run(horizon_s)
    end = max(horizon_s, sim.env.now)
    e2e = np.asarray([r.done - r.arrival for r in sim.requests], dtype=float)
    waits = np.asarray([r.start - r.arrival for r in sim.requests], dtype=float)
    hours = ondemand = 0.0
    for n in sim.nodes:
        h = ((n.ended if n.ended is not None else end) - n.launched) / 3600
        hours += h
        ondemand += 0.0 if n.spot else h
    spot_price = fleet.usd_per_node_hour
    od_price = fleet.ondemand_usd_per_node_hour if fleet.ondemand_usd_per_node_hour is not None else spot_price
    cost = (hours - ondemand) * spot_price + ondemand * (od_price if fleet.capacity == "spot" else spot_price)
    pct = {f"p{p}": float(np.percentile(e2e, p)) for p in (50, 90, 95, 99)} if e2e.size else {}
    return FleetDay(
        seed=seed,
        arrivals=len(sim.requests),
        completed=int((e2e >= 0).sum()),
        e2e_s=pct,
        wait_mean_s=float(waits.mean()) if waits.size else 0.0,
        wait_p95_s=float(np.percentile(waits, 95)) if waits.size else 0.0,
        cold_starts=sim.cold_starts,
        waited_on_cold_start=sum(r.held for r in sim.requests),
        preemptions=sim.preemptions,
        node_hours=hours,
        ondemand_node_hours=ondemand,
        cost_usd=cost,
        usd_per_clip=cost / len(sim.requests) if sim.requests else None,
        max_nodes=max((s.nodes for s in sim.timeline), default=0),
        timeline=sim.timeline,
        answers=[(r.arrival, r.done - r.arrival) for r in sim.requests],
        e2e_samples_s=e2e.tolist(),
    )
