"""worldtune: find the cheapest way to serve Cosmos 3 on vLLM-Omni that meets a goal, with evidence."""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"

# sky/ has no __init__.py on purpose (it must never shadow SkyPilot's `sky`). In an editable install
# setuptools' finder cannot resolve such a mapped folder as `worldtune.sky`, so register it here as a
# namespace package over the repository's sky/ folder. A wheel install has worldtune/sky/ on disk
# next to this file and needs nothing.
_SKY_DIR = Path(__file__).resolve().parent.parent / "sky"
_IS_OURS = (_SKY_DIR / "render.py").is_file() and not (_SKY_DIR / "__init__.py").exists()
if "worldtune.sky" not in sys.modules and not (Path(__file__).parent / "sky").is_dir() and _IS_OURS:
    _spec = importlib.machinery.ModuleSpec("worldtune.sky", None, is_package=True)
    _spec.submodule_search_locations = [str(_SKY_DIR)]
    sys.modules["worldtune.sky"] = importlib.util.module_from_spec(_spec)
