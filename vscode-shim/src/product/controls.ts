/**
 * The active agent chat's controls, commands and usage (docs/vscode-shim.md, "Modes,
 * commands and usage").
 *
 * The daemon tells each chat's state in `client/sessionState` notifications; the chat
 * that got the latest request (a notification naming a `requestId`) is the active one. A
 * status bar item shows its mode and context usage, with everything in its tooltip; a
 * click offers its modes and options (`lmbridge: Agent Modes and Options`), set on its
 * live agent session at once (`chat/setControl`); `lmbridge: Agent Commands` lists its
 * slash commands and puts the one picked into the chat's input as `//name` (which
 * reaches the agent even where VS Code or Copilot has a command of that name).
 * While the chat's mode is one in which the agent approves its own actions, the item says so
 * (a warning icon and colour, "agent approves") and its tooltip names the mode that asks.
 * The text and the items are pure functions, tested; the class is a thin owner of the state.
 */
import * as vscode from 'vscode';
import type { Approver, SessionStateParams, WireControl, WireUsage } from '../chat/wire';

/** What the user types to reach the agent's own command, whatever VS Code makes of `/name`. */
export const COMMAND_ESCAPE = '//';

function isObject(value: unknown): value is Record<string, unknown> {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The notification's params, kept only as far as they are well-formed; undefined if unusable. */
export function stateFromWire(params: unknown): SessionStateParams | undefined {
	if (!isObject(params) || typeof params.chatId !== 'string' || !params.chatId || typeof params.modelId !== 'string') {
		return undefined;
	}
	const controls = (Array.isArray(params.controls) ? params.controls : []).filter((c): c is WireControl =>
		isObject(c) && typeof c.id === 'string' && typeof c.name === 'string' && Array.isArray(c.choices)
		&& c.choices.every(x => isObject(x) && typeof x.value === 'string' && typeof x.name === 'string'))
		.map(c => ({
			...c,
			choices: c.choices.map(({ value, name, approver }) => ({ value, name, ...(approver === 'user' || approver === 'agent' ? { approver } : {}) })),
		}));
	const commands = (Array.isArray(params.commands) ? params.commands : []).filter((c): c is { name: string; description: string; hint?: string } =>
		isObject(c) && typeof c.name === 'string' && typeof c.description === 'string');
	const state: SessionStateParams = { chatId: params.chatId, modelId: params.modelId, controls, commands };
	if (typeof params.requestId === 'number' || typeof params.requestId === 'string') {
		state.requestId = params.requestId;
	}
	if (isObject(params.usage)) {
		const u = params.usage;
		const usage: WireUsage = {};
		if (typeof u.used === 'number' && u.used >= 0) { usage.used = u.used; }
		if (typeof u.size === 'number' && u.size > 0) { usage.size = u.size; }
		if (isObject(u.cost) && typeof u.cost.amount === 'number' && typeof u.cost.currency === 'string') {
			usage.cost = { amount: u.cost.amount, currency: u.cost.currency };
		}
		if (isObject(u.tokens)) {
			const tokens = Object.fromEntries(Object.entries(u.tokens).filter(([, n]) => typeof n === 'number' && Number.isFinite(n) && n >= 0)) as Record<string, number>;
			if (Object.keys(tokens).length) { usage.tokens = tokens; }
		}
		state.usage = usage;
	}
	if (typeof params.title === 'string' && params.title.trim()) {
		state.title = params.title.trim();
	}
	return state;
}

/** 1234 → "1.2k", 200000 → "200k", 1000000 → "1M". */
export function formatTokens(n: number): string {
	if (n >= 1_000_000) {
		return `${+(n / 1_000_000).toFixed(1)}M`;
	}
	if (n >= 1000) {
		return `${+(n / 1000).toFixed(n >= 10_000 ? 0 : 1)}k`;
	}
	return String(Math.round(n));
}

function label(control: WireControl, value: string | undefined): string | undefined {
	return value === undefined ? undefined : control.choices.find(c => c.value === value)?.name ?? value;
}

/** The chat's mode (its control of category `mode`, else its first control), for the status bar. */
export function modeControl(state: SessionStateParams): WireControl | undefined {
	return state.controls.find(c => c.category === 'mode') ?? state.controls[0];
}

/** "used/size" ("53k/200k"), the size alone when the agent says no more, else undefined. */
export function usageText(usage: WireUsage | undefined): string | undefined {
	if (!usage || usage.size === undefined) {
		return usage?.used !== undefined ? `${formatTokens(usage.used)} tokens` : undefined;
	}
	return usage.used !== undefined ? `${formatTokens(usage.used)}/${formatTokens(usage.size)}` : `${formatTokens(usage.size)} context`;
}

/** Who approves the agent's actions in the chat's current mode, where the daemon said. */
export function approverOf(state: SessionStateParams): Approver | undefined {
	const mode = state.controls.find(c => c.category === 'mode');
	return mode?.choices.find(c => c.value === mode.current)?.approver;
}

/** The status bar item's text: `$(hubot) Plan Mode · 53k/200k`; in a mode in which the
 * agent approves its own actions, `$(warning) Auto: agent approves · 53k/200k`. */
export function statusText(state: SessionStateParams): string {
	const mode = modeControl(state);
	const self = approverOf(state) === 'agent';
	const name = mode ? label(mode, mode.current) : undefined;
	const parts = [name && self ? `${name}: agent approves` : name, usageText(state.usage)].filter((p): p is string => !!p);
	return `${self ? '$(warning)' : '$(hubot)'} ${parts.length ? parts.join(' · ') : 'ACP agent'}`;
}

/** The tooltip's sentence on who approves in the chat's mode; undefined when not known. */
export function approvalText(state: SessionStateParams): string | undefined {
	const mode = state.controls.find(c => c.category === 'mode');
	const who = approverOf(state);
	if (!mode || !who) {
		return undefined;
	}
	const name = escapeMarkdown(label(mode, mode.current) ?? '');
	if (who === 'user') {
		return `**You approve**: in ${name} the agent asks you before it changes anything.`;
	}
	const asking = mode.choices.find(c => c.approver === 'user');
	const back = asking ? ` Choose ${escapeMarkdown(asking.name)} to approve each one yourself.` : '';
	return `**The agent approves its own actions** in ${name}: some edits and commands run without asking you.${back}`;
}

function escapeMarkdown(text: string): string {
	return text.replace(/[\\`*_{}[\]()#+\-.!|<>~]/g, m => `\\${m}`);
}

/** The tooltip (markdown, untrusted): the agent, the session's title, each control, the usage, the commands. */
export function statusTooltip(state: SessionStateParams, modelName: string | undefined): string {
	const lines = [`**${escapeMarkdown(modelName ?? state.modelId)}** (this chat's ACP agent)`, ''];
	if (state.title) {
		lines.splice(1, 0, `_${escapeMarkdown(state.title)}_`);
	}
	const approval = approvalText(state);
	if (approval) {
		lines.push(approval, '');
	}
	for (const c of state.controls) {
		lines.push(`- ${escapeMarkdown(c.name)}: ${escapeMarkdown(label(c, c.current) ?? 'unknown')}`);
	}
	const u = state.usage;
	if (u?.used !== undefined || u?.size !== undefined) {
		const used = u.used !== undefined ? u.used.toLocaleString('en-US') : 'unknown';
		const size = u.size !== undefined ? ` of ${u.size.toLocaleString('en-US')}` : '';
		const percent = u.used !== undefined && u.size ? ` (${Math.round((100 * u.used) / u.size)}%)` : '';
		lines.push(`- Context: ${used}${size} tokens${percent}`);
	}
	if (u?.cost) {
		lines.push(`- Cost: ${u.cost.amount.toFixed(2)} ${escapeMarkdown(u.cost.currency)}`);
	}
	const t = u?.tokens;
	if (t && (t.inputTokens !== undefined || t.outputTokens !== undefined || t.totalTokens !== undefined)) {
		const io = [t.inputTokens !== undefined ? `${t.inputTokens.toLocaleString('en-US')} in` : '', t.outputTokens !== undefined ? `${t.outputTokens.toLocaleString('en-US')} out` : ''].filter(Boolean).join(', ');
		const total = t.totalTokens !== undefined ? `${t.totalTokens.toLocaleString('en-US')} tokens` : 'tokens';
		lines.push(`- Last answer: ${total}${io ? ` (${io})` : ''}`);
	}
	if (state.commands.length > 0) {
		const names = state.commands.slice(0, 20).map(c => `\`${COMMAND_ESCAPE}${c.name.replace(/`/g, '')}\``);
		lines.push('', `Commands: ${names.join(' ')}${state.commands.length > 20 ? ' …' : ''}`);
	}
	lines.push('', 'Click to change the mode or options of this chat.');
	return lines.join('\n');
}

export interface ControlItem extends vscode.QuickPickItem {
	controlId?: string;
	value?: string;
}

/** The quick pick of a chat's controls: a separator per control, then its values (the current one checked). */
export function controlItems(state: SessionStateParams): ControlItem[] {
	const items: ControlItem[] = [];
	for (const c of state.controls) {
		items.push({ label: c.name, kind: vscode.QuickPickItemKind.Separator });
		for (const choice of c.choices) {
			const current = choice.value === c.current;
			const who = choice.approver === 'agent' ? 'the agent approves its own actions' : choice.approver === 'user' ? 'asks you first' : undefined;
			const description = [choice.value !== choice.name ? choice.value : undefined, who].filter(Boolean).join(' · ');
			items.push({
				label: `${current ? '$(check)' : '$(blank)'} ${choice.name}`,
				description: description || undefined,
				controlId: c.id,
				value: choice.value,
			});
		}
	}
	return items;
}

export interface CommandItem extends vscode.QuickPickItem {
	command: string;
}

/** The quick pick of a chat's commands: `//name`, its description, its input hint. */
export function commandItems(state: SessionStateParams): CommandItem[] {
	return state.commands.map(c => ({
		label: `${COMMAND_ESCAPE}${c.name}`,
		description: c.description,
		detail: c.hint ? `Input: ${c.hint}` : undefined,
		command: c.name,
	}));
}

export interface ControlsDeps {
	/** `chat/setControl`: the chat's state after it. */
	setControl(chatId: string, controlId: string, value: string): Promise<unknown>;
	/** The name VS Code shows for a model id (the daemon's model list). */
	modelName(modelId: string): string | undefined;
	log: vscode.LogOutputChannel;
	/** The command the status bar item runs. */
	clickCommand: string;
}

/** Chats (by the daemon's chat id) → their state; the active one shown in the status bar. */
export class ChatControls implements vscode.Disposable {
	private readonly chats = new Map<string, SessionStateParams>();
	private activeChat: string | undefined;
	readonly item: vscode.StatusBarItem;

	constructor(private readonly deps: ControlsDeps) {
		this.item = vscode.window.createStatusBarItem('lmbridge.chat', vscode.StatusBarAlignment.Right, 100);
		this.item.name = 'lmbridge: ACP agent chat';
		this.item.command = deps.clickCommand;
	}

	get active(): SessionStateParams | undefined {
		return this.activeChat === undefined ? undefined : this.chats.get(this.activeChat);
	}

	/** A `client/sessionState` notification. */
	onState(params: unknown): void {
		const state = stateFromWire(params);
		if (!state) {
			this.deps.log.warn('client/sessionState: malformed params, ignored');
			return;
		}
		if (!this.chats.has(state.chatId) && this.chats.size >= 200) {
			this.chats.delete(this.chats.keys().next().value as string); // the oldest chat: bounded
		}
		this.chats.delete(state.chatId);
		this.chats.set(state.chatId, state);
		if (state.requestId !== undefined || this.activeChat === undefined) {
			this.activeChat = state.chatId;
		}
		this.render();
	}

	/** The daemon restarted: its chat ids mean nothing any more. */
	reset(): void {
		this.chats.clear();
		this.activeChat = undefined;
		this.render();
	}

	render(): void {
		const state = this.active;
		if (!state) {
			this.item.hide();
			return;
		}
		this.item.text = statusText(state);
		this.item.backgroundColor = approverOf(state) === 'agent' ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
		const tooltip = new vscode.MarkdownString(statusTooltip(state, this.deps.modelName(state.modelId)));
		tooltip.isTrusted = false;
		this.item.tooltip = tooltip;
		this.item.show();
	}

	/** `lmbridge: Agent Modes and Options`: pick a value, set on the chat's live session. */
	async pickControl(): Promise<void> {
		const state = this.active;
		if (!state) {
			void vscode.window.showInformationMessage('No ACP agent chat yet: send a message to an lmbridge model first.');
			return;
		}
		if (state.controls.length === 0) {
			void vscode.window.showInformationMessage(`${this.deps.modelName(state.modelId) ?? state.modelId} offers no modes or options.`);
			return;
		}
		const picked = await vscode.window.showQuickPick(controlItems(state), {
			title: `${this.deps.modelName(state.modelId) ?? state.modelId}: this chat's modes and options`,
			placeHolder: 'Set for this chat only, at once',
		});
		if (!picked?.controlId || picked.value === undefined) {
			return;
		}
		try {
			const after = await this.deps.setControl(state.chatId, picked.controlId, picked.value);
			this.onState(isObject(after) ? { ...after, chatId: state.chatId, modelId: state.modelId } : undefined);
		} catch (err) {
			const reason = err instanceof Error ? err.message : String(err);
			this.deps.log.warn(`could not set ${picked.controlId}: ${reason}`);
			void vscode.window.showWarningMessage(`Could not set it: ${reason}`);
		}
	}

	/** `lmbridge: Agent Commands`: pick one, typed into the chat's input as `//name `. */
	async pickCommand(): Promise<void> {
		const state = this.active;
		if (!state || state.commands.length === 0) {
			void vscode.window.showInformationMessage(state
				? `${this.deps.modelName(state.modelId) ?? state.modelId} has told no commands in this chat.`
				: 'No ACP agent chat yet: send a message to an lmbridge model first.');
			return;
		}
		const picked = await vscode.window.showQuickPick(commandItems(state), {
			title: `${this.deps.modelName(state.modelId) ?? state.modelId}: commands`,
			placeHolder: 'Typed into the chat as //name: sent to the agent, not to VS Code',
			matchOnDescription: true,
		});
		if (picked) {
			await vscode.commands.executeCommand('workbench.action.chat.open', { query: `${COMMAND_ESCAPE}${picked.command} `, isPartialQuery: true });
		}
	}

	dispose(): void {
		this.item.dispose();
	}
}
