#!/usr/bin/env bash
# Set up and run worldtune's main job on the embedded default (infra=local, engine=twin): the agent
# takes the goal in words, predicts, then deploys, benchmarks and learns on the twin, and ends with a
# verified recommendation. Results go to the default database (see README) unless WORLDTUNE_DB is set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
GOAL=${1:-'Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, cheapest per clip, H200 or B200, spot ok, budget $300'}
exec .venv/bin/worldtune tune "$GOAL" --infra local --engine twin --yes
