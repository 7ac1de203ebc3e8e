/** The provider (src/chat/provider.ts) end to end over the fake daemon: streaming, cancellation, errors. */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import type * as vscode from 'vscode';
import { ThinkingDisplay } from '../src/chat/convert';
import { DaemonClient } from '../src/chat/daemon';
import { LmBridgeProvider, ProviderHooks } from '../src/chat/provider';
import { fakeClient, FakeClient, model, noOptions, recorder, script, waitFor } from './helpers';
import {
	CancellationTokenSource, LanguageModelChatMessage, LanguageModelDataPart, LanguageModelError, LanguageModelTextPart,
	LanguageModelToolCallPart, LanguageModelToolResultPart2, MockThinkingPart, mock,
} from './vscode-mock';

const clients: DaemonClient[] = [];

function setup(thinking: ThinkingDisplay = 'auto', options: Parameters<typeof fakeClient>[0] = {}, hooks: ProviderHooks = {}): FakeClient & { provider: LmBridgeProvider } {
	const fake = fakeClient(options);
	clients.push(fake.client);
	const provider = new LmBridgeProvider(fake.client, fake.log as unknown as vscode.LogOutputChannel, () => ({ thinking }), hooks);
	return { ...fake, provider };
}

afterEach(async () => {
	await Promise.all(clients.splice(0).map(c => c.dispose()));
	mock.reset();
});

const token = () => new CancellationTokenSource().token as unknown as vscode.CancellationToken;

describe('provideLanguageModelChatInformation', () => {
	test('asks the daemon and converts its models', async () => {
		const { provider, frames } = setup();
		const models = await provider.provideLanguageModelChatInformation({ silent: true }, token());
		assert.deepEqual(models, [{
			id: 'fake', name: 'Fake Agent', family: 'acp', version: '1', maxInputTokens: 100000, maxOutputTokens: 8000,
			capabilities: { toolCalling: true, imageInput: false }, tooltip: 'ACP agent fake',
		}]);
		assert.deepEqual(frames().find(f => f.method === 'lm/provideLanguageModelChatInformation')?.params, { silent: true });
	});

	test('capabilities pass through as the daemon gives them (imageInput follows the agent\'s promptCapabilities.image)', async () => {
		const { provider } = setup('auto', {
			env: {
				FAKE_DAEMON_MODELS: JSON.stringify([
					{ id: 'claude', name: 'Claude Code', capabilities: { toolCalling: true, imageInput: true } },
					{ id: 'text-only', capabilities: { toolCalling: true, imageInput: false } },
					{ id: 'many-tools', capabilities: { toolCalling: 128, imageInput: true } },
					{ id: 'old-daemon', capabilities: {} },
				]),
			},
		});
		const models = await provider.provideLanguageModelChatInformation({ silent: true }, token());
		assert.deepEqual(models.map(m => [m.id, m.capabilities]), [
			['claude', { toolCalling: true, imageInput: true }],
			['text-only', { toolCalling: true, imageInput: false }],
			['many-tools', { toolCalling: 128, imageInput: true }],
			['old-daemon', { toolCalling: true, imageInput: false }],
		]);
	});

	test('an unavailable daemon gives no models (and the reason in the log)', async () => {
		const { provider, log } = setup('auto', { command: '/nonexistent/lmbridge' });
		assert.deepEqual(await provider.provideLanguageModelChatInformation({ silent: false }, token()), []);
		assert.equal(log.matching('could not list the agents', 'error').length, 1);
	});
});

