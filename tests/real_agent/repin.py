"""``make repin-agents``: move the real agents' pins, and the presets that start what was
tested, to each agent's newest release (docs/agents.md, "Presets").

    python -m tests.real_agent.repin [--dry-run]

For each agent of ``releases.AGENTS`` whose newest release is not the pinned one:

- an npm agent: its version in ``tests/real_agent/package.json``, then the lock re-resolved
  (``npm install --package-lock-only``: nothing installed);
- fast-agent: ``fast-agent-requirements.txt`` re-frozen from a scratch Python 3.13
  environment holding the new release (``pip install``, ``pip freeze``; outside the test cache);
- ``src/lmbridge/daemon/catalog.py``: every ``<package>@<old>`` / ``<package>==<old>`` made the
  new version (the preset's command, gemini's login command).

It prints what moved. ``--dry-run`` only asks the registries and prints. Nothing here
touches the test cache: ``make real-agent-deps`` installs the new pins, then the real-agent
tests say whether the new releases still behave as lmbridge expects.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.real_agent.releases import AGENTS, FAST_AGENT_REQUIREMENTS, HERE, PACKAGE_JSON, ROOT, Agent, make_venv, newest, pinned

CATALOG = ROOT / "src" / "lmbridge" / "daemon" / "catalog.py"


def repin_text(text: str, package: str, old: str, new: str) -> str:
    """``text`` with every pin of ``package`` at ``old`` (``<package>@<old>``, ``<package>==<old>``,
    quoted or not) made ``new``; other packages and versions untouched."""
    pattern = re.compile(rf"(?<![\w@/.-]){re.escape(package)}(@|==){re.escape(old)}(?![\w.+-])")
    return pattern.sub(lambda m: f"{package}{m.group(1)}{new}", text)


def repin_package_json(text: str, package: str, new: str) -> str:
    """``package.json``'s text with ``dependencies[package]`` set to ``new`` (exact)."""
    data = json.loads(text)
    data["dependencies"][package] = new
    return json.dumps(data, indent=2) + "\n"


def refreeze_fast_agent(version: str) -> str:
    """The requirements of a fresh Python 3.13 environment holding ``fast-agent-mcp==version``."""
    with tempfile.TemporaryDirectory(prefix="lmbridge-repin-") as scratch:
        python = make_venv(Path(scratch) / "venv", f"fast-agent-mcp=={version}")
        frozen = subprocess.run([str(python), "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"], check=True, capture_output=True, text=True).stdout
    lines = sorted((line for line in frozen.splitlines() if line and not line.startswith("#")), key=str.lower)
    return "\n".join(lines) + "\n"


def repin(agent: Agent, old: str, new: str) -> list[str]:
    """Move ``agent`` from ``old`` to ``new``: the files changed."""
    changed = []
    if agent.registry == "npm":
        PACKAGE_JSON.write_text(repin_package_json(PACKAGE_JSON.read_text(), agent.package, new))
        subprocess.run(["npm", "install", "--package-lock-only", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True)
        changed += [str(PACKAGE_JSON.relative_to(ROOT)), str((HERE / "package-lock.json").relative_to(ROOT))]
    else:
        FAST_AGENT_REQUIREMENTS.write_text(refreeze_fast_agent(new))
        changed.append(str(FAST_AGENT_REQUIREMENTS.relative_to(ROOT)))
    text = CATALOG.read_text()
    moved = repin_text(text, agent.package, old, new)
    if moved != text:
        CATALOG.write_text(moved)
        changed.append(str(CATALOG.relative_to(ROOT)))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make repin-agents", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dry-run", action="store_true", help="only ask the registries and print what would move")
    args = parser.parse_args(argv)
    pins = pinned()
    moved = 0
    for agent in AGENTS:
        old, new = pins[agent.package], newest(agent)
        if old == new:
            print(f"{agent.name:<11} {agent.package} {old}: the newest")
            continue
        moved += 1
        if args.dry_run:
            print(f"{agent.name:<11} {agent.package} {old} → {new} (dry run: nothing changed)")
            continue
        files = repin(agent, old, new)
        print(f"{agent.name:<11} {agent.package} {old} → {new}: {', '.join(files)}")
    if moved and not args.dry_run:
        print("\nNext: make real-agent-deps, the real-agent tests (pytest tests/real_agent), and docs/agents.md's versions.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
