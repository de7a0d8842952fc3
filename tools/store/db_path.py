"""Where the results database lives, resolved and checked without opening it (the agent's checkpoints sit beside it).

The agent reads this path (agent/configuration.py) while it reaches the database itself only through the MCP
tools; tools/store/schema.py opens the file at the same path. A path a user gives is checked here before
anything is created (no folder made, no file written beside a path that is refused): a folder, a device, a
file that is not an SQLite database or a folder nobody may write to is refused in one line that names the path.
"""

from __future__ import annotations

import os
from pathlib import Path

from worldtune.tools.words.errors import InvalidInput

# Databases this process holds open through SQLite, as (device, inode). Closing any descriptor of a file drops every
# POSIX lock this process holds on it, SQLite's too: reading the header of such a file (open, read, close) would
# silently release the read lock of its kept connections (tools/store/schema.py), and another process closing its
# last connection would then checkpoint and delete the WAL under them ("database disk image is malformed", seen under
# the signal faults of tests/integration/test_faults.py). Their header was checked before the first connection.
_OPEN_HERE: set[tuple[int, int]] = set()

DB_ENV = "WORLDTUNE_DB"
SQLITE_MAGIC = b"SQLite format 3\x00"
EXPECTED = "a file path for the results database (an existing worldtune database or a new file in a writable folder)"
EXAMPLE = "e.g. ~/.local/share/worldtune/worldtune.db"


def default_db_path() -> Path:
    """$WORLDTUNE_DB, else $XDG_DATA_HOME/worldtune/worldtune.db (~/.local/share/... by default)."""
    override = os.environ.get(DB_ENV)
    if override:
        return Path(override).expanduser()
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "worldtune" / "worldtune.db"


def resolve_db_path(path: str | Path | None) -> Path:
    """The database a command will open: `path` (as --db gives it) else the default, checked (check_db_path)."""
    if path is not None:  # an empty --db (an unset variable, say) is refused, not read as the default
        return check_db_path(path, "db")
    return check_db_path(default_db_path(), DB_ENV if os.environ.get(DB_ENV) else "db")


def check_db_path(path: str | Path, field: str = "db") -> Path:
    """`path` as a results database (or a file beside it, such as the checkpoints), or InvalidInput saying why not.

    Reads at most the first 16 bytes of an existing file (never echoed) and creates nothing.
    """
    given, target = _given(path, field, EXPECTED, f"it is empty; {EXAMPLE}")
    try:
        if target.exists():
            _check_existing(target, given, field)
            return target
        _check_new(target, given, field)
    except OSError as exc:  # a name too long, a loop of links, a folder we may not look into
        raise InvalidInput(field, given, EXPECTED, f"it cannot be looked up: {exc.strerror or exc}") from None
    return target


def _given(path: str | Path, field: str, expected: str, empty: str = "it is empty") -> tuple[str, Path]:
    """The path as given and as a Path (~ expanded), refused when it is empty or holds a NUL byte."""
    given = str(path)
    if not given.strip():
        raise InvalidInput(field, given, expected, empty)
    if "\x00" in given:
        raise InvalidInput(field, given, expected, "it contains a NUL byte")
    return given, Path(given).expanduser()


def _check_existing(target: Path, given: str, field: str) -> None:
    if target.is_dir():
        hint = f"it is a folder; give a file in it, such as {target / 'worldtune.db'}"
        raise InvalidInput(field, given, EXPECTED, hint)
    if not target.is_file():
        raise InvalidInput(field, given, EXPECTED, "it is not a regular file (a device, a pipe or a socket)")
    info = target.stat()
    # a database this process has open through SQLite is never opened beside its descriptors (_OPEN_HERE says why)
    head = SQLITE_MAGIC if (info.st_dev, info.st_ino) in _OPEN_HERE else _header(target, given, field)
    if head and head != SQLITE_MAGIC:
        hint = "it exists and is not an SQLite database; worldtune will not write to it"
        raise InvalidInput(field, given, EXPECTED, hint)
    if not os.access(target, os.R_OK | os.W_OK):
        raise InvalidInput(field, given, EXPECTED, "it is not writable by this user")


def _header(target: Path, given: str, field: str) -> bytes:
    """The first bytes of a file (never echoed): SQLite's magic string for a database."""
    try:
        with target.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise InvalidInput(field, given, EXPECTED, f"it cannot be read: {exc.strerror or exc}") from None


def open_here(path: Path) -> None:
    """Note that this process now holds the database at `path` open through SQLite (see _OPEN_HERE)."""
    try:
        info = os.stat(path)
    except OSError:
        return
    _OPEN_HERE.add((info.st_dev, info.st_ino))


def _check_new(target: Path, given: str, field: str, expected: str = EXPECTED) -> None:
    """Nothing at `target` yet: the nearest folder above it that exists must be one this user may write into."""
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InvalidInput(field, given, expected, f"{ancestor} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK) or _read_only(ancestor):
        raise InvalidInput(field, given, expected, f"the folder {ancestor} is not writable")


def _read_only(folder: Path) -> bool:
    """A read-only mount, or a kernel file system (/proc, /sys) where no database can be created."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return True
    resolved = folder.resolve()
    return any(resolved == Path(p) or Path(p) in resolved.parents for p in ("/proc", "/sys", "/dev"))


def check_out_folder(path: str | Path, field: str = "out") -> Path:
    """A folder to write output into (a report, rendered tasks): an existing writable folder or one that can be made."""
    expected = "a folder worldtune can write into (an existing one, or a new one in a writable folder)"
    given, target = _given(path, field, expected)
    try:
        if target.exists():
            if not target.is_dir():
                raise InvalidInput(field, given, expected, "it exists and is not a folder")
            if not os.access(target, os.W_OK | os.X_OK) or _read_only(target):
                raise InvalidInput(field, given, expected, "it is not writable")
            return target
        _check_new(target, given, field, expected)
    except OSError as exc:
        raise InvalidInput(field, given, expected, f"it cannot be looked up: {exc.strerror or exc}") from None
    return target


def check_out_file(path: str | Path, field: str = "out") -> Path:
    """A file to write (an export, a profile): a regular file to replace or a new one in an existing writable folder."""
    expected = "a file worldtune can write (a new file in a writable folder, or a regular file to replace)"
    given, target = _given(path, field, expected)
    try:
        if target.exists():
            if target.is_dir():
                raise InvalidInput(field, given, expected, "it is a folder")
            if not target.is_file():
                raise InvalidInput(field, given, expected, "it is not a regular file (a device, a pipe or a socket)")
            if not os.access(target, os.W_OK) or _read_only(target.parent):
                raise InvalidInput(field, given, expected, "it is not writable")
            return target
        if not target.parent.is_dir():  # a file goes into a folder that is there: no folders made for a typo
            raise InvalidInput(field, given, expected, f"the folder {target.parent} does not exist")
        _check_new(target, given, field, expected)
    except OSError as exc:
        raise InvalidInput(field, given, expected, f"it cannot be looked up: {exc.strerror or exc}") from None
    return target
