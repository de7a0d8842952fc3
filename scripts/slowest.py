"""Where a test run's time went, in a few lines at the very end of scripts/test.sh's output (CI keeps its tail):
the files by their tests' summed time (setup, call and teardown) and the slowest tests, from pytest's JUnit XML.

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


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10)
