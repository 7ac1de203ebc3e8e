/**
 * "lmbridge: Import ACP Agents": the agents a user has already set up elsewhere, as
 * `lmbridge.agents` entries (docs/vscode-shim.md, "Importing agents"):
 *
 * - VS Code's own `chat.agentHost.acpAgents` (`[{id, displayName, command, args, env}]`),
 *   the user's value only (`inspect().globalValue`: never a workspace's or a folder's);
 * - Zed's `agent_servers` in the user's `~/.config/zed/settings.json` (never a project's
 *   `.zed/settings.json`), JSON with comments: a custom
 *   agent `"Name": {"command", "args", "env", "default_mode"?}` (also with `"type": "custom"`),
 *   and Zed's built-in agents (`claude`, `codex`, `gemini`) with only `env` or
 *   `default_mode`, which become lmbridge's presets of that id.
 *
 * The conversions are pure and tested; `importAgents` is the thin command around them.
 */
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import type { AgentSpec } from '../chat/wire';
import { configuredIds } from './manage';

export interface Imported {
	agents: AgentSpec[];
	problems: string[];
}

function isObject(value: unknown): value is Record<string, unknown> {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function strings(value: unknown): string[] | undefined {
	return Array.isArray(value) && value.every(v => typeof v === 'string') ? [...value] as string[] : undefined;
}

function env(value: unknown): Record<string, string> | undefined {
	if (!isObject(value)) {
		return undefined;
	}
	const out: Record<string, string> = {};
	for (const [k, v] of Object.entries(value)) {
		if (typeof v === 'string') {
			out[k] = v;
		}
	}
	return Object.keys(out).length > 0 ? out : undefined;
}

/** A model id from a name: lower case, letters, digits, `-` and `_` (`My Agent` → `my-agent`). */
export function slug(name: string): string {
	return name.trim().toLowerCase().replace(/[^a-z0-9_-]+/g, '-').replace(/^-+|-+$/g, '') || 'agent';
}

/** VS Code's `chat.agentHost.acpAgents` as lmbridge agents. */
export function fromAgentHost(value: unknown, source = 'chat.agentHost.acpAgents'): Imported {
	const out: Imported = { agents: [], problems: [] };
	if (value === undefined || value === null) {
		return out;
	}
	if (!Array.isArray(value)) {
		out.problems.push(`${source}: not a list`);
		return out;
	}
	value.forEach((entry, i) => {
		if (!isObject(entry) || typeof entry.command !== 'string' || !entry.command.trim()) {
			out.problems.push(`${source}[${i}]: no command`);
			return;
		}
		const name = typeof entry.displayName === 'string' && entry.displayName.trim() ? entry.displayName.trim() : undefined;
		const id = typeof entry.id === 'string' && entry.id.trim() ? entry.id.trim() : slug(name ?? path.basename(entry.command));
		const agent: AgentSpec = { id, command: entry.command };
		if (name) { agent.name = name; }
		const args = strings(entry.args);
		if (args?.length) { agent.args = args; }
		const vars = env(entry.env);
		if (vars) { agent.env = vars; }
		out.agents.push(agent);
	});
	return out;
}

/** Zed's built-in agents, by their `agent_servers` key, as lmbridge presets. */
export const ZED_BUILT_INS: Record<string, string> = { 'claude': 'claude', 'claude-code': 'claude', 'codex': 'codex', 'gemini': 'gemini' };

/** Zed's `agent_servers` (the object) as lmbridge agents. */
export function fromZed(servers: unknown, source = 'Zed agent_servers'): Imported {
	const out: Imported = { agents: [], problems: [] };
	if (servers === undefined || servers === null) {
		return out;
	}
	if (!isObject(servers)) {
		out.problems.push(`${source}: not an object`);
		return out;
	}
	for (const [key, entry] of Object.entries(servers)) {
		if (!isObject(entry)) {
			out.problems.push(`${source}.${key}: not an object`);
			continue;
		}
		// Zed's newer form nests a custom agent's command under "command" with "type": "custom";
		// an older one had {"command": {"path", "args", "env"}}.
		const nested = isObject(entry.command) ? entry.command : undefined;
		const command = typeof entry.command === 'string' ? entry.command : typeof nested?.path === 'string' ? nested.path : undefined;
		const mode = typeof entry.default_mode === 'string' && entry.default_mode ? entry.default_mode : undefined;
		const vars = env(entry.env) ?? env(nested?.env);
		const preset = ZED_BUILT_INS[key.toLowerCase()];
		if (!command || !command.trim()) {
			if (!preset) {
				out.problems.push(`${source}.${key}: no command`);
				continue;
			}
			const agent: AgentSpec = { id: preset };
			if (vars) { agent.env = vars; }
			if (mode) { agent.mode = mode; }
			out.agents.push(agent);
			continue;
		}
		const agent: AgentSpec = { id: slug(key), name: key, command };
		const args = strings(entry.args) ?? strings(nested?.args);
		if (args?.length) { agent.args = args; }
		if (vars) { agent.env = vars; }
		if (mode) { agent.mode = mode; }
		out.agents.push(agent);
	}
	return out;
}

/**
 * JSON with comments and trailing commas (Zed's settings) as a value; throws SyntaxError
 * when it is not even that.
 */
export function parseJsonc(text: string): unknown {
	let out = '';
	let i = 0;
	while (i < text.length) {
		const ch = text[i];
		if (ch === '"') {
			const start = i++;
			while (i < text.length && text[i] !== '"') {
				i += text[i] === '\\' ? 2 : 1;
			}
			out += text.slice(start, ++i);
		} else if (ch === '/' && text[i + 1] === '/') {
			while (i < text.length && text[i] !== '\n') { i++; }
		} else if (ch === '/' && text[i + 1] === '*') {
			const end = text.indexOf('*/', i + 2);
			i = end < 0 ? text.length : end + 2;
		} else {
			out += ch;
			i++;
		}
	}
	return JSON.parse(out.replace(/,(\s*[}\]])/g, '$1'));
}

