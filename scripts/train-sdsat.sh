#!/usr/bin/env bash
# SDSAT fine-tunes (`specd train sdsat`): the shipped 16.5M target learns to draft for itself with
# the adaptive token <unused0>. Resumes from checkpoints/ (not in git) if interrupted.
#
#   bash scripts/train-sdsat.sh [BUILD_DIR]
#
# No FIM reordering: the base was trained on plain text only, and FIM rows would teach it a new
# task at the cost of its plain perplexity (which must stay within 2% of the base's).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
corpus=/usr/lib/python3.11   # the base's own training files; every 20th file is held out

"$build/specd" train sdsat --base models/specd-target-q8_0.gguf --corpus "$corpus" \
  --adaptive-token '<unused0>' --max-window 5 --no-fim --ctx 256 --batch 8 --steps 1500 \
  --lr 2e-4 --min-lr-ratio 0.1 --warmup 100 --eval-every 250 --checkpoint checkpoints/sdsat-16m \
  --checkpoint-every 100 --type q8_0 --name specd-target-16m-sdsat \
  -o models/specd-target-sdsat-q8_0.gguf
