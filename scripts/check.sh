#!/usr/bin/env bash
# The quick check before every commit (at most 3 minutes on 2 cores): ruff, ruff format, mypy --strict on the
# package, and the unit tests on both cores. Needs .venv (bash scripts/setup.sh makes it; this runs it if missing).
# scripts/test.sh runs this and then the integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export SKYPILOT_DISABLE_USAGE_COLLECTION=1
# Python writes each module's bytecode once (in .venv and the checkout) and every later process reads it. With
# PYTHONDONTWRITEBYTECODE=1 (set on this machine and CI's) a fresh clone's .venv has none, so every process the tests
# start compiled every module it imported: a clean clone's integration tests took 41% more CPU than a warm tree's.
unset PYTHONDONTWRITEBYTECODE
began=$(date +%s)
[ -x .venv/bin/pytest ] || bash scripts/setup.sh

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

echo "== mypy (strict) on the package"
# The rooms install under worldtune.* through package-dir; mypy reads them through a link tree. Its cache
# (.cache/mypy) is kept between runs: a second check re-reads only what changed.
tree=.cache/typecheck/worldtune
rm -rf "$tree" && mkdir -p "$tree"
ln -s "$PWD/worldtune/"*.py "$tree/"
for room in tools policies sky agent; do ln -s "$PWD/$room" "$tree/$room"; done
(cd .cache/typecheck && ../../.venv/bin/mypy --config-file ../../pyproject.toml --cache-dir ../mypy -p worldtune)

if [ "${WORLDTUNE_CHECK_NO_UNIT:-}" != 1 ]; then
  echo "== unit tests (both cores)"
  .venv/bin/pytest -q -p no:cacheprovider -n "${WORLDTUNE_TEST_WORKERS:-2}" -m "not integration" --durations=10 tests
fi
echo "check: $(( $(date +%s) - began )) s"
