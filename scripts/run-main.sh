#!/usr/bin/env bash
# Set up and run worldtune's main job on the embedded default (infra=local, engine=twin).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/worldtune plans --model cosmos3-super --gpu H200 --gpus 8 --sort cost --limit 10
.venv/bin/worldtune estimate --model cosmos3-super --gpu H200 --plan cfg2-u4-hsdp8
