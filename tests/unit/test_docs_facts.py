"""Issue 36.8: what the README and docs state as fact is checked against the code, so it cannot drift again:
the MCP tool table against the registered tools, the confidence rule against tools/words/stats.py, and the main
job's time against its benchmark's saved measurement."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
from mcp import Client

from worldtune.tools.mcp.server import build_server
from worldtune.tools.words.stats import CLAIM_CONFIDENCE, GOAL_CONFIDENCE, samples_needed

ROOT = Path(__file__).resolve().parents[2]


def flat(path: Path) -> str:
    return " ".join(path.read_text().split())


def test_the_mcp_tool_table_names_every_registered_tool_and_no_other(tmp_path: Path) -> None:
    async def names() -> set[str]:
        async with Client(build_server(str(tmp_path / "wt.db"))) as client:
            return {t.name for t in (await client.list_tools()).tools}

    registered = anyio.run(names)
    rows = [line for line in (ROOT / "docs" / "mcp.md").read_text().splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert documented == registered, (sorted(registered - documented), sorted(documented - registered))


def test_the_readme_states_the_confidence_rule_the_code_applies() -> None:
    readme = flat(ROOT / "README.md")
    bench = f"`bench` at {CLAIM_CONFIDENCE:.0%} confidence (p95 from {samples_needed(0.95, CLAIM_CONFIDENCE)} samples)"
    tune = f"95% unless it says otherwise (p95 from {samples_needed(0.95, GOAL_CONFIDENCE)})"
    assert bench in readme and f"{GOAL_CONFIDENCE:.0%}" == "95%" and tune in readme


def test_the_main_jobs_stated_time_is_the_measured_one() -> None:
    saved = json.loads((ROOT / "benchmarks" / "results" / "main_job.json").read_text())
    wall = saved["after"]["main job"]["wall_s"]
    stated = re.search(r"It finished in (\d+)-(\d+) s", flat(ROOT / "docs" / "agent.md"))
    assert stated, "docs/agent.md no longer states the main job's time"
    low, high = int(stated.group(1)), int(stated.group(2))
    assert low <= wall <= high, f"docs/agent.md says {low}-{high} s; benchmarks/results/main_job.json measured {wall} s"
