"""``lmbridge demo``: a scripted, non-interactive chat through the real daemon.

It plays VS Code's part against ``lmbridge serve`` with the built-in demo
agent: a first turn (streamed thinking, plan and text), then a turn that makes
the agent ask permission to write a file, which surfaces as a
``symposium-agent-action`` tool call; the demo approves it the way the shim's
tool does (returning the approval token) and the agent writes the file.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from lmbridge.client import DaemonClient, approve, assistant, tool_calls, user

DEFAULT_PROMPTS = ["Hello, demo agent!", "Please write a file with my notes."]


def _show(part: dict[str, Any]) -> None:
    if part["type"] == "text":
        sys.stdout.write(part["value"])
    elif part["type"] == "thinking":
        sys.stdout.write(f"\n  💭 {part['value']}")
    elif part["type"] == "tool_call":
        data = part["input"]
        options = ", ".join(f"{o['name']} ({o['kind']})" for o in data.get("options", []))
        sys.stdout.write(f"\n[tool call {part['name']} {part['callId']}]\n  {data.get('title')} — kind {data.get('kind')}\n  options: {options}\n")
    sys.stdout.flush()


async def run(prompts: list[str], scratch: str) -> int:
    env = {**os.environ, "LMBRIDGE_DEMO_SCRATCH": scratch}
    async with DaemonClient.spawn(env=env, stderr=None if os.environ.get("LMBRIDGE_DEMO_LOGS") else -3) as client:
        info = await client.initialize(workspace=[scratch])
        models = await client.request("lm/provideLanguageModelChatInformation", {})
        print(f"daemon {info['serverInfo']['name']} {info['serverInfo']['version']}; models: {[m['id'] for m in models['models']]}")
        history: list[dict[str, Any]] = []
        for prompt in prompts:
            print(f"\n>>> user: {prompt}")
            history.append(user(prompt))
            call = await client.chat("demo", history, on_part=_show)
            history.append(assistant(call.parts))
            while call.error is None and call.result["stopReason"] == "tool_calls":
                print(f"\n<<< stopReason: tool_calls")
                for part in tool_calls(call):
                    print(f">>> VS Code: Allow pressed for {part['input']['title']!r}")
                    history.append(approve(part))
                call = await client.chat("demo", history, on_part=_show)
                history.append(assistant(call.parts))
            if call.error is not None:
                print(f"\n!!! error: {call.error}", file=sys.stderr)
                return 1
            print(f"\n<<< stopReason: {call.result['stopReason']}")
    written = sorted(Path(scratch).rglob("*.txt"))
    for path in written:
        print(f"\nfile written by the agent after approval: {path}\n{path.read_text()}")
    print(json.dumps({"turns": len(prompts), "files_written": len(written)}))
    return 0


def main(prompts: list[str] | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="lmbridge-demo-") as scratch:
        return anyio.run(run, prompts or DEFAULT_PROMPTS, scratch)
