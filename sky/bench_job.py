"""The benchmark job run on a SkyPilot cluster next to the server: `worldtune bench`, samples streamed to the log.

`python -m worldtune.sky.bench_job --db FILE -- <worldtune bench arguments>` runs `worldtune bench
... --json --db FILE` against the server on loopback and, while it runs, prints every sample the
benchmark stores in FILE as one `WORLDTUNE_SAMPLE <json>` line, then the result as one
`WORLDTUNE_RESULT <json>` line. The machine that launched the cluster reads the job's log and copies
each sample into its own results database as it appears (sky/backend.py), so a benchmark cut short
by a preemption still keeps every sample measured before it. Only the standard library and the
worldtune CLI (with its words: each sample is read as a tools.sample.Sample) are needed on the cluster.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from worldtune.tools.words.sample import Sample

SAMPLE_MARKER = "WORLDTUNE_SAMPLE"
RESULT_MARKER = "WORLDTUNE_RESULT"
ERROR_MARKER = "WORLDTUNE_BENCH_ERROR"


def new_samples(db: Path, after_id: int) -> list[tuple[int, Sample]]:
    """Samples stored after row `after_id` (row id, sample with its benchmark seq); [] before the file exists."""
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute("SELECT id, seq, body FROM samples WHERE id > ? ORDER BY id", (after_id,)).fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError:  # schema not created yet, or a write lock: try again next poll
        return []
    return [(int(row_id), Sample.from_json(body, seq=int(seq))) for row_id, seq, body in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--db", required=True, help="results database the benchmark writes on the cluster")
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between looks at the database")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then `worldtune bench` arguments")
    args = parser.parse_args(argv)
    bench_args = [a for a in args.bench_args if a != "--"] if args.bench_args[:1] == ["--"] else args.bench_args
    db = Path(args.db).expanduser()
    db.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "worldtune.cli", "bench", *bench_args, "--json", "--db", str(db)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    last = 0

    def flush() -> None:
        nonlocal last
        for row_id, sample in new_samples(db, last):
            print(f"{SAMPLE_MARKER} {json.dumps(sample.record(), default=str)}", flush=True)
            last = row_id

    while proc.poll() is None:
        flush()
        time.sleep(args.poll)
    out, err = proc.communicate()
    flush()
    if proc.returncode != 0:
        print(f"{ERROR_MARKER} exit {proc.returncode}: {(err or out).strip()[-2000:]}", flush=True)
        return proc.returncode
    try:
        result = json.loads(out)
    except json.JSONDecodeError:
        print(f"{ERROR_MARKER} unreadable result: {out[-2000:]}", flush=True)
        return 1
    print(f"{RESULT_MARKER} {json.dumps(result, default=str)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