describe('provideLanguageModelChatResponse: streaming', () => {
	test('every part is reported as it arrives, in order, as the right VS Code class', async () => {
		const { provider } = setup('auto');
		const rec = recorder();
		const call = { type: 'tool_call', callId: 'lmbridge-perm-1', name: 'symposium-agent-action-mode', input: { title: 'Leave plan mode', message: 'The agent asks to **switch mode**.', approvalToken: 'tok' } };
		await provider.provideLanguageModelChatResponse(model(), script([
			{ part: { type: 'thinking', value: 'Let me think', id: 'th' } },
			{ part: { type: 'text', value: 'Hello' } },
			{ sleep: 150 },
			{ part: { type: 'text', value: ', world' } },
			{ part: call },
			{ result: { stopReason: 'tool_calls' } },
		]), noOptions, rec.progress, token());
		assert.equal(rec.parts.length, 4);
		const [thinking, hello, world, toolCall] = rec.parts as [MockThinkingPart, LanguageModelTextPart, LanguageModelTextPart, LanguageModelToolCallPart];
		assert.ok(thinking instanceof MockThinkingPart);
		assert.deepEqual([thinking.value, thinking.id], ['Let me think', 'th']);
		assert.ok(hello instanceof LanguageModelTextPart && hello.value === 'Hello');
		assert.ok(world instanceof LanguageModelTextPart && world.value === ', world');
		assert.ok(toolCall instanceof LanguageModelToolCallPart);
		assert.deepEqual([toolCall.callId, toolCall.name, toolCall.input], ['lmbridge-perm-1', 'symposium-agent-action-mode', call.input]);
		assert.ok(rec.times[2] - rec.times[1] >= 100, 'the first text was reported before the daemon sent the second');
	});

	const thinkingRows: Array<[ThinkingDisplay, boolean, string[]]> = [
		['auto', true, ['MockThinkingPart:t', 'LanguageModelTextPart:a']],
		['auto', false, ['LanguageModelTextPart:a']],
		['text', true, ['LanguageModelTextPart:t', 'LanguageModelTextPart:a']],
		['hidden', true, ['LanguageModelTextPart:a']],
	];
	for (const [setting, available, expected] of thinkingRows) {
		test(`thinking shown per setting: ${setting}, ThinkingPart ${available ? 'available' : 'absent'}`, async () => {
			mock.setThinkingPartAvailable(available);
			const { provider } = setup(setting);
			const rec = recorder();
			await provider.provideLanguageModelChatResponse(model(), script([
				{ part: { type: 'thinking', value: 't' } }, { part: { type: 'text', value: 'a' } },
			]), noOptions, rec.progress, token());
			assert.deepEqual(rec.parts.map(p => `${(p as object).constructor.name}:${(p as { value: string }).value}`), expected);
		});
	}

	test('when VS Code refuses thinking parts, thinking is hidden from then on and text continues', async () => {
		const { provider, log } = setup('auto');
		const parts: unknown[] = [];
		const progress = {
			report(part: unknown) {
				if (part instanceof MockThinkingPart) {
					throw new Error('proposed API languageModelThinkingPart is not enabled');
				}
				parts.push(part);
			},
		};
		await provider.provideLanguageModelChatResponse(model(), script([
			{ part: { type: 'thinking', value: 't1' } }, { part: { type: 'text', value: 'a' } },
			{ part: { type: 'thinking', value: 't2' } }, { part: { type: 'text', value: 'b' } },
		]), noOptions, progress as any, token());
		assert.deepEqual(parts.map(p => (p as LanguageModelTextPart).value), ['a', 'b']);
		assert.equal(log.matching('VS Code refused a thinking part').length, 1);
	});

	test('the daemon receives the converted request: model, roles, parts, tools and tool mode', async () => {
		const { provider, frames } = setup();
		const messages = [
			{ role: 3, name: undefined, content: [new LanguageModelTextPart('system prompt'), new LanguageModelDataPart(new Uint8Array([1]), 'cache_control')] },
			LanguageModelChatMessage.User('hi'),
			LanguageModelChatMessage.Assistant([new LanguageModelTextPart('ok'), new LanguageModelToolCallPart('c1', 'symposium-agent-action', { title: 'Run date', message: 'm', approvalToken: 'k' })]),
			LanguageModelChatMessage.User([new LanguageModelToolResultPart2('c1', [new LanguageModelTextPart('k')])]),
		];
		const options = { tools: [{ name: 'read_file', description: 'Read a file', inputSchema: { type: 'object' } }], toolMode: 2 };
		await provider.provideLanguageModelChatResponse(model(), messages as any, options as any, recorder().progress, token());
		const request = frames().find(f => f.method === 'lm/provideLanguageModelChatResponse');
		assert.deepEqual(request?.params, {
			modelId: 'fake',
			messages: [
				{ role: 'system', content: [{ type: 'text', value: 'system prompt' }] },
				{ role: 'user', content: [{ type: 'text', value: 'hi' }] },
				{ role: 'assistant', content: [{ type: 'text', value: 'ok' }, { type: 'tool_call', callId: 'c1', name: 'symposium-agent-action', input: { title: 'Run date', message: 'm', approvalToken: 'k' } }] },
				{ role: 'user', content: [{ type: 'tool_result', callId: 'c1', content: [{ type: 'text', value: 'k' }] }] },
			],
			options: { tools: [{ name: 'read_file', description: 'Read a file', inputSchema: { type: 'object' } }], toolMode: 'required' },
		});
	});

	test('an unknown input part is dropped with one warning, not one per request', async () => {
		const { provider, frames, log } = setup();
		const messages = [LanguageModelChatMessage.User([new LanguageModelTextPart('hi'), { hologram: true }])];
		for (let i = 0; i < 3; i++) {
			await provider.provideLanguageModelChatResponse(model(), messages as any, noOptions, recorder().progress, token());
		}
		assert.deepEqual(frames().filter(f => f.method === 'lm/provideLanguageModelChatResponse').map(f => f.params.messages[0].content),
			Array(3).fill([{ type: 'text', value: 'hi' }]));
		assert.equal(log.matching('not sent to the agent: message 0: part object{hologram}', 'warn').length, 1);
		assert.equal(log.matching('not sent to the agent: message 0: part object{hologram}', 'trace').length, 2);
	});

	test('an unknown response part type is logged and skipped, the rest still arrives', async () => {
		const { provider, log } = setup();
		const rec = recorder();
		await provider.provideLanguageModelChatResponse(model(), script([
			{ part: { type: 'hologram', value: 'x' } }, { part: { type: 'text', value: 'fine' } },
		]), noOptions, rec.progress, token());
		assert.deepEqual(rec.parts.map(p => (p as LanguageModelTextPart).value), ['fine']);
		assert.equal(log.matching('unknown type "hologram"', 'warn').length, 1);
	});
});

