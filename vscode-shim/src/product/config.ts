/**
 * Settings → what the daemon is started with. Pure: the extension passes in
 * `workspace.getConfiguration('lmbridge')`; tests pass a plain object.
 */
import * as os from 'os';
import * as path from 'path';
import type { ThinkingDisplay } from '../chat/convert';
import type { LaunchSpec } from '../chat/daemon';
import { DEFAULT_REGISTRY_URL } from './registry';
import type { AgentSpec } from '../chat/wire';

export const SECTION = 'lmbridge';

export interface Settings {
	agents: AgentSpec[];
	/** Agent entries that were left out, and why. */
	agentProblems: string[];
	daemonCommand: string;
	/** The user set lmbridge.daemon.command (else the daemon may be the extension's own: bootstrap.ts). */
	daemonCommandSet: boolean;
	daemonArgs: string[];
	daemonEnv: Record<string, string>;
	pythonPath: string;
	logLevel: string;
	thinking: ThinkingDisplay;
	userTurns: 'request' | 'verbatim';
	/** Live ACP sessions per agent (the daemon's --max-agent-processes). */
	maxAgentProcesses: number;
	/** Start the agents used last right after start-up (the daemon's $LMBRIDGE_PREWARM). */
	prewarm: boolean;
	/** Keep one ACP session ready per running agent (the daemon's $LMBRIDGE_SPARE_SESSION). */
	spareSession: boolean;
	/** Spare sessions kept per running agent (the daemon's $LMBRIDGE_SPARE_SESSIONS); undefined: each agent's own. */
	spareSessions: number | undefined;
	/** Seconds a new chat over the session cap waits for a free session (the daemon's $LMBRIDGE_SESSION_WAIT). */
	sessionWait: number;
	/** The ACP registry feed's URL (a machine setting: it chooses what can be installed); empty: no registry. */
	registryUrl: string;
}

/**
 * The settings that choose what runs (executables, their arguments, their environment).
 * package.json gives each `"scope": "machine"`, so VS Code takes them from the user's own
 * settings only, never from a workspace's `.vscode/settings.json`; `readSettings` reads
 * them from the user's value alone too, whatever VS Code passes.
 */
export const MACHINE_SETTINGS = ['agents', 'daemon.command', 'daemon.args', 'daemon.env', 'pythonPath', 'registry.url'] as const;

/** Settings whose change requires a fresh daemon (it reads them at start-up). */
export const DAEMON_SETTINGS = ['agents', 'daemon', 'pythonPath', 'logLevel', 'userTurns', 'maxAgentProcesses', 'prewarm', 'spareSession', 'spareSessions', 'sessionWait'].map(k => `${SECTION}.${k}`);

export const DEFAULTS = {
	daemonCommand: 'lmbridge',
	daemonArgs: ['serve'],
	logLevel: 'info',
	thinking: 'auto' as ThinkingDisplay,
	maxAgentProcesses: 4,
	prewarm: true,
	spareSession: true,
	sessionWait: 120,
};

/** The levels `lmbridge serve --log-level` accepts (it exits on any other). */
export const LOG_LEVELS = ['debug', 'info', 'warning', 'error'];

export interface ConfigLike {
	get<T>(key: string): T | undefined;
	/** VS Code's: which scopes set a key (tells a setting the user made from the default). */
	inspect?<T>(key: string): { defaultValue?: T; globalValue?: T; workspaceValue?: T; workspaceFolderValue?: T } | undefined;
}

/** A machine setting (`MACHINE_SETTINGS`): the user's value, else the default; never a workspace's. */
function machineValue<T>(config: ConfigLike, key: string): T | undefined {
	if (!config.inspect) {
		return config.get<T>(key);
	}
	const i = config.inspect<T>(key);
	return i?.globalValue !== undefined ? i.globalValue : i?.defaultValue;
}

/** Whether the user set the machine setting `key` (not just its default), to a non-blank value. */
function isSet(config: ConfigLike, key: string): boolean {
	const v = config.inspect ? config.inspect<unknown>(key)?.globalValue : config.get<unknown>(key);
	return typeof v === 'string' ? v.trim() !== '' : v !== undefined;
}

