#!/usr/bin/env bash
# The suite under AddressSanitizer + UBSan, the threaded parts (thread pool, engine, speculative
# decoding, fuzzy layer-parallel forwards, the server's scheduler) under ThreadSanitizer, and
# each libFuzzer target for FUZZ_SECONDS (default 30: CI must stay under an hour, and it took 61 min
# with 60 s on 2026-11-28).
# Run by .ci/run after the release suite; each build has its own folder under build/.
set -euo pipefail
cd "$(dirname "$0")/.."
phase() {  # phase NAME COMMAND...: runs it and says how long it took
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "sanitizers: ${name}: $((SECONDS - start)) s" >&2
}
phase asan-configure cmake --preset asan-ubsan
phase asan-build cmake --build --preset asan-ubsan
if grep -qw avx2 /proc/cpuinfo; then
  # AVX-512 or AVX2 kernels: the pretrained-model and server tests take ~1.5 min under ASan
  # (measured with SPECD_ISA=avx2 on an AMD EPYC, 2026-11-25). The preset leaves out the 1.6 GB
  # default pair's tests (the structured-output client test and the chat page's browser test run
  # on it too: their code paths are those of the smaller pairs here), the sampled-distribution
  # tests and four pretrained-model ones; they run in the release suite. The exclusions are the
  # preset's alone: a -E here would replace them, not add to them (until 2026-12-01 it did, and
  # the 45 tests it let back in took ~11 min of CI's hour: 22 of them ran 630 s under ASan).
  phase asan-ctest ctest --preset asan-ubsan
else
  # Without AVX2 the model runs on the portable kernels, and under ASan the pretrained-model and
  # server tests (SmolLM2 and Gemma forwards) take over an hour (measured on the portable path of
  # an AVX2-only AMD EPYC before the AVX2 kernels, 2026-11-24: both server tests hit their 300 s
  # timeout). They run in the release suite.
  echo "no AVX2: the pretrained-model and server tests are left out of the ASan run"
  phase asan-ctest ctest --preset asan-ubsan-portable
fi
phase tsan-configure cmake --preset tsan
phase tsan-build cmake --build --preset tsan --target specd threading_test engine_test speculative_test \
  tree_test model_test scheduler_test
phase tsan-ctest ctest --preset tsan
phase fuzz bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
