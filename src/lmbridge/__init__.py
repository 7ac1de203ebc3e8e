"""lmbridge: ACP agents as VS Code language models.

The daemon speaks the wire protocol in docs/protocol.md on stdio (to the
vscode-shim extension) and ACP to each agent it starts.
"""

import sys

__version__ = "0.1.0"


def self_command(*args: str) -> list[str]:
    """This Python running lmbridge: ``<python> -P -m lmbridge ARGS``, how lmbridge starts
    its own processes (the demo agent, the MCP stdio relay). ``-P``: the working directory,
    a workspace for a process an agent starts, is not put first on ``sys.path``, so no
    ``lmbridge/`` or ``json.py`` there is imported in place of lmbridge's own modules or
    the standard library's."""
    return [sys.executable, "-P", "-m", "lmbridge", *args]