/** Machine settings a workspace tried to set: ignored, and said so in the log. */
export function workspaceMachineSettings(config: ConfigLike): string[] {
	return MACHINE_SETTINGS.filter(key => {
		const i = config.inspect?.<unknown>(key);
		return i?.workspaceValue !== undefined || i?.workspaceFolderValue !== undefined;
	}).map(key => `${SECTION}.${key}`);
}

function stringRecord(value: unknown): Record<string, string> {
	const out: Record<string, string> = {};
	if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
		for (const [k, v] of Object.entries(value)) {
			if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') {
				out[k] = String(v);
			}
		}
	}
	return out;
}

function stringArray(value: unknown): string[] | undefined {
	return Array.isArray(value) && value.every(v => typeof v === 'string') ? value as string[] : undefined;
}

/**
 * The daemon's agent presets (`agents/presets`), as of this extension's release: used only
 * for hints (the settings schema, a warning's wording). The daemon's list is the truth.
 */
export const PRESET_IDS = ['claude', 'codex', 'gemini', 'fast-agent'] as const;

/** `lmbridge.agents` entries, validated; ids must be unique. An entry may be just `{id}` (a preset). */
export function parseAgents(raw: unknown): { agents: AgentSpec[]; problems: string[] } {
	const agents: AgentSpec[] = [];
	const problems: string[] = [];
	if (raw === undefined || raw === null) {
		return { agents, problems };
	}
	if (!Array.isArray(raw)) {
		return { agents, problems: ['lmbridge.agents must be an array'] };
	}
	const seen = new Set<string>();
	raw.forEach((entry, index) => {
		const e = entry as Record<string, unknown> | null;
		if (typeof e !== 'object' || e === null) {
			problems.push(`lmbridge.agents[${index}] is not an object`);
			return;
		}
		const id = typeof e.id === 'string' ? e.id.trim() : '';
		if (!id) {
			problems.push(`lmbridge.agents[${index}] needs an "id" (a preset such as ${PRESET_IDS.map(p => `"${p}"`).join(', ')}, or any id with a "command")`);
			return;
		}
		if (seen.has(id)) {
			problems.push(`lmbridge.agents[${index}]: the id "${id}" is used twice`);
			return;
		}
		seen.add(id);
		// `{"id": "claude"}` alone is one of the daemon's presets; the daemon resolves it
		// (and says so when it knows no such preset). Any field given overrides the preset's.
		const agent: AgentSpec = { id };
		if (typeof e.command === 'string' && e.command.trim()) {
			agent.command = expandHome(e.command.trim());
		} else if (e.command !== undefined && e.command !== null && e.command !== '') {
			problems.push(`lmbridge.agents[${index}].command must be a string (ignored)`);
		}
		if (typeof e.name === 'string' && e.name.trim()) {
			agent.name = e.name.trim();
		}
		const args = stringArray(e.args);
		if (args && args.length > 0) {
			agent.args = args;
		} else if (e.args !== undefined && !args) {
			problems.push(`lmbridge.agents[${index}].args must be an array of strings (ignored)`);
		}
		const env = stringRecord(e.env);
		if (Object.keys(env).length > 0) {
			agent.env = env;
		}
		if (e.tools !== undefined) {
			const t = (e.tools ?? {}) as Record<string, unknown>;
			const allow = stringArray(t.allow);
			const deny = stringArray(t.deny);
			if ((t.allow !== undefined && !allow) || (t.deny !== undefined && !deny)) {
				problems.push(`lmbridge.agents[${index}].tools: allow and deny must be arrays of glob patterns (ignored)`);
			} else if (allow || deny) {
				agent.tools = { ...(allow ? { allow } : {}), ...(deny ? { deny } : {}) };
			}
		}
		if (typeof e.mode === 'string' && e.mode.trim()) {
			agent.mode = e.mode.trim();
		} else if (e.mode !== undefined) {
			problems.push(`lmbridge.agents[${index}].mode must be a string, one of the agent's modes (ignored)`);
		}
		agents.push(agent);
	});
	return { agents, problems };
}

