"""Agent configuration: which ACP agents the daemon offers as models.

Agents come from, in increasing precedence (a later spec with the same id
replaces an earlier one): the built-in ``demo`` agent (only when nothing else
is configured), a config file, ``lmbridge serve --agent ID=COMMAND``, and
``initialize.agents``.

Config file (JSON)::

    {"agents": [{"id": "claude"},
                {"id": "mine", "name": "My agent", "command": "my-agent", "args": ["--acp"], "env": {}}],
     "idleTimeout": 1800}

An entry with no ``command`` names a **preset** (``PRESETS``: claude, codex, gemini,
fast-agent, docs/agents.md "Presets"): a known command with pinned package versions, a display name
and the sign-in hint; any field the entry gives wins over the preset's. An entry with a command
that is a preset's agent all the same (an ACP registry entry: ``preset_for``) gets its hint too.

``initialize`` needs this module; the rules only the model list and agents' starts need
(``core.session_state``, ``core.modes``, ``core.permissions``, ``core.registry``,
``core.agent_models``, ``core.profiles``, ``core.auth``) are imported where they are used,
after it is answered (docs/performance.md, "Start-up and idle").
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from pydantic import ValidationError

from lmbridge import __version__, self_command
from lmbridge.core.link import AgentEntry, AgentSpec, ModelCapabilities, ModelInfo
from lmbridge.log import get_logger

if TYPE_CHECKING:
    from lmbridge.core.agent_models import Choice
    from lmbridge.core.auth import Hint
    from lmbridge.core.profiles import AgentProfile

log = get_logger("catalog")

MAX_INPUT_TOKENS = 200_000
MAX_OUTPUT_TOKENS = 64_000


class Preset:
    """A known agent: ``spec`` (its command, pinned), what it needs installed, how it signs in.

    ``package``: the npm (or PyPI) package whose release ``spec`` pins; ``registry_id``: the id
    of the same agent in the ACP registry (``core.registry``). An entry that runs ``package``
    (``core.registry.package_of``) or has ``registry_id`` is this agent whichever way it was
    added (``preset_for``): it gets the preset's sign-in hint and the fields it leaves out.
    ``node``: the oldest Node.js major the pinned release runs on (its ``engines.node``),
    checked before an ``npx`` start (``node_problem``); None: no check. ``env``, ``login``,
    ``note``: its sign-in hint's (``hint``: made when asked, so ``core.auth`` loads after
    ``initialize`` is answered).
    """

    def __init__(
        self, spec: AgentSpec, description: str, requires: str, package: str, registry_id: str | None = None, node: int | None = None,
        env: tuple[str, ...] = (), login: tuple[str, ...] = (), note: str = "",
    ) -> None:  # fmt: skip
        self.spec, self.description, self.requires = spec, description, requires
        self.package, self.registry_id, self.node = package, registry_id, node
        self.env, self.login, self.note = env, login, note

    @property
    def hint(self) -> Hint:
        """What it knows of the agent's sign-in (``core.auth.Hint``)."""
        from lmbridge.core.auth import Hint

        return Hint(env=self.env, login=self.login, note=self.note)

    def info(self) -> dict[str, object]:
        """The ``agents/presets`` entry (docs/protocol.md)."""
        return {
            "id": self.spec.id, "name": self.spec.name, "description": self.description, "requires": self.requires,
            "command": self.spec.command, "args": list(self.spec.args), "package": self.package,
            **({"registryId": self.registry_id} if self.registry_id else {}),
        }  # fmt: skip