describe('provideLanguageModelChatResponse: cancellation', () => {
	test('cancel: $/cancelRequest goes out, the call settles at once, and no part is reported after', async () => {
		const { provider, frames } = setup();
		const rec = recorder();
		const source = new CancellationTokenSource();
		// A daemon that keeps streaming after the cancel: the shim must drop what follows.
		const steps: object[] = [{ ignoreCancel: true }];
		for (let i = 0; i < 20; i++) {
			steps.push({ part: { type: 'text', value: `chunk ${i}` } }, { sleep: 100 });
		}
		const call = provider.provideLanguageModelChatResponse(model(), script(steps), noOptions, rec.progress, source.token as any);
		await waitFor(() => rec.parts.length >= 2, 5000, 'the first parts');
		source.cancel();
		const cancelledAt = Date.now();
		const countAtCancel = rec.parts.length;
		await call;
		// Promptly: ~1 ms idle; the daemon's stream has ≥1.8 s to go.
		assert.ok(Date.now() - cancelledAt < 1000, `settled promptly (${Date.now() - cancelledAt} ms)`);
		await new Promise(resolve => setTimeout(resolve, 500)); // the daemon sends ~5 more parts meanwhile
		assert.equal(rec.parts.length, countAtCancel, 'no part after cancel');
		const request = frames().find(f => f.method === 'lm/provideLanguageModelChatResponse');
		await waitFor(() => frames().some(f => f.method === '$/cancelRequest'), 2000, '$/cancelRequest');
		assert.deepEqual(frames().find(f => f.method === '$/cancelRequest')?.params, { id: request?.id });
		assert.equal(frames().find(f => f.method === '$/cancelRequest')?.id, undefined, 'a notification');
	});

	test('cancel while a daemon that ignores the cancel never answers: still settles', async () => {
		const { provider } = setup();
		const source = new CancellationTokenSource();
		const call = provider.provideLanguageModelChatResponse(model(), script([{ ignoreCancel: true }, { hang: true }]), noOptions, recorder().progress, source.token as any);
		await new Promise(resolve => setTimeout(resolve, 300));
		source.cancel();
		const started = Date.now();
		await call;
		assert.ok(Date.now() - started < 5000, `settled in ${Date.now() - started} ms`); // ~1 ms idle; the daemon never answers
	});

	test('a token cancelled before the call: nothing is started', async () => {
		const { provider, client, frames } = setup();
		const source = new CancellationTokenSource();
		source.cancel();
		const rec = recorder();
		await provider.provideLanguageModelChatResponse(model(), script([{ part: { type: 'text', value: 'x' } }]), noOptions, rec.progress, source.token as any);
		assert.equal(client.pid, undefined);
		assert.deepEqual(frames(), []);
		assert.deepEqual(rec.parts, []);
	});

	test('cancel during the respawn backoff settles without waiting for it', async () => {
		const { provider } = setup('auto', { restart: { baseDelayMs: 5000 } });
		await assert.rejects(provider.provideLanguageModelChatResponse(model(), script([{ exit: 1 }]), noOptions, recorder().progress, token()), /exited unexpectedly/);
		const source = new CancellationTokenSource();
		const call = provider.provideLanguageModelChatResponse(model(), script([]), noOptions, recorder().progress, source.token as any);
		await new Promise(resolve => setTimeout(resolve, 100));
		source.cancel();
		const started = Date.now();
		await call;
		assert.ok(Date.now() - started < 2500, `settled in ${Date.now() - started} ms`); // ~1 ms idle; not the 5 s backoff
	});
});