export function expandHome(p: string): string {
	return p === '~' ? os.homedir() : p.startsWith('~/') ? path.join(os.homedir(), p.slice(2)) : p;
}

export function readSettings(config: ConfigLike): Settings {
	const { agents, problems } = parseAgents(machineValue(config, 'agents'));
	const thinking = config.get<string>('thinking');
	return {
		agents,
		agentProblems: problems,
		daemonCommand: (machineValue<string>(config, 'daemon.command') ?? '').trim() || DEFAULTS.daemonCommand,
		daemonCommandSet: isSet(config, 'daemon.command'),
		daemonArgs: stringArray(machineValue(config, 'daemon.args')) ?? DEFAULTS.daemonArgs,
		daemonEnv: stringRecord(machineValue(config, 'daemon.env')),
		pythonPath: (machineValue<string>(config, 'pythonPath') ?? '').trim(),
		logLevel: LOG_LEVELS.includes(config.get<string>('logLevel') ?? '') ? config.get<string>('logLevel')! : DEFAULTS.logLevel,
		thinking: thinking === 'text' || thinking === 'hidden' || thinking === 'auto' ? thinking : DEFAULTS.thinking,
		userTurns: config.get<string>('userTurns') === 'verbatim' ? 'verbatim' : 'request',
		maxAgentProcesses: positiveInteger(config.get('maxAgentProcesses')) ?? DEFAULTS.maxAgentProcesses,
		prewarm: typeof config.get('prewarm') === 'boolean' ? config.get<boolean>('prewarm')! : DEFAULTS.prewarm,
		spareSession: typeof config.get('spareSession') === 'boolean' ? config.get<boolean>('spareSession')! : DEFAULTS.spareSession,
		spareSessions: positiveInteger(config.get('spareSessions')),
		sessionWait: seconds(config.get('sessionWait')) ?? DEFAULTS.sessionWait,
		registryUrl: registryUrl(machineValue(config, 'registry.url')),
	};
}

/** The feed's URL: the default when unset (or not a string), empty when the user set it empty. */
function registryUrl(value: unknown): string {
	return typeof value === 'string' ? value.trim() : DEFAULT_REGISTRY_URL;
}

function seconds(value: unknown): number | undefined {
	return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

function positiveInteger(value: unknown): number | undefined {
	return typeof value === 'number' && Number.isInteger(value) && value >= 1 ? value : undefined;
}

/**
 * How to start the daemon: `<pythonPath> -P -m lmbridge <args>` when a Python path is set
 * (`-P`: the daemon runs in the workspace folder, which must not be on its `sys.path`, or a
 * `lmbridge/` or `json.py` there would be imported in place of lmbridge's own),
 * else `<daemon.command> <args>` (default `lmbridge serve`, found on PATH).
 * The log level reaches the daemon as LMBRIDGE_LOG_LEVEL, the session cap as
 * LMBRIDGE_MAX_AGENT_PROCESSES, pre-warming as LMBRIDGE_PREWARM, the spare session as
 * LMBRIDGE_SPARE_SESSION ("1" or "0") and, where set, how many as LMBRIDGE_SPARE_SESSIONS, the wait
 * for a free session as LMBRIDGE_SESSION_WAIT.
 */
export function launchSpec(settings: Settings, cwd?: string): LaunchSpec {
	const env = {
		...settings.daemonEnv,
		LMBRIDGE_LOG_LEVEL: settings.logLevel,
		LMBRIDGE_MAX_AGENT_PROCESSES: String(settings.maxAgentProcesses),
		LMBRIDGE_PREWARM: settings.prewarm ? '1' : '0',
		LMBRIDGE_SPARE_SESSION: settings.spareSession ? '1' : '0',
		...(settings.spareSessions ? { LMBRIDGE_SPARE_SESSIONS: String(settings.spareSessions) } : {}),
		LMBRIDGE_SESSION_WAIT: String(settings.sessionWait),
	};
	if (settings.pythonPath) {
		return { command: expandHome(settings.pythonPath), args: ['-P', '-m', 'lmbridge', ...settings.daemonArgs], env, cwd };
	}
	return { command: expandHome(settings.daemonCommand), args: [...settings.daemonArgs], env, cwd };
}
