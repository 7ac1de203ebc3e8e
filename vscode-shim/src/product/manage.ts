/**
 * "lmbridge: Manage ACP Agents" (also the gear beside "ACP Agents" in the model picker):
 * a quick pick of the agents of the ACP registry feed (`lmbridge.registry.url`, fetched and
 * cached by registry.ts, read by the daemon: `agents/registry`), then the agents the daemon
 * knows by id (`agents/presets`: the fallback when the registry cannot be reached), the
 * configured ones marked, updates offered, and "Open Settings". Picking a preset adds
 * `{"id": …}` to the user's `lmbridge.agents`; picking a registry agent installs it (after the
 * user confirms what will run) and adds its entry; the settings change restarts the daemon
 * with it (extension.ts). The item building and the settings edit are pure and tested; the
 * UI is a thin wrapper.
 */
import * as vscode from 'vscode';
import { commandLine, Fetch, installAgent, loadFeed, registryPlatform, RegistryEntry, registryRefusal, removeOtherVersions } from './registry';
import type { AgentPreset, AgentPresetsResult, RegistryAgent } from '../chat/wire';

export const OPEN_SETTINGS_ITEM = 'Open Settings';

export interface ManageItem extends vscode.QuickPickItem {
	/** The preset this item adds; absent for "Open Settings" and separators. */
	presetId?: string;
	/** The registry agent this item installs (or updates). */
	registryAgent?: RegistryAgent;
	/** A registry agent installed at another version than the feed's. */
	update?: boolean;
	configured?: boolean;
	/** The id this same agent is in lmbridge.agents under, another way (a preset's registryId, or the preset's id). */
	sameAs?: string;
	openSettings?: true;
}

/** Ids of the entries of an `lmbridge.agents` value (whatever its shape). */
export function configuredIds(agents: unknown): Set<string> {
	const ids = new Set<string>();
	if (Array.isArray(agents)) {
		for (const a of agents) {
			if (typeof a === 'object' && a !== null && typeof (a as { id?: unknown }).id === 'string') {
				ids.add((a as { id: string }).id.trim());
			}
		}
	}
	return ids;
}

/**
 * The configured agents by id: the registry version an entry was installed at (its
 * `registry.version`), or null for an entry that did not come from the registry.
 */
export function installedVersions(agents: unknown): Map<string, string | null> {
	const out = new Map<string, string | null>();
	if (Array.isArray(agents)) {
		for (const a of agents) {
			const e = a as { id?: unknown; registry?: { version?: unknown } } | null;
			if (typeof e === 'object' && e !== null && typeof e.id === 'string') {
				out.set(e.id.trim(), typeof e.registry?.version === 'string' ? e.registry.version : null);
			}
		}
	}
	return out;
}

/** The daemon's answer, keeping only well-formed presets. */
export function presetsFromWire(result: unknown): AgentPreset[] {
	const presets = (result as AgentPresetsResult | undefined)?.presets;
	if (!Array.isArray(presets)) {
		return [];
	}
	return presets.filter((p): p is AgentPreset =>
		typeof p === 'object' && p !== null && typeof p.id === 'string' && !!p.id && typeof p.name === 'string');
}

/**
 * The daemon's `agents/registry` answer, keeping only well-formed agents that pass the
 * registry's rules (registry.ts `registryRefusal`, the daemon's own: an agent that does not
 * is left out, and said in `problems`).
 */
export function registryFromWire(result: unknown): { agents: RegistryAgent[]; problems: string[] } {
	const r = result as { agents?: unknown; problems?: unknown } | undefined;
	const problems = Array.isArray(r?.problems) ? r!.problems.filter((p): p is string => typeof p === 'string') : [];
	const wellFormed = Array.isArray(r?.agents) ? r!.agents.filter((a): a is RegistryAgent => {
		const x = a as Partial<RegistryAgent> | null;
		return typeof x === 'object' && x !== null && typeof x.id === 'string' && !!x.id && typeof x.name === 'string'
			&& typeof x.version === 'string' && ['npx', 'uvx', 'binary'].includes(String(x.distribution)) && Array.isArray(x.args)
			&& (x.env === undefined || (typeof x.env === 'object' && x.env !== null && !Array.isArray(x.env)));
	}).map(a => ({ ...a, env: a.env ?? {} })) : [];
	const agents = wellFormed.filter(agent => {
		const refusal = registryRefusal(agent);
		if (refusal) {
			problems.push(`${agent.id} left out: ${refusal}`);
		}
		return !refusal;
	});
	return { agents, problems };
}