/** Where Zed keeps its settings. */
export function zedSettingsPath(home: string, platform: NodeJS.Platform = process.platform, appData = process.env.APPDATA): string {
	return platform === 'win32' && appData ? path.join(appData, 'Zed', 'settings.json') : path.join(home, '.config', 'zed', 'settings.json');
}

/** Each candidate once by id (the first wins), those already configured set apart. */
export function candidates(found: Imported[], configured: Set<string>): { fresh: AgentSpec[]; known: AgentSpec[]; problems: string[] } {
	const seen = new Set<string>();
	const fresh: AgentSpec[] = [];
	const known: AgentSpec[] = [];
	for (const agent of found.flatMap(f => f.agents)) {
		if (seen.has(agent.id)) {
			continue;
		}
		seen.add(agent.id);
		(configured.has(agent.id) ? known : fresh).push(agent);
	}
	return { fresh, known, problems: found.flatMap(f => f.problems) };
}

export interface ImportDeps {
	log: vscode.LogOutputChannel;
	home: string;
	readFile?(file: string): string | undefined;
}

function readIfThere(file: string): string | undefined {
	try {
		return fs.readFileSync(file, 'utf8');
	} catch {
		return undefined;
	}
}

/** The command: a multi-select quick pick of the agents found; the picked ones added to the user's `lmbridge.agents`. */
export async function importAgents(deps: ImportDeps): Promise<AgentSpec[]> {
	// The user's own value only (like lmbridge's machine settings, config.ts MACHINE_SETTINGS):
	// a workspace's .vscode/settings.json must not choose what runs.
	const agentHost = vscode.workspace.getConfiguration('chat.agentHost').inspect<unknown>('acpAgents');
	if (agentHost?.workspaceValue !== undefined || agentHost?.workspaceFolderValue !== undefined) {
		deps.log.warn('import: chat.agentHost.acpAgents set by the workspace is ignored (only your user settings are read)');
	}
	const found: Imported[] = [fromAgentHost(agentHost?.globalValue)];
	const zedFile = zedSettingsPath(deps.home);
	const zedText = (deps.readFile ?? readIfThere)(zedFile);
	if (zedText !== undefined) {
		try {
			const zed = parseJsonc(zedText);
			found.push(fromZed(isObject(zed) ? zed.agent_servers : undefined, `${zedFile}: agent_servers`));
		} catch (err) {
			found.push({ agents: [], problems: [`${zedFile}: ${err instanceof Error ? err.message : String(err)}`] });
		}
	}
	const config = () => vscode.workspace.getConfiguration('lmbridge');
	const current = config().inspect<unknown[]>('agents')?.globalValue;
	const { fresh, known, problems } = candidates(found, configuredIds(current));
	for (const problem of problems) {
		deps.log.warn(`import: ${problem}`);
	}
	if (fresh.length === 0) {
		void vscode.window.showInformationMessage(known.length
			? `The agents found (${known.map(a => a.id).join(', ')}) are in lmbridge.agents already.`
			: `No agents found in chat.agentHost.acpAgents or ${zedFile}.`);
		return [];
	}
	const picked = await vscode.window.showQuickPick(fresh.map(agent => ({
		label: agent.name ?? agent.id,
		description: agent.command ? [agent.command, ...(agent.args ?? [])].join(' ') : `lmbridge's ${agent.id} preset`,
		detail: agent.env ? `env: ${Object.keys(agent.env).join(', ')}` : undefined,
		picked: true,
		agent,
	})), { title: 'Import ACP agents', placeHolder: 'Add the checked agents to lmbridge.agents (user settings)', canPickMany: true });
	if (!picked || picked.length === 0) {
		return [];
	}
	const agents = picked.map(p => p.agent);
	const list = Array.isArray(current) ? [...current] : [];
	await config().update('agents', [...list, ...agents], vscode.ConfigurationTarget.Global);
	deps.log.info(`imported ${agents.map(a => a.id).join(', ')} into lmbridge.agents (user settings)`);
	void vscode.window.showInformationMessage(`Imported ${agents.map(a => a.name ?? a.id).join(', ')}: pick them in the chat's model picker, under ACP Agents.`);
	return agents;
}
