# lmbridge: the two README commands are `make demo` and `make test`.
# Everything they need is installed here: into ./.venv, and the heavy test installs (the real
# agents, code-server, Chromium) into $$LMBRIDGE_TEST_CACHE (default ~/.cache/lmbridge-test).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv demo test lint test-python test-shim chatview real-agent-deps vsix clean lock

# The daemon's dependencies come from the hashed lock the extension installs
# (requirements/daemon.txt, as bootstrap.ts does), so the tests run what users get; then
# lmbridge itself, editable, with the console extra and the developer tools.
$(STAMP): pyproject.toml requirements/daemon.txt requirements/build.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "lmbridge needs Python 3.11+")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --require-hashes --only-binary=:all: -r requirements/build.txt
	$(PY) -m pip install -q --require-hashes --no-build-isolation -r requirements/daemon.txt
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

venv: $(STAMP)

# Re-pin the daemon's dependencies (pyproject.toml's, every platform, sha256 of every file)
# and the build backend of the one published only as source; tests/test_lock.py checks them.
lock:
	@test -x $(VENV)/bin/uv || $(MAKE) venv
	$(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes --custom-compile-command "make lock" -o requirements/daemon.txt
	$(VENV)/bin/uv pip compile requirements/build.in --universal --python-version 3.11 --generate-hashes --custom-compile-command "make lock" -o requirements/build.txt

# A scripted chat (examples/demo.console) through the real daemon and the demo agent:
# streamed text and thinking, tool-call rendering, and permissions allowed, skipped, stopped.
demo: $(STAMP)
	@scratch=$$(mktemp -d) && LMBRIDGE_DEMO_SCRATCH=$$scratch $(VENV)/bin/lmbridge console --script examples/demo.console; \
	  status=$$?; rm -rf "$$scratch"; exit $$status

# The real ACP agents for the real-agent tests (claude-agent-acp, gemini-cli, codex-acp pinned
# by tests/real_agent/package-lock.json; fast-agent by fast-agent-requirements.txt), into the
# test cache; a no-op when the cache already holds them.
real-agent-deps:
	tests/real_agent/install.sh

# Each real agent's newest release (npm view, pip index versions) made the pin: package.json and
# its lock (npm install --package-lock-only), fast-agent-requirements.txt, the daemon's presets
# (src/lmbridge/daemon/catalog.py). Installs nothing into the test cache; --dry-run only prints
# (REPIN_ARGS=--dry-run). docs/agents.md, "Presets".
.PHONY: repin-agents
repin-agents: $(STAMP)
	$(PY) -m tests.real_agent.repin $(REPIN_ARGS)

# The real-agent suites against each agent's newest release, installed fresh apart from the
# pinned ones ($$LMBRIDGE_NEWEST_CACHE, default ~/.cache/lmbridge-newest, about 0.7 GB), and a
# table of what passed (NEWEST_ARGS=--agents gemini,fast-agent for some). docs/agents.md,
# "Against the newest releases".
.PHONY: real-agents-newest
real-agents-newest: $(STAMP)
	$(PY) -m tests.real_agent.newest $(NEWEST_ARGS)

test: lint test-python test-shim chatview chatview-first-run

# VS Code's real Chat view as the acceptance test (docs/vscode-shim.md): code-server 4.139.1 on
# Node 24 and a headless Chromium, installed into $$LMBRIDGE_TEST_CACHE (default
# ~/.cache/lmbridge-test, reused), drive the packed extension and the demo agent as a user does.
# Screenshots and, on failure, logs in .chatview/<time>/.
chatview: $(STAMP) vsix
	@eval "$$(tests/chatview/install.sh | sed 's/^/export /')" && "$$NODE24" tests/chatview/chatview.mjs

# The first run of the packed extension on a fresh profile with no daemon anywhere: it builds its
# private environment from the wheel it carries (pip, from PyPI: needs the network) and answers.
.PHONY: chatview-first-run
chatview-first-run: $(STAMP) vsix
	@eval "$$(tests/chatview/install.sh | sed 's/^/export /')" && CHATVIEW_FIRST_RUN=1 "$$NODE24" tests/chatview/chatview.mjs

# ruff (pyflakes, pycodestyle, isort, bugbear, pyupgrade), mypy (strict on core/, rpc/, acp/),
# the layout's import contract (import-linter; pyproject.toml, docs/architecture.md "Layout"), and
# the shim's wire.ts as the daemon's wire models generate it (`make wire`; docs/vscode-shim.md).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(MAKE) -C vscode-shim wire-check PYTHON=../$(PY)

# vscode-shim/src/chat/wire.ts regenerated from the daemon's wire models (core/messages.py, core/outbound.py).
.PHONY: wire
wire: $(STAMP)
	$(MAKE) -C vscode-shim wire PYTHON=../$(PY)

# pytest exits 5 when it collects no tests; that is a failure here, not a pass.
test-python: $(STAMP) real-agent-deps
	$(PY) -m pytest -q

test-shim:
	@if [ -f vscode-shim/package.json ]; then $(MAKE) -C vscode-shim test; else echo "vscode-shim: not built yet"; fi

# Regenerate the replay corpus, tests/sessions/*.jsonl (docs/replay.md): short real sessions
# with the demo agent, claude-agent-acp against the fake model server and a scripted agent,
# each recorded by `lmbridge serve --record` and replayed once to check it.
.PHONY: record-sessions
record-sessions: $(STAMP) real-agent-deps
	$(PY) tests/sessions/record.py

# What the bridge costs, against a direct ACP client (docs/performance.md): figures in .bench/results.json.
.PHONY: bench
bench: $(STAMP)
	$(PY) -m bench

# New chats and the agents' memory, lmbridge against a direct ACP client (docs/sessions.md): both with
# claude-agent-acp and the fake model server; figures in .bench/sessions.json.
.PHONY: bench-sessions
bench-sessions: $(STAMP) real-agent-deps
	$(PY) -m bench.sessions

# The daemon's RSS under an agent's over-long stdout lines and its log under an agent's stderr
# flood (docs/reliability.md, "Bounds"); figures in .bench/bounds.json.
.PHONY: bench-bounds
bench-bounds: $(STAMP)
	$(PY) -m bench.bounds

# The soak run (docs/reliability.md): 1,000,000 generated stdin frames, 100,000
# hostile agent frames, 1,000 new chats under the process cap, the hostile agent's
# malformed-start, freeze and flood modes; figures in .fuzz/results.json.
.PHONY: fuzz
fuzz: $(STAMP)
	$(PY) -m tests.fuzz.soak

vsix:
	$(MAKE) -C vscode-shim vsix

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
