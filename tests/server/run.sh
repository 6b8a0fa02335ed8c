#!/usr/bin/env bash
# Runs tests/server/server_test.py (or the test file $3) against the specd binary ($1) with the
# official `openai` client in a virtual environment under the build folder ($2); exits 77
# (skipped) when the client cannot be installed (no network).
set -uo pipefail
specd=$1
venv=$2/openai-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  python3 -m venv "$venv" >/dev/null 2>&1 &&
    "$venv/bin/pip" install -q --disable-pip-version-check openai >/dev/null 2>&1 || {
    echo "SKIPPED: could not install the openai client from PyPI"
    exit 77
  }
fi
exec "$venv/bin/python" "$(dirname "$0")/${3:-server_test.py}" "$specd" -v
