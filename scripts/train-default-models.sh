#!/usr/bin/env bash
# Retrains specd's default model pair (models/) from the Python standard library that Debian
# installs, exactly as the shipped files were made. Takes about 3.5 hours on 2 cores; each step
# resumes from its checkpoint (checkpoints/, not in git) if interrupted.
#
#   bash scripts/train-default-models.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
specd="$build/specd"
corpus=/usr/lib/python3.11   # test/, tests/ and idle_test/ folders are skipped; every 20th file is held out

# 1. Tokenizer: SentencePiece BPE, 4096 pieces (byte fallback, FIM and 20 <unusedN> tokens).
"$specd" train tokenizer --corpus "$corpus" --vocab-size 4096 -o models/specd-tokenizer.gguf

# 2. Target: 16.5M parameters, 2 epochs of next-token training.
target_args=(--corpus "$corpus" --tokenizer models/specd-tokenizer.gguf
  --dim 448 --layers 6 --heads 7 --kv-heads 7 --ffn 1216 --ctx 256 --batch 8 --epochs 2
  --lr 1e-3 --warmup 100 --checkpoint checkpoints/target --checkpoint-every 200 --eval-every 400
  --name specd-target-16m)
"$specd" train model "${target_args[@]}" -o checkpoints/specd-target-f32.gguf
# Re-export the finished checkpoint as q8_0 (the shipped file).
"$specd" train model "${target_args[@]}" --type q8_0 -o models/specd-target-q8_0.gguf

# 3. Draft: 1.7M parameters, wide and shallow, distilled from the shipped target in three phases
#    on one checkpoint: 2 epochs of token-level distillation on the corpus; on to 3.5 epochs with
#    every other step on 1M tokens of text the target writes itself (--teacher-text, generated
#    by specd's engine and cached in the checkpoint folder); on to 4.5 epochs with 2M such
#    tokens (a new cache: the file is regenerated when its recipe or size does not match); on to
#    6 epochs with 3 of 4 steps on 4M fresh tokens (seed 4, so the text differs from the earlier
#    caches); on to 8 epochs with 4 of 5 steps on another 4M fresh tokens (seed 5).
draft_args=(--teacher models/specd-target-q8_0.gguf --corpus "$corpus"
  --tokenizer models/specd-tokenizer.gguf
  --dim 192 --layers 2 --heads 3 --kv-heads 3 --ffn 576 --ctx 256 --batch 8
  --lr 2e-3 --warmup 100 --checkpoint checkpoints/draft --checkpoint-every 200 --eval-every 400
  --name specd-draft-2m --type q8_0)
"$specd" train draft "${draft_args[@]}" --epochs 2 -o checkpoints/specd-draft-2ep-q8_0.gguf
"$specd" train draft "${draft_args[@]}" --epochs 3.5 --teacher-text 1000000 \
  -o checkpoints/specd-draft-3ep-q8_0.gguf
"$specd" train draft "${draft_args[@]}" --epochs 4.5 --teacher-text 2000000 \
  -o checkpoints/specd-draft-4ep-q8_0.gguf
"$specd" train draft "${draft_args[@]}" --epochs 6 --teacher-text 4000000 --teacher-text-share 0.75 \
  --seed 4 -o checkpoints/specd-draft-6ep-q8_0.gguf
"$specd" train draft "${draft_args[@]}" --epochs 8 --teacher-text 4000000 --teacher-text-share 0.8 \
  --seed 5 -o models/specd-draft-q8_0.gguf
