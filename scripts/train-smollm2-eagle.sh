#!/usr/bin/env bash
# Trains the EAGLE head for SmolLM2-135M-Instruct exactly as it was made, into
# pretrained/specd-smollm2-eagle-q8_0.gguf (11.3 MB, not in git: it does not beat the shipped
# draft, see bench/results/smollm2-eagle/NOTES.md); resumes from checkpoints/smol-eagle/ if interrupted. About 1.7 hours on
# 2 cores: ~35 min for 1M tokens the target writes itself (half continuing Python standard-library
# files, half answering chat prompts from scripts/make-chat-prompts.py; half greedy, half sampled
# at t = 1), ~25 min for specd's forward to record the target's features over them (1.27M
# tokens, 1.5 GB of f16 in the checkpoint folder), ~36 min for 1600 steps of 8 x 512 rows.
#
#   bash scripts/train-smollm2-eagle.sh [BUILD_DIR]
#
# The head: one llama block (initialized from the target's last) over fc([embedding; feature]),
# the target's final norm, and an FR-Spec output layer over the 8192 most frequent tokens (the
# target's own embedding rows, frozen). Loss: smooth L1 on the next feature plus 0.25 x the
# cross-entropy against the target's next-token distribution.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
target=pretrained/SmolLM2-135M-Instruct.Q4_1.gguf
dir=checkpoints/smol-eagle
[ -f "$target" ] || bash scripts/get-models.sh
mkdir -p "$dir"
[ -f "$dir/chat-train.jsonl" ] ||
  python3 scripts/make-chat-prompts.py "$dir/chat-train.jsonl" "$dir/chat-heldout.jsonl"
"$build/specd" train eagle --teacher "$target" --corpus /usr/lib/python3.11 \
  --teacher-chat "$dir/chat-train.jsonl" --teacher-text 1048576 --corpus-share 0.2 \
  --head-vocab 8192 --ctx 512 --batch 8 --steps 1600 --lr 1e-3 --warmup 100 \
  --token-weight 0.25 --feature-noise 0.1 --checkpoint "$dir" --checkpoint-every 100 \
  --eval-every 200 --name specd-smollm2-eagle --type q8_0 -o pretrained/specd-smollm2-eagle-q8_0.gguf
# Greedy acceptance at draft length 4 on held-out code and held-out chat prompts.
"$build/specd" train measure --teacher "$target" --draft pretrained/specd-smollm2-eagle-q8_0.gguf \
  --corpus /usr/lib/python3.11
"$build/specd" train measure --teacher "$target" --draft pretrained/specd-smollm2-eagle-q8_0.gguf \
  --chat "$dir/chat-heldout.jsonl" --max-prompts 200
