/**
 * The extension against the real daemon (`../.venv/bin/lmbridge serve`, built by the
 * top-level `make test`) and its built-in demo agent. VS Code is the mock; the test plays
 * Copilot Chat's part: it sends the whole conversation each time, with a System message
 * first, invokes the tool the way VS Code does after the user's choice, and replays the
 * history as VS Code would after Allow, Skip and Stop (docs/vscode.md).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type * as vscode from 'vscode';
import { activate, deactivate, LmBridgeApi } from '../src/extension';
import { AGENT_ACTION_TOOLS, type AgentActionInput } from '../src/chat/wire';
import { isAlive, recorder, tempDir, waitFor } from './helpers';
import {
	CancellationTokenSource, LanguageModelChatMessage, LanguageModelTextPart, LanguageModelToolCallPart,
	LanguageModelToolResult, LanguageModelToolResultPart2, MarkdownString, MockThinkingPart, mock,
} from './vscode-mock';

const SHIM_DIR = path.resolve(__dirname, '..', '..');
const DAEMON = path.resolve(SHIM_DIR, '../.venv/bin/lmbridge');
const SKIP_TEXT = 'The user chose to skip the tool call, they want to proceed without running it';

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
	const tools = AGENT_ACTION_TOOLS.map(name => ({ name, description: '' }));
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

/** The turn's one permission request: a call of `tool`, whose input is the daemon's card and nothing else. */
function permissionCall(turn: Turn, tool: string): LanguageModelToolCallPart & { input: AgentActionInput } {
	assert.equal(turn.toolCalls.length, 1, `one permission request, got: ${JSON.stringify(turn.parts)}`);
	const call = turn.toolCalls[0] as LanguageModelToolCallPart & { input: AgentActionInput };
	assert.equal(call.name, tool);
	assert.deepEqual(Object.keys(call.input).sort(), ['approvalToken', 'message', 'title']);
	assert.ok([call.input.title, call.input.message, call.input.approvalToken].every(v => typeof v === 'string' && v.length > 0));
	return call;
}

/** What VS Code does with the call: the registered tool's confirmation, then (on Allow) its result. */
async function confirm(call: LanguageModelToolCallPart & { input: AgentActionInput }): Promise<{ title: string; message: string; invocationMessage: string }> {
	const tool = mock.state.tools.get(call.name) as vscode.LanguageModelTool<AgentActionInput> | undefined;
	assert.ok(tool, `${call.name} is registered`);
	const prepared = await tool.prepareInvocation!({ input: call.input }, new CancellationTokenSource().token as never);
	const message = prepared?.confirmationMessages?.message as unknown as MarkdownString;
	assert.ok(message instanceof MarkdownString);
	assert.equal(message.isTrusted, false);
	return { title: String(prepared?.confirmationMessages?.title), message: message.value, invocationMessage: String(prepared?.invocationMessage) };
}

async function allow(call: LanguageModelToolCallPart & { input: AgentActionInput }): Promise<LanguageModelToolResult> {
	const tool = mock.state.tools.get(call.name) as vscode.LanguageModelTool<AgentActionInput>;
	const result = await tool.invoke({ input: call.input, toolInvocationToken: undefined } as never, new CancellationTokenSource().token as never) as LanguageModelToolResult;
	assert.deepEqual(result.content.map(p => (p as LanguageModelTextPart).value), [call.input.approvalToken]);
	return result;
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
	assert.ok(provider, 'activate() registered the provider');
	assert.deepEqual([...mock.state.tools.keys()].sort(), [...AGENT_ACTION_TOOLS].sort(), 'and the five agent-action tools');
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

describe('the extension against the real daemon and the demo agent', { timeout: 300_000 }, () => {
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
		const call = permissionCall(asked, 'symposium-agent-action-edit');
		assert.ok(!fs.existsSync(notes()), 'nothing written before approval');

		const card = await confirm(call);
		assert.equal(card.title, 'Write notes.txt');
		assert.equal(card.invocationMessage, 'Agent action: Write notes.txt');
		assert.equal(card.message, call.input.message, 'the daemon\'s card, as it is');
		assert.ok(card.message.includes(notes()), `the file is named in:\n${card.message}`);
		assert.ok(card.message.includes('+Notes from the lmbridge demo agent.'), `the content is previewed in:\n${card.message}`);

		const result = await allow(call);

		const done = await send([systemPrompt(), User(prompt), replay(asked), User([new LanguageModelToolResultPart2(call.callId, result.content)])]);
		assert.match(done.text, /I wrote/);
		assert.equal(done.toolCalls.length, 0);
		assert.match(notesText(), /please write a file with my notes/);
	});

	test('a skip: VS Code\'s skip text is not approval; the agent carries on without writing', async () => {
		const before = notesText();
		const prompt = 'write a skipped file';
		const asked = await send([systemPrompt(), User(prompt)]);
		const call = permissionCall(asked, 'symposium-agent-action-edit');
		const done = await send([systemPrompt(), User(prompt), replay(asked), User([new LanguageModelToolResultPart2(call.callId, [new LanguageModelTextPart(SKIP_TEXT)])])]);
		assert.match(done.text, /did not write the file: permission was declined/);
		assert.equal(notesText(), before, 'nothing written');
	});

	test('a stop while VS Code shows the confirmation: the next request lacks the tool call; its new prompt is answered', async () => {
		const before = notesText();
		const prompt = 'write a stopped file';
		const asked = await send([systemPrompt(), User(prompt)]);
		permissionCall(asked, 'symposium-agent-action-edit');
		// Stop: VS Code drops the stopped turn's response and tool call from the history.
		const next = await send([systemPrompt(), User(prompt), User('never mind, just say hello')]);
		assert.match(next.text, /You said: never mind, just say hello/);
		assert.equal(next.toolCalls.length, 0);
		assert.equal(notesText(), before, 'nothing written');
	});

	test('leaving plan mode asks through the mode tool; a command after it, through the command tool', async () => {
		const first = 'please leave plan mode';
		const asked = await send([systemPrompt(), User(first)]);
		const mode = permissionCall(asked, 'symposium-agent-action-mode');
		assert.equal((await confirm(mode)).title, 'Leave plan mode');
		const history = [systemPrompt(), User(first), replay(asked), User([new LanguageModelToolResultPart2(mode.callId, (await allow(mode)).content)])];
		const left = await send(history);
		assert.match(left.text, /Plan mode left\./);
		assert.equal(left.toolCalls.length, 0);

		// "Allow in this Session" on the mode card would approve only that tool: the command
		// comes on another one, so VS Code shows it a card of its own.
		const second = 'now run the command';
		const run = await send([systemPrompt(), ...history.slice(1), replay(left), User(second)]);
		const command = permissionCall(run, 'symposium-agent-action');
		const card = await confirm(command);
		assert.equal(card.title, 'Run date');
		assert.match(card.message, /(`{3,})\w*\ndate\n\1/, `the whole command in a code block:\n${card.message}`);
		assert.equal(card.invocationMessage, 'Agent action: Run date');

		const skipped = await send([systemPrompt(), ...history.slice(1), replay(left), User(second), replay(run),
			User([new LanguageModelToolResultPart2(command.callId, [new LanguageModelTextPart(SKIP_TEXT)])])]);
		assert.match(skipped.text, /I did not run it: permission was declined\./);
		assert.doesNotMatch(skipped.text, /I ran/);
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
		assert.ok(settledIn < 1000, `settled promptly (${settledIn} ms)`); // ~1 ms idle; the demo agent's stream has ~1.8 s to go
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