#: The agents users have, by id (docs/agents.md has what each does on the wire). Versions
#: are the ones the real-agent tests run (tests/real_agent/package.json and
#: fast-agent-requirements.txt): a preset starts what was tested. ``make repin-agents``
#: (tools/repin_agents.py) moves them, and the tests' pins, to each agent's newest release.
PRESETS: dict[str, Preset] = {
    p.spec.id: p
    for p in (
        Preset(
            AgentSpec(id="claude", name="Claude Code", command="npx", args=["-y", "@agentclientprotocol/claude-agent-acp@0.101.0"]),
            "Anthropic's Claude Code through claude-agent-acp",
            "Node.js 22+ (npx)",
            package="@agentclientprotocol/claude-agent-acp",
            registry_id="claude-acp",
            node=22,
            env=("ANTHROPIC_API_KEY",),
        ),
        Preset(
            AgentSpec(id="codex", name="Codex", command="npx", args=["-y", "@agentclientprotocol/codex-acp@2.6.0"]),
            "OpenAI's Codex through codex-acp",
            "Node.js 20+ (npx)",
            package="@agentclientprotocol/codex-acp",
            registry_id="codex-acp",
            node=20,
            login=("npx", "-y", "@openai/codex", "login"),
        ),
        Preset(
            AgentSpec(id="gemini", name="Gemini CLI", command="npx", args=["-y", "@google/gemini-cli@0.61.0", "--acp"]),
            "Google's Gemini CLI in its ACP mode",
            "Node.js 20+ (npx)",
            package="@google/gemini-cli",
            registry_id="gemini",
            node=20,
            env=("GEMINI_API_KEY",),
            login=("npx", "-y", "@google/gemini-cli@0.61.0"),
        ),
        Preset(
            # --no-shell: its own shell runs commands without asking (docs/agents.md); --home
            # (expanded by fast-agent): its state out of the workspace.
            AgentSpec(
                id="fast-agent",
                name="fast-agent",
                command="uvx",
                args=[
                    "--python",
                    "3.13",
                    "--from",
                    "fast-agent-mcp==0.10.48",
                    "fast-agent-acp",
                    "--no-shell",
                    "--home",
                    "~/.fast-agent",
                ],
            ),  # fmt: skip
            "fast-agent (fast-agent-mcp), any model it supports",
            "uv (uvx), which fetches Python 3.13",
            package="fast-agent-mcp",
            registry_id="fast-agent",
            env=("OPENAI_API_KEY", "ANTHROPIC_API_KEY"),
            note="fast-agent also reads keys from fast-agent.secrets.yaml.",
        ),
    )
}


def preset_for(spec: AgentSpec) -> Preset | None:
    """The preset ``spec`` is, whichever way it was added: the preset of its id started the
    preset's way (its command), else the one whose package its ``npx``/``uvx`` command line runs
    (``core.registry.package_of``: a registry entry, a version of the user's own), else the one
    whose ACP registry id it has (``claude-acp``, ``codex-acp``). None for any other agent."""
    preset = PRESETS.get(spec.id)
    if preset is not None and preset.spec.command == spec.command:
        return preset
    from lmbridge.core.registry import package_of

    ran = package_of(spec.command, spec.args)
    # A registry id that is also a preset's id (gemini, fast-agent) names the preset only started its way (above).
    return next((p for p in PRESETS.values() if ran is not None and ran == p.package), None) or next(
        (p for p in PRESETS.values() if p.registry_id == spec.id and spec.id not in PRESETS), None
    )


def resolve(entry: AgentSpec) -> AgentSpec:
    """``entry`` (an ``AgentEntry`` may leave ``command`` out) with what it leaves out taken
    from the preset of its id; an entry with a command and no preset is used as it is.

    Raises ``ValueError`` when it has no ``command`` and names no preset.
    """
    preset = PRESETS.get(entry.id)
    given = {k: v for k, v in entry.model_dump(exclude_unset=True).items() if v is not None}
    if preset is not None:
        return AgentSpec.model_validate({**preset.spec.model_dump(), **given})
    if not entry.command:
        raise ValueError(f"agent {entry.id!r} has no command and is no preset (presets: {', '.join(PRESETS)})")
    spec = entry if type(entry) is AgentSpec else AgentSpec.model_validate(given)
    same = preset_for(spec)
    if same is None:
        return spec
    # The same agent added another way (a registry entry): the preset's defaults for what it leaves out.
    defaults = same.spec.model_dump(exclude={"id", "name", "command", "args"}, exclude_defaults=True)
    return AgentSpec.model_validate({**defaults, **given}) if defaults else spec


