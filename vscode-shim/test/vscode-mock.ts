/**
 * A hand-written stand-in for the `vscode` module, bundled in place of it by esbuild
 * (`--alias:vscode=./test/vscode-mock.ts`). Real classes with VS Code's shapes for the
 * types the shim builds and inspects; recording fakes for the UI it drives. Test-only
 * controls live on the exported `mock` object.
 */
import * as nodeFs from 'fs';

// ---------------------------------------------------------------- language model parts

export class LanguageModelTextPart {
	constructor(public value: string) { }
}

export class LanguageModelToolCallPart {
	constructor(public callId: string, public name: string, public input: object) { }
}

export class LanguageModelPromptTsxPart {
	constructor(public value: unknown) { }
}

export class LanguageModelToolResultPart {
	constructor(public callId: string, public content: unknown[]) { }
}

/** What VS Code actually hands providers for tool results (docs/vscode.md). */
export class LanguageModelToolResultPart2 extends LanguageModelToolResultPart { }

export class LanguageModelDataPart {
	constructor(public data: Uint8Array, public mimeType: string) { }
	static image(data: Uint8Array, mimeType: string): LanguageModelDataPart {
		return new LanguageModelDataPart(data, mimeType);
	}
	static json(value: unknown, mimeType = 'text/x-json'): LanguageModelDataPart {
		return new LanguageModelDataPart(new TextEncoder().encode(JSON.stringify(value)), mimeType);
	}
	static text(value: string, mimeType = 'text/plain'): LanguageModelDataPart {
		return new LanguageModelDataPart(new TextEncoder().encode(value), mimeType);
	}
}

/** The proposed class; its presence is switched by `mock.setThinkingPartAvailable`. */
export class MockThinkingPart {
	constructor(public value: string | string[], public id?: string, public metadata?: { readonly [key: string]: unknown }) { }
}
// eslint-disable-next-line @typescript-eslint/naming-convention
export let LanguageModelThinkingPart: typeof MockThinkingPart | undefined = MockThinkingPart;

export class LanguageModelToolResult {
	constructor(public content: unknown[]) { }
}

export enum LanguageModelChatMessageRole {
	User = 1,
	Assistant = 2,
	System = 3,
}

export enum LanguageModelChatToolMode {
	Auto = 1,
	Required = 2,
}

export class LanguageModelChatMessage {
	constructor(public role: LanguageModelChatMessageRole, public content: unknown[], public name?: string) { }
	static User(content: string | unknown[], name?: string): LanguageModelChatMessage {
		return new LanguageModelChatMessage(LanguageModelChatMessageRole.User,
			typeof content === 'string' ? [new LanguageModelTextPart(content)] : content, name);
	}
	static Assistant(content: string | unknown[], name?: string): LanguageModelChatMessage {
		return new LanguageModelChatMessage(LanguageModelChatMessageRole.Assistant,
			typeof content === 'string' ? [new LanguageModelTextPart(content)] : content, name);
	}
}

export class LanguageModelError extends Error {
	constructor(message: string | undefined, readonly code: string) {
		super(message);
		this.name = 'LanguageModelError';
	}
	static NotFound(message?: string): LanguageModelError {
		return new LanguageModelError(message, 'NotFound');
	}
	static NoPermissions(message?: string): LanguageModelError {
		return new LanguageModelError(message, 'NoPermissions');
	}
	static Blocked(message?: string): LanguageModelError {
		return new LanguageModelError(message, 'Blocked');
	}
}

/** As VS Code's: not trusted unless set (undefined), no HTML, theme icons per the constructor. */
export class MarkdownString {
	isTrusted?: boolean | { readonly enabledCommands: readonly string[] };
	supportHtml = false;
	supportThemeIcons: boolean;
	constructor(public value = '', supportThemeIcons = false) {
		this.supportThemeIcons = supportThemeIcons;
	}
	appendMarkdown(value: string): this {
		this.value += value;
		return this;
	}
}

// ---------------------------------------------------------------- events and cancellation

export class Disposable {
	constructor(private readonly callOnDispose: () => void) { }
	static from(...items: Array<{ dispose(): unknown }>): Disposable {
		return new Disposable(() => items.forEach(i => i.dispose()));
	}
	dispose(): void {
		this.callOnDispose();
	}
}

