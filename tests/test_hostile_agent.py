"""A hostile ACP agent (tests/agents/hostile_agent.py) through the real daemon: one test per
way an agent has broken it (docs/reliability.md), and a seeded random mix.

Invariants, whatever the agent does: the chat request is answered exactly once, within a
bound; an error names the agent, says what happened, quotes the agent's own reason and is
clipped; each of the agent's requests with a usable id is answered exactly once; nothing
is approved without the user's token; the daemon stays responsive, exits cleanly at EOF,
and no agent process outlives it (``daemon`` fixture).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from lmbridge.devtools.client import DaemonClient, SentRequest, approve, assistant, is_agent_action, skip, text_of, tool_calls, user
from lmbridge.rpc.jsonrpc import usable_id as answerable
from tests.conftest import ROOT, alive
from tests.fuzz.peer import agents_of, rss

pytestmark = pytest.mark.anyio
HOSTILE = ROOT / "tests" / "agents" / "hostile_agent.py"
ERROR_LIMIT = 8 * 1024  # characters of an error the user reads
BOUND = 120.0  # seconds within which every chat here is answered: ~1.5 s idle (docs/reliability.md, "Tests under load")


class Hostile:
    def __init__(self, where: Path, mode: str, *extra: str) -> None:
        self.id = f"hostile-{mode}"
        self.log = where / f"{mode}-{{pid}}.jsonl"
        self.where, self.mode = where, mode
        self.spec = {"id": self.id, "command": sys.executable, "args": [str(HOSTILE), mode, "--log", str(self.log), *extra]}

    def entries(self) -> list[dict[str, Any]]:
        out = []
        for path in self.where.glob(f"{self.mode}-*.jsonl"):
            out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return out

    def check_requests_answered_once(self) -> list[dict[str, Any]]:
        """Each request it sent with a usable id was answered exactly once; returns the answers."""
        entries = self.entries()
        sent = Counter(json.dumps(e["sent"]) for e in entries if "sent" in e and answerable(e["sent"]))
        answers = [e for e in entries if "answer" in e]
        got = Counter(json.dumps(e["answer"]) for e in answers)
        assert {k: got[k] for k in sent} == {k: 1 for k in sent}, f"answers by id: {dict(got)} for requests {dict(sent)}"
        return answers


@pytest.fixture
def hostile(tmp_path: Path) -> Callable[..., Hostile]:
    return lambda mode, *extra: Hostile(tmp_path, mode, *extra)


@asynccontextmanager
async def bridge(daemon: Any, agent: Hostile, **env: str) -> AsyncIterator[DaemonClient]:
    async with daemon(agents=[agent.spec], env=env) as client:
        yield client
        # Responsive after whatever the agent did.
        assert (await client.request("lm/provideTokenCount", {"modelId": agent.id, "text": "abcd"}, timeout=30))["count"] == 1
        pids = agents_of(client.process.pid)
    assert not [p for p in pids if alive(p)], "an agent process outlived the daemon"


async def chat(client: DaemonClient, agent: Hostile, history: list[dict[str, Any]]) -> SentRequest:
    call = await client.chat(agent.id, history, timeout=BOUND)
    if call.error is not None:
        message = call.error.message
        assert len(message) <= ERROR_LIMIT, f"an error of {len(message)} characters"
        assert agent.id in message, f"the error does not name the agent: {message[:300]}"
    return call


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("init-not-object", "initialize"),
        ("new-not-object", "session/new"),
        ("new-bad-session", "session/new"),
    ],
)
async def test_a_malformed_start_is_an_error_naming_the_step_and_the_next_chat_too(daemon: Any, hostile: Any, mode: str, says: str) -> None:
    agent = hostile(mode)
    async with bridge(daemon, agent) as client:
        for _ in range(2):  # the job is not lost, and the agent is not stuck for later chats
            call = await chat(client, agent, [user("hi")])
            assert call.error is not None and says in call.error.message, call.error


async def test_wrong_typed_capabilities_are_read_as_none(daemon: Any, hostile: Any) -> None:
    agent = hostile("init-bad-caps")
    async with bridge(daemon, agent) as client:
        call = await chat(client, agent, [user("hi")])
        assert call.error is None and text_of(call) == "ok"


async def test_an_agent_that_never_answers_initialize(daemon: Any, hostile: Any) -> None:
    agent = hostile("silent-init")
    async with bridge(daemon, agent, LMBRIDGE_START_TIMEOUT="3", LMBRIDGE_START_NOTICE="0.2") as client:
        with anyio.fail_after(BOUND):  # the 3 s start bound, ~3.3 s idle
            call = await chat(client, agent, [user("hi")])
        assert "Starting" in text_of(call)  # said at once, not after the timeout
        assert call.error is not None and "initialize" in call.error.message and "3 s" in call.error.message, call.error


async def test_an_agent_that_stops_reading_its_stdin(daemon: Any, hostile: Any) -> None:
    agent = hostile("deaf")
    async with bridge(daemon, agent, LMBRIDGE_WRITE_TIMEOUT="2") as client:
        with anyio.fail_after(BOUND):  # the 2 s write bound, ~3 s idle
            call = await chat(client, agent, [user("x" * 2_000_000)])
        assert call.error is not None and "stopped reading" in call.error.message, call.error


async def test_a_frozen_agent_waits_for_stop_and_the_daemon_still_exits(daemon: Any, hostile: Any) -> None:
    """A turn with no output is not an error (the agent may be thinking): it lasts until
    the user stops it. After the drain (1 s here) the next chat gets a fresh ACP session;
    the agent is frozen there too, and Stop ends that as well; at EOF the agent is killed."""
    agent = hostile("frozen")
    async with bridge(daemon, agent, LMBRIDGE_DRAIN_TIMEOUT="1") as client:
        history = [user("hi")]
        for n in range(2):
            call = await client.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": history})
            with anyio.fail_after(BOUND):  # Stop once the agent has the prompt (a busy machine may take seconds)
                while len([e for e in agent.entries() if e.get("event") == "prompt"]) <= n:
                    await anyio.sleep(0.05)
            with anyio.move_on_after(1.0):
                await call.done.wait()
            assert not call.done.is_set()
            await client.cancel(call)
            with anyio.fail_after(BOUND):
                await call.done.wait()
            assert call.result == {"stopReason": "cancelled"} and call.error is None
            history = [*history, assistant([]), user("again")]
    prompts = [e for e in agent.entries() if e.get("event") == "prompt"]
    assert len({p["sessionId"] for p in prompts}) == 2, "the second chat did not get a fresh ACP session"


@pytest.mark.parametrize("mode", ["update-list", "deep", "huge-diff", "bad-ids"])
async def test_frames_the_daemon_cannot_use_are_dropped_and_the_turn_goes_on(daemon: Any, hostile: Any, mode: str) -> None:
    agent = hostile(mode)
    async with bridge(daemon, agent) as client:
        call = await chat(client, agent, [user("hi")])
        assert call.error is None and call.result == {"stopReason": "end_turn"}, call.error
        assert "survived" in text_of(call)
    answers = agent.check_requests_answered_once()
    if mode == "bad-ids":
        # Usable ids (unknown methods): -32601 each. Ids JSON-RPC cannot answer by ({}, [1], true,
        # null): answered at once with id null, never approved; the user is told. (1e400 is
        # written "Infinity", which is no JSON: a line that is not a frame.)
        by_id = Counter(json.dumps(a["answer"]) for a in answers)
        assert by_id == Counter({'"s"': 1, "-7": 1, "1.5": 1, "null": 4}), by_id
        assert all(a["error"]["code"] == (-32600 if a["answer"] is None else -32601) for a in answers), answers
        assert text_of(call).count("sent a permission request lmbridge cannot read (id is neither") == 4
        # The responses it sent to requests never made are never answered.
        assert not [a for a in answers if a["answer"] in (999_999, "never-sent")]


@pytest.mark.parametrize("mode", ["shared-option-id", "unknown-kinds"])
async def test_ambiguous_options_are_answered_cancelled_at_once_and_no_card_is_shown(daemon: Any, hostile: Any, mode: str) -> None:
    """Options with no unambiguous allow_once: nothing the user could approve, so no card."""
    agent = hostile(mode)
    async with bridge(daemon, agent) as client:
        call = await chat(client, agent, [user("hi")])
        assert call.result == {"stopReason": "end_turn"} and not tool_calls(call)
        assert "its options cannot be read unambiguously: declined." in text_of(call)
    (reply,) = agent.check_requests_answered_once()
    assert reply["result"] == {"outcome": {"outcome": "cancelled"}}


async def test_malformed_permissions_are_answered_at_once_naming_the_field(daemon: Any, hostile: Any) -> None:
    agent = hostile("malformed-permission")
    async with bridge(daemon, agent) as client:
        with anyio.fail_after(BOUND):
            call = await chat(client, agent, [user("hi")])
        assert call.result == {"stopReason": "end_turn"} and not tool_calls(call)
        assert "survived 6 answers" in text_of(call)
        for field in ("options is not a list", "options is missing", "options is empty", "options[0] is not a permission option", "toolCall is missing", "toolCall is not an object"):
            assert f"hostile-malformed-permission sent a permission request lmbridge cannot read ({field}" in text_of(call), field
    answers = agent.check_requests_answered_once()
    assert len(answers) == 6 and all(a["error"]["code"] == -32602 for a in answers), answers
    assert sorted(a["error"]["message"].split(": ", 1)[1].split(" ")[0] for a in answers) == ["options", "options", "options", "options[0]", "toolCall", "toolCall"]


async def test_a_permission_asked_as_the_turn_ends_is_no_card(daemon: Any, hostile: Any) -> None:
    agent = hostile("permission-at-end")
    async with bridge(daemon, agent) as client:
        call = await chat(client, agent, [user("hi")])
        assert call.result == {"stopReason": "end_turn"} and not tool_calls(call)
    (reply,) = agent.check_requests_answered_once()
    assert reply["result"] == {"outcome": {"outcome": "cancelled"}}


async def test_the_agents_own_reason_is_quoted(daemon: Any, hostile: Any) -> None:
    agent = hostile("error-data")
    async with bridge(daemon, agent) as client:
        call = await chat(client, agent, [user("hi")])
        assert call.error is not None and "quota exceeded (429)" in call.error.message, call.error


async def test_long_stderr_lines_are_clipped_in_the_error_and_in_memory(daemon: Any, hostile: Any) -> None:
    agent = hostile("long-stderr")
    async with bridge(daemon, agent) as client:
        call = await chat(client, agent, [user("hi")])
        assert call.error is not None and "code 3" in call.error.message, call.error
        assert rss(client.process.pid) < 200 * 2**20


async def test_a_command_too_long_for_a_card_is_declined_never_cut(daemon: Any, hostile: Any, tmp_path: Path) -> None:
    """A 100 KB command (gemini and codex put the command in the title): no card shows it cut
    for the user to approve; it is declined with a line saying why, and logs stay bounded."""
    agent = hostile("huge-title")
    async with bridge(daemon, agent) as client:
        call = await chat(client, agent, [user("hi")])
        assert call.result == {"stopReason": "end_turn"} and not tool_calls(call)
        assert "asked to run a command of 100,000 characters, too long to show whole on a card: declined." in text_of(call)
        assert len(json.dumps(call.parts)) < 20_000
    (reply,) = agent.check_requests_answered_once()
    assert reply["result"] == {"outcome": {"outcome": "selected", "optionId": "reject"}}
    longest = max(len(line) for line in (tmp_path / "daemon.stderr").read_text().splitlines())
    assert longest < 20_000, f"a log line of {longest} characters"


async def test_an_agent_that_ignores_eof_and_sigterm_is_killed(daemon: Any, hostile: Any) -> None:
    agent = hostile("ignore-signals")
    async with bridge(daemon, agent) as client:
        call = await chat(client, agent, [user("hi")])
        assert text_of(call) == "ok"


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_seeded_mix_of_hostile_frames(daemon: Any, hostile: Any, seed: int) -> None:
    agent = hostile("mix", "--seed", str(seed), "--frames", "300")
    async with bridge(daemon, agent) as client:
        history = [user("hi")]
        for _ in range(20):  # each card answered Skip, until the turn ends
            call = await chat(client, agent, history)
            cards = [p for p in tool_calls(call) if is_agent_action(p)]
            if call.error is not None or not cards:
                break
            history += [assistant(call.parts), *(skip(card) for card in cards)]
        assert call.error is None or agent.id in call.error.message
    answers = agent.check_requests_answered_once()
    approved = [a for a in answers if isinstance(a.get("result"), dict) and (a["result"].get("outcome") or {}).get("outcome") == "selected"
                and a["result"]["outcome"].get("optionId") in ("allow", "x", "y", "go")]
    assert not approved, f"approved without the user's token: {approved}"
    assert any(e.get("event") == "mix_done" for e in agent.entries())


# ------------------------------------------------------------------ bounds: over-long lines, floods, freeze, malformed starts


def daemon_log(tmp_path: Path) -> list[str]:
    return (tmp_path / "daemon.stderr").read_text(errors="replace").splitlines()


async def test_over_long_lines_are_dropped_as_they_stream_and_the_link_goes_on(daemon: Any, hostile: Any, tmp_path: Path) -> None:
    """Two session/update lines and a permission request of 40 MB each (past the 16 MiB
    limit): each dropped as it streams, logged once, the permission answered -32600 (the
    agent is not left waiting), the turn goes on; the daemon's RSS stays under twice what
    it was before (it is never held whole)."""
    warm, long = hostile("init-bad-caps"), hostile("long-lines", "--long-mb", "40", "--long-count", "2")
    async with daemon(agents=[warm.spec, long.spec]) as client:
        assert text_of(await chat(client, warm, [user("warm up")])) == "ok"
        idle = rss(client.process.pid)
        peak = idle
        async with anyio.create_task_group() as tg:

            async def sample() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, rss(client.process.pid))
                    await anyio.sleep(0.02)

            tg.start_soon(sample)
            call = await chat(client, long, [user("long lines")])
            tg.cancel_scope.cancel()
        assert call.error is None and call.result == {"stopReason": "end_turn"} and text_of(call) == "survived", call.error
        assert peak < 2 * idle, f"RSS {peak / 2**20:.0f} MiB under over-long lines, {idle / 2**20:.0f} MiB before"
    (answer,) = long.check_requests_answered_once()
    assert answer["error"]["code"] == -32600 and "longer than lmbridge's limit" in answer["error"]["message"], answer
    dropped = [line for line in daemon_log(tmp_path) if "hostile-long-lines' sent a line of 40,000," in line]
    assert len(dropped) == 3 and all("dropped, the link goes on" in line for line in dropped), dropped


async def test_an_agent_flooding_stderr_is_logged_bounded_and_counted(daemon: Any, hostile: Any, tmp_path: Path) -> None:
    """20,000 stderr lines: the first ones logged, then a few a second; the rest said as a
    count (lines, bytes) at the end; every line is either logged or counted, once."""
    agent = hostile("flood-stderr", "--lines", "20000")
    async with bridge(daemon, agent) as client:
        call = await chat(client, agent, [user("flood")])
        assert call.error is None and text_of(call) == "survived"
    log = [line for line in daemon_log(tmp_path) if "agent=hostile-flood-stderr" in line]
    logged = [line for line in log if "agent stderr" in line and "warn: the agent is chatty" in line]
    summaries = [line for line in log if "more stderr lines" in line]
    counted = sum(int(line.split(" lines=")[1].split()[0]) for line in summaries)
    assert len(logged) + counted == 20_000, (len(logged), counted)
    assert len(logged) < 200 and 1 <= len(summaries) <= 10, (len(logged), summaries)


async def test_a_flood_on_both_pipes_and_over_long_lines_at_once(daemon: Any, hostile: Any, tmp_path: Path) -> None:
    agent = hostile("flood", "--lines", "20000", "--long-mb", "20", "--long-count", "1")
    async with bridge(daemon, agent) as client:
        call = await chat(client, agent, [user("flood")])
        assert call.error is None and text_of(call) == "survived", call.error
    agent.check_requests_answered_once()
    log = daemon_log(tmp_path)
    assert len([line for line in log if "hostile-flood' stdout" in line]) <= 10  # quoted first ones, then counts
    assert len([line for line in log if "agent=hostile-flood" in line and "agent stderr" in line]) < 200


async def test_an_agent_that_freezes_mid_session_answers_each_request_once(daemon: Any, hostile: Any) -> None:
    """The agent answers one prompt, then stops answering anything. The frozen turn ends on
    Stop; a new chat is answered once: by an error naming the agent (the start and session
    bounds, 10 s here), by a process that answers (the frozen one replaced), or, when its prompt reached the frozen process (a
    spare session opened before the freeze), on Stop, as any turn that streams nothing."""
    agent = hostile("freeze")
    async with bridge(daemon, agent, LMBRIDGE_DRAIN_TIMEOUT="1", LMBRIDGE_START_TIMEOUT="10", LMBRIDGE_SESSION_TIMEOUT="10") as client:
        first = await chat(client, agent, [user("hi")])
        assert text_of(first) == "ok"
        history = [user("hi"), assistant(first.parts), user("more")]
        frozen = await client.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": history})
        with anyio.fail_after(BOUND):
            while "thinking" not in text_of(frozen):
                await anyio.sleep(0.05)
        await client.cancel(frozen)
        with anyio.fail_after(BOUND):
            await frozen.done.wait()
        assert frozen.result == {"stopReason": "cancelled"}
        after = await client.start("lm/provideLanguageModelChatResponse", {"modelId": agent.id, "messages": [user("a new chat")]})
        with anyio.move_on_after(BOUND):
            await after.done.wait()
        if not after.done.is_set():
            await client.cancel(after)
            with anyio.fail_after(BOUND):
                await after.done.wait()
            assert after.result == {"stopReason": "cancelled"}
        elif after.error is not None:
            assert agent.id in after.error.message and len(after.error.message) <= ERROR_LIMIT, after.error
        else:
            assert text_of(after) == "ok"
    assert any(e.get("event") == "frozen" for e in agent.entries())


MALFORMED_INIT = ["valid", "null", "array", "bad-version", "error", "garbage-then-valid", "wrong-id", "twice", "huge", "exit"]
SILENT = ("start-wrong-id-valid", "start-valid-never", "start-valid-string-id")
MALFORMED_NEW = ["null", "no-session", "numeric-session", "empty-session", "junk-options", "error", "never", "twice", "string-id", "huge", "exit"]


async def test_malformed_starts_are_each_answered_once_naming_the_agent(daemon: Any, hostile: Any, tmp_path: Path) -> None:
    """Each garbage answer to initialize (with a good session/new) and to session/new (with
    a good initialize), two new chats each (one for those never answered: each costs the
    start or session bound, 10 s here): every chat answered exactly once, by its agent's answer or an
    error naming the agent and what it waited on; the daemon stays up."""
    agents = [Hostile(tmp_path, "malformed-start", "--init", how, "--new", "valid") for how in MALFORMED_INIT]
    agents += [Hostile(tmp_path, "malformed-start", "--init", "valid", "--new", how) for how in MALFORMED_NEW]
    for agent in agents:
        how = "-".join(agent.spec["args"][-3::2])
        agent.id = agent.spec["id"] = f"start-{how}"
    outcome: dict[str, list[str]] = {}
    async with daemon(agents=[a.spec for a in agents], env={"LMBRIDGE_START_TIMEOUT": "10", "LMBRIDGE_SESSION_TIMEOUT": "10"}) as client:
        for agent in agents:
            for n in range(1 if agent.id in SILENT else 2):
                call = await chat(client, agent, [user(f"chat {n}")])
                outcome.setdefault(agent.id, []).append(call.error.message if call.error else text_of(call))
        assert (await client.request("lm/provideTokenCount", {"modelId": agents[0].id, "text": "abcd"}, timeout=BOUND))["count"] == 1
    assert not [f for f in client.unmatched if "id" in f and f["id"] is not None], client.unmatched  # nothing answered twice
    for good in ("start-valid-valid", "start-garbage-then-valid-valid", "start-twice-valid", "start-valid-twice", "start-valid-junk-options"):
        assert outcome[good] == ["ok", "ok"], (good, outcome[good])
    for silent in SILENT:
        assert all("within 10 s" in said for said in outcome[silent]), (silent, outcome[silent])
    for huge in ("start-huge-valid", "start-valid-huge"):
        assert all("longer than lmbridge's limit" in said for said in outcome[huge]), (huge, outcome[huge])
    assert all("the agent's own reason" in said for said in outcome["start-error-valid"] + outcome["start-valid-error"]), outcome


async def test_terminals_that_print_without_end_never_exit_and_are_never_released(daemon: Any, hostile: Any) -> None:
    """4 MB of a command's output as ``_meta.terminal_output`` that never ends, and three
    commands through ``terminal/create`` never released (one printing without end, two
    never exiting): the answer stays bounded (each command's block at most
    ``live.HEAD + live.TAIL``), every request is answered once, and the commands die with
    the daemon (``bridge``: no process outlives it)."""
    from lmbridge.core.live import HEAD, TAIL

    agent = hostile("terminals", "--long-mb", "4")
    async with bridge(daemon, agent) as client:
        first = await chat(client, agent, [user("run things")])
        cards = tool_calls(first)  # each command is asked for first: the user approves all three
        assert len(cards) == 3 and all(is_agent_action(card) for card in cards), text_of(first)
        approved = {"role": "user", "content": [approve(card)["content"][0] for card in cards]}
        call = await chat(client, agent, [user("run things"), assistant(first.parts), approved])
        assert call.error is None and "survived" in text_of(call), call.error
        terminals = [e for e in agent.entries() if e.get("event") == "terminal"]
        assert len(terminals) == 3 and all(str(e["terminalId"]).startswith("term-") for e in terminals), terminals
        marker = terminals[0]["marker"]
        running = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
        assert running.count(marker) >= 3  # still running after the turn: released by nobody
    agent.check_requests_answered_once()
    assert len(text_of(call).encode()) < 2 * (HEAD + TAIL) + 4096  # 4 MB in, two bounded blocks out
    assert marker not in subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
