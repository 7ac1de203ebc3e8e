/**
 * Pure conversions between VS Code's language-model types and the wire shapes (wire.ts).
 *
 * Rules of this file:
 * - No I/O, no state: every function maps its arguments to a value. What a conversion
 *   had to drop is returned to the caller (who logs it), never logged here.
 * - Parts are recognised by class when the class is there and by shape otherwise:
 *   VS Code hands providers subclasses (`LanguageModelToolResultPart2`) and parts built
 *   by other extensions, and proposed classes (`LanguageModelThinkingPart`) or newer ones
 *   (`LanguageModelDataPart`, 1.106) may be missing from the running API.
 * - Each function is table-tested in test/convert.test.ts; add a row there with any change.
 */
import * as vscode from 'vscode';
import type {
	ModelInfo, RpcError, WireChatOptions, WireDataPart, WireInputPart, WireMessage, WireResponsePart,
	WireRole, WireTextPart, WireTool,
} from './wire';
import { ErrorCode } from './wire';

// ---------------------------------------------------------------- roles

/** `LanguageModelChatMessageRole.System`: sent by Copilot Chat, missing from the stable typings. */
export const SYSTEM_ROLE = 3;

export function roleToWire(role: unknown): WireRole | undefined {
	switch (role) {
		case 1: return 'user';       // LanguageModelChatMessageRole.User
		case 2: return 'assistant';  // LanguageModelChatMessageRole.Assistant
		case SYSTEM_ROLE: return 'system';
		default: return undefined;
	}
}

// ---------------------------------------------------------------- feature detection

export interface ThinkingPartCtor {
	new(value: string | string[], id?: string, metadata?: { readonly [key: string]: unknown }): object;
}

/**
 * `vscode.LanguageModelThinkingPart` when the running VS Code exposes it (proposed API),
 * else undefined. Reading a proposed member can throw in some hosts: treat that as absent.
 */
export function thinkingPartClass(api: object = vscode): ThinkingPartCtor | undefined {
	try {
		const ctor = (api as { LanguageModelThinkingPart?: unknown }).LanguageModelThinkingPart;
		return typeof ctor === 'function' ? ctor as ThinkingPartCtor : undefined;
	} catch {
		return undefined;
	}
}

function classOf(api: object, name: string): Function | undefined {
	try {
		const ctor = (api as Record<string, unknown>)[name];
		return typeof ctor === 'function' ? ctor : undefined;
	} catch {
		return undefined;
	}
}

function isInstance(value: unknown, api: object, name: string): boolean {
	const ctor = classOf(api, name);
	return !!ctor && value instanceof (ctor as new (...args: never[]) => unknown);
}

// ---------------------------------------------------------------- input parts

/**
 * Data-part mime types that are not content: Copilot Chat's own markers
 * (`cache_control`, `stateful_marker`, `thinking`, `context_management`, `token_usage`, …).
 * None of them is a real media type, so the rule is "no `/` in the mime type".
 */
export function isInternalMimeType(mimeType: string): boolean {
	return !mimeType.includes('/');
}

/**
 * The one internal mime type a message's data part keeps on the wire: the stateful marker
 * the daemon's answers carry, which VS Code re-sends with each answer (docs/vscode.md,
 * "Stateful markers"). The daemon decides what it names; the shim only converts.
 */
export const STATEFUL_MARKER = 'stateful_marker';

function isObject(value: unknown): value is Record<string, unknown> {
	return typeof value === 'object' && value !== null;
}

function isBytes(value: unknown): value is Uint8Array {
	return value instanceof Uint8Array
		|| (isObject(value) && typeof value.byteLength === 'number' && typeof value.length === 'number');
}

