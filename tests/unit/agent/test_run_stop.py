"""A run asked to stop (a signal, its MCP session ending) stops, even when a library swallows the first
cancellation: the flake where `tune` exited 0 after SIGINT on a loaded machine (issue 12 item 7)."""

from __future__ import annotations

import asyncio
import contextlib

from worldtune.tools.runs.stopping import RunControl, RunStopped


def test_a_swallowed_cancellation_is_delivered_again_and_the_reason_is_kept() -> None:
    swallowed: list[int] = []

    async def stubborn_step() -> None:
        """Like a step deep in a client library that catches one cancellation and goes on waiting."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            swallowed.append(1)
        await asyncio.sleep(30)  # a second cancellation ends it

    async def main() -> RunStopped | None:
        task = asyncio.current_task()
        assert task is not None
        control = RunControl("run-x", asyncio.get_running_loop(), task)
        asyncio.get_running_loop().call_soon(control.stop, "SIGINT", 2)
        try:
            await stubborn_step()
        except asyncio.CancelledError:
            return control.notice()
        return None

    stopped = asyncio.run(asyncio.wait_for(main(), timeout=20))
    assert swallowed == [1]
    assert isinstance(stopped, RunStopped) and stopped.signum == 2 and "worldtune resume run-x" in str(stopped)


def test_notice_clears_the_pending_cancellations_so_cleanup_can_await() -> None:
    async def main() -> str:
        task = asyncio.current_task()
        assert task is not None
        control = RunControl("run-y", asyncio.get_running_loop(), task)
        control.stop("SIGTERM", 15)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)
        assert control.notice() is not None and task.cancelling() == 0
        await asyncio.sleep(0.6)  # past the re-cancel interval: nothing cancels the cleanup any more
        return "cleaned up"

    assert asyncio.run(asyncio.wait_for(main(), timeout=20)) == "cleaned up"


def test_no_stop_asked_means_no_stop() -> None:
    async def main() -> RunStopped | None:
        task = asyncio.current_task()
        assert task is not None
        return RunControl("run-z", asyncio.get_running_loop(), task).notice()

    assert asyncio.run(main()) is None
