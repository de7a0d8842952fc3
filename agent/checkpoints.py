"""The run's checkpoints: SQLite savers that store the state's words with the one serializer that may rebuild
them (agent/state.CHECKPOINT_SERDE), so a run resumes in a new process with its Goal, SearchState, ... intact."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing, contextmanager
from pathlib import Path

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from worldtune.agent.state import CHECKPOINT_SERDE


@contextmanager
def sqlite_saver(path: str | Path) -> Iterator[SqliteSaver]:
    """A saver on the checkpoint file (as SqliteSaver.from_conn_string opens it), with the state's serializer."""
    with closing(sqlite3.connect(str(path), check_same_thread=False)) as conn:
        yield SqliteSaver(conn, serde=CHECKPOINT_SERDE)


@asynccontextmanager
async def async_sqlite_saver(path: str | Path) -> AsyncIterator[AsyncSqliteSaver]:
    """The asynchronous saver the runner drives the graph with, with the state's serializer."""
    import aiosqlite

    async with aiosqlite.connect(str(path)) as conn:
        yield AsyncSqliteSaver(conn, serde=CHECKPOINT_SERDE)


def studio_checkpointer() -> InMemorySaver:
    """The checkpointer `langgraph dev` / Studio runs the graph with (langgraph.json `checkpointer`): in memory, as
    the dev server's own, but with the state's serializer, so a thread resumed there rebuilds exactly the state's
    words. The dev server's default saver allows any type with a "Deserializing unregistered type" warning (and
    under LANGGRAPH_STRICT_MSGPACK blocks the words where it reads a thread without the graph's allowlist)."""
    return InMemorySaver(serde=CHECKPOINT_SERDE)
