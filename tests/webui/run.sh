#!/usr/bin/env bash
# Runs tests/webui/chat_page_test.py against the specd binary ($1) in headless Chromium driven
# by Selenium, from a virtual environment under the build folder ($2). Exits 77 (skipped, said
# why) when Debian's chromium / chromium-driver are not installed or Selenium cannot be.
set -uo pipefail
specd=$1
venv=$2/webui-venv
for program in chromium chromedriver; do
  if ! command -v "$program" >/dev/null; then
    echo "SKIPPED: $program is not installed (apt-get install chromium chromium-driver;" \
      "scripts/install-deps.sh does)"
    exit 77
  fi
done
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import selenium" 2>/dev/null; then
  python3 -m venv "$venv" >/dev/null 2>&1 &&
    "$venv/bin/pip" install -q --disable-pip-version-check "selenium==4.45.0" >/dev/null 2>&1 || {
    echo "SKIPPED: could not install selenium from PyPI"
    exit 77
  }
fi
exec "$venv/bin/python" "$(dirname "$0")/chat_page_test.py" "$specd" -v