describe('provideLanguageModelChatResponse: errors', () => {
	test('unknown model → LanguageModelError.NotFound carrying the daemon\'s message', async () => {
		const { provider } = setup();
		await assert.rejects(provider.provideLanguageModelChatResponse(model('nope'), script([]), noOptions, recorder().progress, token()), (e: unknown) => {
			assert.ok(e instanceof LanguageModelError);
			assert.equal(e.code, 'NotFound');
			assert.match(e.message, /unknown model 'nope'; configured: fake/);
			return true;
		});
	});

	test('another daemon error reaches the user with its text; parts before it stay reported', async () => {
		const { provider } = setup();
		const rec = recorder();
		await assert.rejects(provider.provideLanguageModelChatResponse(model(), script([
			{ part: { type: 'text', value: 'partial' } },
			{ error: { code: -32000, message: 'agent "fake" crashed: exit code 1\nstderr: segfault' } },
		]), noOptions, rec.progress, token()), (e: unknown) => {
			assert.ok(!(e instanceof LanguageModelError));
			assert.equal((e as Error).message, 'agent "fake" crashed: exit code 1\nstderr: segfault');
			return true;
		});
		assert.equal(rec.parts.length, 1);
	});

	test('an agent that needs a sign-in: the chat gets the daemon\'s sentence (no stack), the hook the data', async () => {
		const seen: Array<[unknown, string]> = [];
		const { provider } = setup('auto', {}, { onAuthRequired: (auth, message) => seen.push([auth, message]) });
		const message = 'Codex needs you to sign in: run "codex login" (Sign in…), or set OPENAI_API_KEY in its "env" in lmbridge.agents.';
		const data = { reason: 'auth_required', agentId: 'fake', agentName: 'Codex', login: { command: 'codex', args: ['login'], env: {} }, logins: [], env: ['OPENAI_API_KEY'], methods: [] };
		await assert.rejects(provider.provideLanguageModelChatResponse(model(), script([{ error: { code: -32000, message, data } }]), noOptions, recorder().progress, token()),
			(e: unknown) => {
				assert.ok(!(e instanceof LanguageModelError));
				assert.equal((e as Error).message, message);
				assert.equal((e as Error).stack, '');
				return true;
			});
		assert.deepEqual(seen, [[data, message]]);
		// Another error: no hook.
		await assert.rejects(provider.provideLanguageModelChatResponse(model(), script([{ error: { code: -32000, message: 'boom' } }]), noOptions, recorder().progress, token()));
		assert.equal(seen.length, 1);
	});

	test('a daemon crash mid-response fails the call with a clear message, and the next call works', async () => {
		const { provider } = setup('auto', { restart: { baseDelayMs: 10 } });
		await assert.rejects(provider.provideLanguageModelChatResponse(model(), script([{ part: { type: 'text', value: 'a' } }, { exit: 9 }]), noOptions, recorder().progress, token()),
			/The lmbridge daemon exited unexpectedly \(exit code 9\)/);
		const rec = recorder();
		await provider.provideLanguageModelChatResponse(model(), [LanguageModelChatMessage.User('again')] as any, noOptions, rec.progress, token());
		assert.deepEqual(rec.parts.map(p => (p as LanguageModelTextPart).value), ['echo: again']);
	});
});

describe('provideTokenCount', () => {
	test('is local: no daemon, chars/4', async () => {
		const { provider, client, frames } = setup();
		assert.equal(await provider.provideTokenCount(model(), 'x'.repeat(41), token()), 11);
		assert.equal(await provider.provideTokenCount(model(), LanguageModelChatMessage.User('abcdefgh') as any, token()), 2);
		assert.equal(client.pid, undefined);
		assert.deepEqual(frames(), []);
	});
});
