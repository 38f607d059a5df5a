#!/usr/bin/env bash
# Runs the whole test suite from a fresh clone on Debian: installs what it needs first
# (Debian's chromium, the Python package with its test oracles, the npm packages), then
# builds the fixtures and runs pytest (CPython, Pyodide parity and headless-Chromium tests).
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
npm ci --no-audit --no-fund --loglevel=error
python3 fixtures/make.py >/dev/null
# Two workers (pytest-xdist, one per core on the 2-core machines this runs on), each test file
# kept in one worker (--dist loadfile): a module's browser page and its fixtures stay together.
python3 -m pytest -n auto --dist loadfile "$@"