/** One line saying how the preset starts: `npx -y @agentclientprotocol/claude-agent-acp@0.101.0`. */
export function presetCommandLine(preset: AgentPreset): string {
	return [preset.command ?? '', ...(Array.isArray(preset.args) ? preset.args : [])].filter(Boolean).join(' ');
}

const sentence = (text: string | undefined) => (text?.trim() ? text.trim().replace(/([^.!?])$/, '$1.') : '');

/** What the registry part of the quick pick shows: its agents, or why there are none. */
export interface RegistryView {
	agents: RegistryAgent[];
	/** The configured agents (`installedVersions` of the user's lmbridge.agents). */
	installed: Map<string, string | null>;
	/** Set when the feed came from the cache: when it was fetched. */
	cachedAt?: string;
	/** Why the feed could not be had (then `agents` is empty), or why it is the cached copy. */
	problem?: string;
}

/**
 * A preset and a registry agent that are one agent (the preset's `registryId`): registry id →
 * preset id. lmbridge gives both the same profile, sign-in help and defaults, so the quick
 * pick shows one as added when the other is.
 */
export function sameAgents(presets: AgentPreset[]): Map<string, string> {
	return new Map(presets.filter(p => typeof p.registryId === 'string' && p.registryId).map(p => [p.registryId!, p.id]));
}

/**
 * The registry's items: a separator, each agent (installed ones marked, updates offered; one
 * added as its built-in preset, `presetOf` → `configured`, marked so).
 */
export function registryItems(view: RegistryView, presetOf: Map<string, string> = new Map(), configured: Set<string> = new Set()): ManageItem[] {
	const heading = view.cachedAt ? `ACP Registry (cached ${view.cachedAt.slice(0, 10)})` : 'ACP Registry';
	const items: ManageItem[] = [{ label: heading, kind: vscode.QuickPickItemKind.Separator }];
	if (view.agents.length === 0) {
		items.push({
			label: '$(warning) The ACP registry could not be read',
			description: 'lmbridge.registry.url',
			detail: view.problem ? `${view.problem}. The built-in agents below need no registry.` : 'It lists no agents for this platform.',
			openSettings: true,
		});
		return items;
	}
	for (const agent of view.agents) {
		const installed = view.installed.get(agent.id);
		const item: ManageItem = { label: agent.name, registryAgent: agent, configured: installed !== undefined };
		const preset = presetOf.get(agent.id);
		if (installed === undefined && preset !== undefined && configured.has(preset)) {
			item.label = `$(check) ${agent.name}`;
			item.description = `${agent.id} · added as the built-in ${preset}`;
			item.configured = true;
			item.sameAs = preset;
		} else if (installed === undefined) {
			item.description = `${agent.id} · ${agent.version} · ${agent.distribution}`;
		} else if (installed === null) {
			item.label = `$(check) ${agent.name}`;
			item.description = `${agent.id} · in lmbridge.agents, not from the registry`;
		} else if (installed !== agent.version) {
			item.label = `$(arrow-up) ${agent.name}`;
			item.description = `${agent.id} · update ${installed} → ${agent.version}`;
			item.update = true;
		} else {
			item.label = `$(check) ${agent.name}`;
			item.description = `${agent.id} · ${agent.version} · installed`;
		}
		const detail = sentence(agent.description);
		if (detail) {
			item.detail = detail;
		}
		items.push(item);
	}
	return items;
}

/**
 * The quick pick's items: the registry's (when given), each preset (configured ones marked),
 * then "Open Settings".
 */
