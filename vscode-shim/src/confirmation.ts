/**
 * The confirmation VS Code shows for a `symposium-agent-action` tool call: what the ACP
 * agent wants to do, rendered from the call's input (title, kind, rawInput, content,
 * locations) so the user can judge it before pressing Allow or Skip.
 *
 * Pure: input in, strings out (the tool wraps the markdown in a MarkdownString). Nothing
 * from the agent is trusted: every value is escaped or fenced, and long values are cut.
 */
import type { AgentActionInput, ToolCallContent, ToolCallLocation } from './wire';

export interface Confirmation {
	title: string;
	/** Markdown. */
	message: string;
	invocationMessage: string;
}

/** Lines shown at most per code block. */
export const MAX_BLOCK_LINES = 40;
/** Characters shown at most per code block. */
export const MAX_BLOCK_CHARS = 4000;
/** Files listed at most. */
export const MAX_LOCATIONS = 20;

const KIND_LABELS: Record<string, string> = {
	read: 'read files',
	edit: 'edit files',
	delete: 'delete files',
	move: 'move files',
	search: 'search',
	execute: 'run a command',
	think: 'think',
	fetch: 'fetch from the network',
	switch_mode: 'switch mode',
	other: 'act',
};

const DEFAULT_TITLE = 'The agent asks for permission';

// ---------------------------------------------------------------- markdown helpers

/** Inline text with markdown syntax escaped. */
export function escapeMarkdown(text: string): string {
	return text.replace(/[\\`*_{}[\]()#+\-.!|<>~]/g, ch => `\\${ch}`).replace(/\r?\n/g, ' ');
}

/** Inline code that survives backticks in the value. */
export function inlineCode(text: string): string {
	const oneLine = text.replace(/\r?\n/g, ' ');
	const longest = Math.max(0, ...(oneLine.match(/`+/g) ?? []).map(run => run.length));
	const fence = '`'.repeat(longest + 1);
	const pad = oneLine.startsWith('`') || oneLine.endsWith('`') ? ' ' : '';
	return `${fence}${pad}${oneLine}${pad}${fence}`;
}

/** Cut to MAX_BLOCK_LINES / MAX_BLOCK_CHARS, saying how much was left out. */
export function truncate(text: string, maxLines = MAX_BLOCK_LINES, maxChars = MAX_BLOCK_CHARS): string {
	const lines = text.split('\n');
	let kept = lines.slice(0, maxLines).join('\n');
	let cutChars = false;
	if (kept.length > maxChars) {
		kept = kept.slice(0, maxChars);
		cutChars = true;
	}
	const keptLines = kept.split('\n').length;
	const more = lines.length - keptLines;
	if (more > 0) {
		return `${kept}\n… (${more} more line${more === 1 ? '' : 's'})`;
	}
	return cutChars ? `${kept}…` : kept;
}

