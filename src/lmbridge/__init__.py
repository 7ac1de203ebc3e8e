"""lmbridge: ACP agents as VS Code language models.

The daemon speaks the wire protocol in docs/protocol.md on stdio (to the
vscode-shim extension) and ACP to each agent it starts.
"""

__version__ = "0.1.0"
