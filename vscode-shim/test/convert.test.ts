/** Table tests of every conversion in src/chat/convert.ts: each row is one case. */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import {
	BINARY_PART_TOKENS, classifyPart, errorFromRpc, estimateTokens, isInternalMimeType, messagesToWire,
	modelInfoFromWire, optionsToWire, partToWire, promptTsxText, responsePartFromWire, roleToWire,
	thinkingPartClass, toolResultContentToWire, ThinkingDisplay,
} from '../src/chat/convert';
import type { ModelInfo, RpcError, WireInputPart, WireResponsePart } from '../src/chat/wire';
import * as mockApi from './vscode-mock';
import {
	LanguageModelChatMessageRole, LanguageModelDataPart, LanguageModelError, LanguageModelPromptTsxPart,
	LanguageModelTextPart, LanguageModelToolCallPart, LanguageModelToolResultPart, LanguageModelToolResultPart2,
	MockThinkingPart, mock,
} from './vscode-mock';

const bytes = (s: string) => new TextEncoder().encode(s);
const b64 = (s: string) => Buffer.from(s).toString('base64');
const PNG = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 255]);

afterEach(() => mock.reset());

describe('roleToWire', () => {
	const rows: Array<[unknown, string | undefined]> = [
		[LanguageModelChatMessageRole.User, 'user'],
		[LanguageModelChatMessageRole.Assistant, 'assistant'],
		[3, 'system'],                 // System: not in the stable typings
		[0, undefined],
		[4, undefined],
		['user', undefined],
		[undefined, undefined],
	];
	for (const [role, expected] of rows) {
		test(`${String(role)} → ${String(expected)}`, () => assert.equal(roleToWire(role), expected));
	}
});

