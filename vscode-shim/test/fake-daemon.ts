/**
 * A scripted stand-in for `lmbridge serve` that speaks wire contract v1 on stdio, so the
 * shim's process handling and streaming are tested against a real child process.
 *
 * The last user message's text chooses what a chat request does:
 *   `script:[step, …]` with steps
 *     {"part": ResponsePart}            send an lm/responsePart
 *     {"sleep": ms}
 *     {"result": object}                answer with this result (default {stopReason:"end_turn"})
 *     {"error": {code, message, data?}} answer with a JSON-RPC error
 *     {"exit": code}                    exit the process now (a crash)
 *     {"answerAndExit": code}           answer end_turn, then exit at once
 *     {"hang": true}                    never answer
 *     {"ignoreCancel": true}            keep going after $/cancelRequest (a misbehaving daemon)
 *     {"stderr": text}                  write a line to stderr
 *     {"notify": method}                send a notification with this method (no params)
 *     {"ask": {method, params}}         send the shim a request (id "lmbridge-<n>"), wait for its
 *                                       answer and send it as a text part "answer: <JSON frame>"
 *   anything else: one text part "echo: <text>", then end_turn.
 * Start-up behaviour comes from FAKE_DAEMON_MODE: normal | exit-at-start | bad-protocol |
 * no-initialize | ignore-eof | ignore-sigterm | no-presets (an older daemon: no `agents/presets`).
 * FAKE_DAEMON_MODELS (JSON: [{id, name?, capabilities?}]) replaces the models it offers.
 * `agents/presets` answers PRESETS below (the shape the daemon's answer has, docs/agents.md), and
 * `initialize.agents` entries that are just `{id}` get the preset's name. Every frame received
 * is appended to the file FAKE_DAEMON_RECORD (one JSON per line) when set.
 */
import * as fs from 'fs';
import * as readline from 'readline';

type Step =
	| { part: unknown } | { sleep: number } | { result: unknown } | { error: { code: number; message: string; data?: unknown } }
	| { exit: number } | { answerAndExit: number } | { hang: true } | { ignoreCancel: true } | { stderr: string }
	| { notify: string } | { ask: { method: string; params: unknown } };

const mode = process.env.FAKE_DAEMON_MODE ?? 'normal';
const record = process.env.FAKE_DAEMON_RECORD;
const log = (line: string) => process.stderr.write(`${line}\n`);
const send = (message: object) => process.stdout.write(`${JSON.stringify(message)}\n`);

log(`[info     ] fake daemon starting pid=${process.pid} mode=${mode}`);
if (mode === 'exit-at-start') {
	log('Traceback (most recent call last):');
	log('ModuleNotFoundError: No module named \'lmbridge\'');
	process.exit(2);
}
if (mode === 'ignore-sigterm') {
	process.on('SIGTERM', () => log('[warning  ] ignoring SIGTERM'));
}

type FakeModel = { id: string; name?: string; capabilities?: Record<string, unknown> };
let models: FakeModel[] = process.env.FAKE_DAEMON_MODELS ? JSON.parse(process.env.FAKE_DAEMON_MODELS) : [{ id: 'fake', name: 'Fake Agent' }];

const PRESETS = [
	{ id: 'claude', name: 'Claude Code', description: 'Anthropic\'s Claude Code, through claude-agent-acp.', requires: 'Node.js 22+', command: 'npx', args: ['-y', '@agentclientprotocol/claude-agent-acp@0.101.0'], package: '@agentclientprotocol/claude-agent-acp', registryId: 'claude-acp' },
	{ id: 'codex', name: 'Codex', description: 'OpenAI\'s Codex, through codex-acp.', requires: 'Node.js 20+', command: 'npx', args: ['-y', '@agentclientprotocol/codex-acp@2.6.0'], package: '@agentclientprotocol/codex-acp', registryId: 'codex-acp' },
	{ id: 'gemini', name: 'Gemini CLI', description: 'Google\'s Gemini CLI.', requires: 'Node.js 20+', command: 'npx', args: ['-y', '@google/gemini-cli@0.61.0', '--acp'] },
	{ id: 'fast-agent', name: 'fast-agent', description: 'fast-agent, any model it supports.', requires: 'uv (Python 3.13)', command: 'uvx', args: ['--python', '3.13', 'fast-agent-mcp@0.10.48', 'acp'] },
];
const cancelled = new Set<number | string>();
/** The fake's own requests to the shim, waiting for its answer. */
const asked = new Map<string, (frame: unknown) => void>();
let askIds = 0;
const answered = new Set<number | string>();

function modelInfo(m: FakeModel) {
	return {
		id: m.id, name: m.name ?? m.id, family: 'acp', version: '1',
		maxInputTokens: 100000, maxOutputTokens: 8000,
		capabilities: m.capabilities ?? { toolCalling: true, imageInput: false },
		tooltip: `ACP agent ${m.id}`,
	};
}

function lastUserText(messages: Array<{ role: string; content: Array<{ type: string; value?: string }> }>): string {
	for (let i = messages.length - 1; i >= 0; i--) {
		if (messages[i].role === 'user') {
			const text = messages[i].content.find(p => p.type === 'text');
			if (text?.value !== undefined) {
				return text.value;
			}
		}
	}
	return '';
}