export function manageItems(presets: AgentPreset[], configured: Set<string>, problem?: string, registry?: RegistryView): ManageItem[] {
	const items: ManageItem[] = registry ? registryItems(registry, sameAgents(presets), configured) : [];
	if (registry && presets.length > 0) {
		items.push({ label: 'Built in', kind: vscode.QuickPickItemKind.Separator });
	}
	for (const preset of presets) {
		// The same agent installed from the registry (its registryId in lmbridge.agents).
		const viaRegistry = !configured.has(preset.id) && preset.registryId && configured.has(preset.registryId) ? preset.registryId : undefined;
		const isConfigured = configured.has(preset.id) || viaRegistry !== undefined;
		const detail = [sentence(preset.description ?? undefined), preset.requires ? sentence(`Needs ${preset.requires}`) : ''].filter(Boolean).join(' ');
		const item: ManageItem = {
			label: isConfigured ? `$(check) ${preset.name}` : preset.name,
			description: viaRegistry ? `${preset.id} · added from the ACP registry as ${viaRegistry}` : isConfigured ? `${preset.id} · configured` : preset.id,
			presetId: preset.id,
			configured: isConfigured,
			...(viaRegistry ? { sameAs: viaRegistry } : {}),
		};
		if (detail) {
			item.detail = detail;
		}
		items.push(item);
	}
	if (items.length > 0) {
		items.push({ label: '', kind: vscode.QuickPickItemKind.Separator });
	}
	items.push({
		label: `$(gear) ${OPEN_SETTINGS_ITEM}`,
		description: 'lmbridge.agents',
		detail: problem ?? 'Other ACP agents, API keys (an agent\'s "env"), modes and tool filters.',
		openSettings: true,
	});
	return items;
}

/** The new user-level `lmbridge.agents` with the preset added (unchanged when it is there). */
export function withPreset(globalAgents: unknown, id: string): unknown[] {
	const current = Array.isArray(globalAgents) ? [...globalAgents] : [];
	return configuredIds(current).has(id) ? current : [...current, { id }];
}

/**
 * The new user-level `lmbridge.agents` with a registry agent's entry added, or replacing the
 * entry it installed before (an update: what the user added to it, such as `env` keys, a
 * `mode` or `tools`, is kept; the registry's command, args and version are the new ones).
 * Throws when the id is taken by an entry that did not come from the registry.
 */
export function withRegistryEntry(globalAgents: unknown, entry: RegistryEntry): unknown[] {
	const current = Array.isArray(globalAgents) ? [...globalAgents] : [];
	const index = current.findIndex(a => typeof a === 'object' && a !== null && (a as { id?: unknown }).id === entry.id);
	if (index < 0) {
		return [...current, entry];
	}
	const old = current[index] as Record<string, unknown>;
	if (typeof old.registry !== 'object' || old.registry === null) {
		throw new Error(`lmbridge.agents already has an agent "${entry.id}" of your own: rename it first`);
	}
	const oldEnv = typeof old.env === 'object' && old.env !== null ? old.env as Record<string, string> : {};
	const env = { ...(entry.env ?? {}), ...oldEnv };
	const merged: Record<string, unknown> = { ...old, ...entry };
	if (Object.keys(env).length > 0) {
		merged.env = env;
	}
	current[index] = merged;
	return current;
}

/** The confirmation's text: what installing the agent will download and run. */
export function installPrompt(agent: RegistryAgent, update?: string): { message: string; detail: string } {
	const message = update ? `Update ${agent.name} from ${update} to ${agent.version}?` : `Install ${agent.name} ${agent.version} from the ACP registry?`;
	const lines: string[] = [];
	if (agent.distribution === 'binary') {
		lines.push(`lmbridge downloads ${agent.archive} into its storage, unpacks it and runs ${commandLine(agent.cmd ?? '', agent.args)} from there as the agent.`);
		lines.push(agent.sha256 ? `The download must match the registry's sha256 ${agent.sha256.toLowerCase()}.` : 'The registry gives no checksum for this download.');
	} else {
		lines.push(`The agent runs as: ${commandLine(agent.command ?? '', agent.args)}`);
		lines.push(agent.distribution === 'npx' ? `npx fetches the package from the npm registry when the agent first starts (Node.js needed).` : `uvx fetches the package from PyPI when the agent first starts (uv needed).`);
	}
	const env = Object.entries(agent.env);
	if (env.length > 0) {
		// Every variable with its value: a registry entry sets nothing the user does not read here.
		lines.push(`Its environment:\n${env.map(([name, value]) => `${name}=${commandLine(value, [])}`).join('\n')}`);
	}
	lines.push('It can read, edit and run in your workspace when you use it in a chat, as your other agents can.');
	return { message, detail: lines.join('\n\n') };
}

