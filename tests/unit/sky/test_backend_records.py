"""The backends write the results database through `tools.deployment.Records` (a word), which the Store satisfies
structurally: sky/ types against the protocol and never imports tools/store/database.py (issue 16: sky stands on the
words)."""

from __future__ import annotations

import inspect
from pathlib import Path

from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Records

ROOT = Path(__file__).resolve().parents[3]


def _methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


def test_the_store_has_every_method_of_records_with_the_same_signature(tmp_path: Path) -> None:
    wanted = _methods(Records)
    assert {"ledger_launch", "ledger_gone", "save_deployment", "update_benchmark"} <= set(wanted)
    store = Store(tmp_path / "wt.db")
    assert isinstance(store.path, Path)
    for name, signature in wanted.items():
        have = inspect.signature(getattr(Store, name))
        assert list(have.parameters) == list(signature.parameters), name
        assert [p.default for p in have.parameters.values()] == [p.default for p in signature.parameters.values()]


def test_no_backend_in_sky_imports_the_store() -> None:
    for path in sorted((ROOT / "sky").glob("*.py")):
        assert "worldtune.tools.store.database" not in path.read_text(), path.name
