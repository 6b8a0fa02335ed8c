#!/usr/bin/env bash
# Fetches xgrammar's sources (its PyPI sdist carries the C++ core and its two header-only
# dependencies, picojson and dlpack) into third_party/ (git-ignored). specd builds the C++ core
# itself (cmake/xgrammar.cmake) for its structured output: JSON schemas, grammars, tool calls.
# Idempotent: quiet when the sources are there.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.2.8
sha=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
dest=third_party/xgrammar-$version
[ -f "$dest/include/xgrammar/xgrammar.h" ] && exit 0

cache_dir=${SPECD_PIP_CACHE:-.cache/pip-sdist}
mkdir -p "$cache_dir" third_party
archive=$cache_dir/xgrammar-$version.tar.gz
if [ ! -f "$archive" ] || [ "$(sha256sum "$archive" | cut -d' ' -f1)" != "$sha" ]; then
  python3 -m pip download --quiet --no-deps --no-binary xgrammar "xgrammar==$version" \
    -d "$cache_dir"
fi
if [ "$(sha256sum "$archive" | cut -d' ' -f1)" != "$sha" ]; then
  echo "get-xgrammar: $archive does not have the expected sha256" >&2
  exit 1
fi
tar -xzf "$archive" -C third_party
echo "get-xgrammar: xgrammar $version sources in $dest"