def auth_hint(spec: AgentSpec) -> Hint | None:
    """The preset's sign-in hint for an agent that is a preset's (``preset_for``)."""
    preset = preset_for(spec)
    return preset.hint if preset is not None else None


#: ``node --version`` by the node executable's path, once per daemon.
_NODE_VERSIONS: dict[str, str] = {}


async def node_problem(spec: AgentSpec) -> str | None:
    """Why ``spec`` cannot start: an ``npx`` start of a preset's agent (``preset_for``) whose
    release needs a newer Node.js (``Preset.node``) than the ``node`` on the agent's PATH
    (what ``npx`` runs it with). None when it may start: another command, no such preset,
    no ``node`` found or its version unreadable (the start says what is wrong then)."""
    preset = preset_for(spec)
    if preset is None or preset.node is None or Path(spec.command).name not in ("npx", "npx.cmd"):
        return None
    node = shutil.which("node", path={**os.environ, **spec.env}.get("PATH"))
    if node is None:
        return None
    if node not in _NODE_VERSIONS:
        try:
            with anyio.fail_after(10):
                done = await anyio.run_process([node, "--version"], check=False)
            _NODE_VERSIONS[node] = done.stdout.decode("utf-8", "replace").strip()
        except (OSError, TimeoutError):
            _NODE_VERSIONS[node] = ""
    version = _NODE_VERSIONS[node]
    from lmbridge.core.registry import node_major

    major = node_major(version)
    if major is None or major >= preset.node:
        return None
    name = spec.name or preset.spec.name or spec.id
    return (
        f"{name} needs Node.js {preset.node} or newer ({preset.package} declares engines.node >={preset.node}); "
        f"the node npx runs here, {node}, is {version}: install Node.js {preset.node}+ (nodejs.org, or your version manager) and restart VS Code"
    )


def demo_agent() -> AgentSpec:
    """The built-in demo agent: this Python running ``lmbridge demo-agent`` (``self_command``:
    the workspace it runs in is not on its ``sys.path``)."""
    command, *args = self_command("demo-agent")
    return AgentSpec(id="demo", name="lmbridge demo agent", command=command, args=args)


def parse_agent_option(value: str) -> AgentSpec:
    """``ID=COMMAND`` (COMMAND split shell-style), or a preset's ``ID`` alone → AgentSpec.

    Raises ``ValueError`` naming what is wrong.
    """
    ident, sep, command = value.partition("=")
    if not sep and ident.strip() in PRESETS:
        return PRESETS[ident.strip()].spec
    words = shlex.split(command) if sep else []
    if not ident.strip() or not words:
        raise ValueError(f"--agent expects ID=COMMAND or a preset's ID ({', '.join(PRESETS)}), got {value!r}")
    return AgentSpec(id=ident.strip(), command=words[0], args=words[1:])


def load_config(path: Path) -> tuple[list[AgentSpec], float | None]:
    """Read a config file: (agents, idleTimeout seconds or None).

    Raises ``ValueError`` with the file name and the problem.
    """
    try:
        data = json.loads(path.read_text())
        agents = [resolve(AgentEntry.model_validate(a)) for a in data.get("agents", [])]
        idle = data.get("idleTimeout")
        return agents, (float(idle) if idle is not None else None)
    except (OSError, ValueError, ValidationError, AttributeError, TypeError) as exc:
        raise ValueError(f"config file {path}: {exc}") from exc


def merge(*sources: Iterable[AgentSpec], problems: list[str] | None = None) -> dict[str, AgentSpec]:
    """Agents by id, later sources winning, presets resolved (``resolve``); the demo agent
    when there are none. An entry that cannot be resolved is left out, its reason appended
    to ``problems`` (or ``ValueError`` raised when no list is given)."""
    out: dict[str, AgentSpec] = {}
    for source in sources:
        for spec in source:
            try:
                out[spec.id] = resolve(spec)
            except ValueError as exc:
                if problems is None:
                    raise
                problems.append(str(exc))
    return out or {"demo": demo_agent()}


