/**
 * "lmbridge: Manage ACP Agents" (also the gear beside "ACP Agents" in the model picker):
 * a quick pick of the agents the daemon knows by id (`agents/presets`), the configured ones
 * marked, and "Open Settings". Picking a preset adds `{"id": …}` to the user's
 * `lmbridge.agents`; the settings change restarts the daemon with it (extension.ts).
 * The item building and the settings edit are pure and tested; the UI is a thin wrapper.
 */
import * as vscode from 'vscode';
import type { AgentPreset, AgentPresetsResult } from './wire';

export const OPEN_SETTINGS_ITEM = 'Open Settings';

export interface ManageItem extends vscode.QuickPickItem {
	/** The preset this item adds; absent for "Open Settings" and separators. */
	presetId?: string;
	configured?: boolean;
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

/** The daemon's answer, keeping only well-formed presets. */
export function presetsFromWire(result: unknown): AgentPreset[] {
	const presets = (result as AgentPresetsResult | undefined)?.presets;
	if (!Array.isArray(presets)) {
		return [];
	}
	return presets.filter((p): p is AgentPreset =>
		typeof p === 'object' && p !== null && typeof p.id === 'string' && !!p.id && typeof p.name === 'string');
}

/** One line saying how the preset starts: `npx -y @zed-industries/claude-agent-acp@0.23.1`. */
export function presetCommandLine(preset: AgentPreset): string {
	return [preset.command ?? '', ...(Array.isArray(preset.args) ? preset.args : [])].filter(Boolean).join(' ');
}

/** The quick pick's items: each preset (configured ones marked), then "Open Settings". */
export function manageItems(presets: AgentPreset[], configured: Set<string>, problem?: string): ManageItem[] {
	const items: ManageItem[] = presets.map(preset => {
		const isConfigured = configured.has(preset.id);
		const sentence = (text: string | undefined) => (text?.trim() ? text.trim().replace(/([^.!?])$/, '$1.') : '');
		const detail = [sentence(preset.description), preset.requires ? sentence(`Needs ${preset.requires}`) : ''].filter(Boolean).join(' ');
		const item: ManageItem = {
			label: isConfigured ? `$(check) ${preset.name}` : preset.name,
			description: isConfigured ? `${preset.id} · configured` : preset.id,
			presetId: preset.id,
			configured: isConfigured,
		};
		if (detail) {
			item.detail = detail;
		}
		return item;
	});
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

export interface ManageDeps {
	/** `agents/presets` from the daemon. */
	presets(): Promise<unknown>;
	log: vscode.LogOutputChannel;
	openSettings(): Thenable<unknown>;
}

/** The command. Resolves with the id added, if any. */
export async function manageAgents(deps: ManageDeps): Promise<string | undefined> {
	const config = () => vscode.workspace.getConfiguration('lmbridge');
	const items = deps.presets().then(
		result => manageItems(presetsFromWire(result), configuredIds(config().inspect<unknown[]>('agents')?.globalValue)),
		err => {
			const reason = err instanceof Error ? err.message : String(err);
			deps.log.warn(`could not list the agent presets: ${reason}`);
			return manageItems([], new Set(), `The daemon did not list its agents (${reason}); add them in the settings.`);
		},
	);
	const picked = await vscode.window.showQuickPick(items, {
		title: 'ACP Agents',
		placeHolder: 'Pick an agent to add to the model picker',
		matchOnDescription: true,
		matchOnDetail: true,
	});
	if (!picked) {
		return undefined;
	}
	if (picked.openSettings || !picked.presetId) {
		await deps.openSettings();
		return undefined;
	}
	const name = picked.label.replace(/^\$\(check\) /, '');
	if (picked.configured) {
		const choice = await vscode.window.showInformationMessage(
			`${name} is already in lmbridge.agents: pick it in the chat's model picker, under ACP Agents.`, OPEN_SETTINGS_ITEM);
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