const sleep = (ms: number) => new Promise(resolve => setTimeout(resolve, ms));

async function chat(id: number | string, params: { modelId: string; messages: never[] }): Promise<void> {
	if (!models.some(m => m.id === params.modelId)) {
		send({ jsonrpc: '2.0', id, error: { code: -32602, message: `unknown model '${params.modelId}'; configured: ${models.map(m => m.id).join(', ')}` } });
		return;
	}
	const text = lastUserText(params.messages);
	if (!text.startsWith('script:')) {
		send({ jsonrpc: '2.0', method: 'lm/responsePart', params: { requestId: id, part: { type: 'text', value: `echo: ${text}` } } });
		send({ jsonrpc: '2.0', id, result: { stopReason: 'end_turn' } });
		return;
	}
	const steps = JSON.parse(text.slice('script:'.length)) as Step[];
	let ignoreCancel = false;
	for (const step of steps) {
		if (cancelled.has(id) && !ignoreCancel) {
			return;
		}
		if ('ignoreCancel' in step) {
			ignoreCancel = true;
		} else if ('part' in step) {
			send({ jsonrpc: '2.0', method: 'lm/responsePart', params: { requestId: id, part: step.part } });
		} else if ('ask' in step) {
			const askId = `lmbridge-${++askIds}`;
			const answer = new Promise<unknown>(resolve => asked.set(askId, resolve));
			send({ jsonrpc: '2.0', id: askId, method: step.ask.method, params: step.ask.params });
			const frame = await answer;
			send({ jsonrpc: '2.0', method: 'lm/responsePart', params: { requestId: id, part: { type: 'text', value: `answer: ${JSON.stringify(frame)}` } } });
		} else if ('notify' in step) {
			send({ jsonrpc: '2.0', method: step.notify, params: {} });
		} else if ('sleep' in step) {
			await sleep(step.sleep);
		} else if ('result' in step) {
			send({ jsonrpc: '2.0', id, result: step.result });
			answered.add(id);
			return;
		} else if ('error' in step) {
			send({ jsonrpc: '2.0', id, error: step.error });
			return;
		} else if ('exit' in step) {
			log(`[error    ] crashing on purpose with code ${step.exit}`);
			process.exit(step.exit);
		} else if ('answerAndExit' in step) {
			send({ jsonrpc: '2.0', id, result: { stopReason: 'end_turn' } });
			process.exit(step.answerAndExit);
		} else if ('hang' in step) {
			return;
		} else if ('stderr' in step) {
			log(step.stderr);
		}
	}
	if (!cancelled.has(id) || ignoreCancel) {
		send({ jsonrpc: '2.0', id, result: { stopReason: 'end_turn' } });
	}
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', line => {
	if (record) {
		fs.appendFileSync(record, `${line}\n`);
	}
	let msg: { id?: number | string; method?: string; params?: any };
	try {
		msg = JSON.parse(line);
	} catch {
		send({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'parse error' } });
		return;
	}
	const { id, method, params } = msg;
	if (method === undefined && typeof id === 'string' && asked.has(id)) {
		asked.get(id)!(msg);
		asked.delete(id);
		return;
	}
	switch (method) {
		case 'initialize':
			if (mode === 'no-initialize') {
				return;
			}
			if (Array.isArray(params?.agents) && params.agents.length > 0) {
				models = params.agents.map((a: { id: string; name?: string }) => ({ id: a.id, name: a.name ?? PRESETS.find(p => p.id === a.id)?.name }));
			}
			send({ jsonrpc: '2.0', id, result: { protocolVersion: mode === 'bad-protocol' ? 99 : 1, serverInfo: { name: 'fake-lmbridge', version: '0.0.1' } } });
			return;
		case 'lm/provideLanguageModelChatInformation':
			send({ jsonrpc: '2.0', id, result: { models: models.map(modelInfo) } });
			return;
		case 'lm/provideLanguageModelChatResponse':
			void chat(id!, params);
			return;
		case 'agents/presets':
			if (mode === 'no-presets') {
				send({ jsonrpc: '2.0', id, error: { code: -32601, message: `unknown method: ${method}` } });
			} else {
				send({ jsonrpc: '2.0', id, result: { presets: PRESETS } });
			}
			return;
		case 'lm/provideTokenCount':
			send({ jsonrpc: '2.0', id, result: { count: 42 } });
			return;
		case 'shutdown':
			send({ jsonrpc: '2.0', id, result: null });
			return;
		case '$/cancelRequest':
			cancelled.add(params?.id);
			if (!answered.has(params?.id)) {
				send({ jsonrpc: '2.0', id: params?.id, result: { stopReason: 'cancelled' } });
			}
			return;
		default:
			if (id !== undefined) {
				send({ jsonrpc: '2.0', id, error: { code: -32601, message: `unknown method: ${method}` } });
			}
	}
});
rl.on('close', () => {
	log('[info     ] stdin closed');
	if (mode === 'ignore-eof' || mode === 'ignore-sigterm') {
		log('[warning  ] ignoring EOF');
		setInterval(() => undefined, 1000);
		return;
	}
	process.exit(0);
});