export type Event<T> = (listener: (e: T) => unknown) => Disposable;

export class EventEmitter<T> {
	private listeners = new Set<(e: T) => unknown>();
	readonly event: Event<T> = listener => {
		this.listeners.add(listener);
		return new Disposable(() => this.listeners.delete(listener));
	};
	fire(e: T): void {
		for (const l of [...this.listeners]) {
			l(e);
		}
	}
	dispose(): void {
		this.listeners.clear();
	}
}

export interface CancellationToken {
	isCancellationRequested: boolean;
	onCancellationRequested: Event<void>;
}

export class CancellationTokenSource {
	private readonly emitter = new EventEmitter<void>();
	private cancelled = false;
	readonly token: CancellationToken;
	constructor() {
		const self = this;
		this.token = {
			get isCancellationRequested() { return self.cancelled; },
			onCancellationRequested: this.emitter.event,
		};
	}
	cancel(): void {
		if (!this.cancelled) {
			this.cancelled = true;
			this.emitter.fire();
		}
	}
	dispose(): void {
		this.emitter.dispose();
	}
}

export class CancellationError extends Error { }

export class Uri {
	private constructor(readonly scheme: string, readonly fsPath: string) { }
	static file(path: string): Uri {
		return new Uri('file', path);
	}
	static parse(value: string): Uri {
		const m = /^([A-Za-z][\w+.-]*):(.*)$/.exec(value); // a scheme: letters, digits, + - .
		return new Uri(m?.[1] ?? 'file', m?.[2] ?? value);
	}
	toString(): string {
		return `${this.scheme}://${this.fsPath}`;
	}
}

// ---------------------------------------------------------------- documents and edits

export class Position {
	constructor(readonly line: number, readonly character: number) { }
}

export class Range {
	constructor(readonly start: Position, readonly end: Position) { }
}

type MockEdit = { kind: 'replace'; uri: Uri; range: Range; text: string } | { kind: 'create'; uri: Uri };

export class WorkspaceEdit {
	readonly edits: MockEdit[] = [];
	replace(uri: Uri, range: Range, text: string): void {
		this.edits.push({ kind: 'replace', uri, range, text });
	}
	insert(uri: Uri, position: Position, text: string): void {
		this.edits.push({ kind: 'replace', uri, range: new Range(position, position), text });
	}
	createFile(uri: Uri, _options?: { ignoreIfExists?: boolean }): void {
		this.edits.push({ kind: 'create', uri });
	}
}

/** A text document: its text in memory (an edit makes it dirty), saved to disk by `save`. */
export class MockTextDocument {
	isDirty = false;
	saves = 0;
	/** The texts it had before each applied edit (what Ctrl+Z would go back through). */
	readonly undo: string[] = [];
	constructor(readonly uri: Uri, public text: string) { }
	getText(): string {
		return this.text;
	}
	positionAt(offset: number): Position {
		const before = this.text.slice(0, Math.max(0, Math.min(offset, this.text.length)));
		const lines = before.split('\n');
		return new Position(lines.length - 1, lines[lines.length - 1].length);
	}
	offsetAt(position: Position): number {
		const lines = this.text.split('\n');
		let offset = 0;
		for (let i = 0; i < position.line && i < lines.length; i++) {
			offset += lines[i].length + 1;
		}
		return offset + position.character;
	}
	async save(): Promise<boolean> {
		if (!this.isDirty) {
			return false;
		}
		nodeFs.writeFileSync(this.uri.fsPath, this.text);
		this.isDirty = false;
		this.saves += 1;
		return true;
	}
}

// ---------------------------------------------------------------- the UI and the host

export type LogLevelName = 'trace' | 'debug' | 'info' | 'warn' | 'error';

