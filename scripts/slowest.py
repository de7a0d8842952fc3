"""Where a test run's time went, in a few lines at the very end of scripts/test.sh's output (CI keeps its tail):
the files by their tests' summed time (setup, call and teardown), the slowest tests, and the files by their tests'
CPU seconds (tests/conftest.py records each test's CPU and its reaped children's: on 2 cores the suite is
CPU-bound, so CPU is what a test costs the run), from pytest's JUnit XML.

    python scripts/slowest.py .cache/junit.xml [N]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def main(path: str, n: int = 10) -> None:
    if not Path(path).is_file():
        print(f"slowest: no {path} (pytest did not write it)")
        return
    cases = [(c.get("classname", ""), c.get("name", ""), float(c.get("time") or 0.0))
             for c in ET.parse(path).getroot().iter("testcase")]  # fmt: skip
    files: dict[str, float] = defaultdict(float)
    for classname, _, took in cases:
        files[classname.rsplit(".", 1)[-1]] += took
    top_files = sorted(files.items(), key=lambda kv: -kv[1])[:n]
    print("slowest files (s): " + ", ".join(f"{name} {took:.0f}" for name, took in top_files))
    top = sorted(cases, key=lambda c: -c[2])[:n]
    print("slowest tests (s): " + ", ".join(f"{name[:60]} {took:.0f}" for _, name, took in top))
    cpu: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).getroot().iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "cpu_s":
                cpu[case.get("classname", "").rsplit(".", 1)[-1]] += float(prop.get("value") or 0.0)
    if cpu:
        top_cpu = sorted(cpu.items(), key=lambda kv: -kv[1])[:n]
        print(
            f"CPU s of tests and their children ({sum(cpu.values()):.0f} in all; daemons such as SkyPilot's API"
            " server not counted): " + ", ".join(f"{name} {took:.0f}" for name, took in top_cpu)
        )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10)