export interface ManageDeps {
	/** `agents/presets` from the daemon. */
	presets(): Promise<unknown>;
	/** `agents/registry` from the daemon, for a feed and this platform. */
	registry?(feed: unknown, platform: string | undefined): Promise<unknown>;
	/** The feed's URL (`lmbridge.registry.url`, the user's value only); empty: no registry. */
	registryUrl?(): string;
	/** The extension's storage (the feed's cache, binary agents). */
	storageDir?: string;
	fetchImpl?: Fetch;
	log: vscode.LogOutputChannel;
	openSettings(): Thenable<unknown>;
}

async function registryView(deps: ManageDeps, installed: Map<string, string | null>): Promise<RegistryView | undefined> {
	const url = deps.registryUrl?.().trim();
	if (!url || !deps.registry || !deps.storageDir) {
		return undefined;
	}
	try {
		const feed = await loadFeed(url, deps.storageDir, deps.fetchImpl);
		if (feed.problem) {
			deps.log.warn(`the ACP registry at ${url} could not be read (${feed.problem}); using the copy fetched ${feed.fetchedAt}`);
		}
		const { agents, problems } = registryFromWire(await deps.registry(feed.feed, registryPlatform()));
		for (const problem of problems) {
			deps.log.info(`ACP registry: ${problem}`);
		}
		return { agents, installed, ...(feed.from === 'cache' ? { cachedAt: feed.fetchedAt, problem: feed.problem } : {}) };
	} catch (err) {
		const reason = err instanceof Error ? err.message : String(err);
		deps.log.warn(`the ACP registry at ${url} could not be read: ${reason}`);
		return { agents: [], installed, problem: reason };
	}
}

/** The installed registry agents the feed has at another version: `[agent (the feed's), installed version]`. */
export function updatesAvailable(agents: RegistryAgent[], installed: Map<string, string | null>): Array<[RegistryAgent, string]> {
	return agents.flatMap(agent => {
		const version = installed.get(agent.id);
		return typeof version === 'string' && version !== agent.version ? [[agent, version] as [RegistryAgent, string]] : [];
	});
}

/**
 * Once a window starts: when agents installed from the registry have another version in the
 * feed, a notification says so, with a button opening Manage ACP Agents (where each update
 * is offered and confirmed). Nothing is fetched when no agent came from the registry.
 * Resolves with the ids that have an update.
 */
export async function offerUpdates(deps: ManageDeps, openManage: () => Thenable<unknown>): Promise<string[]> {
	const installed = installedVersions(vscode.workspace.getConfiguration('lmbridge').inspect<unknown[]>('agents')?.globalValue);
	if (![...installed.values()].some(v => typeof v === 'string')) {
		return [];
	}
	const view = await registryView(deps, installed);
	const updates = updatesAvailable(view?.agents ?? [], installed);
	if (updates.length > 0) {
		const list = updates.map(([agent, from]) => `${agent.name} ${from} → ${agent.version}`).join(', ');
		deps.log.info(`ACP registry: updates available: ${list}`);
		const manage = 'Manage ACP Agents';
		void Promise.resolve(vscode.window.showInformationMessage(`ACP agent update${updates.length > 1 ? 's' : ''} available: ${list}.`, manage))
			.then(choice => (choice === manage ? openManage() : undefined));
	}
	return updates.map(([agent]) => agent.id);
}