def model_info(
    spec: AgentSpec,
    choice: Choice | None = None,
    images: bool = False,
    options: object = None,
    context: int | None = None,
    profile: AgentProfile | None = None,
    configuration: Mapping[str, object] | None = None,
) -> ModelInfo:
    """The ``LanguageModelChatInformation`` VS Code shows for an agent, or for one of its
    own models (``choice``, a value of its ``model`` config option: agent_models).
    ``images``: the agent's ``promptCapabilities.image`` as last seen (``imageInput``).
    ``options``: its configOptions as last learnt, whose modes and other select options
    become the model's ``configurationSchema`` (session_state; the mode's default is the
    mode a new session starts in: ``core.modes.start_mode`` of ``profile``, the agent's
    profile as last seen; None: ``profiles.OTHER``, an agent not seen yet). ``configuration``:
    VS Code's model configuration last received for this model (its mode, when the agent
    offers it, is the one new chats start in). The
    tooltip names that mode and who approves in it (``core.modes.approval_note``).
    ``context``: the context window (tokens) the agent's ``usage_update`` gave for this
    model, its ``maxInputTokens`` (else ``MAX_INPUT_TOKENS``)."""
    from lmbridge.core import modes, permissions, profiles, session_state
    from lmbridge.core.agent_models import model_id

    profile = profiles.OTHER if profile is None else profile

    name = spec.name or spec.id
    defaults: dict[str, str] = {}
    controls = session_state.controls_from_json(options)
    mode = next((c for c in controls if c.category == "mode"), None)
    tooltip = f"ACP agent: {shlex.join([spec.command, *spec.args])}"
    if mode is not None:
        start = modes.start_mode(profile, [c.value for c in mode.choices], spec.mode)
        if start is not None:
            defaults[mode.id] = start
        chosen = configuration.get(mode.id) if isinstance(configuration, dict) else None
        # Only a mode the configuration may set is one new chats start in (permissions.from_configuration).
        allowed = isinstance(chosen, str) and mode.offers(chosen) and permissions.from_configuration(mode.id, mode.category, mode.legacy, chosen, profile)
        starts = chosen if allowed and isinstance(chosen, str) else start
        note = modes.approval_note(profile, starts, mode.label(starts))
        if note is not None:
            tooltip += f"\nNew chats start in {mode.label(starts)}. {note}"
    return ModelInfo(
        id=spec.id if choice is None else model_id(spec.id, choice.value),
        name=name if choice is None else f"{name} · {choice.name}",
        family="acp",
        version=__version__,
        maxInputTokens=context if context else MAX_INPUT_TOKENS,
        maxOutputTokens=MAX_OUTPUT_TOKENS,
        capabilities=ModelCapabilities(toolCalling=True, imageInput=images),
        tooltip=tooltip,
        detail="ACP agent",
        configurationSchema=session_state.configuration_schema(controls, defaults),
    )


class ModelStore(Protocol):
    """Where what was learnt of the agents persists (``session_index.SessionIndex``)."""

    def models(self) -> dict[str, Any]: ...

    def images(self) -> dict[str, bool]: ...

    def profiles(self) -> dict[str, str]: ...

    def save_models(self, agents: dict[str, Any], images: dict[str, bool] | None = None, profiles: dict[str, str] | None = None) -> None: ...


