"""The MCP tool write_report: a completed run's report file, drawn on the server (as `worldtune report RUN_ID`).

The drawing is the agent's (agent/report.py, matplotlib) and tools never import the agent, so the tool asks the
server's Tuner (the agent, handed to build_server) to draw what tools/results/report_data.py reads from the server's
results database. The files are written on the server's machine, in the run's report folder next to the
database; a client over HTTP gets their paths (it names no path itself) and the HTML page's text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio.to_thread
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from worldtune.tools.mcp.common import RECORDS, refusals, tool
from worldtune.tools.mcp.session import session_of

HTML_LIMIT = 1_000_000  # characters of report.html returned inline


class ReportFiles(BaseModel):
    """The report files written on the server."""

    run_id: str
    files: dict[str, str] = Field(description="name -> path on the server: html (report.html), the plots, json, YAML")
    html: str | None = Field(default=None, description="report.html's text (images referenced by file name)")


@tool("Write a run's report", RECORDS)
async def write_report(
    ctx: Context, run_id: Annotated[str, Field(min_length=1, max_length=100, description="a completed run's id")]
) -> ReportFiles:
    """Write a completed tuning run's report on the server: an HTML page, PNG plots of latency vs throughput
    and cost per clip, the JSON record and the recommended deployment's YAML. Returns their paths and the page."""
    from worldtune.tools.mcp.tuning import tuner

    session = session_of(ctx)
    driver = tuner(session)  # refused on a server built without the agent
    with refusals():
        files = await anyio.to_thread.run_sync(lambda: driver.write_report(run_id, str(session.store.path)))
    page = Path(files["html"]) if files.get("html") else None
    html = page.read_text()[:HTML_LIMIT] if page is not None and page.is_file() else None
    return ReportFiles(run_id=run_id, files=files, html=html)
