"""The benchmark next to the server: one attempt of `worldtune bench` as a `sky exec` job on the deployment's
cluster, its log followed and every sample copied into the local Store as it appears (sky/bench_job.py prints
them). SkyPilotBackend.benchmark (sky/backend.py) runs attempts under the words' preemption recovery.
"""

from __future__ import annotations

import json
import queue
import shlex
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from worldtune.sky.bench_job import ERROR_MARKER, RESULT_MARKER, SAMPLE_MARKER
from worldtune.sky.local_cluster import cluster_python
from worldtune.sky.render import cluster_name
from worldtune.tools.words.bench_spec import BenchmarkSpec
from worldtune.tools.words.deployment import API_KEY_ENV, Deployment, MeasureHere, Progress
from worldtune.tools.words.sample import Sample

if TYPE_CHECKING:
    from worldtune.sky.backend import SkyPilotBackend

# how often a benchmark asks SkyPilot about its job while the log stream is quiet (each ask runs a Python on the
# cluster: ~1.5 s of CPU; it was asked every 10 s while samples streamed in, issue 35)
STATUS_EVERY_S = 10.0
# How long a job SkyPilot cannot reach may stay unexplained while its cluster still reads UP: a cut cluster
# (scancel, spot reclaim) is seen by the next status refresh, which can lag the cut on a busy head node.
UNREACHABLE_GRACE_S = 120.0
# How long a finished job's log stream may stay silent before its log is read in one piece instead: the
# follow stream of SkyPilot's API server can lag the job's end by minutes on a busy machine, or never close.
SILENT_STREAM_GRACE_S = 30.0


def run_attempt(
    backend: SkyPilotBackend,
    dep: Deployment,
    spec: BenchmarkSpec,
    benchmark_id: str,
    attempt: int,
    say: Progress,
    on_job: Callable[[Deployment, int], None] | None,
    here: MeasureHere,
) -> tuple[str, dict[str, Any] | None]:
    """One `sky exec` of the benchmark job: ("completed", result), ("preempted", None) once the cluster went away
    under it (what it measured kept and marked by `here.cut_short`), or (what went wrong, None)."""

    cluster = dep.cluster or cluster_name(dep)
    offset = here.next_seq(benchmark_id)
    remote_db = f"~/.worldtune/bench/{benchmark_id}-a{attempt}.db"
    # On the cluster every replica is on loopback, at the port its endpoint carries.
    endpoints = [f"http://127.0.0.1:{urlsplit(e).port}" for e in dep.endpoints]
    on_cluster = spec.model_copy(update={"endpoints": endpoints, "deployment_id": None, "run_id": None})
    args = [a for e in endpoints for a in ("--endpoint", e)] + ["--spec-json", on_cluster.model_dump_json()]
    python = cluster_python() if dep.infra.kind == "slurm" else "~/.worldtune-venv/bin/python"
    run = f"{python} -m worldtune.sky.bench_job --db {remote_db} -- {shlex.join(args)}"
    task = backend.sky.Task(name=f"worldtune-bench-{benchmark_id}", run=run)
    task.set_resources(backend.sky.Resources(cpus=1))
    task.update_secrets({API_KEY_ENV: backend.api_key(dep)})  # the benchmark client sends the servers' key
    job_id, _ = backend.result(backend.sky.exec(task, cluster_name=cluster))
    say(f"bench job {job_id} on {cluster} (attempt {attempt})", None)
    if on_job:
        on_job(dep, int(job_id))
    stream: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_follow, args=(backend, cluster, int(job_id), stream), daemon=True).start()
    reader = _BenchLog(here, benchmark_id, offset, attempt, cluster)
    pending, stream_open, checked = "", True, time.time()
    heard = checked  # when the stream last brought something: while lines flow, the job is not asked about
    unreachable_since: float | None = None
    ended_at: float | None = None  # when SkyPilot first said the job is over while its stream stayed open
    while True:
        try:
            chunk = stream.get(timeout=backend.poll_s)
        except queue.Empty:
            chunk = ""
        if chunk is None:
            stream_open = False
        elif chunk:
            pending += chunk
            heard = time.time()
        *lines, pending = pending.split("\n")
        if (outcome := reader.consume(lines)) is not None:
            return outcome
        # The stream ends with the job, or hangs when the cluster vanishes: ask SkyPilot now and then.
        if stream_open and time.time() - max(checked, heard) < STATUS_EVERY_S:
            continue
        checked = time.time()
        status = backend.job_status(cluster, int(job_id))
        unreachable_since = (unreachable_since or checked) if status is None else None
        if status in ("RUNNING", "PENDING", "SETTING_UP", "INIT"):
            if not stream_open:  # the stream broke while the job runs: follow again (samples dedupe)
                stream_open = True
                threading.Thread(target=_follow, args=(backend, cluster, int(job_id), stream), daemon=True).start()
            continue
        if status == "SUCCEEDED" and not stream_open and pending:
            pending += "\n"  # a last line without newline
            continue
        if status is not None and stream_open:
            ended_at = ended_at or checked
            if checked - ended_at < SILENT_STREAM_GRACE_S:
                continue
            # The job is over but its stream lags or hangs: read the whole log once (samples dedupe).
            if (outcome := reader.consume(backend.job_log(cluster, int(job_id)).splitlines())) is not None:
                return outcome
            stream_open = False
        if backend.status(dep).state == "preempted":
            here.cut_short(benchmark_id, attempt)  # what was measured before the cut stays, marked
            return "preempted", None
        if stream_open:
            continue
        if unreachable_since is not None and checked - unreachable_since < UNREACHABLE_GRACE_S:
            continue  # the job cannot be reached but its cluster reads UP: ask again before judging
        return f"bench job {job_id} ended ({status}) without a result: {reader.tail[-1500:]}", None


