"""The ACP registry feed read for one platform (lmbridge.core.registry; docs/protocol.md, ``agents/registry``).

Table tests on feeds shaped like the registry's (its FORMAT and agent schema: docs/vscode-shim.md,
"Agents from the ACP registry"), the rules of what a feed may not do row by row
(tests/fixtures/registry_rules.json, the table the shim's tests read too), and hypothesis:
whatever the feed holds, the daemon answers with agents it can vouch for, or a ValueError,
never another exception.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmbridge.core.registry import (
    PLATFORMS,
    REFUSED_ENV,
    REFUSED_ENV_NAMES,
    REFUSED_ENV_PREFIXES,
    command_allowed,
    env_refused,
    package_allowed,
    plain_text,
    registry_agents,
    relative_inside,
    url_allowed,
)

SHA = "ab" * 32


def agent(id: str = "a", **distribution: Any) -> dict[str, Any]:
    return {"id": id, "name": id.upper(), "version": "1.0.0", "description": f"agent {id}", "distribution": distribution}


def feed(*agents: dict[str, Any]) -> dict[str, Any]:
    return {"version": "1.0.0", "agents": list(agents)}


BINARY = {
    "linux-x86_64": {"archive": "https://example.com/a-1.0.0-linux.tar.gz", "sha256": SHA.upper(), "cmd": "./bin/a", "args": ["acp"], "env": {"A": "1"}},
    "darwin-aarch64": {"archive": "https://example.com/a-1.0.0-mac.zip", "cmd": "a"},
}

ROWS: list[tuple[str, dict[str, Any], str | None, list[dict[str, Any]], list[str]]] = [
    (
        "npx: npx -y <package> [args]",
        agent(npx={"package": "@s/a@1.0.0", "args": ["--acp"], "env": {"K": "v"}}),
        "linux-x86_64",
        [{"distribution": "npx", "command": "npx", "args": ["-y", "@s/a@1.0.0", "--acp"], "env": {"K": "v"}}],
        [],
    ),
    (
        "npx with cmd: npx -y --package <package> <cmd> [args]",
        agent(npx={"package": "@s/tools@1.0.0", "cmd": "a-acp"}),
        None,
        [{"distribution": "npx", "command": "npx", "args": ["-y", "--package", "@s/tools@1.0.0", "a-acp"], "env": {}}],
        [],
    ),
    (
        "uvx: uvx <package> [args]",
        agent(uvx={"package": "a==1.0.0", "args": ["acp"]}),
        "linux-x86_64",
        [{"distribution": "uvx", "command": "uvx", "args": ["a==1.0.0", "acp"], "env": {}}],
        [],
    ),
    (
        "uvx with cmd: uvx --from <package> <cmd> [args]",
        agent(uvx={"package": "a-tools==1.0.0", "cmd": "a-acp"}),
        "linux-x86_64",
        [{"distribution": "uvx", "command": "uvx", "args": ["--from", "a-tools==1.0.0", "a-acp"], "env": {}}],
        [],
    ),
    (
        "npx before uvx before binary",
        agent(binary=BINARY, uvx={"package": "a"}, npx={"package": "a"}),
        "linux-x86_64",
        [{"distribution": "npx", "command": "npx", "args": ["-y", "a"], "env": {}}],
        [],
    ),
    (
        "binary for the platform: archive, sha256 (lower case), cmd, args, env",
        agent(binary=BINARY),
        "linux-x86_64",
        [{"distribution": "binary", "archive": BINARY["linux-x86_64"]["archive"], "sha256": SHA, "cmd": "./bin/a", "args": ["acp"], "env": {"A": "1"}}],
        [],
    ),
    (
        "binary with no sha256",
        agent(binary=BINARY),
        "darwin-aarch64",
        [{"distribution": "binary", "archive": BINARY["darwin-aarch64"]["archive"], "cmd": "a", "args": [], "env": {}}],
        [],
    ),
    ("binary, none for this platform", agent(binary=BINARY), "windows-x86_64", [], ["agents[0] (a) left out: no distribution for windows-x86_64"]),
    ("binary, no platform given", agent(binary=BINARY), None, [], ["agents[0] (a) left out: no distribution for this platform"]),
    (
        "binary served on 127.0.0.1 over plain http (a test feed)",
        agent(binary={"linux-x86_64": {"archive": "http://127.0.0.1:8000/a.tar.gz", "cmd": "a"}}),
        "linux-x86_64",
        [{"distribution": "binary", "archive": "http://127.0.0.1:8000/a.tar.gz", "cmd": "a", "args": [], "env": {}}],
        [],
    ),
    (
        "binary over plain http elsewhere: left out",
        agent(binary={"linux-x86_64": {"archive": "http://example.com/a.tar.gz", "cmd": "a"}}),
        "linux-x86_64",
        [],
        ["agents[0] (a) left out: its archive for linux-x86_64 is not an https URL lmbridge accepts: 'http://example.com/a.tar.gz'"],
    ),
    (
        "binary whose cmd leaves the archive: left out",
        agent(binary={"linux-x86_64": {"archive": "https://e.com/a.tar.gz", "cmd": "../../usr/bin/sh"}}),
        "linux-x86_64",
        [],
        ["agents[0] (a) left out: its cmd '../../usr/bin/sh' is not a relative path inside the archive"],
    ),
    (
        "a bad sha256: left out",
        agent(binary={"linux-x86_64": {"archive": "https://e.com/a.tar.gz", "cmd": "a", "sha256": "xyz"}}),
        "linux-x86_64",
        [],
        ["agents[0] (a) left out: distribution.binary.linux-x86_64.sha256: String should match pattern '^[A-Fa-f0-9]{64}$'"],
    ),
    ("an id that is no registry id: left out", agent("../A", npx={"package": "a"}), None, [], ["agents[0] (../A) left out: id: String should match pattern '^[a-z][a-z0-9-]*$'"]),
    ("no distribution at all", agent(), None, [], ["agents[0] (a) left out: no distribution for this platform"]),
    # What a feed may not do: the whole entry is left out (not its next distribution).
    (
        "an npx package that is an npx option running a command",
        agent(npx={"package": "--call=touch /tmp/pwned"}, uvx={"package": "a"}),
        None,
        [],
        ["agents[0] (a) left out: its npx package '--call=touch /tmp/pwned' is not a plain npm package spec"],
    ),
    ("a uvx package that is a uvx option", agent(uvx={"package": "--with=evil"}), None, [], ["agents[0] (a) left out: its uvx package '--with=evil' is not a plain PyPI package spec"]),
    ("an npx package from GitHub", agent(npx={"package": "user/repo"}), None, [], ["agents[0] (a) left out: its npx package 'user/repo' is not a plain npm package spec"]),
    ("an npx cmd the shell reads", agent(npx={"package": "a@1.0.0", "cmd": "a;id"}), None, [], ["agents[0] (a) left out: its npx cmd 'a;id' is not a plain command name"]),
    ("a uvx cmd that is an option", agent(uvx={"package": "a", "cmd": "--python=/tmp/x"}), None, [], ["agents[0] (a) left out: its uvx cmd '--python=/tmp/x' is not a plain command name"]),
    (
        "an env npm reads: another registry",
        agent(npx={"package": "a", "env": {"API_KEY": "k", "npm_config_registry": "http://evil.example/"}}),
        None,
        [],
        ["agents[0] (a) left out: its env sets 'npm_config_registry', which a registry entry may not set (a package manager, loader or interpreter reads it)"],
    ),
    (
        "an env node reads: a module loaded first",
        agent(binary={"linux-x86_64": {"archive": "https://e.com/a.tar.gz", "cmd": "a", "env": {"NODE_OPTIONS": "--require /tmp/x.js"}}}),
        "linux-x86_64",
        [],
        ["agents[0] (a) left out: its env sets 'NODE_OPTIONS', which a registry entry may not set (a package manager, loader or interpreter reads it)"],
    ),
    (
        "an env the loader reads",
        agent(uvx={"package": "a", "env": {"LD_PRELOAD": "/tmp/x.so"}}),
        None,
        [],
        ["agents[0] (a) left out: its env sets 'LD_PRELOAD', which a registry entry may not set (a package manager, loader or interpreter reads it)"],
    ),
    (
        "an env value with a control character",
        agent(npx={"package": "a", "env": {"MODE": "acp\x1b[2J"}}),
        None,
        [],
        ["agents[0] (a) left out: its env value of MODE holds a control or format character"],
    ),
    (
        "an argument with a carriage return",
        agent(npx={"package": "a", "args": ["--acp\r--yolo"]}),
        None,
        [],
        ["agents[0] (a) left out: its argument '--acp\\r--yolo' holds a control or format character"],
    ),
    (
        "a name that spans lines",
        {**agent(npx={"package": "a"}), "name": "A\n\nThe agent runs as: npx -y safe"},
        None,
        [],
        ["agents[0] (a) left out: its name 'A\\n\\nThe agent runs as: npx -y safe' holds a control or format character"],
    ),
    (
        "an archive URL that reads as 127.0.0.1 to urllib and as evil to a browser",
        agent(binary={"linux-x86_64": {"archive": "http://evil\\@127.0.0.1/a.tar.gz", "cmd": "a"}}),
        "linux-x86_64",
        [],
        ["agents[0] (a) left out: its archive for linux-x86_64 is not an https URL lmbridge accepts: 'http://evil\\\\@127.0.0.1/a.tar.gz'"],
    ),
    (
        "an archive URL with a user name",
        agent(binary={"linux-x86_64": {"archive": "http://evil@127.0.0.1/a.tar.gz", "cmd": "a"}}),
        "linux-x86_64",
        [],
        ["agents[0] (a) left out: its archive for linux-x86_64 is not an https URL lmbridge accepts: 'http://evil@127.0.0.1/a.tar.gz'"],
    ),
    (
        "a binary cmd holding an argument",
        agent(binary={"linux-x86_64": {"archive": "https://e.com/a.tar.gz", "cmd": "./kiro-cli acp"}}),
        "linux-x86_64",
        [],
        ["agents[0] (a) left out: its cmd './kiro-cli acp' is not a relative path inside the archive"],
    ),
]


@pytest.mark.parametrize(("name", "entry", "platform", "expected", "problems"), ROWS, ids=[r[0] for r in ROWS])
def test_one_agent(name: str, entry: dict[str, Any], platform: str | None, expected: list[dict[str, Any]], problems: list[str]) -> None:
    agents, found = registry_agents(feed(entry), platform)
    common = {"id": entry["id"], "name": entry["id"].upper(), "version": "1.0.0", "description": f"agent {entry['id']}"}
    assert agents == [{**common, **e} for e in expected]
    assert found == problems


def test_the_rest_of_the_feed_is_offered_and_extra_fields_ignored() -> None:
    good = {**agent("b", npx={"package": "b"}), "icon": "https://e.com/b.svg", "authors": ["x"], "website": "https://b.dev", "license": "MIT"}
    agents, problems = registry_agents(feed("junk", agent("a", pip={"package": "a"}), good, agent("b", uvx={"package": "b"}), {"id": 3}), "linux-x86_64")
    assert [a["id"] for a in agents] == ["b"]
    assert agents[0]["website"] == "https://b.dev" and agents[0]["license"] == "MIT"
    assert problems == [
        "agents[0] left out: Input should be a valid dictionary or instance of FeedAgent",
        "agents[1] (a) left out: no distribution for linux-x86_64",
        "agents[3] (b) left out: the id 'b' is listed twice",
        "agents[4] left out: id: Input should be a valid string",
    ]


@pytest.mark.parametrize("bad", [None, [], {"agents": {}}, {"version": "1"}, "registry"])
def test_not_a_feed(bad: Any) -> None:
    with pytest.raises(ValueError, match='no "agents" list'):
        registry_agents(bad, None)


def test_unknown_platform() -> None:
    with pytest.raises(ValueError, match="unknown platform 'linux-riscv'"):
        registry_agents(feed(), "linux-riscv")


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://github.com/o/r/releases/download/v1/a.tar.gz", True),
        ("http://127.0.0.1:9/a.tar.gz", True),
        ("http://localhost/a.tar.gz", False),
        ("http://127.0.0.1.evil.com/a", False),
        ("ftp://127.0.0.1/a", False),
        ("file:///a", False),
        ("https:///a", False),
        ("a.tar.gz", False),
    ],
)
def test_url_allowed(url: str, ok: bool) -> None:
    assert url_allowed(url) is ok


@pytest.mark.parametrize(
    ("cmd", "ok"),
    [("./a", True), ("bin/a", True), ("a.exe", True), ("../a", False), ("a/../../b", False), ("/bin/sh", False), ("C:\\a.exe", False), ("\\\\h\\a", False), (".", False), ("", False)],
)
def test_relative_inside(cmd: str, ok: bool) -> None:
    assert relative_inside(cmd) is ok


# ---------------------------------------------------------------- the rules, row by row (shared with the shim)

RULES: dict[str, Any] = json.loads((Path(__file__).parent / "fixtures" / "registry_rules.json").read_text(encoding="utf-8"))
CHECKS = {
    "npmPackage": lambda v: package_allowed("npx", v),
    "pypiPackage": lambda v: package_allowed("uvx", v),
    "command": command_allowed,
    "binaryCmd": relative_inside,
    "url": url_allowed,
    "envName": lambda v: not env_refused(v),
    "text": plain_text,
}
RULE_ROWS = [(table, value, ok, why) for table in CHECKS for value, ok, why in RULES[table]]


@pytest.mark.parametrize(("table", "value", "ok", "why"), RULE_ROWS, ids=[f"{r[0]}:{r[1]!r}" for r in RULE_ROWS])
def test_rule(table: str, value: str, ok: bool, why: str) -> None:
    assert CHECKS[table](value) is ok, why


def test_the_refused_variables_are_the_tables() -> None:
    # The shim's list (vscode-shim/src/product/registry.ts) is checked against the same table.
    assert sorted(REFUSED_ENV_NAMES) == RULES["refusedEnv"]["names"]
    assert sorted(REFUSED_ENV_PREFIXES) == RULES["refusedEnv"]["prefixes"]


@given(st.text(max_size=30))
def test_an_accepted_package_is_never_an_option_a_path_or_a_url(text: str) -> None:
    for kind in ("npx", "uvx"):
        if package_allowed(kind, text):  # type: ignore[arg-type]
            assert text.isascii() and not text.startswith(("-", ".", "/", "~"))
            assert not any(c.isspace() or c in ":#\\" for c in text)
            assert "/" not in text or (kind == "npx" and text.startswith("@") and text.count("/") == 1)


@given(st.text(max_size=40), st.sampled_from(["http://", "https://", "http://127.0.0.1", "https://a.b/"]))
def test_an_accepted_url_has_no_user_name_backslash_or_space(text: str, prefix: str) -> None:
    url = prefix + text
    if url_allowed(url):
        authority = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
        assert "@" not in authority and "\\" not in url and url.isascii() and not any(c.isspace() for c in url) and "#" not in url
        assert url.startswith("https://") or authority.split(":")[0] == "127.0.0.1"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
entries = st.fixed_dictionaries(
    {"id": st.sampled_from(["a", "b", "A", "../x"]) | st.text(max_size=5), "name": st.text(max_size=5), "version": st.sampled_from(["1.0.0", "2.1.3-rc1", "x"])},
    optional={
        "description": st.text(max_size=5),
        "distribution": st.fixed_dictionaries(
            {},
            optional={
                "npx": st.fixed_dictionaries({"package": st.text(max_size=5)}, optional={"cmd": st.text(max_size=5), "args": st.lists(st.text(max_size=3))}) | json_values,
                "uvx": st.fixed_dictionaries({"package": st.text(max_size=5)}) | json_values,
                "binary": st.dictionaries(
                    st.sampled_from(sorted(PLATFORMS)),
                    st.fixed_dictionaries(
                        {
                            "archive": st.sampled_from(["https://e.com/a.tgz", "http://e.com/a.tgz", "http://127.0.0.1/a", "file:///a"]),
                            "cmd": st.sampled_from(["./a", "../a", "/a", "a/b"]) | st.text(max_size=4),
                        },
                        optional={"sha256": st.sampled_from([SHA, "nope"])},
                    )
                    | json_values,
                )
                | json_values,
            },
        ),
    },
)


@settings(max_examples=150, deadline=None)
@given(st.lists(entries | json_values, max_size=6), st.sampled_from([None, *sorted(PLATFORMS)]))
def test_any_feed_gives_agents_it_can_vouch_for(raw: list[Any], platform: str | None) -> None:
    agents, problems = registry_agents({"agents": raw}, platform)
    assert len(agents) + len(problems) == len(raw)
    assert len({a["id"] for a in agents}) == len(agents)
    for a in agents:
        assert a["distribution"] in ("npx", "uvx", "binary")
        assert plain_text(a["name"]) and all(plain_text(x) for x in a["args"])
        assert not any(env_refused(k) or not plain_text(v) for k, v in a["env"].items())
        if a["distribution"] == "binary":
            assert platform is not None and url_allowed(a["archive"]) and relative_inside(a["cmd"])
        else:
            assert a["command"] == a["distribution"] and all(isinstance(x, str) for x in a["args"])
            # The package (and a cmd) is never an option of npx or uvx.
            rest = a["args"][2:] if a["args"][:2] == ["-y", "--package"] else a["args"][1:] if a["args"][:1] in (["-y"], ["--from"]) else a["args"]
            assert package_allowed(a["distribution"], rest[0])


# ---------------------------------------------------------------- through the daemon


@pytest.mark.anyio
async def test_agents_registry_on_the_wire(daemon: Any) -> None:
    from lmbridge.devtools.client import RPCError

    async with daemon() as client:
        result = await client.request("agents/registry", {"feed": feed(agent("a", npx={"package": "a@1.0.0"}), agent("b", binary=BINARY)), "platform": "linux-x86_64"})
        assert [(a["id"], a["distribution"]) for a in result["agents"]] == [("a", "npx"), ("b", "binary")]
        assert result["problems"] == []
        for params, message in [
            ({}, "invalid params: feed: Field required"),
            ({"feed": {"agents": 3}}, 'invalid params: the feed has no "agents" list'),
            ({"feed": feed(), "platform": ["linux-x86_64"]}, "invalid params: platform: Input should be a valid string"),
            ({"feed": feed(), "platform": "plan9"}, "invalid params: unknown platform 'plan9'"),
        ]:
            with pytest.raises(RPCError) as err:
                await client.request("agents/registry", params)
            assert (err.value.code, str(err.value.message).split(" (one of")[0]) == (-32602, message)
        # The daemon goes on.
        assert (await client.request("agents/registry", {"feed": feed()}))["agents"] == []


def test_the_docs_table_of_refused_variables_is_the_code() -> None:
    text = (Path(__file__).parents[1] / "docs" / "vscode-shim.md").read_text(encoding="utf-8")
    section = text.split("#### What the registry may not do", 1)[1].split("\n#", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines() if line.strip().startswith("| ") and not line.strip().startswith("| Why")]
    names = {n for row in rows for n in re.findall(r"`([^`]+)`", row[1])}
    prefixes = {p for row in rows for p in re.findall(r"`([^`]+)`", row[2])}
    assert len(rows) == len(REFUSED_ENV)
    assert (names, prefixes) == (set(REFUSED_ENV_NAMES), set(REFUSED_ENV_PREFIXES))
