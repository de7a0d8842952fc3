"""Every benchmark says how long it took (issue 35 item 5): each script under benchmarks/ stamps the JSON it saves
with its run's wall and CPU seconds (benchmarks/_run_clock.py)."""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PARTS = {"step_noise.py": ("data", "child"), "rehearsal.py": ("partial",)}  # progress so far, a child's part


def test_every_json_a_benchmark_saves_is_stamped_with_its_run() -> None:
    scripts = sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
    assert len(scripts) >= 10
    for script in scripts:
        text = script.read_text()
        # every save of a result goes through stamped(...); the only others are a run's progress so far and a child
        # process's part, which its parent reads back into the stamped result
        saves = re.findall(r"(?:write_text\(json\.dumps\(|write_json\([^,]+, )(\w+)", text)
        unstamped = [s for s in saves if s not in ("stamped", *PARTS.get(script.name, ()))]
        assert "stamped" in saves and not unstamped, f"{script.name} saves {unstamped} without stamped(...)"


def test_the_stamp_measures_this_process() -> None:
    spec = importlib.util.spec_from_file_location("_run_clock", BENCHMARKS / "_run_clock.py")
    assert spec and spec.loader
    clock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(clock)
    began = time.process_time()
    while time.process_time() - began < 0.3:  # burn a little CPU so the stamp has something to count
        pass
    out = clock.stamped({"rows": [1], "run": "old"})
    run = out["run"]
    assert out["rows"] == [1] and isinstance(run, dict)
    assert run["wall_s"] >= 0.3 and run["cpu_s"] >= 0.3 and run["cores"] >= 1 and len(run["load_avg_1m"]) == 2
    assert run["started_at"].endswith("Z") and "measured" in run["clock"]