def _follow(backend: SkyPilotBackend, cluster: str, job_id: int, sink: queue.Queue[str | None]) -> None:
    """Copy a job's log into `sink` as it is written; None marks its end."""
    try:
        for chunk in backend.sky.tail_logs(cluster, job_id, follow=True, preload_content=False):
            if chunk is None:
                break
            sink.put(chunk)
    except Exception as exc:  # the cluster went away under the stream
        sink.put(f"\n(log stream ended: {exc})\n")
    finally:
        sink.put(None)


class _BenchLog:
    """Reads a bench job's log lines: samples are kept once each (by their remote seq), the result ends it."""

    def __init__(self, here: MeasureHere, benchmark_id: str, offset: int, attempt: int, cluster: str) -> None:
        self.here, self.benchmark_id, self.offset = here, benchmark_id, offset
        self.attempt, self.cluster = attempt, cluster
        self.seen: set[int] = set()
        self.tail = ""

    def consume(self, lines: list[str]) -> tuple[str, dict[str, Any] | None] | None:
        """("completed", result) or (error, None) once the log says so; None while it goes on."""
        for line in lines:
            self.tail = (self.tail + line + "\n")[-3000:]
            if SAMPLE_MARKER in line:  # SkyPilot prefixes each job line with "(task, pid=...) "
                sample = Sample.from_json(_after(line, SAMPLE_MARKER))
                seq = sample.seq
                if seq not in self.seen:
                    self.seen.add(seq)
                    here = {"seq": self.offset + seq, "attempt": self.attempt, "cluster": self.cluster}
                    message = f"{len(self.seen)} samples (attempt {self.attempt})"
                    self.here.keep(
                        self.benchmark_id, Sample.of({**sample.record(), **here, "remote_seq": seq}), message
                    )
            elif RESULT_MARKER in line:
                return "completed", json.loads(_after(line, RESULT_MARKER))
            elif ERROR_MARKER in line:
                return _after(line, ERROR_MARKER), None
        return None


def _after(line: str, marker: str) -> str:
    return line[line.index(marker) + len(marker) :].strip()
