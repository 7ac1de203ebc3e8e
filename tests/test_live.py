"""A running command's output in the answer (``live``, ``render.TurnRenderer``), pure.

The updates are shaped as the agents send them (docs/agents.md): codex-acp 0.16.0 streams
``_meta.terminal_output`` while the command runs and ends with ``rawOutput.exit_code``;
claude-agent-acp 0.23.1 sends all the output once the command has ended, then
``_meta.terminal_exit`` with the final status and the same output as ``rawOutput``.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.core.live import FENCE, HEAD, TAIL, LiveOutput, clean
from lmbridge.core.present import TERMINAL_UPDATE, TurnRenderer
from lmbridge.core.profiles import CLAUDE, CODEX


def text(parts: list[dict]) -> str:
    assert all(p["type"] == "text" for p in parts), parts
    return "".join(p["value"] for p in parts)


def fences(answer: str) -> list[str]:
    """The fence lines of ``answer`` (a code block opens and closes with one each)."""
    return [line for line in answer.split("\n") if re.fullmatch(r" {0,3}`{3,}\w*", line)]


def codex_start(call: str = "call_1", cmd: str = "for i in 1 2 3; do echo line $i; sleep 1; done") -> dict:
    return {
        "sessionUpdate": "tool_call", "toolCallId": call, "title": cmd, "kind": "execute", "status": "in_progress",
        "content": [{"type": "terminal", "terminalId": call}], "rawInput": {"command": ["/bin/bash", "-lc", cmd]},
    }  # fmt: skip


def codex_output(data: str, call: str = "call_1") -> dict:
    return {"sessionUpdate": "tool_call_update", "toolCallId": call, "_meta": {"terminal_output": {"terminal_id": call, "data": data}}}


def codex_end(stdout: str, code: int = 0, call: str = "call_1") -> dict:
    raw = {"stdout": stdout, "aggregated_output": stdout, "formatted_output": stdout, "exit_code": code}
    return {"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "completed", "rawOutput": raw}


# ---------------------------------------------------------------- codex: streamed


def test_codex_output_grows_one_block_then_closes_with_the_exit_code():
    r = TurnRenderer(profile=CODEX)
    start = text(r.update(codex_start()))
    assert "🔧" in start and "for i in 1 2 3" in start
    first = text(r.update(codex_output("line 2\n")))
    assert first == f"\n\n{FENCE}text\nline 2\n"  # the block opens with the first output
    assert text(r.update(codex_output("line 3\n"))) == "line 3\n"  # and continues: not a block per update
    end = text(r.update(codex_end("line 2\nline 3\n")))
    assert end.startswith(f"{FENCE}\n\n") and "completed · exit code 0" in end
    assert "line 2" not in end  # the result's output is not shown again
    answer = start + first + "line 3\n" + end
    assert answer.count("line 2") == 1 and len(fences(answer)) == 2
    assert r.close() == []


def test_codex_failed_command_says_its_exit_code():
    r = TurnRenderer(profile=CODEX)
    r.update(codex_start())
    r.update(codex_output("boom\n"))
    end = text(r.update(codex_end("boom\n", code=2)))
    assert "· exit code 2" in end and "boom" not in end


def test_codex_quick_command_without_live_output_shows_its_output_once_at_its_end():
    # codex-acp 2.6.0 (its dist/index.js, commandEndMeta): output that did not stream goes out
    # once, as terminal_output on the end, beside terminal_exit; rawOutput holds none.
    r = TurnRenderer(profile=CODEX)
    r.update(codex_start())
    meta = {"terminal_output": {"terminal_id": "call_1", "data": "a.txt\n"}, "terminal_exit": {"exit_code": 0, "signal": None, "terminal_id": "call_1"}}
    end = text(r.update({"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "completed", "_meta": meta}))
    assert end.count("a.txt") == 1 and "completed · exit code 0" in end, end


def test_agent_text_between_outputs_closes_and_reopens_the_block():
    r = TurnRenderer(profile=CODEX)
    r.update(codex_start())
    out = text(r.update(codex_output("one\n")))
    between = r.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Still running."}})
    assert [p["value"] for p in between] == [f"{FENCE}\n\n", "Still running."]
    more = text(r.update(codex_output("two\n")))
    assert more == f"\n\n{FENCE}text\ntwo\n"
    answer = out + text(between) + more + text(r.update(codex_end("one\ntwo\n")))
    assert len(fences(answer)) == 4  # two blocks, each closed


def test_turn_end_closes_an_open_block():
    r = TurnRenderer(profile=CODEX)
    r.update(codex_start())
    r.update(codex_output("partial line without end"))
    closed = text(r.close())
    assert closed.startswith(f"\n{FENCE}\n\n") and "ended without a result" in closed


def test_turn_end_after_text_does_not_open_an_empty_block():
    """codex-acp drops a command's end that comes after its turn ended (docs/agents.md): the
    block, paused by the agent's text and all shown, is not opened again empty at the end."""
    r = TurnRenderer(profile=CODEX)
    r.update(codex_start())
    shown = text(r.update(codex_output("ready\n")))
    between = text(r.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Finished."}}))
    closed = text(r.close())
    answer = shown + between + closed
    assert len(fences(answer)) == 2 and answer.count(f"{FENCE}text\n") == 1, answer
    assert closed.strip().startswith("_") and "ended without a result" in closed


def test_pause_closes_the_fence_at_a_response_end():
    r = TurnRenderer(profile=CODEX)
    r.update(codex_start())
    r.update(codex_output("x\n"))
    assert text(r.pause()) == f"{FENCE}\n\n"
    assert r.pause() == []
    assert text(r.update(codex_output("y\n"))) == f"\n\n{FENCE}text\ny\n"


# ---------------------------------------------------------------- claude: once, at the end


def claude_updates(output: str, code: int = 0) -> list[dict]:
    tid = "toolu_1"
    meta_tool = {"claudeCode": {"toolName": "Bash"}}
    return [
        {"_meta": {**meta_tool, "terminal_info": {"terminal_id": tid}}, "toolCallId": tid, "sessionUpdate": "tool_call", "rawInput": {},
         "status": "pending", "title": "Terminal", "kind": "execute", "content": [{"type": "terminal", "terminalId": tid}]},
        {"_meta": meta_tool, "toolCallId": tid, "sessionUpdate": "tool_call_update", "rawInput": {"command": "seq 3"},
         "title": "seq 3", "kind": "execute", "content": [{"type": "terminal", "terminalId": tid}]},
        {"_meta": {"claudeCode": {"toolResponse": {"stdout": output}, "toolName": "Bash"}}, "toolCallId": tid, "sessionUpdate": "tool_call_update"},
        {"_meta": {"terminal_output": {"terminal_id": tid, "data": output}}, "toolCallId": tid, "sessionUpdate": "tool_call_update"},
        {"_meta": {**meta_tool, "terminal_exit": {"terminal_id": tid, "exit_code": code, "signal": None}}, "toolCallId": tid,
         "sessionUpdate": "tool_call_update", "status": "completed" if code == 0 else "failed", "rawOutput": output,
         "content": [{"type": "terminal", "terminalId": tid}]},
    ]  # fmt: skip


def test_claude_output_once_at_the_end():
    r = TurnRenderer(profile=CLAUDE)
    answer = "".join(text(r.update(u)) for u in claude_updates("1\n2\n3"))
    assert answer.count("\n2\n") == 1  # once: not again from rawOutput or the terminal content
    assert "completed · exit code 0" in answer and "_terminal" not in answer
    assert len(fences(answer)) == 2
    assert answer.index(f"{FENCE}text") < answer.index("completed")


def test_claude_failed_command_shows_its_exit_code():
    r = TurnRenderer(profile=CLAUDE)
    answer = "".join(text(r.update(u)) for u in claude_updates("nope", code=1))
    assert "failed · exit code 1" in answer and answer.count("nope") == 1


# ---------------------------------------------------------------- lmbridge's own terminals


def test_own_terminal_streams_then_says_how_it_ended():
    r = TurnRenderer()
    assert text(r.update({"sessionUpdate": TERMINAL_UPDATE, "terminalId": "term-1", "data": "a\n"})) == f"\n\n{FENCE}text\na\n"
    assert text(r.update({"sessionUpdate": TERMINAL_UPDATE, "terminalId": "term-1", "data": "b\n"})) == "b\n"
    end = text(r.update({"sessionUpdate": TERMINAL_UPDATE, "terminalId": "term-1", "exited": True, "exitCode": None, "signal": "SIGKILL"}))
    assert end == f"{FENCE}\n\n_killed by SIGKILL_\n\n"
    # The agent's tool call embedding that terminal ends without showing its output again.
    r.update({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "make", "kind": "execute", "status": "in_progress"})
    done = text(r.update({"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed",
                          "content": [{"type": "terminal", "terminalId": "term-1"}]}))  # fmt: skip
    assert "a\n" not in done and "killed by SIGKILL" in done


def test_own_terminal_of_a_call_shown_says_how_it_ended_once():
    """A terminal the agent's tool call already shows (its ``terminal`` content): how it ended
    is said on the call's end line, not on a line of its own as well."""
    r = TurnRenderer()
    r.update({"sessionUpdate": "tool_call", "toolCallId": "c", "title": "sh tick.sh", "kind": "execute", "status": "in_progress",
              "content": [{"type": "terminal", "terminalId": "term-1"}]})  # fmt: skip
    answer = text(r.update({"sessionUpdate": TERMINAL_UPDATE, "terminalId": "term-1", "data": "tick\n"}))
    answer += text(r.update({"sessionUpdate": TERMINAL_UPDATE, "terminalId": "term-1", "exited": True, "exitCode": 0, "signal": None}))
    answer += text(r.update({"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed"}))
    assert answer.count("exit code 0") == 1 and "completed · exit code 0" in answer, answer
    assert answer.count("tick\n") == 1 and len(fences(answer)) == 2


def test_malformed_terminal_updates_are_harmless():
    r = TurnRenderer()
    for bad in ({"sessionUpdate": TERMINAL_UPDATE}, {"sessionUpdate": TERMINAL_UPDATE, "terminalId": 3, "data": "x"},
                {"sessionUpdate": TERMINAL_UPDATE, "terminalId": "t", "data": 5, "exited": "yes"}):  # fmt: skip
        assert r.update(bad) == []
    r.update(codex_start())
    weird = {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "_meta": {"terminal_output": {"terminal_id": 1, "data": ["x"]}, "terminal_exit": "no"}}
    assert r.update(weird) == []


# ---------------------------------------------------------------- bounds and fences


def test_past_the_head_only_the_tail_is_kept_and_shown_at_the_end():
    live = LiveOutput(head=1024, tail=1024)
    shown = live.feed("t", "".join(f"line {i:06d}\n" for i in range(50_000)))  # ~600 KB at once
    assert len(shown.encode()) <= 1024 + 20
    assert len(live.blocks["t"].held.encode()) <= 1024
    end = live.end("t")
    assert "[… earlier output left out: " in end and "line 049999\n" in end and end.endswith(f"{FENCE}\n\n")
    assert len(end.encode()) <= 1024 + 100


def test_output_that_looks_like_a_fence_does_not_close_the_block():
    live = LiveOutput()
    answer = live.feed("t", "```\nx\n````\n") + live.feed("t", "``") + live.feed("t", "``\n") + live.end("t")
    assert len(fences(answer)) == 2


def test_clean_drops_terminal_control_sequences():
    assert clean("\x1b[31mred\x1b[0m\r\nok\rnext\x07\x00") == "red\nok\nnext"


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.text(max_size=600), max_size=40), head=st.integers(1, 2048), tail=st.integers(1, 2048))
def test_any_output_is_one_bounded_closed_block(chunks: list[str], head: int, tail: int) -> None:
    live = LiveOutput(head=head, tail=tail)
    answer = "".join(live.feed("t", c) for c in chunks) + live.end("t")
    block = live.block("t")
    assert block.shown <= head and len(block.held.encode("utf-8", "surrogatepass")) == 0
    lines = fences(answer)
    assert len(lines) in (0, 2)  # nothing shown, or one block opened and closed
    assert len(answer.encode("utf-8", "surrogatepass")) <= head + tail + 200 + answer.count("\u200b") * 3
    if any(clean(c) for c in chunks):
        assert lines


def test_defaults_bound_a_block_to_16_kib():
    assert HEAD + TAIL == 16 * 1024