/** The command. Resolves with the id added or updated, if any. */
export async function manageAgents(deps: ManageDeps): Promise<string | undefined> {
	const config = () => vscode.workspace.getConfiguration('lmbridge');
	const globalAgents = () => config().inspect<unknown[]>('agents')?.globalValue;
	const items = Promise.all([
		deps.presets().then(presetsFromWire, err => err instanceof Error ? err : new Error(String(err))),
		registryView(deps, installedVersions(globalAgents())),
	]).then(([presets, registry]) => {
		if (presets instanceof Error) {
			deps.log.warn(`could not list the agent presets: ${presets.message}`);
			return manageItems([], new Set(), `The daemon did not list its agents (${presets.message}); add them in the settings.`, registry);
		}
		return manageItems(presets, configuredIds(globalAgents()), undefined, registry);
	});
	const picked = await vscode.window.showQuickPick(items, {
		title: 'ACP Agents',
		placeHolder: 'Pick an agent to add to the model picker',
		matchOnDescription: true,
		matchOnDetail: true,
	});
	if (!picked) {
		return undefined;
	}
	if (picked.registryAgent) {
		return installFromRegistry(deps, picked);
	}
	if (picked.openSettings || !picked.presetId) {
		await deps.openSettings();
		return undefined;
	}
	const name = picked.label.replace(/^\$\(check\) /, '');
	if (picked.configured) {
		const where = picked.sameAs ? ` as "${picked.sameAs}"` : '';
		const choice = await vscode.window.showInformationMessage(
			`${name} is already in lmbridge.agents${where}: pick it in the chat's model picker, under ACP Agents.`, OPEN_SETTINGS_ITEM);
		if (choice === OPEN_SETTINGS_ITEM) {
			await deps.openSettings();
		}
		return undefined;
	}
	const inspected = config().inspect<unknown[]>('agents');
	await config().update('agents', withPreset(inspected?.globalValue, picked.presetId), vscode.ConfigurationTarget.Global);
	deps.log.info(`added the agent preset "${picked.presetId}" to lmbridge.agents (user settings)`);
	// A machine setting (config.ts MACHINE_SETTINGS): the user's value is the only one.
	void vscode.window.showInformationMessage(`${name} was added: pick it in the chat's model picker, under ACP Agents.`);
	return picked.presetId;
}

/** Installs (or updates) the picked registry agent, once the user confirms what will run. */
async function installFromRegistry(deps: ManageDeps, picked: ManageItem): Promise<string | undefined> {
	const agent = picked.registryAgent!;
	const config = () => vscode.workspace.getConfiguration('lmbridge');
	const installed = installedVersions(config().inspect<unknown[]>('agents')?.globalValue).get(agent.id);
	if (installed === undefined && picked.sameAs) {
		// The same agent is there as its built-in preset: one agent, not two model entries.
		const choice = await vscode.window.showInformationMessage(
			`${agent.name} is already in lmbridge.agents as the built-in "${picked.sameAs}" (the same agent): pick it in the chat's model picker, under ACP Agents.`, OPEN_SETTINGS_ITEM);
		if (choice === OPEN_SETTINGS_ITEM) {
			await deps.openSettings();
		}
		return undefined;
	}
	if (installed !== undefined && !picked.update) {
		const choice = await vscode.window.showInformationMessage(installed === null
			? `lmbridge.agents already has an agent "${agent.id}" of your own: ${agent.name} from the registry would replace it; rename yours first.`
			: `${agent.name} ${agent.version} is installed: pick it in the chat's model picker, under ACP Agents.`, OPEN_SETTINGS_ITEM);
		if (choice === OPEN_SETTINGS_ITEM) {
			await deps.openSettings();
		}
		return undefined;
	}
	const action = picked.update ? 'Update' : 'Install';
	const prompt = installPrompt(agent, picked.update ? installed ?? undefined : undefined);
	if (await vscode.window.showInformationMessage(prompt.message, { modal: true, detail: prompt.detail }, action) !== action) {
		return undefined;
	}
	let entry: RegistryEntry;
	try {
		entry = await vscode.window.withProgress(
			{ location: vscode.ProgressLocation.Notification, title: `${action === 'Update' ? 'Updating' : 'Installing'} ${agent.name}` },
			progress => installAgent(agent, { storageDir: deps.storageDir!, fetchImpl: deps.fetchImpl, report: message => progress.report({ message }) }));
		await config().update('agents', withRegistryEntry(config().inspect<unknown[]>('agents')?.globalValue, entry), vscode.ConfigurationTarget.Global);
	} catch (err) {
		const reason = err instanceof Error ? err.message : String(err);
		deps.log.error(`could not install ${agent.id} ${agent.version} from the ACP registry: ${reason}`);
		void vscode.window.showErrorMessage(`${agent.name} was not installed: ${reason}`);
		return undefined;
	}
	deps.log.info(`${action === 'Update' ? 'updated' : 'installed'} ${agent.id} ${agent.version} (${agent.distribution}) from the ACP registry: ${commandLine(entry.command, entry.args)}`);
	if (agent.distribution === 'binary') {
		removeOtherVersions(deps.storageDir!, agent.id, agent.version);
	}
	void vscode.window.showInformationMessage(`${agent.name} ${agent.version} was ${action === 'Update' ? 'updated' : 'installed'}: pick it in the chat's model picker, under ACP Agents.`);
	return agent.id;
}
