#!/usr/bin/env bash
# SDSAT fine-tunes (`specd train sdsat`), resumable from checkpoints/ (not in git):
#
#   bash scripts/train-sdsat.sh            # the shipped 16.5M target (~25 min on 2 cores)
#   bash scripts/train-sdsat.sh smollm2    # SmolLM2-135M-Instruct as a LoRA adapter (~1 hour)
#   bash scripts/train-sdsat.sh smollm2-pilot   # its 240-step pilot (~35 min), measured in the
#                                               # bench/results/sdsat/NOTES.md; adapters go to pretrained/ (not in
#                                               # git: models/ has a 60 MB budget)
#   bash scripts/train-sdsat.sh qwen-coder   # Qwen2.5-Coder-0.5B-Instruct as a LoRA (~45 min)
#   bash scripts/train-sdsat.sh qwen-coder-kl   # the same, plain rows as KL to the frozen base
#
# SDSAT_STOP_AT=N checkpoints and stops after step N; the same command resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-16m}
specd=${SPECD:-build/release/specd}
corpus=/usr/lib/python3.11   # the 16.5M base's own training files; every 20th file is held out
stop=()
[[ -n "${SDSAT_STOP_AT:-}" ]] && stop=(--stop-at-step "$SDSAT_STOP_AT")

case "$which" in
  16m)
    # No FIM reordering: the base was trained on plain text only, and FIM rows would teach it a
    # new task at the cost of its plain perplexity (which must stay within 2% of the base's).
    "$specd" train sdsat --base models/specd-target-q8_0.gguf --corpus "$corpus" \
      --adaptive-token '<unused0>' --max-window 5 --no-fim --ctx 256 --batch 8 --steps 1500 \
      --lr 2e-4 --min-lr-ratio 0.1 --warmup 100 --eval-every 250 \
      --checkpoint checkpoints/sdsat-16m --checkpoint-every 100 "${stop[@]}" --type q8_0 \
      --name specd-target-16m-sdsat -o models/specd-target-sdsat-q8_0.gguf
    ;;
  smollm2)
    # A rank-16 LoRA (frozen base) plus the adaptive token <empty_output>'s embedding row, written
    # as a llama.cpp adapter for --lora. SmolLM2's vocabulary has no FIM tokens.
    "$specd" train sdsat --base pretrained/SmolLM2-135M-Instruct.Q4_1.gguf --corpus "$corpus" \
      --adaptive-token '<empty_output>' --max-window 5 --lora-rank 16 --ctx 256 --batch 8 \
      --steps 600 --lr 1e-3 --min-lr-ratio 0.1 --warmup 50 --eval-every 100 \
      --checkpoint checkpoints/sdsat-smollm2-lora16 --checkpoint-every 25 "${stop[@]}" \
      --type f16 --name smollm2-135m-instruct-sdsat-lora16 \
      -o pretrained/smollm2-sdsat-lora16-f16.gguf
    ;;
  smollm2-pilot)
    "$specd" train sdsat --base pretrained/SmolLM2-135M-Instruct.Q4_1.gguf --corpus "$corpus" \
      --adaptive-token '<empty_output>' --max-window 5 --lora-rank 16 --ctx 256 --batch 8 \
      --steps 240 --lr 1e-3 --min-lr-ratio 0.1 --warmup 20 --eval-every 80 \
      --checkpoint checkpoints/sdsat-smollm2-pilot --checkpoint-every 20 "${stop[@]}" \
      --type f16 --name smollm2-135m-instruct-sdsat-lora16-pilot \
      -o pretrained/smollm2-sdsat-lora16-pilot-f16.gguf
    ;;
  qwen-coder)
    # Qwen2.5-Coder-0.5B-Instruct (the flagship): a rank-16 LoRA plus the embedding row of the
    # unused special token <|vision_pad|> as the adaptive token; FIM rows with Qwen's FIM tokens.
    # Measured on Zen 4 (2 threads, bf16 autocast): 124 tokens/s, 16.5 s a step of 8 x 256
    # tokens, 12 GB resident. A 1200-step schedule (~5.5 hours) was tried across sessions; its
    # place-1 accuracy stayed at 0.39-0.40 from step 100 to step 300, and its checkpoints were lost
    # twice with the machine, so the run is sized to fit a session beside its evaluation: 150
    # steps (~45 minutes), annealed to 0.1 x lr. On an AVX2-only EPYC (Zen 3 class, no bf16: f32)
    # a step takes ~39 s (150 steps ~1.7 hours) and the trainer holds 21.6 GB. The adapter (~9 MB
    # in f16) goes to pretrained/, not models/.
    "$specd" train sdsat --base pretrained/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
      --corpus "$corpus" --adaptive-token '<|vision_pad|>' --max-window 5 --lora-rank 16 \
      --ctx 256 --batch 8 --steps 150 --lr 1e-3 --min-lr-ratio 0.1 --warmup 20 \
      --eval-every 150 --checkpoint checkpoints/sdsat-qwen-coder-lora16 --checkpoint-every 25 \
      "${stop[@]}" --type f16 --name qwen2.5-coder-0.5b-instruct-sdsat-lora16 \
      -o pretrained/qwen-coder-sdsat-lora16-f16.gguf
    ;;
  qwen-coder-kl)
    # The same LoRA with the plain rows' loss as KL to the frozen base instead of next-token
    # cross-entropy on the corpus: the qwen-coder recipe's step-50 adapter lost 12 points of
    # HumanEval Pass@1 by taking up the standard library's terse style from those rows. 120 steps:
    # ~2 hours in f32 on an AVX2 EPYC (58 s a step measured, the base's extra forward included).
    "$specd" train sdsat --base pretrained/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
      --corpus "$corpus" --adaptive-token '<|vision_pad|>' --max-window 5 --lora-rank 16 \
      --plain-loss kl-to-base --ctx 256 --batch 8 --steps 120 --lr 1e-3 --min-lr-ratio 0.1 \
      --warmup 15 --eval-every 120 --checkpoint checkpoints/sdsat-qwen-coder-kl-lora16 \
      --checkpoint-every 20 "${stop[@]}" --type f16 \
      --name qwen2.5-coder-0.5b-instruct-sdsat-kl-lora16 -o pretrained/qwen-coder-sdsat-kl-lora16-f16.gguf
    ;;
  *)
    echo "usage: $0 [16m|smollm2|smollm2-pilot|qwen-coder|qwen-coder-kl]" >&2
    exit 2
    ;;
esac