export class MockLogOutputChannel {
	readonly lines: Array<{ level: LogLevelName; message: string }> = [];
	shown = 0;
	disposed = false;
	constructor(readonly name: string) { }
	private add(level: LogLevelName, message: unknown): void {
		this.lines.push({ level, message: message instanceof Error ? message.message : String(message) });
	}
	trace(message: string): void { this.add('trace', message); }
	debug(message: string): void { this.add('debug', message); }
	info(message: string): void { this.add('info', message); }
	warn(message: string): void { this.add('warn', message); }
	error(message: string | Error): void { this.add('error', message); }
	append(value: string): void { this.add('info', value); }
	appendLine(value: string): void { this.add('info', value); }
	replace(): void { }
	clear(): void { this.lines.length = 0; }
	show(): void { this.shown++; }
	hide(): void { }
	dispose(): void { this.disposed = true; }
	readonly onDidChangeLogLevel = new EventEmitter<number>().event;
	readonly logLevel = 2;
	/** Lines whose message contains `text`. */
	matching(text: string, level?: LogLevelName): string[] {
		return this.lines.filter(l => l.message.includes(text) && (!level || l.level === level)).map(l => l.message);
	}
}

interface ErrorMessage { message: string; items: string[]; options?: { modal?: boolean; detail?: string } }

/** A message's buttons, and its MessageOptions (`{modal, detail}`) when given before them. */
function messageOf(message: string, rest: unknown[]): ErrorMessage {
	const options = typeof rest[0] === 'object' && rest[0] !== null ? rest.shift() as ErrorMessage['options'] : undefined;
	return { message, items: rest as string[], ...(options ? { options } : {}) };
}

export enum ProgressLocation { SourceControl = 1, Window = 10, Notification = 15 }
export enum QuickPickItemKind { Separator = -1, Default = 0 }
export enum StatusBarAlignment { Left = 1, Right = 2 }

export class ThemeColor {
	constructor(readonly id: string) { }
}
export class MockStatusBarItem {
	text = '';
	name: string | undefined;
	tooltip: unknown;
	backgroundColor: ThemeColor | undefined;
	command: unknown;
	visible = false;
	disposed = false;
	constructor(readonly id: string, readonly alignment: StatusBarAlignment, readonly priority: number) { }
	show(): void { this.visible = true; }
	hide(): void { this.visible = false; }
	dispose(): void { this.disposed = true; this.visible = false; }
}
export enum ConfigurationTarget { Global = 1, Workspace = 2, WorkspaceFolder = 3 }

export interface MockTerminal { options: Record<string, unknown>; shown: number; show(): void; dispose(): void }

const state = {
	config: {} as Record<string, unknown>,
	configListeners: new EventEmitter<{ affectsConfiguration(section: string): boolean }>(),
	folderListeners: new EventEmitter<{ added: unknown[]; removed: unknown[] }>(),
	errorMessages: [] as ErrorMessage[],
	/** Which button the fake user clicks on an error message. */
	errorResponse: undefined as ((m: ErrorMessage) => string | undefined) | undefined,
	warningMessages: [] as ErrorMessage[],
	/** Which button the fake user clicks on a warning; a promise keeps the notification open. */
	warningResponse: undefined as ((m: ErrorMessage) => string | undefined | Promise<string | undefined>) | undefined,
	infoMessages: [] as ErrorMessage[],
	infoResponse: undefined as ((m: ErrorMessage) => string | undefined) | undefined,
	quickPicks: [] as Array<{ items: Array<Record<string, unknown>>; options: unknown }>,
	/** What the fake user picks in a quick pick (given its items). */
	quickPickResponse: undefined as ((items: Array<Record<string, unknown>>) => Record<string, unknown> | undefined) | undefined,
	terminals: [] as MockTerminal[],
	progress: [] as Array<{ title: string; messages: string[] }>,
	/** Settings written with `update`: [key, value, target]. */
	updates: [] as Array<[string, unknown, unknown]>,
	/** A workspace's values (`inspect`'s workspaceValue; `get` returns them over the user's, as VS Code does). */
	workspaceConfig: {} as Record<string, unknown>,
	executed: [] as Array<{ command: string; args: unknown[] }>,
	commands: new Map<string, (...args: unknown[]) => unknown>(),
	providers: new Map<string, unknown>(),
	tools: new Map<string, unknown>(),
	channels: [] as MockLogOutputChannel[],
	statusBarItems: [] as MockStatusBarItem[],
	workspaceFolders: undefined as Array<{ uri: Uri; name: string; index: number }> | undefined,
	documents: [] as MockTextDocument[],
	appliedEdits: [] as WorkspaceEdit[],
};

