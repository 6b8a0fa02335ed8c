#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang, ASan + UBSan) and runs each for
# SECONDS (default 60) on its seed corpus in fuzz/corpus/. New inputs go to build/fuzz/work/,
# findings to build/fuzz/findings/; exits non-zero if any target found something.
#   scripts/fuzz.sh [SECONDS] [TARGET...]   targets: gguf_load tokenizer prompt_file openai_request
#                                          http_server
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(gguf_load tokenizer prompt_file openai_request http_server)
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target "${targets[@]/#/fuzz_}"
status=0
for t in "${targets[@]}"; do
  work=build/fuzz/work/$t
  findings=build/fuzz/findings/$t/
  mkdir -p "$work" "$findings"
  echo "fuzz_$t: ${seconds} s"
  if ! build/fuzz/fuzz_$t -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="$findings" "$work" "fuzz/corpus/$t" >"build/fuzz/$t.log" 2>&1; then
    echo "fuzz_$t FOUND A PROBLEM (log: build/fuzz/$t.log, input in $findings):"
    # The harness's own message (or the uncaught exception) comes just before the report.
    grep -v -E '^#[0-9]+|^"|^\s+NEW_FUNC' "build/fuzz/$t.log" | grep -B3 -A10 -m1 "ERROR" | head -16
    status=1
  else
    grep -E "stat::number_of_executed_units|Done" "build/fuzz/$t.log" | tail -1
  fi
done
exit $status