describe('partToWire: every input part, by class and by shape', () => {
	const rows: Array<[string, unknown, WireInputPart | undefined]> = [
		['TextPart', new LanguageModelTextPart('hi'), { type: 'text', value: 'hi' }],
		['text by shape', { value: 'plain' }, { type: 'text', value: 'plain' }],
		['empty text', new LanguageModelTextPart(''), { type: 'text', value: '' }],
		['ThinkingPart (string)', new MockThinkingPart('hmm', 'th1'), { type: 'thinking', value: 'hmm', id: 'th1' }],
		['ThinkingPart (string[])', new MockThinkingPart(['a', 'b', 'c']), { type: 'thinking', value: 'abc' }],
		['thinking by shape (array value)', { value: ['x', 'y'] }, { type: 'thinking', value: 'xy' }],
		['thinking by shape (id key)', { value: 'deep', id: 'z', metadata: {} }, { type: 'thinking', value: 'deep', id: 'z' }],
		['ToolCallPart', new LanguageModelToolCallPart('c1', 'read', { path: 'a' }),
			{ type: 'tool_call', callId: 'c1', name: 'read', input: { path: 'a' } }],
		['tool call by shape', { callId: 'c2', name: 'run', input: { x: 1 } },
			{ type: 'tool_call', callId: 'c2', name: 'run', input: { x: 1 } }],
		['tool call with non-object input', { callId: 'c3', name: 'run', input: 'oops' },
			{ type: 'tool_call', callId: 'c3', name: 'run', input: {} }],
		['ToolResultPart', new LanguageModelToolResultPart('c1', [new LanguageModelTextPart('tok')]),
			{ type: 'tool_result', callId: 'c1', content: [{ type: 'text', value: 'tok' }] }],
		['ToolResultPart2 (subclass)', new LanguageModelToolResultPart2('c9', [new LanguageModelTextPart('tok9')]),
			{ type: 'tool_result', callId: 'c9', content: [{ type: 'text', value: 'tok9' }] }],
		['tool result by shape', { callId: 'c4', content: [{ value: 'r' }] },
			{ type: 'tool_result', callId: 'c4', content: [{ type: 'text', value: 'r' }] }],
		['tool result with an image', new LanguageModelToolResultPart('c5', [LanguageModelDataPart.image(PNG, 'image/png')]),
			{ type: 'tool_result', callId: 'c5', content: [{ type: 'data', mimeType: 'image/png', data: Buffer.from(PNG).toString('base64') }] }],
		['tool result with prompt-tsx', new LanguageModelToolResultPart('c6', [new LanguageModelPromptTsxPart({ node: { children: [{ text: 'ren' }, { text: 'dered' }] } })]),
			{ type: 'tool_result', callId: 'c6', content: [{ type: 'text', value: 'rendered' }] }],
		['tool result drops cache_control', new LanguageModelToolResultPart('c7', [new LanguageModelTextPart('t'), new LanguageModelDataPart(bytes('{}'), 'cache_control')]),
			{ type: 'tool_result', callId: 'c7', content: [{ type: 'text', value: 't' }] }],
		['DataPart image', LanguageModelDataPart.image(PNG, 'image/png'),
			{ type: 'data', mimeType: 'image/png', data: Buffer.from(PNG).toString('base64') }],
		['DataPart jpeg by shape', { mimeType: 'image/jpeg', data: bytes('jpg') }, { type: 'data', mimeType: 'image/jpeg', data: b64('jpg') }],
		['DataPart json', LanguageModelDataPart.json({ a: 1 }, 'application/json'), { type: 'data', mimeType: 'application/json', data: b64('{"a":1}') }],
		['DataPart cache_control', new LanguageModelDataPart(bytes('ephemeral'), 'cache_control'), undefined],
		// The daemon's own marker, re-sent by VS Code with its answer: kept for the daemon to read.
		['DataPart stateful_marker', new LanguageModelDataPart(bytes('m\\lmb1.x.1.mac'), 'stateful_marker'),
			{ type: 'data', mimeType: 'stateful_marker', data: b64('m\\lmb1.x.1.mac') }],
		['tool result drops stateful_marker', new LanguageModelToolResultPart('c8', [new LanguageModelTextPart('t'), new LanguageModelDataPart(bytes('m\\x'), 'stateful_marker')]),
			{ type: 'tool_result', callId: 'c8', content: [{ type: 'text', value: 't' }] }],
		['DataPart usage (Copilot internal)', new LanguageModelDataPart(bytes('{}'), 'usage'), undefined],
		['DataPart thinking (Copilot internal)', new LanguageModelDataPart(bytes('{}'), 'thinking'), undefined],
		['unknown object', { foo: 1, bar: 2 }, undefined],
		['null', null, undefined],
		['number', 42, undefined],
	];
	for (const [name, part, expected] of rows) {
		test(name, () => assert.deepEqual(partToWire(part, mockApi).value, expected));
	}

	test('an unknown part is reported as dropped; an internal data part silently', () => {
		assert.match(partToWire({ foo: 1 }, mockApi).dropped[0], /part object\{foo\}/);
		assert.deepEqual(partToWire(new LanguageModelDataPart(bytes('x'), 'cache_control'), mockApi).dropped, []);
	});

	test('a subarray DataPart encodes only its own bytes', () => {
		const backing = bytes('XXhelloXX');
		const part = new LanguageModelDataPart(backing.subarray(2, 7), 'text/plain');
		assert.deepEqual(partToWire(part, mockApi).value, { type: 'data', mimeType: 'text/plain', data: b64('hello') });
	});
});

describe('classifyPart without the proposed and newer classes', () => {
	test('recognises parts by shape when LanguageModelThinkingPart/DataPart are absent', () => {
		const bare = { LanguageModelTextPart, LanguageModelToolCallPart, LanguageModelToolResultPart };
		assert.equal(classifyPart(new MockThinkingPart('x', 'id'), bare), 'thinking');
		assert.equal(classifyPart(new LanguageModelDataPart(PNG, 'image/png'), bare), 'data');
		assert.equal(classifyPart(new LanguageModelToolResultPart2('c', []), bare), 'tool_result');
	});
	test('an API object whose proposed getter throws counts as "absent"', () => {
		const throwing = Object.defineProperty({}, 'LanguageModelThinkingPart', { get() { throw new Error('proposed API not enabled'); } });
		assert.equal(thinkingPartClass(throwing), undefined);
		assert.equal(classifyPart(new LanguageModelTextPart('t'), throwing), 'text');
	});
});

