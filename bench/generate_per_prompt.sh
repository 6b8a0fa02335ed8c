#!/usr/bin/env bash
# Speculative vs plain decoding where users are: one `specd generate` process per prompt (cold
# start included), alternating the two so that a slow phase of a shared machine hits both.
# Prints per prompt the decode time of each and the ratio, then the ratio of the sums.
#
#   bash bench/generate_per_prompt.sh [BUILD_DIR] [N_PREDICT] [extra generate flags...]
#
# The prompts: 8 code openings and 8 chat questions (in the model's chat template, --chat).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
n=${2:-256}
shift $(( $# > 2 ? 2 : $# ))
specd="$build/specd"

code=("def quicksort(items):" "class Stack:" "import os\n\ndef list_files(root):"
  "def parse_args(argv=None):" "def read_config(path):" "def fibonacci(n):"
  "def merge(left, right):" "def is_prime(n):")
chat=("How do I reverse a list in Python?" "What is the difference between a list and a tuple?"
  "Explain what a hash table is." "What does the grep command do?"
  "Give me three tips for writing readable code." "What is recursion? Give an example."
  "How can I read a CSV file in Python?" "What is a race condition?")

decode_ms() {  # the decode time of one run, from --json's summary
  "$specd" generate "$@" --json 2>/dev/null |
    python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin if "summary" in l][0]["t_decode_ms"])'
}

printf '| prompt | plain decode ms | speculative decode ms | speedup |\n|---|---|---|---|\n'
total_plain=0
total_spec=0
run() {  # kind, prompt, flags...
  local kind=$1 prompt=$2
  shift 2
  local plain spec
  plain=$(decode_ms -p "$prompt" -e -n "$n" --temp 0 --ignore-eos --strategy ar "$@")
  spec=$(decode_ms -p "$prompt" -e -n "$n" --temp 0 --ignore-eos "$@")
  total_plain=$(python3 -c "print($total_plain + $plain)")
  total_spec=$(python3 -c "print($total_spec + $spec)")
  printf '| %s: %s | %.1f | %.1f | %.2fx |\n' "$kind" "${prompt:0:40}" "$plain" "$spec" \
    "$(python3 -c "print($plain / $spec)")"
}
for p in "${code[@]}"; do run code "$p" "$@"; done
for p in "${chat[@]}"; do run chat "$p" --chat "$@"; done
printf '\nall prompts: plain %.0f ms, speculative %.0f ms: %.2fx (%s, %s new tokens each, greedy)\n' \
  "$total_plain" "$total_spec" "$(python3 -c "print($total_plain / $total_spec)")" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" "$n"
