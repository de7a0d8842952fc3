#!/usr/bin/env bash
# Set up everything the tests need (venv, Debian packages, services) and run every check:
# ruff, mypy --strict (scripts/check.sh), then every test, unit and integration, in one pytest run over
# pytest-xdist workers (--dist loadfile: each file's tests on one worker, one after another, so the tests that
# share a module fixture never run at once; --no-loadscope-reorder keeps tests/conftest.py's order, the longest
# files first). The Slurm file runs on one worker; its cluster fixture could share the cluster across workers
# (tests/integration/slurm_support.py), but on 2 cores two Slurm files at once made the suite slower (issue 35).
# (--dist loadgroup does not group with pytest 9.2 and pytest-xdist 3.8.0: an xdist_group test ran on every worker,
# checked here.) Exit non-zero on any failure; print the total time and the 25 slowest tests at the end.
#   WORLDTUNE_TEST_WORKERS=N   pytest-xdist workers (default 3: the Slurm tests mostly wait on SkyPilot, so a
#                              third worker keeps both cores busy)
set -euo pipefail
cd "$(dirname "$0")/.."
export SKYPILOT_DISABLE_USAGE_COLLECTION=1
# Python writes each module's bytecode once (in .venv and the checkout) and every later process reads it. With
# PYTHONDONTWRITEBYTECODE=1 (set on this machine and CI's) a fresh clone's .venv has none, so every process the tests
# start compiled every module it imported: a clean clone's integration tests took 41% more CPU than a warm tree's.
unset PYTHONDONTWRITEBYTECODE
began=$(date +%s)
bash scripts/setup.sh
echo "test.sh: setup done after $(( $(date +%s) - began )) s"

# ---- MCP Inspector CLI (npm) for tests/integration/test_mcp_inspector.py; pinned, installed once ----
# (Its package.json asks for node >= 22.19; its CLI runs on this machine's node 20, npm only warns.) It installs
# in the background while ruff and mypy run.
INSPECTOR_VERSION=2.12.0
npm_pid=""
mkdir -p .cache
if ! grep -qs "\"version\": \"$INSPECTOR_VERSION\"" .cache/npm/node_modules/@modelcontextprotocol/inspector/package.json; then
    npm install --prefix .cache/npm --no-audit --no-fund "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" \
        > .cache/npm-install.log 2>&1 &
    npm_pid=$!
fi
# ---- end MCP Inspector ----

# ---- the local Slurm cluster (tests/integration/test_slurm_skypilot.py): brought up once, in the background, while
# ruff and mypy run (its fixture finds it up); taken down at the end if this run brought it up ----
slurm_pid=""
# the same SkyPilot client home, API port and GPU count as the tests' fixture (tests/integration/slurm_support.py)
slurm() { WORLDTUNE_SKY_HOME="$PWD/.cache/sky-home-tests" WORLDTUNE_SKY_API_PORT=46592 WORLDTUNE_SLURM_GPUS=8 \
    bash scripts/slurm-cluster.sh "$@"; }
if [ "$(id -u)" = 0 ] && ! slurm status 2>/dev/null | grep -q "slurmctld              up"; then
    slurm up > .cache/slurm-up.log 2>&1 &
    slurm_pid=$!
    trap 'slurm down > /dev/null 2>&1 || true' EXIT
fi

# ---- the real vLLM-Omni 0.30.0 (tests/integration/test_real_engine_*.py): its own venv outside the checkout, reused
# when there (scripts/engine-setup.sh); installed in the background while ruff and mypy run. A failed install fails
# the run here, in one line: the real-engine tests never skip. ----
engine_began=$(date +%s)
bash scripts/engine-setup.sh > .cache/engine-setup.log 2>&1 &
engine_pid=$!
# ---- end real engine ----

WORLDTUNE_CHECK_NO_UNIT=1 bash scripts/check.sh

if [ -n "$npm_pid" ] && ! wait "$npm_pid"; then
    tail -40 .cache/npm-install.log >&2
    echo "test.sh: the MCP Inspector did not install" >&2
    exit 1
fi
if [ -n "$slurm_pid" ] && ! wait "$slurm_pid"; then
    tail -40 .cache/slurm-up.log >&2  # the fixture tries again and fails the Slurm tests with the reason
fi

if ! wait "$engine_pid"; then
    tail -3 .cache/engine-setup.log >&2
    echo "test.sh: the real vLLM-Omni engine did not install (log: .cache/engine-setup.log)" >&2
    exit 1
fi
grep "^engine-setup:" .cache/engine-setup.log || true
echo "test.sh: the real engine was ready $(( $(date +%s) - engine_began )) s after its setup started"

echo "== tests: unit and integration, ${WORLDTUNE_TEST_WORKERS:-3} workers"
# the machine's busy CPU seconds over the tests (every process, SkyPilot's daemons included): /proc/stat's first line
busy() { awk '/^cpu /{print ($2+$3+$4+$7+$8) / 100}' /proc/stat; }
busy_before=$(busy)
pytest_began=$(date +%s)
status=0
.venv/bin/pytest -q -p no:cacheprovider -n "${WORLDTUNE_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder \
    --durations=25 --junitxml=.cache/junit.xml -o junit_duration_report=total tests \
    || status=$?
.venv/bin/python scripts/slowest.py .cache/junit.xml || true  # the last lines CI keeps: where the time went
echo "test.sh: the tests kept the machine's CPUs busy $(awk -v a="$busy_before" -v b="$(busy)" 'BEGIN{printf "%.0f", b-a}') s" \
    "over $(( $(date +%s) - pytest_began )) s of wall time on $(nproc) cores"
echo "test.sh: total $(( $(date +%s) - began )) s (setup, lint, types and every test), pytest exit $status"
exit "$status"
