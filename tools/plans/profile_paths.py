"""Which profile files a caller may make worldtune read: the allow-list every profile and twin-profile path passes.

A profile argument is a path the server opens, so who asks matters (`origin`):

- "cli": a person on this machine typed it; any regular YAML/JSON file they name may be read.
- "mcp-local": an MCP client over stdio (an IDE on this machine): the shipped profiles and the user's
  profile folder, by name or by a path inside them.
- "mcp-http": a remote MCP client: a profile *name* only (no path at all), from the same two places.

The user's folder is $WORLDTUNE_PROFILE_DIR, else $XDG_CONFIG_HOME/worldtune/profiles
(~/.config/worldtune/profiles). Over-long paths, /proc, /sys and /dev files, folders, devices and pipes
are refused for every origin, and no refusal ever quotes a file's contents (tools/words/profile.py).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal, get_args

from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.profile import Profile

Origin = Literal["cli", "mcp-local", "mcp-http"]
ORIGINS: tuple[str, ...] = get_args(Origin)
PROFILE_DIR_ENV = "WORLDTUNE_PROFILE_DIR"
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "policies" / "profiles"
MAX_PATH_CHARS = 1024
SUFFIXES = (".yaml", ".yml")
# Pseudo-filesystems whose "files" are the process's or the kernel's state (environ, memory, keys), never a profile.
FORBIDDEN_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def user_profile_dir() -> Path:
    """$WORLDTUNE_PROFILE_DIR, else $XDG_CONFIG_HOME/worldtune/profiles (~/.config/worldtune/profiles)."""
    override = os.environ.get(PROFILE_DIR_ENV)
    if override:
        return Path(override).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "worldtune" / "profiles"


def allowed_dirs() -> list[Path]:
    """Where MCP clients may name profiles from: the user's folder first, then the shipped ones."""
    return [user_profile_dir(), SHIPPED_DIR, SHIPPED_DIR / "measured"]


def profile_names() -> list[str]:
    """Profile names MCP clients may give (file stems in the allowed folders)."""
    names: set[str] = set()
    for folder in allowed_dirs():
        if folder.is_dir():
            names |= {p.stem for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file()}
    return sorted(names)


def _expected(origin: str) -> str:
    where = f"{user_profile_dir()} or the shipped profiles"
    names = ", ".join(profile_names()[:8]) or "none"
    if origin == "mcp-http":
        return f"a profile name (no path) from {where}: e.g. {names}"
    if origin == "mcp-local":
        return f"a profile name or a path inside {where}: e.g. {names}"
    return "a readable profile YAML/JSON file"


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.is_relative_to(folder.resolve())
    except OSError:
        return False


def _by_name(name: str) -> Path | None:
    for folder in allowed_dirs():
        for candidate in [folder / name, *(folder / f"{name}{suffix}" for suffix in SUFFIXES)]:
            if candidate.suffix in SUFFIXES and candidate.is_file():
                return candidate.resolve()
    return None


def allowed_profile_path(path: object, origin: str, field: str = "profile") -> Path:
    """The resolved file `path` names, if `origin` may read it; InvalidInput naming field, value and what would do."""
    if origin not in ORIGINS:
        raise InvalidInput("origin", origin, f"one of {', '.join(ORIGINS)}")
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput(field, path, _expected(origin))
    if len(path) > MAX_PATH_CHARS:
        raise InvalidInput(field, path[:60] + "...", f"a path of at most {MAX_PATH_CHARS} characters")
    if "\0" in path:
        raise InvalidInput(field, path.replace("\0", "\\0")[:60], "a path without NUL characters")
    is_name = "/" not in path and "\\" not in path and path not in (".", "..")
    if origin == "mcp-http" and not is_name:
        raise InvalidInput(field, path, _expected(origin), "remote clients cannot name files on the server")
    found = _by_name(path) if is_name and origin != "cli" else None
    if found is None and origin != "mcp-http":
        try:
            found = Path(path).expanduser().resolve(strict=True)
        except (OSError, RuntimeError):
            found = None
    if found is None:
        raise InvalidInput(field, path, _expected(origin))
    if any(found == root or found.is_relative_to(root) for root in FORBIDDEN_ROOTS):
        raise InvalidInput(field, path, "a profile file, not a /proc, /sys or /dev entry")
    if origin != "cli" and not any(_inside(found, folder) for folder in allowed_dirs()):
        raise InvalidInput(field, path, _expected(origin))
    try:
        mode = found.stat().st_mode
    except OSError:
        raise InvalidInput(field, path, _expected(origin)) from None
    if not stat.S_ISREG(mode):
        raise InvalidInput(field, path, "a regular file (not a folder, device or pipe)")
    if found.suffix.lower() not in SUFFIXES:
        raise InvalidInput(field, path, f"a profile file ending in {', '.join(SUFFIXES)}")
    return found


def load_profile(path: object, origin: str, field: str = "profile") -> Profile:
    """The Profile at `path` after the allow-list (errors name the path and Profile's fields, never the file)."""
    return Profile.load(allowed_profile_path(path, origin, field), field=field)


def profile_for_gpu(paths: list[str], gpu: str, origin: str, field: str = "twin_profiles") -> str | None:
    """The first of `paths` whose profile is for `gpu` (each one passes `origin`'s allow-list and is read: a file
    that is not an allowed profile is refused, one for another GPU type passed over), else None: the shipped one."""
    for path in paths:
        if load_profile(path, origin, field).gpu.lower() == gpu.strip().lower():
            return path
    return None
