"""Issue 36.1: every path a user gives is checked before anything is created, refused in one line naming it.

The checks (tools/store/db_path.py) read at most a file's first 16 bytes and never echo them; the command line
refuses a bad --db / --out with exit 2 and no traceback, and writes nothing beside a refused path.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from worldtune.tools.store.database import Store
from worldtune.tools.store.db_path import check_db_path, check_out_file, check_out_folder, resolve_db_path
from worldtune.tools.words.errors import InvalidInput

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")
SECRET = "root:x:0:0:do-not-echo-me:/root:/bin/bash\n"


def refused(call: object, *args: object) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        call(*args)  # type: ignore[operator]
    assert "\n" not in str(caught.value) and SECRET.strip() not in str(caught.value)
    return caught.value


def test_a_database_path_is_refused_when_it_cannot_be_a_database_and_nothing_is_created(tmp_path: Path) -> None:
    text = tmp_path / "passwd"
    text.write_text(SECRET)
    assert "not an SQLite database" in str(refused(check_db_path, text))
    assert "is a folder" in str(refused(check_db_path, tmp_path))
    assert "not a regular file" in str(refused(check_db_path, "/dev/null"))
    assert "not a folder" in str(refused(check_db_path, text / "x.db"))
    assert "not writable" in str(refused(check_db_path, "/proc/self/x.db"))
    assert "empty" in str(refused(resolve_db_path, ""))
    with pytest.raises(InvalidInput, match="db="):
        Store(text)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["passwd"] and text.read_text() == SECRET


def test_a_new_or_existing_database_is_accepted(tmp_path: Path) -> None:
    fresh = tmp_path / "a" / "b" / "wt.db"
    assert check_db_path(fresh) == fresh and not fresh.parent.exists()  # checked, not created
    Store(fresh)
    assert fresh.read_bytes()[:16] == b"SQLite format 3\x00" and check_db_path(fresh) == fresh
    empty = tmp_path / "empty.db"
    empty.touch()  # an empty file is what sqlite3 itself makes of a new database
    assert check_db_path(empty) == empty
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.close()
    assert check_db_path(tmp_path / "other.db") == tmp_path / "other.db"


def test_output_files_and_folders(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert check_out_folder(tmp_path / "new" / "report") == tmp_path / "new" / "report"
    assert "not a folder" in str(refused(check_out_folder, tmp_path / "f"))
    assert "not writable" in str(refused(check_out_folder, "/sys/worldtune-report"))
    assert check_out_file(tmp_path / "f") == tmp_path / "f"
    assert "is a folder" in str(refused(check_out_file, tmp_path))
    assert "does not exist" in str(refused(check_out_file, tmp_path / "no" / "x.csv"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize(
    "command",
    [
        ["tune", "cheapest per clip, p95 under 150 s", "--yes", "--json"],
        ["results", "list"],
        ["gc"],
        ["resume", "tune-x"],
    ],
)
def test_the_command_line_refuses_a_file_that_is_not_a_database_in_one_line(tmp_path: Path, command: list[str]) -> None:
    text = tmp_path / "passwd"
    text.write_text(SECRET)
    out = subprocess.run([WORLDTUNE, *command, "--db", str(text)], capture_output=True, text=True, timeout=120)
    said = out.stdout + out.stderr
    assert out.returncode == 2 and "Traceback" not in said and "db=" in said, said
    assert "do-not-echo-me" not in said and len(said) < 600, said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["passwd"]  # no -checkpoints.sqlite, no -wal beside it
    assert text.read_text() == SECRET


def test_a_dry_run_refuses_the_folder_the_real_deploy_could_not_write(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    out = subprocess.run(
        [WORLDTUNE, "deploy", "--gpu", "H200", "--plan", "tp8", "--dry-run", "--out", str(tmp_path / "f" / "task")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and "out=" in out.stderr and "Traceback" not in out.stderr, out.stderr