export const workspace = {
	getConfiguration(section?: string) {
		const prefix = section ? `${section}.` : '';
		return {
			/** As VS Code's: a workspace's value (`workspaceConfig`) wins over the user's. */
			get<T>(key: string, defaultValue?: T): T | undefined {
				const v = state.workspaceConfig[prefix + key] !== undefined ? state.workspaceConfig[prefix + key] : state.config[prefix + key];
				return (v === undefined ? defaultValue : v) as T | undefined;
			},
			has(key: string): boolean {
				return (prefix + key) in state.config;
			},
			inspect<T>(key: string): { key: string; globalValue?: T; workspaceValue?: T } | undefined {
				return {
					key: prefix + key,
					globalValue: state.config[prefix + key] as T | undefined,
					workspaceValue: state.workspaceConfig[prefix + key] as T | undefined,
				};
			},
			update(key: string, value: unknown, target?: unknown): Promise<void> {
				state.updates.push([prefix + key, value, target]);
				mock.changeConfig({ [prefix + key]: value });
				return Promise.resolve();
			},
		};
	},
	onDidChangeConfiguration: state.configListeners.event,
	onDidChangeWorkspaceFolders: state.folderListeners.event,
	get workspaceFolders() {
		return state.workspaceFolders;
	},
	/** The documents VS Code has open (those a test opened with `mock.openDocument`, or read). */
	get textDocuments(): MockTextDocument[] {
		return state.documents;
	},
	async openTextDocument(uri: Uri): Promise<MockTextDocument> {
		const open = state.documents.find(d => d.uri.fsPath === uri.fsPath);
		if (open) {
			return open;
		}
		const document = new MockTextDocument(uri, nodeFs.readFileSync(uri.fsPath, 'utf8'));
		state.documents.push(document);
		return document;
	},
	async applyEdit(edit: WorkspaceEdit): Promise<boolean> {
		state.appliedEdits.push(edit);
		for (const e of edit.edits) {
			if (e.kind === 'create') {
				if (!state.documents.some(d => d.uri.fsPath === e.uri.fsPath)) {
					nodeFs.writeFileSync(e.uri.fsPath, '', { flag: 'a' });
					state.documents.push(new MockTextDocument(e.uri, nodeFs.readFileSync(e.uri.fsPath, 'utf8')));
				}
				continue;
			}
			const document = await workspace.openTextDocument(e.uri);
			const start = document.offsetAt(e.range.start);
			const end = document.offsetAt(e.range.end);
			document.undo.push(document.text);
			document.text = document.text.slice(0, start) + e.text + document.text.slice(end);
			document.isDirty = true;
		}
		return true;
	},
	fs: {
		async stat(uri: Uri): Promise<{ size: number }> {
			return { size: nodeFs.statSync(uri.fsPath).size };
		},
	},
};

export const window = {
	createOutputChannel(name: string, _options?: { log: true }): MockLogOutputChannel {
		const channel = new MockLogOutputChannel(name);
		state.channels.push(channel);
		return channel;
	},
	showErrorMessage(message: string, ...rest: unknown[]): Promise<string | undefined> {
		const m = messageOf(message, rest);
		state.errorMessages.push(m);
		return Promise.resolve(state.errorResponse?.(m));
	},
	showWarningMessage(message: string, ...rest: unknown[]): Promise<string | undefined> {
		const m = messageOf(message, rest);
		state.warningMessages.push(m);
		return Promise.resolve(state.warningResponse?.(m));
	},
	showInformationMessage(message: string, ...rest: unknown[]): Promise<string | undefined> {
		const m = messageOf(message, rest);
		state.infoMessages.push(m);
		return Promise.resolve(state.infoResponse?.(m));
	},
	async showQuickPick(items: unknown[] | Promise<unknown[]>, options?: unknown): Promise<unknown> {
		const resolved = await items as Array<Record<string, unknown>>;
		state.quickPicks.push({ items: resolved, options });
		return state.quickPickResponse?.(resolved);
	},
	createStatusBarItem(id: string, alignment: StatusBarAlignment, priority: number): MockStatusBarItem {
		const item = new MockStatusBarItem(id, alignment, priority);
		state.statusBarItems.push(item);
		return item;
	},
	createTerminal(options: Record<string, unknown>): MockTerminal {
		const terminal: MockTerminal = { options, shown: 0, show() { this.shown++; }, dispose() { } };
		state.terminals.push(terminal);
		return terminal;
	},
	async withProgress<T>(options: { title: string }, task: (progress: { report(v: { message?: string }): void }) => Promise<T>): Promise<T> {
		const entry = { title: options.title, messages: [] as string[] };
		state.progress.push(entry);
		return task({ report: v => { if (v.message) { entry.messages.push(v.message); } } });
	},
};

