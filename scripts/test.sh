#!/usr/bin/env bash
# Set up everything the tests need (venv, Debian packages, services) and run every check:
# ruff, mypy --strict, unit tests, then integration tests. Exit non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
export SKYPILOT_DISABLE_USAGE_COLLECTION=1
bash scripts/setup.sh

# ---- MCP Inspector CLI (npm) for tests/integration/test_mcp_inspector.py; pinned, installed once ----
# (Its package.json asks for node >= 22.19; its CLI runs on this machine's node 20, npm only warns.)
INSPECTOR_VERSION=2.12.0
if ! grep -qs "\"version\": \"$INSPECTOR_VERSION\"" .cache/npm/node_modules/@modelcontextprotocol/inspector/package.json; then
    npm install --prefix .cache/npm --no-audit --no-fund "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
fi
# ---- end MCP Inspector ----

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

echo "== mypy (strict) on the package"
# The rooms install under worldtune.* through package-dir; mypy reads them through a link tree.
tree=.cache/typecheck/worldtune
rm -rf .cache/typecheck && mkdir -p "$tree"
ln -s "$PWD/worldtune/"*.py "$tree/"
for room in tools policies sky agent; do ln -s "$PWD/$room" "$tree/$room"; done
(cd .cache/typecheck && ../../.venv/bin/mypy --config-file ../../pyproject.toml -p worldtune)

echo "== unit tests"
.venv/bin/pytest -q -m "not integration" tests

echo "== integration tests"
.venv/bin/pytest -q -m integration tests