/** A fenced code block whose fence is longer than any backtick run inside. */
export function codeBlock(text: string, lang = ''): string {
	const longest = Math.max(0, ...(text.match(/`+/g) ?? []).map(run => run.length));
	const fence = '`'.repeat(Math.max(3, longest + 1));
	return `${fence}${lang}\n${text}\n${fence}`;
}

// ---------------------------------------------------------------- diff

/**
 * A unified-style diff of two texts: the common head and tail are trimmed to three
 * lines of context and everything between is shown as removed then added. Not minimal,
 * always correct, and linear in the input (agents send whole files).
 */
export function simpleDiff(path: string, oldText: string | null | undefined, newText: string): string {
	// A final newline ends the last line; it does not start another.
	const lines_ = (text: string) => (text === '' ? [] : text.replace(/\n$/, '').split('\n'));
	const before = oldText == null ? [] : lines_(oldText);
	const after = lines_(newText);
	let head = 0;
	while (head < before.length && head < after.length && before[head] === after[head]) {
		head++;
	}
	let tail = 0;
	while (tail < before.length - head && tail < after.length - head
		&& before[before.length - 1 - tail] === after[after.length - 1 - tail]) {
		tail++;
	}
	const context = 3;
	const lines: string[] = [oldText == null ? '--- /dev/null' : `--- ${path}`, `+++ ${path}`];
	const startCtx = Math.max(0, head - context);
	lines.push(`@@ -${before.length ? startCtx + 1 : 0} +${after.length ? startCtx + 1 : 0} @@`);
	for (let i = startCtx; i < head; i++) {
		lines.push(` ${before[i]}`);
	}
	for (let i = head; i < before.length - tail; i++) {
		lines.push(`-${before[i]}`);
	}
	for (let i = head; i < after.length - tail; i++) {
		lines.push(`+${after[i]}`);
	}
	for (let i = before.length - tail; i < Math.min(before.length, before.length - tail + context); i++) {
		lines.push(` ${before[i]}`);
	}
	return lines.join('\n');
}

// ---------------------------------------------------------------- reading the input

function isObject(value: unknown): value is Record<string, unknown> {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function shellQuote(arg: string): string {
	return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** The command line an `execute` call will run, from the agents' usual rawInput shapes. */
export function commandOf(rawInput: unknown): { command: string; cwd?: string; description?: string } | undefined {
	if (!isObject(rawInput)) {
		return undefined;
	}
	const raw = rawInput.command ?? rawInput.cmd ?? rawInput.commandLine;
	let command: string | undefined;
	if (typeof raw === 'string' && raw.trim()) {
		command = raw;
	} else if (Array.isArray(raw) && raw.length > 0 && raw.every(a => typeof a === 'string')) {
		const argv = raw as string[];
		// codex: ["bash", "-lc", "<script>"] shows the script itself.
		if (argv.length === 3 && /(^|\/)(ba|z)?sh$/.test(argv[0]) && /^-l?c$/.test(argv[1])) {
			command = argv[2];
		} else {
			command = argv.map(shellQuote).join(' ');
		}
	}
	if (command === undefined) {
		return undefined;
	}
	const cwd = typeof rawInput.cwd === 'string' ? rawInput.cwd
		: typeof rawInput.workdir === 'string' ? rawInput.workdir : undefined;
	const description = typeof rawInput.description === 'string' ? rawInput.description : undefined;
	return { command, cwd, description };
}

interface Diff { path: string; oldText: string | null | undefined; newText: string }

function diffsOf(input: AgentActionInput): Diff[] {
	const diffs: Diff[] = [];
	for (const c of input.content ?? []) {
		if (isObject(c) && c.type === 'diff' && typeof c.path === 'string' && typeof c.newText === 'string') {
			diffs.push({ path: c.path, oldText: c.oldText as string | null | undefined, newText: c.newText });
		}
	}
	// Agents that put the edit only in rawInput (Claude Code's Edit/Write tools).
	const raw = input.rawInput;
	if (diffs.length === 0 && isObject(raw)) {
		const path = raw.file_path ?? raw.path;
		if (typeof path === 'string' && typeof raw.new_string === 'string') {
			diffs.push({ path, oldText: typeof raw.old_string === 'string' ? raw.old_string : '', newText: raw.new_string });
		} else if (typeof path === 'string' && typeof raw.content === 'string') {
			diffs.push({ path, oldText: null, newText: raw.content });
		}
	}
	return diffs;
}

function textsOf(content: ToolCallContent[] | null | undefined): string[] {
	const out: string[] = [];
	for (const c of content ?? []) {
		if (isObject(c) && c.type === 'content' && isObject(c.content)
			&& c.content.type === 'text' && typeof c.content.text === 'string' && c.content.text.trim()) {
			out.push(c.content.text);
		}
	}
	return out;
}

function locationsOf(locations: ToolCallLocation[] | null | undefined): ToolCallLocation[] {
	return (locations ?? []).filter(l => isObject(l) && typeof l.path === 'string');
}

function jsonOf(value: unknown): string | undefined {
	if (value === undefined || value === null) {
		return undefined;
	}
	if (isObject(value) && Object.keys(value).length === 0) {
		return undefined;
	}
	try {
		return typeof value === 'string' ? value : JSON.stringify(value, null, 2);
	} catch {
		return undefined;
	}
}

// ---------------------------------------------------------------- the confirmation

export function renderConfirmation(input: AgentActionInput): Confirmation {
	const title = (typeof input.title === 'string' && input.title.trim()) ? input.title.trim() : DEFAULT_TITLE;
	const kind = typeof input.kind === 'string' && input.kind ? input.kind : 'other';
	const sections: string[] = [];

	sections.push(`The agent asks to **${escapeMarkdown(KIND_LABELS[kind] ?? kind)}** (kind: ${inlineCode(kind)}).`);

	const command = commandOf(input.rawInput);
	if (command) {
		const lines = ['**Command**'];
		if (command.description) {
			lines.push(`*${escapeMarkdown(command.description)}*`);
		}
		lines.push(codeBlock(truncate(command.command), 'sh'));
		if (command.cwd) {
			lines.push(`in ${inlineCode(command.cwd)}`);
		}
		sections.push(lines.join('\n\n'));
	}

	const diffs = diffsOf(input);
	for (const diff of diffs) {
		sections.push(`**Changes to ${inlineCode(diff.path)}**\n\n${codeBlock(truncate(simpleDiff(diff.path, diff.oldText, diff.newText)), 'diff')}`);
	}

	const locations = locationsOf(input.locations);
	if (locations.length > 0) {
		const items = locations.slice(0, MAX_LOCATIONS).map(l =>
			`- ${inlineCode(l.path)}${typeof l.line === 'number' ? ` (line ${l.line})` : ''}`);
		if (locations.length > MAX_LOCATIONS) {
			items.push(`- … and ${locations.length - MAX_LOCATIONS} more`);
		}
		sections.push(`**Files**\n\n${items.join('\n')}`);
	}

	for (const text of textsOf(input.content)) {
		sections.push(codeBlock(truncate(text), 'text'));
	}

	if (!command && diffs.length === 0) {
		const details = jsonOf(input.rawInput);
		if (details) {
			sections.push(`**Details**\n\n${codeBlock(truncate(details), 'json')}`);
		}
	}

	const options = (input.options ?? []).filter(o => isObject(o) && typeof o.name === 'string');
	if (options.length > 0) {
		sections.push(`The agent offered: ${options.map(o => escapeMarkdown(o.name)).join(' · ')}.`);
	}
	sections.push('**Allow** lets the agent do this once. **Skip** declines; the agent carries on without it.');

	return {
		title,
		message: sections.join('\n\n'),
		// Shown while it runs and, after a Stop or a Skip, on the card's line: never "Allowed".
		invocationMessage: `Agent action: ${title}`,
	};
}
