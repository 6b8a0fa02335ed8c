#!/usr/bin/env bash
# Fetches the tokenizer reference data the tests compare against: llama.cpp's vocabulary-only
# GGUF files of real models with input texts and the ids each model's original tokenizer gives
# (llama.cpp's models/ggml-vocab-*, MIT License, Copyright (c) 2023-2024 The ggml authors), from
# the llama.cpp vendored in the llama-cpp-python 0.3.36 sdist on PyPI, into .cache/vocab/
# (git-ignored). Idempotent; without network it says so and exits 0 (the tokenizer tests then
# skip with that reason). The sdist is kept in .cache/sdist/: the peer build (bench/) uses it too.
set -euo pipefail
cd "$(dirname "$0")/.."

dest=${SPECD_VOCAB_DIR:-.cache/vocab}
sdist_dir=.cache/sdist
sdist=$sdist_dir/llama_cpp_python-0.3.36.tar.gz
sdist_sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
names=(llama-spm phi-3 gpt-2 starcoder deepseek-coder falcon qwen2 llama-bpe)

complete() {
  for n in "${names[@]}"; do
    for suffix in .gguf .gguf.inp .gguf.out; do
      [ -s "$dest/ggml-vocab-$n$suffix" ] || return 1
    done
  done
}
if complete; then
  echo "test data: $dest ready"
  exit 0
fi
mkdir -p "$dest" "$sdist_dir"
if [ ! -f "$sdist" ] || [ "$(sha256sum "$sdist" | cut -d' ' -f1)" != "$sdist_sha" ]; then
  rm -f "$sdist"
  if ! python3 -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check \
      -d "$sdist_dir" llama-cpp-python==0.3.36 >/dev/null 2>&1; then
    echo "test data: no network (PyPI unreachable): the tokenizer reference tests will skip" >&2
    exit 0
  fi
  got=$(sha256sum "$sdist" | cut -d' ' -f1)
  if [ "$got" != "$sdist_sha" ]; then
    echo "error: $sdist has sha256 $got, expected $sdist_sha" >&2
    exit 1
  fi
fi
members=()
for n in "${names[@]}"; do
  for suffix in .gguf .gguf.inp .gguf.out; do
    members+=("llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-$n$suffix")
  done
done
tar -xzf "$sdist" -C "$dest" --strip-components=4 "${members[@]}"
complete || { echo "error: the sdist lacks some vocabulary files" >&2; exit 1; }
echo "test data: $dest ready (${#names[@]} vocabularies)"
