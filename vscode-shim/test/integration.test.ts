/**
 * The extension against the real daemon (`../.venv/bin/lmbridge serve`, built by the
 * top-level `make test`) and its built-in demo agent. VS Code is the mock; the test plays
 * Copilot Chat's part: it sends the whole conversation each time, with a System message
 * first, invokes the tool the way VS Code does after the user's choice, and replays the
 * history as VS Code would after Allow, Skip and Stop (facts.md §1).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type * as vscode from 'vscode';
import { activate, deactivate, LmBridgeApi } from '../src/extension';
import type { AgentActionInput } from '../src/wire';
import { isAlive, recorder, tempDir, waitFor } from './helpers';
import {
	CancellationTokenSource, LanguageModelChatMessage, LanguageModelTextPart, LanguageModelToolCallPart,
	LanguageModelToolResult, LanguageModelToolResultPart2, MarkdownString, MockThinkingPart, mock,
} from './vscode-mock';

const SHIM_DIR = path.resolve(__dirname, '..', '..');
const DAEMON = path.resolve(SHIM_DIR, '../.venv/bin/lmbridge');
const SKIP_TEXT = 'The user chose to skip the tool call, they want to proceed without running it';
const TOOL = 'symposium-agent-action';

type Message = vscode.LanguageModelChatRequestMessage;
const System = (text: string) => ({ role: 3, name: undefined, content: [new LanguageModelTextPart(text)] }) as unknown as Message;
const User = (content: string | unknown[]) => LanguageModelChatMessage.User(content as never) as unknown as Message;
const Assistant = (content: unknown[]) => LanguageModelChatMessage.Assistant(content as never) as unknown as Message;

/** Copilot re-renders its system prompt on every request. */
let requestNo = 0;
const systemPrompt = () => System(`You are GitHub Copilot. Request ${++requestNo}. Current date: 2025-11-21.`);

let api: LmBridgeApi;
let scratch: string;
let provider: vscode.LanguageModelChatProvider;
let tool: vscode.LanguageModelTool<AgentActionInput>;
let demo: vscode.LanguageModelChatInformation;

interface Turn {
	parts: unknown[];
	text: string;
	toolCalls: LanguageModelToolCallPart[];
}

async function send(messages: Message[], token?: vscode.CancellationToken, onPart?: (parts: unknown[]) => void): Promise<Turn> {
	const rec = recorder();
	const progress = { report: (p: vscode.LanguageModelResponsePart) => { rec.progress.report(p); onPart?.(rec.parts); } };
	// Agent mode offers the agent-action tools; without them the daemon declines permissions.
	const tools = ['symposium-agent-action', 'symposium-agent-action-read', 'symposium-agent-action-edit'].map(name => ({ name, description: '' }));
	await provider.provideLanguageModelChatResponse(demo, messages, { toolMode: 1, tools } as never, progress,
		token ?? (new CancellationTokenSource().token as unknown as vscode.CancellationToken));
	return {
		parts: rec.parts,
		text: rec.parts.filter(p => p instanceof LanguageModelTextPart).map(p => (p as LanguageModelTextPart).value).join(''),
		toolCalls: rec.parts.filter(p => p instanceof LanguageModelToolCallPart) as LanguageModelToolCallPart[],
	};
}

/** The assistant message VS Code replays for a turn: its text, then its tool calls. */
function replay(turn: Turn): Message {
	return Assistant([new LanguageModelTextPart(turn.text), ...turn.toolCalls]);
}

function permissionCall(turn: Turn): LanguageModelToolCallPart & { input: AgentActionInput } {
	assert.equal(turn.toolCalls.length, 1, `one permission request, got: ${JSON.stringify(turn.parts)}`);
	const call = turn.toolCalls[0] as LanguageModelToolCallPart & { input: AgentActionInput };
	assert.ok(call.name.startsWith(TOOL), call.name);  // one tool per class of ACP tool kind
	assert.equal(typeof call.input.approvalToken, 'string');
	return call;
}

const notes = () => path.join(scratch, 'notes.txt');
const notesText = () => (fs.existsSync(notes()) ? fs.readFileSync(notes(), 'utf8') : '');

before(async () => {
	assert.ok(fs.existsSync(DAEMON),
		`the lmbridge daemon is not installed at ${DAEMON}: run \`make venv\` (or \`make test\`) at the top of the repository first`);
	scratch = tempDir('lmbridge-demo-scratch-');
	mock.reset();
	mock.setWorkspaceFolders([scratch]);
	mock.setConfig({
		'lmbridge.daemon.command': DAEMON,
		'lmbridge.daemon.env': { LMBRIDGE_DEMO_SCRATCH: scratch, LMBRIDGE_START_NOTICE: '60' },  // answers compared exactly: no "Starting…" line
		'lmbridge.thinking': 'auto',
	});
	api = activate(mock.context() as never);
	provider = mock.state.providers.get('lmbridge') as vscode.LanguageModelChatProvider;
	tool = mock.state.tools.get(TOOL) as vscode.LanguageModelTool<AgentActionInput>;
	assert.ok(provider && tool, 'activate() registered the provider and the tool');
	const models = await provider.provideLanguageModelChatInformation({ silent: true }, new CancellationTokenSource().token as never) ?? [];
	const found = models.find(m => m.id === 'demo');
	assert.ok(found, `the daemon offers the demo agent; got ${JSON.stringify(models)}`);
	demo = found;
});

after(async () => {
	const pid = api?.daemon.pid;
	await deactivate();
	assert.ok(!isAlive(pid), 'the daemon is gone after deactivate');
});

