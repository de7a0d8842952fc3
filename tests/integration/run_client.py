"""A throw-away MCP client for tests/integration/test_run_abandon.py and benchmarks/client_abandon.py.

    python run_client.py URL GOAL GRACE_S attached|detached ...

Starts one tuning run per argument over streamable HTTP (start_tuning on the local twin; a detached one with
hold_hours=1), prints each run id on its own line, then heartbeats every run each second until it is killed.
"""

from __future__ import annotations

import sys

import anyio
from mcp import Client


async def main(url: str, goal: str, grace_s: float, kinds: list[str]) -> None:
    async with Client(url) as client:
        ids = []
        for kind in kinds:
            args: dict[str, object] = {"goal": goal, "time_scale": 60.0, "grace_s": grace_s}
            if kind == "detached":
                args |= {"detach": True, "hold_hours": 1.0}
            started = await client.call_tool("start_tuning", args)
            assert not started.is_error, started.content
            assert isinstance(started.structured_content, dict)
            ids.append(str(started.structured_content["run_id"]))
            print(ids[-1], flush=True)
        while True:
            for run_id in ids:
                await client.call_tool("heartbeat_run", {"run_id": run_id})
            await anyio.sleep(1.0)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:])