export const commands = {
	registerCommand(command: string, callback: (...args: unknown[]) => unknown): Disposable {
		state.commands.set(command, callback);
		return new Disposable(() => state.commands.delete(command));
	},
	async executeCommand(command: string, ...args: unknown[]): Promise<unknown> {
		state.executed.push({ command, args });
		return state.commands.get(command)?.(...args);
	},
};

export const lm = {
	registerLanguageModelChatProvider(vendor: string, provider: unknown): Disposable {
		state.providers.set(vendor, provider);
		return new Disposable(() => state.providers.delete(vendor));
	},
	registerTool(name: string, tool: unknown): Disposable {
		state.tools.set(name, tool);
		return new Disposable(() => state.tools.delete(name));
	},
	tools: [] as unknown[],
};

export const version = '1.104.0';

// ---------------------------------------------------------------- test controls

export const mock = {
	state,
	setConfig(values: Record<string, unknown>): void {
		state.config = { ...values };
	},
	/** Changes settings and fires onDidChangeConfiguration for the changed keys. */
	changeConfig(values: Record<string, unknown>): void {
		const changed = Object.keys(values);
		state.config = { ...state.config, ...values };
		state.configListeners.fire({
			affectsConfiguration: (section: string) => changed.some(k => k === section || k.startsWith(`${section}.`)),
		});
	},
	setWorkspaceFolders(paths: string[] | undefined): void {
		state.workspaceFolders = paths?.map((p, index) => ({ uri: Uri.file(p), name: p, index }));
	},
	/** Folders changed while the window is open (a multi-root workspace): `onDidChangeWorkspaceFolders` fires. */
	changeWorkspaceFolders(folders: Array<{ uri: Uri }>): void {
		state.workspaceFolders = folders.map((f, index) => ({ uri: f.uri, name: f.uri.fsPath, index }));
		state.folderListeners.fire({ added: [], removed: [] });
	},
	/** Opens a document as an editor would, with `text` unsaved when given. */
	openDocument(path: string, text?: string): MockTextDocument {
		const document = new MockTextDocument(Uri.file(path), nodeFs.readFileSync(path, 'utf8'));
		if (text !== undefined) {
			document.text = text;
			document.isDirty = true;
		}
		state.documents.push(document);
		return document;
	},
	setThinkingPartAvailable(available: boolean): void {
		LanguageModelThinkingPart = available ? MockThinkingPart : undefined;
	},
	reset(): void {
		state.config = {};
		state.errorMessages.length = 0;
		state.errorResponse = undefined;
		state.warningMessages.length = 0;
		state.warningResponse = undefined;
		state.infoMessages.length = 0;
		state.infoResponse = undefined;
		state.quickPicks.length = 0;
		state.quickPickResponse = undefined;
		state.terminals.length = 0;
		state.progress.length = 0;
		state.updates.length = 0;
		state.workspaceConfig = {};
		state.executed.length = 0;
		state.commands.clear();
		state.providers.clear();
		state.tools.clear();
		state.channels.length = 0;
		state.statusBarItems.length = 0;
		state.workspaceFolders = undefined;
		state.documents.length = 0;
		state.appliedEdits.length = 0;
		LanguageModelThinkingPart = MockThinkingPart;
	},
	/** A minimal ExtensionContext (its extension folder has no bundled daemon; storage in `storage` when given). */
	context(storage?: string): {
		subscriptions: Array<{ dispose(): unknown }>; extension: { id: string; packageJSON: { version: string } };
		globalStorageUri?: Uri; extensionUri: Uri;
	} {
		return {
			subscriptions: [], extension: { id: 'lmbridge.lmbridge', packageJSON: { version: '0.1.0' } },
			extensionUri: Uri.file('/nonexistent/lmbridge-extension'),
			...(storage ? { globalStorageUri: Uri.file(storage) } : {}),
		};
	},
};