export function toBase64(bytes: Uint8Array): string {
	return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

/** A short description of a part for the log, without its (possibly large) payload. */
export function describePart(part: unknown): string {
	if (!isObject(part)) {
		return typeof part;
	}
	const ctor = (part as { constructor?: { name?: string } }).constructor?.name;
	const keys = Object.keys(part).slice(0, 6).join(',');
	return `${ctor && ctor !== 'Object' ? ctor : 'object'}{${keys}}`;
}

type PartKind = 'thinking' | 'text' | 'tool_result' | 'tool_call' | 'data' | 'prompt_tsx' | 'unknown';

/** Which wire part a VS Code part is: by class first, then by shape. */
export function classifyPart(part: unknown, api: object = vscode): PartKind {
	if (!isObject(part)) {
		return 'unknown';
	}
	const ctorName = (part as { constructor?: { name?: string } }).constructor?.name;
	if (isInstance(part, api, 'LanguageModelThinkingPart') || ctorName === 'LanguageModelThinkingPart'
		|| (Array.isArray(part.value) && part.value.every(v => typeof v === 'string'))
		// A text part never has `id` or `metadata`; a thinking part always has the keys.
		|| (typeof part.value === 'string' && ('id' in part || 'metadata' in part))) {
		return 'thinking';
	}
	if (isInstance(part, api, 'LanguageModelToolResultPart')
		|| (typeof part.callId === 'string' && Array.isArray(part.content))) {
		return 'tool_result';
	}
	if (isInstance(part, api, 'LanguageModelToolCallPart')
		|| (typeof part.callId === 'string' && typeof part.name === 'string' && 'input' in part)) {
		return 'tool_call';
	}
	if (isInstance(part, api, 'LanguageModelDataPart')
		|| (typeof part.mimeType === 'string' && isBytes(part.data))) {
		return 'data';
	}
	if (isInstance(part, api, 'LanguageModelTextPart') || typeof part.value === 'string') {
		return 'text';
	}
	if (isInstance(part, api, 'LanguageModelPromptTsxPart') || ('value' in part && Object.keys(part).length <= 2)) {
		return 'prompt_tsx';
	}
	return 'unknown';
}

/**
 * The text of a prompt-tsx part (a tool result rendered with @vscode/prompt-tsx): every
 * `text` string in its JSON tree, in order. Falls back to the JSON itself.
 */
export function promptTsxText(value: unknown): string {
	if (typeof value === 'string') {
		return value;
	}
	const out: string[] = [];
	const walk = (node: unknown, depth: number): void => {
		if (depth > 64) {
			return;
		}
		if (Array.isArray(node)) {
			node.forEach(n => walk(n, depth + 1));
		} else if (isObject(node)) {
			for (const [key, child] of Object.entries(node)) {
				if (key === 'text' && typeof child === 'string') {
					out.push(child);
				} else {
					walk(child, depth + 1);
				}
			}
		}
	};
	walk(value, 0);
	if (out.length > 0) {
		return out.join('');
	}
	try {
		return JSON.stringify(value) ?? '';
	} catch {
		return '';
	}
}

export interface Converted<T> {
	value: T;
	/** What was left out, one line each, for the log. */
	dropped: string[];
}

function dataToWire(part: { mimeType: string; data: Uint8Array }, keepMarker = false): WireDataPart | undefined {
	if (isInternalMimeType(part.mimeType) && !(keepMarker && part.mimeType === STATEFUL_MARKER)) {
		return undefined;
	}
	return { type: 'data', mimeType: part.mimeType, data: toBase64(part.data) };
}

/** The content of a tool result: text and data parts (prompt-tsx parts become text). */
export function toolResultContentToWire(content: readonly unknown[], api: object = vscode): Converted<Array<WireTextPart | WireDataPart>> {
	const value: Array<WireTextPart | WireDataPart> = [];
	const dropped: string[] = [];
	for (const part of content) {
		const kind = classifyPart(part, api);
		const p = part as Record<string, unknown>;
		if (kind === 'text') {
			value.push({ type: 'text', value: p.value as string });
		} else if (kind === 'data') {
			const data = dataToWire(p as { mimeType: string; data: Uint8Array });
			if (data) {
				value.push(data);
			} else {
				dropped.push(`tool result data part with internal mime type ${String(p.mimeType)}`);
			}
		} else if (kind === 'prompt_tsx') {
			value.push({ type: 'text', value: promptTsxText(p.value) });
		} else {
			dropped.push(`tool result part ${describePart(part)}`);
		}
	}
	return { value, dropped };
}

/** One part of a request message, or undefined with the reason it was dropped. */
export function partToWire(part: unknown, api: object = vscode): Converted<WireInputPart | undefined> {
	const kind = classifyPart(part, api);
	const p = part as Record<string, unknown>;
	switch (kind) {
		case 'text':
			return { value: { type: 'text', value: p.value as string }, dropped: [] };
		case 'thinking': {
			const raw = p.value;
			const value = Array.isArray(raw) ? raw.join('') : typeof raw === 'string' ? raw : '';
			const id = typeof p.id === 'string' ? p.id : undefined;
			return { value: id === undefined ? { type: 'thinking', value } : { type: 'thinking', value, id }, dropped: [] };
		}
		case 'tool_call': {
			const input = isObject(p.input) && !Array.isArray(p.input) ? p.input : {};
			return { value: { type: 'tool_call', callId: p.callId as string, name: p.name as string, input }, dropped: [] };
		}
		case 'tool_result': {
			const content = toolResultContentToWire(p.content as unknown[], api);
			return { value: { type: 'tool_result', callId: p.callId as string, content: content.value }, dropped: content.dropped };
		}
		case 'data': {
			const data = dataToWire(p as { mimeType: string; data: Uint8Array }, true);
			return data
				? { value: data, dropped: [] }
				: { value: undefined, dropped: [] }; // Copilot's markers: dropped by design, not worth a log line
		}
		default:
			return { value: undefined, dropped: [`part ${describePart(part)}`] };
	}
}

export interface RequestMessageLike {
	readonly role: unknown;
	readonly content: ReadonlyArray<unknown>;
	readonly name?: string | undefined;
}

/** The request's messages in wire shape. Messages of unknown role are dropped (and reported). */
export function messagesToWire(messages: readonly RequestMessageLike[], api: object = vscode): Converted<WireMessage[]> {
	const value: WireMessage[] = [];
	const dropped: string[] = [];
	messages.forEach((message, index) => {
		const role = roleToWire(message.role);
		if (!role) {
			dropped.push(`message ${index} with unknown role ${String(message.role)}`);
			return;
		}
		const content: WireInputPart[] = [];
		for (const part of message.content) {
			const converted = partToWire(part, api);
			if (converted.value) {
				content.push(converted.value);
			}
			dropped.push(...converted.dropped.map(d => `message ${index}: ${d}`));
		}
		const wire: WireMessage = { role, content };
		if (typeof message.name === 'string' && message.name.length > 0) {
			wire.name = message.name;
		}
		value.push(wire);
	});
	return { value, dropped };
}

// ---------------------------------------------------------------- options

export interface RequestOptionsLike {
	readonly tools?: ReadonlyArray<{ name: string; description: string; inputSchema?: object | undefined }>;
	readonly toolMode?: unknown;
	readonly modelOptions?: { readonly [name: string]: unknown };
	/** VS Code's per-model configuration (the chatProvider proposal; absent from the stable typings). */
	readonly modelConfiguration?: { readonly [name: string]: unknown };
}

export function optionsToWire(options: RequestOptionsLike | undefined): WireChatOptions {
	const out: WireChatOptions = {};
	if (!options) {
		return out;
	}
	if (options.tools && options.tools.length > 0) {
		out.tools = options.tools.map(t => {
			const tool: WireTool = { name: t.name, description: t.description ?? '' };
			if (t.inputSchema !== undefined) {
				tool.inputSchema = t.inputSchema as Record<string, unknown>;
			}
			return tool;
		});
	}
	if (options.toolMode === 2) {           // LanguageModelChatToolMode.Required
		out.toolMode = 'required';
	} else if (options.toolMode === 1) {    // LanguageModelChatToolMode.Auto
		out.toolMode = 'auto';
	}
	if (options.modelOptions && Object.keys(options.modelOptions).length > 0) {
		out.modelOptions = { ...options.modelOptions };
	}
	// VS Code's per-model configuration (the chatProvider proposal's `modelConfiguration`,
	// passed to every provider): the mode and options chosen beside the model picker.
	const configuration: unknown = options.modelConfiguration;
	if (isObject(configuration) && !Array.isArray(configuration) && Object.keys(configuration).length > 0) {
		out.configuration = { ...configuration };
	}
	return out;
}

// ---------------------------------------------------------------- response parts

/** `lmbridge.thinking`: how the agent's thinking is shown. */
export type ThinkingDisplay = 'auto' | 'text' | 'hidden';

/**
 * The VS Code part to report for one `lm/responsePart`, or undefined to report nothing.
 * Thinking: `auto` → LanguageModelThinkingPart when the running VS Code has it, else
 * nothing; `text` → a text part; `hidden` → nothing.
 */
export function responsePartFromWire(part: WireResponsePart, thinking: ThinkingDisplay, api: object = vscode): object | undefined {
	switch (part?.type) {
		case 'text':
			return typeof part.value === 'string' ? new vscode.LanguageModelTextPart(part.value) : undefined;
		case 'tool_call': {
			const input = isObject(part.input) && !Array.isArray(part.input) ? part.input : {};
			return new vscode.LanguageModelToolCallPart(part.callId, part.name, input);
		}
		case 'thinking': {
			if (typeof part.value !== 'string' || thinking === 'hidden') {
				return undefined;
			}
			if (thinking === 'text') {
				return new vscode.LanguageModelTextPart(part.value);
			}
			const Thinking = thinkingPartClass(api);
			return Thinking ? new Thinking(part.value, part.id) : undefined;
		}
		case 'data': {
			// LanguageModelDataPart (1.106): absent from an older VS Code, which then gets nothing.
			const Data = classOf(api, 'LanguageModelDataPart') as (new (data: Uint8Array, mimeType: string) => object) | undefined;
			if (!Data || typeof part.mimeType !== 'string' || typeof part.data !== 'string') {
				return undefined;
			}
			return new Data(new Uint8Array(Buffer.from(part.data, 'base64')), part.mimeType);
		}
		default:
			return undefined;
	}
}

// ---------------------------------------------------------------- models

export function modelInfoFromWire(model: ModelInfo): vscode.LanguageModelChatInformation {
	const info: {
		-readonly [K in keyof vscode.LanguageModelChatInformation]: vscode.LanguageModelChatInformation[K]
	} & { tooltip?: string; detail?: string } = {
		id: model.id,
		name: model.name || model.id,
		family: model.family || 'acp',
		version: model.version || '1',
		maxInputTokens: model.maxInputTokens,
		maxOutputTokens: model.maxOutputTokens,
		capabilities: {
			toolCalling: model.capabilities?.toolCalling ?? true,
			imageInput: model.capabilities?.imageInput ?? false,
		},
	};
	if (model.tooltip) {
		info.tooltip = model.tooltip;
	}
	if (model.detail) {
		info.detail = model.detail;
	}
	// Not in the stable typings (the chatProvider proposal), but the extension host passes it
	// on to the model picker for any provider (docs/vscode-shim.md, "Modes and options").
	if (isObject(model.configurationSchema) && isObject(model.configurationSchema.properties)) {
		(info as { configurationSchema?: unknown }).configurationSchema = model.configurationSchema;
	}
	return info;
}

// ---------------------------------------------------------------- errors

/** Whether a daemon error means "no such model" (code -32602, message "unknown model …" or data.kind). */
export function isUnknownModelError(error: RpcError): boolean {
	const data = error.data as { kind?: unknown } | undefined;
	if (isObject(data) && data.kind === 'unknown_model') {
		return true;
	}
	return /unknown model/i.test(error.message ?? '');
}

/** The error a provider call rejects with, carrying the daemon's own message. */
export function errorFromRpc(error: RpcError): Error {
	const message = error.message || `lmbridge daemon error ${error.code}`;
	if (isUnknownModelError(error)) {
		return vscode.LanguageModelError.NotFound(message);
	}
	if (error.code === ErrorCode.MethodNotFound) {
		return userError(`${message} (the lmbridge daemon does not support this request: is it older than this extension?)`);
	}
	return userError(message);
}

/** An error for the user to read: the Chat view prints a provider's error with its stack
 * (seen in VS Code 1.139's Chat view), and our call stack tells the user nothing. */
function userError(message: string): Error {
	const err = new Error(message);
	err.stack = "";
	return err;
}

// ---------------------------------------------------------------- tokens

/** Characters per token for the local estimate; no round trip on this hot path. */
export const CHARS_PER_TOKEN = 4;
/** Flat estimate for an image or other binary part. */
export const BINARY_PART_TOKENS = 765;

function partChars(part: unknown, api: object): number {
	const p = part as Record<string, unknown>;
	switch (classifyPart(part, api)) {
		case 'text':
			return (p.value as string).length;
		case 'thinking':
			return Array.isArray(p.value) ? (p.value as string[]).join('').length : 0;
		case 'tool_call':
			return (p.name as string).length + safeJsonLength(p.input);
		case 'tool_result':
			return (p.content as unknown[]).reduce<number>((n, c) => n + partChars(c, api), 0);
		case 'data': {
			const mime = p.mimeType as string;
			if (isInternalMimeType(mime)) {
				return 0;
			}
			const bytes = (p.data as Uint8Array).byteLength;
			return mime.startsWith('text/') || mime.endsWith('json') ? bytes : BINARY_PART_TOKENS * CHARS_PER_TOKEN;
		}
		case 'prompt_tsx':
			return promptTsxText(p.value).length;
		default:
			return 0;
	}
}

function safeJsonLength(value: unknown): number {
	try {
		return JSON.stringify(value)?.length ?? 0;
	} catch {
		return 0;
	}
}

export function estimateTokens(text: string | RequestMessageLike, api: object = vscode): number {
	const chars = typeof text === 'string'
		? text.length
		: text.content.reduce<number>((n, part) => n + partChars(part, api), 0);
	return Math.ceil(chars / CHARS_PER_TOKEN);
}
