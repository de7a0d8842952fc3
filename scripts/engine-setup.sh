#!/usr/bin/env bash
# Install the real vLLM-Omni engine (vllm-omni 0.30.0 + vllm 0.30.0 + the torch they pin) in its own venv beside the
# project's, for the real-engine tests (tests/integration/test_real_engine*.py; docs/real-engine.md).
#
#   WORLDTUNE_ENGINE_VENV   where (default /opt/worldtune/engine-vllm-omni-0.30.0: outside the checkout, so a clean
#                           clone on the same machine reuses it instead of downloading ~9 GB again)
#
# Idempotent: a venv whose stamp matches scripts/engine-requirements.txt is only checked (`vllm --version` is not
# run: it takes ~15 s; the stamp is written only after the import check below passed). A failed install says so in
# one line and exits non-zero; scripts/test.sh fails on it (the real-engine tests never skip silently).
#
# Why not the machine's pip configuration: it adds a local folder of wheels with `torch 2.13.0+cpu` and caps torch,
# while PyPI's torchvision 0.28.0 (which vLLM's CLI imports) is a CUDA build that fails to import beside the CPU
# torch ('operator torchvision::nms does not exist', ../shared/REAL_ENGINE.md). uv does not read pip's configuration
# and installs PyPI's CUDA build of torch 2.13.0 (it runs on the CPU; no GPU is needed to import it).
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINE=${WORLDTUNE_ENGINE_VENV:-/opt/worldtune/engine-vllm-omni-0.30.0}
REQS=$PWD/scripts/engine-requirements.txt
UV_VERSION=0.13.9  # as scripts/setup.sh
# The system Python where it is 3.11 (Debian 12's): a venv's interpreter is a link to its base, and a cluster's job
# user (the local Slurm cluster's skyuser) cannot execute one under /root (pyenv's), so the engine would not start
# there. Elsewhere the Python on PATH.
if [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sys, venv, ensurepip; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
  PY=/usr/bin/python3
else
  PY=${PYTHON:-python3}
fi
stamp=$ENGINE/.worldtune-engine
want() { cat "$REQS"; echo "# python: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"; }
fail() { echo "engine-setup: the real vLLM-Omni engine did not install in $ENGINE: $*" >&2; exit 1; }

if [ -f "$stamp" ] && cmp -s "$stamp" <(want); then
  echo "engine-setup: reusing $ENGINE ($(du -sh "$ENGINE" 2>/dev/null | cut -f1))"
  exit 0
fi
began=$(date +%s)
# a venv of another interpreter is made anew (its links point at the old one)
if [ -x "$ENGINE/bin/python" ] && [ "$(readlink -f "$ENGINE/bin/python")" != "$(readlink -f "$(command -v "$PY")")" ]; then
  rm -rf "$ENGINE"
fi
mkdir -p "$(dirname "$ENGINE")"
[ -x "$ENGINE/bin/python" ] || "$PY" -m venv "$ENGINE" || fail "$PY -m venv failed"
# the installer itself: uv, pinned, from PyPI through the venv's own pip (the machine's pip config is fine for uv)
"$ENGINE/bin/python" -m pip install -q "uv==$UV_VERSION" >/dev/null 2>&1 || fail "pip install uv==$UV_VERSION failed"
log=$ENGINE/install.log
# PyPI only: no find-links, no local indexes (see above). UV_SYSTEM_CERTS: uv's own CA bundle rejects this machine's.
if ! env -u PIP_FIND_LINKS -u PIP_CONFIG_FILE UV_SYSTEM_CERTS=1 UV_HTTP_TIMEOUT=300 UV_CONCURRENT_DOWNLOADS=8 \
    "$ENGINE/bin/uv" pip install --python "$ENGINE/bin/python" --no-config --index-url https://pypi.org/simple \
    -r "$REQS" >"$log" 2>&1; then
  tail -5 "$log" >&2
  fail "uv pip install -r scripts/engine-requirements.txt failed (log: $log)"
fi
# What the tests need from it: vLLM's CLI imports torchvision; vLLM-Omni's Cosmos3 pipeline and diffusers' classes.
"$ENGINE/bin/python" - <<'EOF' || fail "the installed engine does not import"
import importlib.metadata as md
import torch, torchvision  # noqa: F401  (torchvision::nms must exist beside this torch)
import vllm_omni, diffusers  # noqa: F401
from diffusers import AutoencoderKLWan  # noqa: F401
for name in ("vllm", "vllm-omni", "torch"):
    print(f"engine-setup: {name} {md.version(name)}")
EOF
want > "$stamp"
echo "engine-setup: installed in $(( $(date +%s) - began )) s, $(du -sh "$ENGINE" | cut -f1) in $ENGINE"
