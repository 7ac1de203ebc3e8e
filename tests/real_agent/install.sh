#!/usr/bin/env bash
# Installs the real ACP agents the tests drive into the test cache, outside the clone
# (reused when present; CI keeps it):
#   - the npm agents pinned by this folder's package-lock.json (claude-agent-acp,
#     gemini-cli, codex-acp with its linux-x64 binary) into $CACHE/agents;
#   - fast-agent (PyPI fast-agent-mcp, needs Python 3.13) into a virtual environment,
#     $CACHE/fast-agent-<version>, pinned by fast-agent-requirements.txt.
# tests/real_agent/cache.py finds them at the same places.
#   LMBRIDGE_TEST_CACHE  the cache folder (default ~/.cache/lmbridge-test)
#   PYTHON313            the Python 3.13 to use (default: python3.13 on PATH, then pyenv's)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${LMBRIDGE_TEST_CACHE:-$HOME/.cache/lmbridge-test}
mkdir -p "$CACHE"
log() { echo "real agents install: $*" >&2; }
exec 1>&2  # nothing here is meant for stdout

AG=$CACHE/agents
if [ ! -f "$AG/.installed" ] || ! cmp -s "$HERE/package-lock.json" "$AG/package-lock.json"; then
  log "npm agents (claude-agent-acp, gemini-cli, codex-acp)"
  rm -rf "$AG" && mkdir -p "$AG"
  cp "$HERE/package.json" "$HERE/package-lock.json" "$AG/"
  (cd "$AG" && npm ci --no-audit --no-fund --loglevel=error)
  touch "$AG/.installed"
fi

FA_VERSION=$(sed -n 's/^fast-agent-mcp==//p' "$HERE/fast-agent-requirements.txt")
FA=$CACHE/fast-agent-$FA_VERSION
if [ ! -f "$FA/.installed" ] || ! cmp -s "$HERE/fast-agent-requirements.txt" "$FA/requirements.txt"; then
  # A pyenv shim answers `command -v` for versions that are installed but not active:
  # each candidate must run.
  PY313=""
  for candidate in ${PYTHON313:-} python3.13 $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13 2>/dev/null || true); do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' 2>/dev/null; then
      PY313=$candidate && break
    fi
  done
  if [ -z "$PY313" ]; then
    log "no Python 3.13 (fast-agent needs it): set PYTHON313; the fast-agent tests will say it is missing"
    exit 0
  fi
  log "fast-agent $FA_VERSION with $PY313"
  rm -rf "$FA"
  "$PY313" -m venv "$FA"
  "$FA/bin/python" -m pip install -q --disable-pip-version-check -r "$HERE/fast-agent-requirements.txt"
  cp "$HERE/fast-agent-requirements.txt" "$FA/requirements.txt"
  touch "$FA/.installed"
fi
