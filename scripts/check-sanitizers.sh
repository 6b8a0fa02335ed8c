#!/usr/bin/env bash
# The suite under AddressSanitizer + UBSan, the threaded parts (thread pool, engine, speculative
# decoding, fuzzy layer-parallel forwards, the server's scheduler) under ThreadSanitizer, and
# each libFuzzer target for FUZZ_SECONDS (default 60).
# Run by .ci/run after the release suite; each build has its own folder under build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset asan-ubsan && cmake --build --preset asan-ubsan && ctest --preset asan-ubsan
cmake --preset tsan
cmake --build --preset tsan --target specd threading_test engine_test speculative_test tree_test model_test \
  scheduler_test
ctest --preset tsan
bash scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
