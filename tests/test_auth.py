"""Agents that need a login or a key (docs/agents.md, "Signing in"), presets and imageInput.

The pure part (auth.py, agents.resolve) against the real agents' ``authMethods`` as they
came on the wire; the daemon's part with the scripted agent: an automatic
``authenticate`` where a method needs nobody, one actionable error (with the data the
shim turns into buttons) where it does, and the next message working once the user has
signed in, with no restart of anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmbridge.core import auth
from lmbridge.core.messages import AgentEntry, AgentSpec
from lmbridge.daemon.catalog import PRESETS, auth_hint, merge, parse_agent_option, resolve
from lmbridge.devtools.client import text_of, user

# initialize's authMethods as the real agents sent them (probed here; docs/agents.md).
CODEX = [
    {"id": "chatgpt", "name": "Login with ChatGPT", "description": "Use your ChatGPT login with Codex CLI (requires a paid ChatGPT subscription)"},
    {"type": "env_var", "id": "codex-api-key", "name": "Use CODEX_API_KEY", "description": "Requires setting the `CODEX_API_KEY` environment variable.", "vars": [{"name": "CODEX_API_KEY"}]},
    {"type": "env_var", "id": "openai-api-key", "name": "Use OPENAI_API_KEY", "description": "Requires setting the `OPENAI_API_KEY` environment variable.", "vars": [{"name": "OPENAI_API_KEY"}]},
]  # fmt: skip
GEMINI = [
    {"id": "oauth-personal", "name": "Log in with Google", "description": "Log in with your Google account"},
    {"id": "gemini-api-key", "name": "Gemini API key", "description": "Use an API key with Gemini Developer API", "_meta": {"api-key": {"provider": "google"}}},
    {"id": "vertex-ai", "name": "Vertex AI", "description": "Use an API key with Vertex AI GenAI API"},
    {"id": "gateway", "name": "AI API Gateway", "description": "Use a custom AI API Gateway", "_meta": {"gateway": {"protocol": "google", "restartRequired": "false"}}},
]  # fmt: skip
# claude-agent-acp 0.23.1 with clientCapabilities.auth.terminal (the daemon says it).
CLAUDE = [{"description": "Run `claude /login` in the terminal", "name": "Log in with Claude", "id": "claude-login", "type": "terminal", "args": ["--cli"]}]

# Today's releases (read in their dist, seen on the wire against fake models).
# codex-acp 2.6.0 (getCodexAuthMethods; NO_BROWSER unset, no URL elicitation, no gateway).
CODEX_26 = [
    {"id": "api-key", "name": "API Key", "description": "Use an API key to authenticate", "_meta": {"api-key": {"provider": "openai"}}},
    {"id": "chat-gpt", "name": "ChatGPT", "description": "Use ChatGPT to authenticate"},
]  # fmt: skip
# claude-agent-acp 0.101.0 with clientCapabilities.auth.terminal.
CLAUDE_101 = [
    {"description": "Use Claude subscription ", "name": "Claude Subscription", "id": "claude-ai-login", "type": "terminal", "args": ["--cli", "auth", "login", "--claudeai"]},
    {"description": "Use Anthropic Console (API usage billing)", "name": "Anthropic Console", "id": "console-login", "type": "terminal", "args": ["--cli", "auth", "login", "--console"]},
]  # fmt: skip


# ---------------------------------------------------------------- auth.py


def test_methods_read_each_type() -> None:
    codex = auth.methods(CODEX)
    assert [(m.id, m.type, m.vars) for m in codex] == [
        ("chatgpt", "agent", ()), ("codex-api-key", "env_var", ("CODEX_API_KEY",)), ("openai-api-key", "env_var", ("OPENAI_API_KEY",))
    ]  # fmt: skip
    (claude,) = auth.methods(CLAUDE)
    assert claude.type == "terminal" and claude.args == ("--cli",)
    assert [m.type for m in auth.methods(GEMINI)] == ["agent"] * 4


def test_methods_skip_junk() -> None:
    junk: list[Any] = [None, 3, "x", {}, {"id": 5}, {"id": "ok", "vars": "nope", "args": {"a": 1}, "env": [1]}]
    (only,) = auth.methods(junk)
    assert only == auth.Method(id="ok", name="ok")


def test_automatic_needs_every_variable_set() -> None:
    codex = auth.methods(CODEX)
    assert auth.automatic(codex, {}) is None
    assert auth.automatic(codex, {"OPENAI_API_KEY": ""}) is None  # empty is not set
    method = auth.automatic(codex, {"OPENAI_API_KEY": "sk-x"})
    assert method is not None and method.id == "openai-api-key"
    assert auth.automatic(auth.methods(GEMINI), {"GEMINI_API_KEY": "x"}) is None  # agent-handled: nothing to call


def test_problem_for_codex_names_the_variables_and_the_login() -> None:
    message, data = auth.problem("codex", "Codex", "Authentication required", auth.methods(CODEX), ["npx", "-y", "@zed-industries/codex-acp@0.16.0"], auth_hint(PRESETS["codex"].spec))
    assert message.startswith("Codex needs you to sign in (Authentication required): ")
    assert "set CODEX_API_KEY or OPENAI_API_KEY" in message and "`npx -y @openai/codex login`" in message
    assert message.endswith("Then send your message again.")
    assert data == {
        "reason": "auth_required", "agentId": "codex", "agentName": "Codex",
        "login": {"command": "npx", "args": ["-y", "@openai/codex", "login"], "env": {}},
        "logins": [{"id": "login", "name": "Sign in", "description": "", "command": "npx", "args": ["-y", "@openai/codex", "login"], "env": {}}],
        "env": ["CODEX_API_KEY", "OPENAI_API_KEY"],
        "methods": [{"id": m["id"], "name": m["name"], "description": m["description"]} for m in CODEX],
    }  # fmt: skip


def test_problem_for_claude_runs_its_own_command_in_a_terminal() -> None:
    command = ["npx", "-y", "@zed-industries/claude-agent-acp@0.23.1"]
    message, data = auth.problem("claude", "Claude Code", "Authentication required", auth.methods(CLAUDE), command, auth_hint(PRESETS["claude"].spec))
    assert data["login"] == {"command": "npx", "args": ["-y", "@zed-industries/claude-agent-acp@0.23.1", "--cli"], "env": {}}
    assert "ANTHROPIC_API_KEY" in message and "`npx -y @zed-industries/claude-agent-acp@0.23.1 --cli`" in message


def test_problem_with_nothing_known_lists_the_agents_own_ways() -> None:
    message, data = auth.problem("x", "X", "", auth.methods(GEMINI), ["x-agent"])
    assert "X needs you to sign in (authentication required): one of: Log in with Google (Log in with your Google account); Gemini API key" in message
    assert data["login"] is None and data["env"] == []


JSON = st.recursive(st.none() | st.text() | st.integers(), lambda c: st.lists(c) | st.dictionaries(st.text(), c))
METHOD_KEYS = st.sampled_from(["id", "name", "type", "vars", "args", "env", "description"])


@given(st.lists(st.dictionaries(METHOD_KEYS, JSON)), st.text())
def test_problem_never_raises_and_never_leaks_values(raw: list[Any], reason: str) -> None:
    offered = auth.methods(raw)
    message, data = auth.problem("a", "A", reason, offered, ["cmd"])
    assert message.startswith("A needs you to sign in") and data["reason"] == "auth_required"
    assert auth.automatic(offered, {"SECRET": "sk-123"}) is None or "sk-123" not in message


# ---------------------------------------------------------------- presets (agents.py)


def test_a_preset_by_id_alone() -> None:
    spec = resolve(AgentEntry(id="gemini"))
    assert spec == PRESETS["gemini"].spec and spec.command == "npx" and "@google/gemini-cli@0.61.0" in spec.args


def test_fields_given_win_over_the_preset() -> None:
    spec = resolve(AgentEntry.model_validate({"id": "claude", "name": "Mine", "env": {"ANTHROPIC_API_KEY": "k"}}))
    assert (spec.name, spec.env, spec.command) == ("Mine", {"ANTHROPIC_API_KEY": "k"}, "npx")
    own = resolve(AgentEntry.model_validate({"id": "codex", "command": "/opt/codex-acp"}))
    assert own.command == "/opt/codex-acp" and own.args == PRESETS["codex"].spec.args
    assert auth_hint(own) is None  # started another way: the preset's hint may not hold


def test_an_unknown_id_without_a_command_is_a_problem_not_a_crash() -> None:
    problems: list[str] = []
    agents = merge([AgentSpec(id="mine", command="my-agent")], [AgentEntry(id="nope"), AgentEntry(id="fast-agent")], problems=problems)
    assert list(agents) == ["mine", "fast-agent"]
    assert problems == ["agent 'nope' has no command and is no preset (presets: claude, codex, gemini, fast-agent)"]
    with pytest.raises(ValueError):
        merge([AgentEntry(id="nope")])


def test_serve_agent_option_takes_a_preset_id() -> None:
    assert parse_agent_option("codex") == PRESETS["codex"].spec
    assert parse_agent_option("codex=my-codex --x").args == ["--x"]
    with pytest.raises(ValueError, match="ID=COMMAND or a preset's ID"):
        parse_agent_option("nope")


# ---------------------------------------------------------------- through the daemon

pytestmark = pytest.mark.anyio
TIMEOUT = 120  # seconds per chat or test body: ~1.5 s idle (a daemon and an agent start); docs/reliability.md


async def test_presets_and_agent_problems_on_the_wire(daemon: Any) -> None:
    async with daemon(initialize=False) as client:
        result = await client.request("initialize", {"protocolVersion": 1, "agents": [{"id": "claude"}, {"id": "nope"}]})
        assert result["agentProblems"] == ["agent 'nope' has no command and is no preset (presets: claude, codex, gemini, fast-agent)"]
        presets = (await client.request("agents/presets"))["presets"]
        assert [p["id"] for p in presets] == ["claude", "codex", "gemini", "fast-agent"]
        assert presets[0] == {"id": "claude", "name": "Claude Code", "description": PRESETS["claude"].description,
                              "requires": "Node.js 22+ (npx)", "command": "npx", "args": ["-y", "@agentclientprotocol/claude-agent-acp@0.101.0"],
                              "package": "@agentclientprotocol/claude-agent-acp", "registryId": "claude-acp"}  # fmt: skip
        models = (await client.request("lm/provideLanguageModelChatInformation", {}))["models"]
        assert [(m["id"], m["name"]) for m in models] == [("claude", "Claude Code")]


def env_var_method(name: str) -> dict[str, Any]:
    return {"type": "env_var", "id": "key", "name": f"Use {name}", "vars": [{"name": name}]}


async def test_a_key_in_the_environment_is_used_without_the_user(scripted: Any, daemon: Any) -> None:
    agent = scripted({"initialize": {"authMethods": [{"id": "browser", "name": "Browser login"}, env_var_method("SCRIPTED_KEY")]},
                      "auth_required": {"message": "Authentication required"}, "turns": [[{"text": "Signed in."}]]})  # fmt: skip
    spec = {**agent.spec, "env": {"SCRIPTED_KEY": "k-1"}}
    async with daemon(agents=[spec]) as client:
        call = await client.chat(agent.id, [user("hi")], timeout=TIMEOUT)
    assert call.error is None and text_of(call) == "Signed in."
    assert [e["methodId"] for e in agent.events("authenticate")] == ["key"]
    assert len(agent.events("auth_refused")) == 1  # the first session/new, then none


async def test_an_api_key_method_is_used_when_its_key_is_set(scripted: Any, daemon: Any) -> None:
    """codex-acp 2.6: ``api-key`` names no variable; with OPENAI_API_KEY set, session/new says
    "Authentication required" until ``authenticate {"methodId": "api-key"}``."""
    agent = scripted({"initialize": {"authMethods": CODEX_26}, "auth_required": {"message": "Authentication required"},
                      "turns": [[{"text": "Signed in."}]]})  # fmt: skip
    spec = {**agent.spec, "env": {"OPENAI_API_KEY": "sk-test"}}
    async with daemon(agents=[spec]) as client:
        call = await client.chat(agent.id, [user("hi")], timeout=TIMEOUT)
    assert call.error is None and text_of(call) == "Signed in."
    assert [e["methodId"] for e in agent.events("authenticate")] == ["api-key"]


async def test_a_login_needed_is_one_actionable_error_then_the_next_message_works(scripted: Any, daemon: Any, tmp_path: Path) -> None:
    login_file = tmp_path / "logged-in"
    agent = scripted({
        "initialize": {"authMethods": [{"id": "browser", "name": "Browser login"}, env_var_method("SCRIPTED_KEY"),
                                       {"id": "term", "name": "Terminal login", "type": "terminal", "args": ["--login"]}]},
        "auth_required": {"message": "Not signed in.", "login_file": str(login_file)},
        "turns_per_session": True, "turns": [[{"text": "Hello, signed-in user."}]],
    })  # fmt: skip
    async with daemon(agents=[agent], env={"SCRIPTED_KEY": ""}) as client:
        with anyio.fail_after(TIMEOUT):
            first = await client.chat(agent.id, [user("hi")], timeout=TIMEOUT)
        assert first.error is not None and first.parts == []
        command = [agent.spec["command"], *agent.spec["args"]]
        assert first.error.message == (
            f"{agent.id} needs you to sign in (Not signed in): set SCRIPTED_KEY in its \"env\" in the lmbridge.agents setting, "
            f"or sign in by running `{' '.join([*command, '--login'])}` in a terminal. Then send your message again."
        )
        assert first.error.data["reason"] == "auth_required" and first.error.data["agentId"] == agent.id
        assert first.error.data["login"] == {"command": command[0], "args": [*command[1:], "--login"], "env": {}}
        assert first.error.data["env"] == ["SCRIPTED_KEY"]
        assert agent.events("authenticate") == []  # nothing it could do by itself
        login_file.write_text("token")  # the user signs in, in a terminal
        with anyio.fail_after(TIMEOUT):
            second = await client.chat(agent.id, [user("hi")], timeout=TIMEOUT)
        assert second.error is None and text_of(second) == "Hello, signed-in user."
    assert len(agent.pids()) == 2  # the process that said "not signed in" was replaced; the daemon stayed


async def test_a_login_needed_at_the_prompt_is_the_same_error(scripted: Any, daemon: Any) -> None:
    agent = scripted({"initialize": {"authMethods": [{"id": "term", "name": "Log in", "type": "terminal", "args": ["--cli"]}]},
                      "auth_required": {"message": "Authentication required", "at": "prompt"}})  # fmt: skip
    async with daemon(agents=[agent]) as client:
        call = await client.chat(agent.id, [user("hi")], timeout=TIMEOUT)
    assert call.error is not None and call.error.data["reason"] == "auth_required"
    assert call.error.message.startswith(f"{agent.id} needs you to sign in (Authentication required): ") and "--cli`" in call.error.message


async def test_image_input_follows_the_agents_prompt_capabilities(scripted: Any, daemon: Any) -> None:
    seeing = scripted({"initialize": {"agentCapabilities": {"promptCapabilities": {"image": True}}}})
    blind = scripted({})
    async with daemon(agents=[seeing, blind]) as client:
        before = {m["id"]: m["capabilities"]["imageInput"] for m in (await client.request("lm/provideLanguageModelChatInformation", {}))["models"]}
        assert before == {seeing.id: False, blind.id: False}  # not known before the agent ran
        for agent in (seeing, blind):
            assert (await client.chat(agent.id, [user("hi")], timeout=TIMEOUT)).error is None
        after = {m["id"]: m["capabilities"]["imageInput"] for m in (await client.request("lm/provideLanguageModelChatInformation", {}))["models"]}
        assert after == {seeing.id: True, blind.id: False}
        assert any(n["method"] == "lm/modelsChanged" for n in client.notifications)


# (authMethods, the agent's environment, the method authenticated with at once or None)
AUTOMATIC = [
    (CODEX_26, {"OPENAI_API_KEY": "sk-x"}, "api-key"),
    (CODEX_26, {"CODEX_API_KEY": "sk-x"}, "api-key"),
    (CODEX_26, {"OPENAI_API_KEY": "  "}, None),  # codex-acp trims: blank is not a key
    (CODEX_26, {"OPENAI_API_KEY": ""}, None),
    (CODEX_26, {"ANTHROPIC_API_KEY": "x"}, None),
    (CODEX_26, {}, None),
    # Another provider's API key method: no variable is known to be its key.
    ([{"id": "api-key", "name": "K", "_meta": {"api-key": {"provider": "acme"}}}], {"OPENAI_API_KEY": "sk-x"}, None),
    ([{"id": "api-key", "name": "K", "_meta": {"api-key": {"provider": "google"}}}], {"GEMINI_API_KEY": "x"}, None),
    # Named api-key, but without the marker: the agent handles it (a form, a browser).
    ([{"id": "api-key", "name": "K"}], {"OPENAI_API_KEY": "sk-x"}, None),
    ([{"id": "api-key", "name": "K", "_meta": {"api-key": "openai"}}], {"OPENAI_API_KEY": "sk-x"}, None),
    # A terminal method is never passed to authenticate, whatever it says.
    ([{"id": "t", "name": "T", "type": "terminal", "_meta": {"api-key": {"provider": "openai"}}}], {"OPENAI_API_KEY": "sk-x"}, None),
    # env_var: every variable, set and not blank.
    ([{"id": "e", "name": "E", "type": "env_var", "vars": [{"name": "A"}, {"name": "B"}]}], {"A": "1"}, None),
    ([{"id": "e", "name": "E", "type": "env_var", "vars": [{"name": "A"}, {"name": "B"}]}], {"A": "1", "B": " "}, None),
    ([{"id": "e", "name": "E", "type": "env_var", "vars": [{"name": "A"}, {"name": "B"}]}], {"A": "1", "B": "2"}, "e"),
    (CLAUDE_101, {"ANTHROPIC_API_KEY": "x"}, None),
    (CODEX + CODEX_26, {"OPENAI_API_KEY": "sk-x"}, "openai-api-key"),  # the first that fits
]


@pytest.mark.parametrize(("offered", "env", "expected"), AUTOMATIC)
def test_which_method_needs_nobody(offered: list[Any], env: dict[str, str], expected: str | None) -> None:
    method = auth.automatic(auth.methods(offered), env)
    assert (method.id if method else None) == expected


def test_codex_26_without_a_key_names_its_variables() -> None:
    message, data = auth.problem("codex", "Codex", "Authentication required", auth.methods(CODEX_26), ["codex-acp"])
    assert "set CODEX_API_KEY or OPENAI_API_KEY in its" in message and "one of" not in message, message
    assert data["env"] == ["CODEX_API_KEY", "OPENAI_API_KEY"] and data["login"] is None and data["logins"] == []
    assert [m["id"] for m in data["methods"]] == ["api-key", "chat-gpt"]


def test_every_login_an_agent_lists_is_offered() -> None:
    command = ["npx", "-y", "@agentclientprotocol/claude-agent-acp@0.101.0"]
    message, data = auth.problem("claude", "Claude Code", "Please run /login", auth.methods(CLAUDE_101), command)
    assert data["logins"] == [
        {"id": "claude-ai-login", "name": "Claude Subscription", "description": "Use Claude subscription ",
         "command": "npx", "args": ["-y", "@agentclientprotocol/claude-agent-acp@0.101.0", "--cli", "auth", "login", "--claudeai"], "env": {}},
        {"id": "console-login", "name": "Anthropic Console", "description": "Use Anthropic Console (API usage billing)",
         "command": "npx", "args": ["-y", "@agentclientprotocol/claude-agent-acp@0.101.0", "--cli", "auth", "login", "--console"], "env": {}},
    ]  # fmt: skip
    assert data["login"] == {k: data["logins"][0][k] for k in ("command", "args", "env")}
    assert ("sign in by running `npx -y @agentclientprotocol/claude-agent-acp@0.101.0 --cli auth login --claudeai` (Claude Subscription)"
            " or `npx -y @agentclientprotocol/claude-agent-acp@0.101.0 --cli auth login --console` (Anthropic Console) in a terminal") in message


# (an _auth/status_update's params, the status read, signed out)
STATUS = [
    ({"authStatus": {"kind": "none", "label": "Not logged in"}}, auth.Status("none", "Not logged in"), True),
    ({"authStatus": {"kind": "api_key", "label": "Anthropic API key"}}, auth.Status("api_key", "Anthropic API key"), False),
    ({"authStatus": {"kind": "gateway"}}, auth.Status("gateway", ""), False),
    ({"authStatus": {"kind": "x" * 300, "label": 5}}, auth.Status("x" * 200, ""), False),
    ({"authStatus": {"label": "no kind"}}, None, None),
    ({"authStatus": "none"}, None, None),
    ({}, None, None),
    ([], None, None),
]


@pytest.mark.parametrize(("params", "expected", "signed_out"), STATUS)
def test_what_an_auth_status_update_says(params: Any, expected: auth.Status | None, signed_out: bool | None) -> None:
    got = auth.status(params)
    assert got == expected
    assert (got.signed_out if got else None) == signed_out