class Catalog:
    """The agents the daemon offers and what it learnt of them: the one owner of both.

    ``agents``: by id, the configured ones merged with ``initialize``'s (``configure``).
    ``options()``: agent id → its configOptions as last learnt (``agent_models.to_json``: its
    own models in the picker); ``images()``: agent id → its ``promptCapabilities.image`` as
    last seen. Both start from ``store()`` (the state folder's, or None: asked for, and read,
    on first use, after ``initialize`` is answered) and are
    replaced whole on a change, which calls ``changed()`` (the shim is told
    ``lm/modelsChanged``) and marks them ``dirty`` until ``save``."""

    def __init__(
        self, configured: Sequence[AgentSpec] = (), store: Callable[[], ModelStore | None] = lambda: None, changed: Callable[[], None] = lambda: None
    ) -> None:
        self.configured = list(configured)
        self.agents: dict[str, AgentSpec] = merge(self.configured)
        self.store = store
        self.changed = changed
        self.dirty = False
        self._options: dict[str, Any] | None = None
        self._images: dict[str, bool] | None = None
        self._profiles: dict[str, str] | None = None
        self.context_sizes: dict[str, int] = {}  # model id → the context window its agent's usage_update gave

    def configure(self, entries: Sequence[AgentSpec]) -> list[str]:
        """``initialize.agents`` (none: the configured ones stay): the problems of the
        entries left out."""
        problems: list[str] = []
        if entries:
            self.agents = merge(self.configured, entries, problems=problems)
        return problems

    def options(self) -> dict[str, Any]:
        if self._options is None:
            store = self.store()
            self._options = store.models() if store is not None else {}
        return self._options

    def images(self) -> dict[str, bool]:
        if self._images is None:
            store = self.store()
            self._images = store.images() if store is not None else {}
        return self._images

    def profile(self, agent_id: str) -> AgentProfile:
        """The agent's profile as last seen (``OTHER`` until one of its processes started)."""
        from lmbridge.core import profiles

        name = (self._profiles if self._profiles is not None else self._load_profiles()).get(agent_id)
        return next((p for p in profiles.ALL if p.name == name), profiles.OTHER)

    def _load_profiles(self) -> dict[str, str]:
        store = self.store()
        self._profiles = store.profiles() if store is not None else {}
        return self._profiles

    def saw_profile(self, agent_id: str, profile: AgentProfile) -> None:
        """An agent process's profile (once it is initialized): its modes' defaults and notes."""
        from lmbridge.core.profiles import OTHER

        known = self._profiles if self._profiles is not None else self._load_profiles()
        if known.get(agent_id) != profile.name:
            self._profiles = {**known, agent_id: profile.name}
            self.dirty = True
            if known.get(agent_id, OTHER.name) != profile.name:  # an agent not known is OTHER: no change shown
                self.changed()

    def offers(self, agent_id: str, value: str) -> bool:
        """Whether ``value`` is one of the agent's own models (its ``model`` config option)."""
        from lmbridge.core.agent_models import of_category, select_options

        own = of_category(select_options(self.options().get(agent_id)), "model")
        return own is not None and any(c.value == value for c in own.choices)

    def knows_options(self, agent_id: str) -> bool:
        return agent_id in self.options()

    def learn(self, agent_id: str, config_options: object) -> None:
        """An agent's configOptions (a session's, or a probe's): its models, kept and shown."""
        from lmbridge.core.agent_models import current_values, select_options, to_json

        if not isinstance(config_options, list):
            return
        old = self.options().get(agent_id)
        # The values first learnt stay the options' defaults (VS Code's model configuration
        # schema, session_state): a later session's own choices do not move them.
        learnt = to_json(select_options(config_options), {**current_values(config_options), **current_values(old)})
        if old != learnt:
            self._options = {**self.options(), agent_id: learnt}
            self.dirty = True
            log.info("agent options learnt", agent=agent_id, options=[o["id"] for o in learnt])
            if old or learnt:  # "none" learnt for the first time changes no model list
                self.changed()

    def saw_context(self, model: str, size: int) -> None:
        """A model's context window (tokens), from its agent's ``usage_update``: its ``maxInputTokens``."""
        if self.context_sizes.get(model) != size:
            self.context_sizes[model] = size
            self.changed()

    def saw_images(self, agent_id: str, images: bool) -> None:
        """An agent process's ``promptCapabilities.image`` (once it is initialized)."""
        if self.images().get(agent_id, False) != images:
            self._images = {**self.images(), agent_id: images}
            self.dirty = True
            self.changed()

    async def save(self) -> None:
        """Persist what changed since the last save (in a thread). Raises ``OSError``."""
        store = self.store()
        if store is None or not self.dirty:
            return
        self.dirty = False
        names = dict(self._profiles if self._profiles is not None else self._load_profiles())
        await anyio.to_thread.run_sync(store.save_models, dict(self.options()), dict(self.images()), names)