describe('messagesToWire: roles, names and content together', () => {
	test('a Copilot-shaped request: system, user with context, assistant tool call, tool result, cache markers dropped, the stateful marker kept', () => {
		const messages = [
			{ role: 3, name: undefined, content: [new LanguageModelTextPart('You are Copilot'), new LanguageModelDataPart(bytes('e'), 'cache_control')] },
			{ role: 1, name: 'alice', content: [new LanguageModelTextPart('<context>x</context>'), new LanguageModelTextPart('write a file'), LanguageModelDataPart.image(PNG, 'image/png')] },
			{ role: 2, name: undefined, content: [new MockThinkingPart('plan'), new LanguageModelTextPart('Sure.'), new LanguageModelToolCallPart('lmbridge-1', 'symposium-agent-action', { approvalToken: 't' }), new LanguageModelDataPart(bytes('m'), 'stateful_marker')] },
			{ role: 1, name: undefined, content: [new LanguageModelToolResultPart2('lmbridge-1', [new LanguageModelTextPart('t')])] },
		];
		const { value, dropped } = messagesToWire(messages, mockApi);
		assert.deepEqual(value, [
			{ role: 'system', content: [{ type: 'text', value: 'You are Copilot' }] },
			{ role: 'user', name: 'alice', content: [{ type: 'text', value: '<context>x</context>' }, { type: 'text', value: 'write a file' }, { type: 'data', mimeType: 'image/png', data: Buffer.from(PNG).toString('base64') }] },
			{ role: 'assistant', content: [{ type: 'thinking', value: 'plan' }, { type: 'text', value: 'Sure.' }, { type: 'tool_call', callId: 'lmbridge-1', name: 'symposium-agent-action', input: { approvalToken: 't' } }, { type: 'data', mimeType: 'stateful_marker', data: b64('m') }] },
			{ role: 'user', content: [{ type: 'tool_result', callId: 'lmbridge-1', content: [{ type: 'text', value: 't' }] }] },
		]);
		assert.deepEqual(dropped, []);
	});

	test('a message of unknown role is dropped and reported; an unknown part is reported with its message index', () => {
		const { value, dropped } = messagesToWire([
			{ role: 7, content: [new LanguageModelTextPart('?')] },
			{ role: 1, content: [new LanguageModelTextPart('ok'), { weird: true }] },
		], mockApi);
		assert.deepEqual(value, [{ role: 'user', content: [{ type: 'text', value: 'ok' }] }]);
		assert.deepEqual(dropped, ['message 0 with unknown role 7', 'message 1: part object{weird}']);
	});

	test('an empty name is left out', () => {
		assert.deepEqual(messagesToWire([{ role: 1, name: '', content: [] }], mockApi).value, [{ role: 'user', content: [] }]);
	});
});

describe('toolResultContentToWire', () => {
	test('text, data, prompt-tsx kept in order; unknown reported', () => {
		const r = toolResultContentToWire([
			new LanguageModelTextPart('a'), LanguageModelDataPart.text('b'), new LanguageModelPromptTsxPart('c'), Symbol('x'),
		], mockApi);
		assert.deepEqual(r.value, [{ type: 'text', value: 'a' }, { type: 'data', mimeType: 'text/plain', data: b64('b') }, { type: 'text', value: 'c' }]);
		assert.equal(r.dropped.length, 1);
	});
});

describe('promptTsxText', () => {
	const rows: Array<[string, unknown, string]> = [
		['a string', 'plain', 'plain'],
		['nested text nodes', { node: { type: 1, children: [{ type: 2, text: 'a' }, { children: [{ text: 'b' }] }] } }, 'ab'],
		['no text: the JSON', { n: 1 }, '{"n":1}'],
	];
	for (const [name, value, expected] of rows) {
		test(name, () => assert.equal(promptTsxText(value), expected));
	}
});

describe('isInternalMimeType', () => {
	const rows: Array<[string, boolean]> = [
		['cache_control', true], ['stateful_marker', true], ['thinking', true], ['context_management', true],
		['image/png', false], ['text/plain', false], ['application/json', false],
	];
	for (const [mime, internal] of rows) {
		test(`${mime} → ${internal}`, () => assert.equal(isInternalMimeType(mime), internal));
	}
});

