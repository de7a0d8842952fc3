#!/usr/bin/env bash
# Set up worldtune on a fresh machine: .venv/ in the repo root with worldtune installed editable,
# with every extra (agent, SkyPilot, dev tools). Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
export SKYPILOT_DISABLE_USAGE_COLLECTION=1

PY=${PYTHON:-python3}
UV_VERSION=0.13.9  # the installer of the venv (below); scripts/slurm-cluster.sh pins the same for the cluster
need_apt=()
command -v rsync >/dev/null || need_apt+=(rsync)        # SkyPilot needs rsync even for dry runs
"$PY" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# headless Chromium renders the tuning report in tests/integration/test_report_chromium.py
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.worldtune-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # uv installs the ~450 MB of dependencies with parallel downloads, a shared cache and hard links: pip took ~80 s
  # of a clean clone's setup here (issue 35). uv itself comes from PyPI, pinned, through the venv's own pip; it
  # reads the system's CA store as pip does (uv's own bundle rejects this machine's TLS root).
  .venv/bin/python -m pip install -q "uv==$UV_VERSION" 2>&1 | grep -v "^WARNING: Location" || true
  UV_SYSTEM_CERTS=1 .venv/bin/uv pip install -q --python .venv/bin/python -e '.[agent,sky,dev]'
  .venv/bin/python -c 'import worldtune.tools.plans.estimate, worldtune.policies.perf_model' \
    || { echo "setup: worldtune did not install" >&2; exit 1; }
  touch "$stamp"
fi
# `worldtune calibrate`'s CPU tests run the micro-benchmarks when torch is importable. Install it only when
# this machine holds the CPU wheel on disk (seconds, no download; the exact +cpu pin can never pull the
# multi-GB CUDA build from PyPI); elsewhere those tests skip and say why.
torch_wheel=(/opt/wheels/torch-2.13.0+cpu-*.whl)
if [ -f "${torch_wheel[0]}" ] && ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  UV_SYSTEM_CERTS=1 .venv/bin/uv pip install -q --python .venv/bin/python --find-links /opt/wheels 'torch==2.13.0+cpu'
fi
# An IDE waits on `worldtune mcp`'s tools/list: write the tool listing for this code now, so even the
# first start answers from it (the server rebuilds it by itself whenever tools/ changes).
.venv/bin/python -c 'import asyncio; from worldtune.tools.mcp.server import build_server
asyncio.run(build_server(cache_tools=True).list_tools())' || echo "setup: MCP tool listing not cached (first start is slower)" >&2
echo "setup: .venv/bin/worldtune ready"
