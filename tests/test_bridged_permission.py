"""Which of an agent's permission requests are for a bridged VS Code tool (granted at
once: VS Code confirms its own tools when it runs them, docs/tools.md). Each agent names
the tool its own way; anything else is put to the user."""

from __future__ import annotations

from typing import Any

import pytest

from lmbridge.mcp_bridge import ToolBridge, gemini_qualified
from lmbridge.session_actor import _tool_name
from lmbridge.wire import ToolInfo


def bridge(*names: str) -> ToolBridge:
    async def on_call(call: Any) -> None:
        raise AssertionError("no call expected")

    b = ToolBridge("s1", on_call)
    b.tools = {n: ToolInfo(name=n, description="", inputSchema={"type": "object"}) for n in names}
    return b


# Permissions as the agents send them (gemini-cli 0.61.0 and claude-agent-acp 0.23.1, seen on the wire).
GEMINI_MCP = {"toolCallId": "mcp_vscode_grep_search__mcp_vscode_grep_search_1795592249627_0", "title": "grep_search (vscode MCP Server)", "kind": "other"}
GEMINI_SHELL = {"toolCallId": "run_shell_command__run_shell_command_1795592249627_0", "title": "touch x", "kind": "execute"}
CLAUDE_MCP = {"toolCallId": "toolu_1", "title": "mcp__vscode__grep_search", "_meta": {"claudeCode": {"toolName": "mcp__vscode__grep_search"}}}


@pytest.mark.parametrize(
    ("raw_call", "bridged"),
    [
        (GEMINI_MCP, True),
        (CLAUDE_MCP, True),
        ({"toolCallId": "c1", "title": "mcp__vscode__grep_search"}, True),  # title only
        (GEMINI_SHELL, False),
        # gemini's title of an MCP tool with a `command` argument is that command: the id still names the tool
        ({**GEMINI_MCP, "title": "rm -rf /"}, True),
        # a title that looks like gemini's is not enough: the shell command runs as it is
        ({**GEMINI_SHELL, "title": "grep_search (vscode MCP Server)"}, False),
        # another server's tool, another tool of ours that is not offered
        ({**GEMINI_MCP, "toolCallId": "mcp_other_grep_search__1"}, False),
        ({**GEMINI_MCP, "toolCallId": "mcp_vscode_run_in_terminal__1"}, False),
        # the shell's id may carry a model-chosen suffix: only the prefix names the tool
        ({**GEMINI_SHELL, "toolCallId": "run_shell_command__mcp_vscode_grep_search__1"}, False),
    ],
)
def test_permission_for_a_bridged_tool(raw_call: dict[str, Any], bridged: bool) -> None:
    assert bridge("grep_search", "read_file").is_bridged(_tool_name(raw_call)) is bridged


def test_gemini_names_like_gemini_cli() -> None:
    assert gemini_qualified("grep_search") == "mcp_vscode_grep_search"
    assert gemini_qualified("my tool/x") == "mcp_vscode_my_tool_x"
    long = gemini_qualified("t" * 80)
    assert len(long) == 63 and long.startswith("mcp_vscode_") and "..." in long