describe('optionsToWire', () => {
	const tool = { name: 'read_file', description: 'Reads', inputSchema: { type: 'object' } };
	const rows: Array<[string, any, object]> = [
		['undefined', undefined, {}],
		['empty', { toolMode: undefined }, {}],
		['auto', { toolMode: 1 }, { toolMode: 'auto' }],
		['required', { toolMode: 2 }, { toolMode: 'required' }],
		['tools', { tools: [tool, { name: 'x', description: 'y' }], toolMode: 1 },
			{ tools: [tool, { name: 'x', description: 'y' }], toolMode: 'auto' }],
		['empty tools list left out', { tools: [], toolMode: 1 }, { toolMode: 'auto' }],
		['modelOptions', { modelOptions: { temperature: 0.2 }, toolMode: 1 }, { modelOptions: { temperature: 0.2 }, toolMode: 'auto' }],
		['modelConfiguration (the mode chosen beside the picker)', { modelConfiguration: { mode: 'plan' } }, { configuration: { mode: 'plan' } }],
		['empty or malformed modelConfiguration left out', { modelConfiguration: {}, toolMode: 1 }, { toolMode: 'auto' }],
		['modelConfiguration not an object', { modelConfiguration: ['plan'] }, {}],
	];
	for (const [name, options, expected] of rows) {
		test(name, () => assert.deepEqual(optionsToWire(options), expected));
	}
});

describe('responsePartFromWire: every response part and thinking setting', () => {
	type Row = [string, WireResponsePart, ThinkingDisplay, boolean, ((p: unknown) => void) | undefined];
	const isText = (value: string) => (p: unknown) => {
		assert.ok(p instanceof LanguageModelTextPart, 'a text part');
		assert.equal((p as LanguageModelTextPart).value, value);
	};
	const rows: Row[] = [
		['text', { type: 'text', value: 'hello' }, 'auto', true, isText('hello')],
		['tool_call', { type: 'tool_call', callId: 'lmbridge-7', name: 'symposium-agent-action', input: { approvalToken: 'k' } }, 'auto', true, p => {
			assert.ok(p instanceof LanguageModelToolCallPart);
			assert.deepEqual([p.callId, p.name, p.input], ['lmbridge-7', 'symposium-agent-action', { approvalToken: 'k' }]);
		}],
		['thinking, auto, API present', { type: 'thinking', value: 'pondering', id: 't1' }, 'auto', true, p => {
			assert.ok(p instanceof MockThinkingPart);
			assert.deepEqual([p.value, p.id], ['pondering', 't1']);
		}],
		['thinking, auto, API absent', { type: 'thinking', value: 'pondering' }, 'auto', false, undefined],
		['thinking, text, API present', { type: 'thinking', value: 'pondering' }, 'text', true, isText('pondering')],
		['thinking, text, API absent', { type: 'thinking', value: 'pondering' }, 'text', false, isText('pondering')],
		['thinking, hidden', { type: 'thinking', value: 'pondering' }, 'hidden', true, undefined],
		['data: the stateful marker', { type: 'data', mimeType: 'stateful_marker', data: b64('demo\\lmb1.ab1.3.mac') }, 'auto', true, p => {
			assert.ok(p instanceof LanguageModelDataPart, 'a data part');
			assert.equal(p.mimeType, 'stateful_marker');
			assert.equal(Buffer.from(p.data).toString('utf8'), 'demo\\lmb1.ab1.3.mac');
		}],
		['data: usage', { type: 'data', mimeType: 'usage', data: b64('{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}') }, 'auto', true, p => {
			assert.ok(p instanceof LanguageModelDataPart, 'a data part');
			assert.equal(p.mimeType, 'usage');
			assert.deepEqual(JSON.parse(Buffer.from(p.data).toString('utf8')), { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 });
		}],
		['data without data', { type: 'data', mimeType: 'usage' } as unknown as WireResponsePart, 'auto', true, undefined],
		['unknown type', { type: 'image', value: 'x' } as unknown as WireResponsePart, 'auto', true, undefined],
		['text without value', { type: 'text' } as unknown as WireResponsePart, 'auto', true, undefined],
	];
	for (const [name, part, thinking, available, check] of rows) {
		test(name, () => {
			mock.setThinkingPartAvailable(available);
			const out = responsePartFromWire(part, thinking, mockApi);
			if (check) {
				check(out);
			} else {
				assert.equal(out, undefined);
			}
		});
	}
});

