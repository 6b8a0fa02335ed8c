#!/usr/bin/env bash
# Retrains the shipped draft for SmolLM2-135M-Instruct (models/specd-smollm2-draft-q8_0.gguf)
# exactly as it was made: about 1.4 hours on 2 cores (50 min of text written by the target, 40 min
# of training); resumes from checkpoints/smol-draft/ if interrupted.
#
#   bash scripts/train-smollm2-draft.sh [BUILD_DIR]
#
# The draft: 6 layers, d=256, an FR-Spec head over the 8192 tokens most frequent in its training
# text, trained on next-token targets only (--alpha 0) from
#  - 2608 sequences of 513 tokens the target wrote itself (1.34M tokens; half greedy, half
#    sampled at t = 1, top-p 0.95; half continuing 32 tokens of a Python standard-library file,
#    half answering a chat prompt built by scripts/make-chat-prompts.py from the standard
#    library's code and docstrings and Debian's man pages), 80% of the steps;
#  - the standard library's source itself, 20% of the steps.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
target=pretrained/SmolLM2-135M-Instruct.Q4_1.gguf
dir=checkpoints/smol-draft
[ -f "$target" ] || bash scripts/get-models.sh
mkdir -p "$dir"
[ -f "$dir/chat-train.jsonl" ] ||
  python3 scripts/make-chat-prompts.py "$dir/chat-train.jsonl" "$dir/chat-heldout.jsonl"
"$build/specd" train draft --teacher "$target" --corpus /usr/lib/python3.11 --tokenizer "$target" \
  --teacher-chat "$dir/chat-train.jsonl" --teacher-text 1337904 --teacher-text-share 0.8 \
  --head-vocab 8192 --alpha 0 \
  --dim 256 --layers 6 --heads 4 --kv-heads 4 --ffn 768 --ctx 512 --batch 8 --steps 2400 \
  --lr 2e-3 --warmup 200 --checkpoint "$dir" --checkpoint-every 100 --eval-every 500 \
  --name specd-smollm2-draft --type q8_0 -o models/specd-smollm2-draft-q8_0.gguf
# Acceptance on held-out chat prompts (the trainer itself reports it on held-out code).
"$build/specd" train measure --teacher "$target" --draft models/specd-smollm2-draft-q8_0.gguf \
  --chat "$dir/chat-heldout.jsonl" --max-prompts 200
