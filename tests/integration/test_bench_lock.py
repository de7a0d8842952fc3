"""Two `worldtune bench` runs against one twin: the second is refused naming the first, or with --wait waits for it.

Before the lock, two `--repeats 5` benches against one twin measured 5.46 and 6.15 s per step instead of
3.04 (each queued behind the other), with no note.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from test_bench_twin import WORLDTUNE, twin

from worldtune.tools.bench.lock import lock_target
from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration


def test_a_second_bench_on_one_twin_is_refused_or_waits(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    store = Store(db)
    with twin("--time-scale", "100", "--load-time", "0") as urls:
        target = lock_target(None, urls)
        args = ["bench", "--endpoint", urls[0], "--repeats", "3", "--db", str(db), "--json"]
        long_run = [*args[:4], "8", *args[5:]]  # the first runs long enough (~30 s wall) to be seen running
        first = subprocess.Popen([*WORLDTUNE, *long_run], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        holder = None
        for _ in range(12000):  # until the first bench holds the twin (bounded; it cannot end before it holds)
            holder = store.lock_holder(target)
            if holder is not None or first.poll() is not None:
                break
            time.sleep(0.05)
        assert holder is not None, "the first bench never took the lock"
        refused = subprocess.run([*WORLDTUNE, *args], capture_output=True, text=True, timeout=600)
        waited = subprocess.run([*WORLDTUNE, *args, "--wait"], capture_output=True, text=True, timeout=900)
        first_out, _ = first.communicate(timeout=900)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    reason = json.loads(refused.stdout)["reason"]
    assert f"{holder['benchmark_id']} is running on it" in reason and "endpoint=" in reason
    assert first.returncode == 0 and waited.returncode == 0, waited.stdout[-2000:] + waited.stderr[-2000:]
    one, two = json.loads(first_out), json.loads(waited.stdout)
    assert one["load"]["concurrent_benchmarks"] == [] and two["load"]["concurrent_benchmarks"] == []
    assert two["load"]["waited_s"] > 0
    assert len(store.list_benchmarks()) == 2  # the refused one stored nothing