describe('modelInfoFromWire', () => {
	test('all fields, tooltip and detail kept', () => {
		const wire: ModelInfo = {
			id: 'claude', name: 'Claude Code', family: 'acp', version: '0.23', maxInputTokens: 200000, maxOutputTokens: 32000,
			capabilities: { toolCalling: true, imageInput: true }, tooltip: 'tip', detail: 'detail',
		};
		assert.deepEqual(modelInfoFromWire(wire), wire);
	});
	test('the configurationSchema (the agent\'s modes) passes to VS Code; a malformed one does not', () => {
		const schema = { properties: { mode: { type: 'string', enum: ['default', 'plan'], default: 'default', group: 'navigation' } } };
		const base = { id: 'x', name: 'x', family: 'acp', version: '1', maxInputTokens: 1, maxOutputTokens: 2, capabilities: { toolCalling: true, imageInput: false } };
		assert.deepEqual(modelInfoFromWire({ ...base, configurationSchema: schema }), { ...base, configurationSchema: schema });
		assert.deepEqual(modelInfoFromWire({ ...base, configurationSchema: { properties: 'x' } } as unknown as ModelInfo), base);
	});
	test('defaults for missing name, family, version and capabilities', () => {
		const out = modelInfoFromWire({ id: 'x', maxInputTokens: 1, maxOutputTokens: 2 } as ModelInfo);
		assert.deepEqual(out, { id: 'x', name: 'x', family: 'acp', version: '1', maxInputTokens: 1, maxOutputTokens: 2, capabilities: { toolCalling: true, imageInput: false } });
	});
});

describe('errorFromRpc', () => {
	const rows: Array<[string, RpcError, string | undefined, RegExp]> = [
		['unknown model by message', { code: -32602, message: "unknown model 'nope'" }, 'NotFound', /unknown model 'nope'/],
		['unknown model, other case', { code: -32602, message: 'Unknown Model: nope' }, 'NotFound', /Unknown Model/],
		['unknown model by data.kind', { code: -32602, message: 'no such agent', data: { kind: 'unknown_model' } }, 'NotFound', /no such agent/],
		['other invalid params', { code: -32602, message: 'messages: field required' }, undefined, /^messages: field required$/],
		['agent crashed', { code: -32000, message: 'agent "claude" exited (code 1): boom' }, undefined, /agent "claude" exited/],
		['unknown method', { code: -32601, message: 'unknown method: lm/x' }, undefined, /unknown method: lm\/x.*older/],
		['empty message', { code: -32603, message: '' }, undefined, /lmbridge daemon error -32603/],
	];
	for (const [name, rpc, code, message] of rows) {
		test(name, () => {
			const error = errorFromRpc(rpc);
			assert.match(error.message, message);
			if (code) {
				assert.ok(error instanceof LanguageModelError);
				assert.equal(error.code, code);
			} else {
				assert.ok(!(error instanceof LanguageModelError));
			}
		});
	}
});

describe('estimateTokens (local, chars/4)', () => {
	const rows: Array<[string, any, number]> = [
		['empty string', '', 0],
		['string', 'abcd', 1],
		['rounds up', 'abcde', 2],
		['message text parts', { role: 1, content: [new LanguageModelTextPart('abcd'), new LanguageModelTextPart('efgh')] }, 2],
		['tool call counts name and input', { role: 2, content: [new LanguageModelToolCallPart('c', 'abcd', { k: 'v' })] }, Math.ceil((4 + 9) / 4)],
		['tool result counts its text', { role: 1, content: [new LanguageModelToolResultPart('c', [new LanguageModelTextPart('12345678')])] }, 2],
		['image is a flat estimate', { role: 1, content: [LanguageModelDataPart.image(PNG, 'image/png')] }, BINARY_PART_TOKENS],
		['internal marker counts nothing', { role: 1, content: [new LanguageModelDataPart(bytes('xxxxxxxx'), 'cache_control')] }, 0],
	];
	for (const [name, input, expected] of rows) {
		test(name, () => assert.equal(estimateTokens(input, mockApi), expected));
	}
});
