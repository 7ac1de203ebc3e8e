"""lmbridge: ACP agents as VS Code language models.

The daemon speaks the wire protocol in docs/protocol.md on stdio (to the
vscode-shim extension) and ACP to each agent it starts.
"""

import sys

__version__ = "0.1.0"


def self_command(*args: str) -> list[str]:
    """This Python running lmbridge: ``<python> -E -P -m lmbridge ARGS``, how lmbridge starts
    its own processes (the demo agent, the MCP stdio relay). ``-P``: the working directory,
    a workspace for a process an agent starts, is not put first on ``sys.path``, so no
    ``lmbridge/`` or ``json.py`` there is imported in place of lmbridge's own modules or
    the standard library's. ``-E``: no ``PYTHON*`` variable is honoured (``PYTHONPATH``,
    ``PYTHONHOME``, ``PYTHONSTARTUP``, ``PYTHONUSERBASE``, ...): the relay gets the agent's
    environment, and agents put workspace values there (gemini-cli the workspace's ``.env``,
    Claude Code ``.claude/settings.json``'s ``env``). lmbridge is imported from this Python's
    own site-packages (a venv, pip, pipx), never through ``PYTHONPATH``."""
    return [sys.executable, "-E", "-P", "-m", "lmbridge", *args]
