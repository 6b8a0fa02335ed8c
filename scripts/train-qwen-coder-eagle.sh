#!/usr/bin/env bash
# Trains an EAGLE head for Qwen2.5-Coder-0.5B-Instruct, resumable (the target's text, its features
# and the training steps are checkpointed in checkpoints/qwen-eagle/; a rerun continues):
#
#   bash scripts/train-qwen-coder-eagle.sh [BUILD_DIR] [OUT]
#
# The head: one qwen2 block (started as the target's last, q / k / v biases included) over
# fc([E(t_{i+1}); f_i]), the target's final norm, and an FR-Spec output layer over the 16384
# tokens most frequent in the training text: the target's own output rows (Qwen's file has its
# own output.weight), frozen with the embedding. Data: 128K tokens Qwen writes itself, 64
# sequences at a time (half continuing 32 tokens of a Python standard-library file, half
# answering a chat prompt of scripts/make-chat-prompts.py; half greedy, half sampled at t = 1),
# and three times as many 513-token windows of the standard library's source; the target's
# features over all of it come from specd's own forward. Loss: smooth L1 on the next feature
# plus 0.25 x the cross-entropy against the target's next-token distribution; uniform noise
# +-0.1 on input features. ~1.5 hours on 2 cores (Zen 4).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
out=${2:-pretrained/specd-qwen-coder-eagle-q8_0.gguf}
target=pretrained/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
dir=checkpoints/qwen-eagle
[ -f "$target" ] || bash scripts/get-models.sh
[ -f "$target" ] || { echo "error: $target is missing (no network?)" >&2; exit 1; }
mkdir -p "$dir"
[ -f "$dir/chat-train.jsonl" ] ||
  python3 scripts/make-chat-prompts.py "$dir/chat-train.jsonl" "$dir/chat-heldout.jsonl"
# Stage 1: 1000 steps (EAGLE-1's training); stage 2 continues the run to 1200 steps with every
# row unrolled over 3 drafting steps (EAGLE-3's training-time test: steps 2 and 3 read the head's
# own predicted features, as drafting does), at the cosine's tail.
train() {
  "$build/specd" train eagle --teacher "$target" --corpus /usr/lib/python3.11 \
    --teacher-chat "$dir/chat-train.jsonl" --teacher-text 131072 --teacher-batch 64 \
    --corpus-share 3 --head-vocab 16384 --ctx 512 --batch 8 --steps "$1" --unroll "$2" \
    --lr 1e-3 --warmup 50 --token-weight 0.25 --feature-noise 0.1 --checkpoint "$dir" \
    --checkpoint-every 50 --eval-every 200 --name specd-qwen-coder-eagle --type q8_0 -o "$3"
}
step=$(cut -d' ' -f1 "$dir/step.txt" 2>/dev/null || echo 0)
[ "$step" -ge 1000 ] || train 1000 1 "$dir/stage1-q8_0.gguf"
train 1200 3 "$out"
# Greedy acceptance at draft length 4 on held-out code and held-out chat prompts.
"$build/specd" train measure --teacher "$target" --draft "$out" --corpus /usr/lib/python3.11
"$build/specd" train measure --teacher "$target" --draft "$out" \
  --chat "$dir/chat-heldout.jsonl" --max-prompts 200