describe('the extension against the real daemon and the demo agent', { timeout: 120_000 }, () => {
	test('a chat turn streams thinking, then text', async () => {
		const turn = await send([systemPrompt(), User('hi there')]);
		assert.match(turn.text, /Hello from the demo agent\. You said: hi there/);
		const firstThinking = turn.parts.findIndex(p => p instanceof MockThinkingPart);
		const firstText = turn.parts.findIndex(p => p instanceof LanguageModelTextPart);
		assert.ok(firstThinking >= 0, 'thinking reported as a LanguageModelThinkingPart');
		assert.ok(firstThinking < firstText, 'thinking came first');
		assert.equal(turn.toolCalls.length, 0);

		// The same chat goes on: VS Code replays the first turn.
		const next = await send([systemPrompt(), User('hi there'), replay(turn), User('and again')]);
		assert.match(next.text, /You said: and again/);
	});

	test('a permission approved through the tool: the confirmation shows the write, invoke returns the token, the agent writes', async () => {
		const prompt = 'please write a file with my notes';
		const asked = await send([systemPrompt(), User(prompt)]);
		const call = permissionCall(asked);
		assert.ok(!fs.existsSync(notes()), 'nothing written before approval');

		const prepared = await tool.prepareInvocation!({ input: call.input }, new CancellationTokenSource().token as never);
		assert.equal(prepared?.confirmationMessages?.title, 'Write notes.txt');
		const message = prepared?.confirmationMessages?.message as unknown as MarkdownString;
		assert.ok(message instanceof MarkdownString);
		assert.match(message.value, /\*\*edit files\*\*/);
		assert.ok(message.value.includes(notes()), `the file is named in:\n${message.value}`);
		assert.ok(message.value.includes('+Notes from the lmbridge demo agent.'), `the content is previewed in:\n${message.value}`);

		const result = await tool.invoke({ input: call.input, toolInvocationToken: undefined } as never, new CancellationTokenSource().token as never) as LanguageModelToolResult;
		assert.deepEqual(result.content.map(p => (p as LanguageModelTextPart).value), [call.input.approvalToken]);

		const done = await send([systemPrompt(), User(prompt), replay(asked), User([new LanguageModelToolResultPart2(call.callId, result.content)])]);
		assert.match(done.text, /I wrote/);
		assert.equal(done.toolCalls.length, 0);
		assert.match(notesText(), /please write a file with my notes/);
	});

	test('a skip: VS Code\'s skip text is not approval; the agent carries on without writing', async () => {
		const before = notesText();
		const prompt = 'write a skipped file';
		const asked = await send([systemPrompt(), User(prompt)]);
		const call = permissionCall(asked);
		const done = await send([systemPrompt(), User(prompt), replay(asked), User([new LanguageModelToolResultPart2(call.callId, [new LanguageModelTextPart(SKIP_TEXT)])])]);
		assert.match(done.text, /did not write the file: permission was declined/);
		assert.equal(notesText(), before, 'nothing written');
	});

	test('a stop while VS Code shows the confirmation: the next request lacks the tool call; its new prompt is answered', async () => {
		const before = notesText();
		const prompt = 'write a stopped file';
		const asked = await send([systemPrompt(), User(prompt)]);
		permissionCall(asked);
		// Stop: VS Code drops the stopped turn's response and tool call from the history.
		const next = await send([systemPrompt(), User(prompt), User('never mind, just say hello')]);
		assert.match(next.text, /You said: never mind, just say hello/);
		assert.equal(next.toolCalls.length, 0);
		assert.equal(notesText(), before, 'nothing written');
	});

	test('a stop while streaming: the call settles at once, no part after it, and the chat goes on', async () => {
		const source = new CancellationTokenSource();
		let countAtCancel = -1;
		let cancelledAt = 0;
		const streaming = send([systemPrompt(), User('go slow please')], source.token as never, parts => {
			if (countAtCancel < 0 && parts.filter(p => p instanceof LanguageModelTextPart && /chunk \d/.test((p as LanguageModelTextPart).value)).length >= 3) {
				countAtCancel = parts.length;
				cancelledAt = Date.now();
				source.cancel();
			}
		});
		const turn = await streaming;
		const settledIn = Date.now() - cancelledAt;
		assert.ok(countAtCancel > 0, 'cancelled mid-stream');
		assert.ok(settledIn < 200, `settled promptly (${settledIn} ms)`);
		await new Promise(resolve => setTimeout(resolve, 500)); // the agent would have sent ~10 more chunks
		assert.equal(turn.parts.length, countAtCancel, 'no part reported after the cancel');

		const next = await send([systemPrompt(), User('go slow please'), User('hello instead')]);
		assert.match(next.text, /You said: hello instead/);
		assert.doesNotMatch(next.text, /chunk \d/, 'nothing of the cancelled turn leaks into the next');
	});

	test('an unknown model is LanguageModelError.NotFound with the daemon\'s message', async () => {
		await assert.rejects(
			Promise.resolve(provider.provideLanguageModelChatResponse({ ...demo, id: 'no-such-agent' }, [systemPrompt(), User('hi')], { toolMode: 1 } as never,
				recorder().progress, new CancellationTokenSource().token as never)),
			(e: unknown) => (e as { code?: string }).code === 'NotFound' && /unknown model/i.test((e as Error).message));
	});

	test('the daemon log reaches the output channel', async () => {
		const channel = mock.state.channels[0];
		await waitFor(() => channel.matching('[daemon]').length > 0, 5000, 'daemon log lines');
		assert.ok(channel.matching('lmbridge daemon ready: lmbridge').length === 1);
	});
});
