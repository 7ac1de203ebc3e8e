/** The daemon process (src/chat/daemon.ts) against the fake daemon run as a real child process. */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { DaemonClient, DaemonError, OPEN_SETTINGS, SHOW_LOGS, stderrLevel } from '../src/chat/daemon';
import { fakeClient, isAlive, waitFor } from './helpers';
import { mock } from './vscode-mock';

const clients: DaemonClient[] = [];
function track<T extends { client: DaemonClient }>(c: T): T {
	clients.push(c.client);
	return c;
}

afterEach(async () => {
	await Promise.all(clients.splice(0).map(c => c.dispose()));
	mock.reset();
});

const chat = (text: string, modelId = 'fake') => ({
	modelId, messages: [{ role: 'user', content: [{ type: 'text', value: text }] }],
});

describe('DaemonClient: start', () => {
	test('lazy: nothing runs until the first request, which sends initialize first', async () => {
		const { client, frames } = track(fakeClient({
			initializeParams: () => ({ protocolVersion: 1, clientInfo: { name: 'lmbridge-vscode', version: '0.1.0' }, workspaceFolders: ['/w'], agents: [{ id: 'a', command: 'x' }] }),
		}));
		assert.equal(client.pid, undefined);
		assert.deepEqual(frames(), []);
		const result = await client.request<{ models: Array<{ id: string }> }>('lm/provideLanguageModelChatInformation', { silent: true });
		assert.deepEqual(result.models.map(m => m.id), ['a']);
		const [init, info] = frames();
		assert.equal(init.method, 'initialize');
		assert.deepEqual(init.params, { protocolVersion: 1, clientInfo: { name: 'lmbridge-vscode', version: '0.1.0' }, workspaceFolders: ['/w'], agents: [{ id: 'a', command: 'x' }] });
		assert.equal(info.method, 'lm/provideLanguageModelChatInformation');
		assert.ok(typeof init.id === 'number' && typeof info.id === 'number' && info.id > init.id, 'numeric ids, increasing');
	});

	test('lm/modelsChanged reaches onModelsChanged; other notifications are ignored', async () => {
		let changed = 0;
		const { client } = track(fakeClient({ onModelsChanged: () => { changed += 1; } }));
		await client.request('lm/provideLanguageModelChatResponse', chat('script:[{"notify":"lm/modelsChanged"},{"notify":"lm/somethingElse"}]'));
		assert.equal(changed, 1);
	});

	test('the daemon\'s requests reach the handler registered for their method, and are answered', async () => {
		const { client } = track(fakeClient());
		const notes: unknown[] = [];
		const served = client.onRequest('client/readTextFile', params => ({ content: `text of ${(params as { path: string }).path}` }));
		client.onNotification('client/sessionState', params => notes.push(params));
		const parts: string[] = [];
		await client.request('lm/provideLanguageModelChatResponse',
			chat('script:[{"ask":{"method":"client/readTextFile","params":{"path":"/w/a.txt"}}},{"ask":{"method":"client/unknown","params":{}}},{"notify":"client/sessionState"}]'),
			{ onPart: part => parts.push((part as { value: string }).value) });
		assert.deepEqual(parts.map(p => JSON.parse(p.slice('answer: '.length))), [
			{ jsonrpc: '2.0', id: 'lmbridge-1', result: { content: 'text of /w/a.txt' } },
			{ jsonrpc: '2.0', id: 'lmbridge-2', error: { code: -32601, message: 'unknown method: client/unknown' } },
		]);
		assert.deepEqual(notes, [{}]);
		served.dispose();
		parts.length = 0;
		await client.request('lm/provideLanguageModelChatResponse',
			chat('script:[{"ask":{"method":"client/readTextFile","params":{"path":"/w/a.txt"}}}]'),
			{ onPart: part => parts.push((part as { value: string }).value) });
		assert.equal(JSON.parse(parts[0].slice('answer: '.length)).error.code, -32601, 'no handler once disposed');
	});

	test('one process serves concurrent and later requests', async () => {
		const { client, frames } = track(fakeClient());
		const [a, b] = await Promise.all([
			client.request<{ models: unknown[] }>('lm/provideLanguageModelChatInformation', {}),
			client.request<{ stopReason: string }>('lm/provideLanguageModelChatResponse', chat('hi')),
		]);
		assert.equal(a.models.length, 1);
		assert.equal(b.stopReason, 'end_turn');
		const pid = client.pid;
		await client.request('lm/provideLanguageModelChatInformation', {});
		assert.equal(client.pid, pid);
		assert.equal(frames().filter(f => f.method === 'initialize').length, 1);
	});

	test('stderr lines reach the log channel with their level', async () => {
		const { client, log } = track(fakeClient());
		await client.request('lm/provideLanguageModelChatResponse', chat('script:[{"stderr":"[warning  ] agent slow"},{"stderr":"plain line"}]'));
		await waitFor(() => log.matching('[daemon] plain line').length === 1, 10_000, 'stderr');
		assert.equal(log.matching('[daemon] [info     ] fake daemon starting', 'info').length, 1);
		assert.equal(log.matching('[daemon] [warning  ] agent slow', 'warn').length, 1);
		assert.equal(log.matching('[daemon] plain line', 'info').length, 1);
		assert.equal(log.matching('lmbridge daemon ready: fake-lmbridge 0.0.1', 'info').length, 1);
	});

	test('a daemon that speaks another protocol version is refused and stopped', async () => {
		const { client } = track(fakeClient({ mode: 'bad-protocol' }));
		await assert.rejects(client.request('lm/provideLanguageModelChatInformation', {}),
			(e: unknown) => e instanceof DaemonError && e.kind === 'protocol' && /protocol version 99/.test(e.message));
	});

	test('a daemon that never answers initialize times out and is stopped', async () => {
		const { client, log } = track(fakeClient({ mode: 'no-initialize', initializeTimeoutMs: 300, stop: { eofGraceMs: 100, termGraceMs: 100 } }));
		await assert.rejects(client.request('lm/provideLanguageModelChatInformation', {}), /did not answer "initialize"/);
		await waitFor(() => log.matching('exited').length > 0, 10_000, 'the stuck daemon to be stopped'); // ~0.5 s idle
		assert.equal(client.pid, undefined);
	});

	test('command not found: how to install the daemon, with buttons to settings and logs; not a crash', async () => {
		const { client } = track(fakeClient({ command: '/nonexistent/bin/lmbridge', restart: { crashLimit: 1 } }));
		const chosen: string[][] = [];
		mock.state.errorResponse = m => { chosen.push(m.items); return OPEN_SETTINGS; };
		for (let i = 0; i < 3; i++) {
			await assert.rejects(client.request('lm/provideLanguageModelChatInformation', {}), (e: unknown) => {
				assert.ok(e instanceof DaemonError);
				assert.equal(e.kind, 'spawn'); // never 'crash_loop', although crashLimit is 1
				assert.match(e.message, /"\/nonexistent\/bin\/lmbridge" was not found/);
				assert.match(e.message, /pip install/);
				assert.match(e.message, /lmbridge\.daemon\.command/);
				return true;
			});
		}
		assert.equal(mock.state.errorMessages.length, 1, 'the same failure is shown once');
		assert.deepEqual(chosen, [[OPEN_SETTINGS, SHOW_LOGS]]);
		await waitFor(() => mock.state.executed.length > 0, 10_000, 'open settings');
		assert.deepEqual(mock.state.executed[0], { command: 'workbench.action.openSettings', args: ['lmbridge'] });
	});
});

describe('DaemonClient: crashes', () => {
	test('a crash fails the pending requests with a clear message; the next request respawns after a backoff', async () => {
		const { client, log } = track(fakeClient({ restart: { baseDelayMs: 300 } }));
		const slow = client.request('lm/provideLanguageModelChatResponse', chat('script:[{"hang":true}]'));
		const firstPid = client.pid ?? await waitFor(() => client.pid !== undefined).then(() => client.pid);
		const crashing = client.request('lm/provideLanguageModelChatResponse', chat('script:[{"sleep":50},{"exit":3}]'));
		for (const pending of [slow, crashing]) {
			await assert.rejects(pending, (e: unknown) => {
				assert.ok(e instanceof DaemonError);
				assert.equal(e.kind, 'exited');
				assert.match(e.message, /exited unexpectedly \(exit code 3\)/);
				assert.match(e.message, /next request starts it again/);
				assert.match(e.message, /crashing on purpose/); // the daemon's last words
				return true;
			});
		}
		assert.ok(!isAlive(firstPid));
		assert.equal(log.matching('exited unexpectedly: exit code 3', 'error').length, 1);

		const started = Date.now();
		const result = await client.request<{ stopReason: string }>('lm/provideLanguageModelChatResponse', chat('again'));
		assert.equal(result.stopReason, 'end_turn');
		assert.ok(Date.now() - started >= 250, `respawn waited the backoff (${Date.now() - started} ms)`);
		assert.notEqual(client.pid, firstPid);
		assert.equal(log.matching('restarting the lmbridge daemon in').length, 1);
	});

	test('an answer written just before the daemon exits is still delivered', async () => {
		const { client } = track(fakeClient({ restart: { baseDelayMs: 10 } }));
		for (let i = 0; i < 4; i++) {
			const result = await client.request<{ stopReason: string }>('lm/provideLanguageModelChatResponse', chat('script:[{"part":{"type":"text","value":"x"}},{"answerAndExit":0}]'));
			assert.equal(result.stopReason, 'end_turn');
			await waitFor(() => client.pid === undefined, 10_000, 'the exit to be handled');
		}
	});

	test('request ids never repeat across restarts', async () => {
		const { client, frames } = track(fakeClient({ restart: { baseDelayMs: 10 } }));
		await client.request('lm/provideLanguageModelChatInformation', {});
		await assert.rejects(client.request('lm/provideLanguageModelChatResponse', chat('script:[{"exit":1}]')), /exited unexpectedly/);
		await client.request('lm/provideLanguageModelChatInformation', {});
		const ids = frames().filter(f => f.id !== undefined).map(f => f.id);
		assert.equal(frames().filter(f => f.method === 'initialize').length, 2, 'two daemons');
		assert.equal(new Set(ids).size, ids.length, `unique ids: ${ids.join(',')}`);
	});

	test('crash loop: the backoff doubles, then respawning stops with one error offering the logs; restart() resets', async () => {
		let mode = 'exit-at-start';
		const { client, log } = track(fakeClient({
			mode: () => mode,
			restart: { baseDelayMs: 100, maxDelayMs: 1000, crashLimit: 4, crashWindowMs: 60_000 },
		}));
		mock.state.errorResponse = m => (m.items.includes(SHOW_LOGS) ? SHOW_LOGS : undefined);
		const durations: number[] = [];
		for (let i = 0; i < 4; i++) {
			const started = Date.now();
			await assert.rejects(client.request('lm/provideLanguageModelChatInformation', {}),
				(e: unknown) => e instanceof DaemonError && e.kind === 'exited' && /No module named 'lmbridge'/.test(e.message));
			durations.push(Date.now() - started);
		}
		// Waits before spawns 2, 3, 4: 100, 200, 400 ms.
		assert.ok(durations[1] >= 90 && durations[2] >= 190 && durations[3] >= 390, `backoff doubles: ${durations.join(', ')}`);

		const started = Date.now();
		await assert.rejects(client.request('lm/provideLanguageModelChatInformation', {}), (e: unknown) => {
			assert.ok(e instanceof DaemonError);
			assert.equal(e.kind, 'crash_loop');
			assert.match(e.message, /crashed 4 times within 60 s/);
			assert.match(e.message, /lmbridge: Restart Daemon/);
			return true;
		});
		assert.ok(Date.now() - started < 700, 'fails at once, no spawn'); // a spawn would wait the next backoff, 800 ms
		const spawns = log.matching('starting the lmbridge daemon:').length;
		assert.equal(spawns, 4);

		await waitFor(() => log.shown === 1, 10_000, 'the Show Logs button to open the log');
		const crashLoopMessages = mock.state.errorMessages.filter(m => /crashed 4 times/.test(m.message));
		assert.equal(crashLoopMessages.length, 1, 'one notification');
		assert.deepEqual(crashLoopMessages[0].items, [SHOW_LOGS]);
		await assert.rejects(client.request('lm/provideLanguageModelChatInformation', {}), /crashed 4 times/);
		assert.equal(mock.state.errorMessages.filter(m => /crashed 4 times/.test(m.message)).length, 1, 'still one notification');

		mode = 'normal';
		await client.restart('test');
		const result = await client.request<{ models: unknown[] }>('lm/provideLanguageModelChatInformation', {});
		assert.equal(result.models.length, 1);
	});
});

describe('DaemonClient: stop and dispose', () => {
	const cases: Array<{ mode: string; expectTerm: boolean; expectKill: boolean }> = [
		{ mode: 'normal', expectTerm: false, expectKill: false },
		{ mode: 'ignore-eof', expectTerm: true, expectKill: false },
		{ mode: 'ignore-sigterm', expectTerm: true, expectKill: true },
	];
	for (const { mode, expectTerm, expectKill } of cases) {
		test(`dispose closes stdin, then SIGTERM, then SIGKILL (daemon: ${mode})`, async () => {
			// Each grace ≥10x what the step takes idle (~50 ms), except where the test waits it out.
			const { client, log } = fakeClient({ mode, stop: { eofGraceMs: expectTerm ? 1000 : 5000, termGraceMs: expectKill ? 500 : 3000 } });
			await client.request('lm/provideLanguageModelChatInformation', {});
			const pid = client.pid;
			assert.ok(isAlive(pid));
			await waitFor(() => log.matching('fake daemon starting').length === 1, 10_000);
			const started = Date.now();
			await client.dispose();
			const took = Date.now() - started;
			assert.ok(!isAlive(pid), 'the daemon is gone');
			await waitFor(() => log.matching('[daemon] [info     ] stdin closed').length === 1, 10_000, 'the daemon to see EOF');
			assert.equal(log.matching('sending SIGTERM').length, expectTerm ? 1 : 0);
			assert.equal(log.matching('sending SIGKILL').length, expectKill ? 1 : 0);
			if (!expectTerm) {
				assert.ok(took < 5000, `EOF alone was enough (${took} ms)`);
			}
			assert.equal(log.matching('exited unexpectedly').length, 0, 'a requested stop is not a crash');
			await assert.rejects(client.request('lm/provideLanguageModelChatInformation', {}), /shutting down/);
		});
	}

	test('dispose during a respawn backoff does not wait for it', async () => {
		const { client } = fakeClient({ restart: { baseDelayMs: 10_000 } });
		await assert.rejects(client.request('lm/provideLanguageModelChatResponse', chat('script:[{"exit":1}]')), /exited unexpectedly/);
		const waiting = client.request('lm/provideLanguageModelChatInformation', {}).then(() => undefined, (e: unknown) => e);
		await new Promise(resolve => setTimeout(resolve, 100));
		const started = Date.now();
		await client.dispose();
		assert.ok(Date.now() - started < 5000, `dispose took ${Date.now() - started} ms`); // not the 10 s backoff
		const error = await waiting;
		assert.ok(error instanceof DaemonError && /shutting down/.test(error.message), String(error));
		assert.equal(client.pid, undefined, 'no daemon was started');
	});

	test('requests pending at dispose fail with a "stopped" message', async () => {
		const { client } = fakeClient();
		const pending = client.request('lm/provideLanguageModelChatResponse', chat('script:[{"hang":true}]')).then(() => undefined, (e: unknown) => e);
		await waitFor(() => client.pid !== undefined);
		await new Promise(resolve => setTimeout(resolve, 50));
		await client.dispose();
		const error = await pending;
		assert.ok(error instanceof DaemonError, String(error));
		assert.equal(error.kind, 'stopped');
		assert.match(error.message, /was stopped: the extension is shutting down/);
	});
});

describe('stderrLevel', () => {
	const rows: Array<[string, string]> = [
		['2025-01-01 [info     ] started', 'info'],
		['[warning  ] slow', 'warn'],
		['[error    ] agent crashed', 'error'],
		['[debug    ] frame', 'debug'],
		['level=warning msg=x', 'warn'],
		['{"level": "error", "event": "x"}', 'error'],
		['WARNING:root:x', 'warn'],
		['Traceback (most recent call last):', 'error'],
		['anything else', 'info'],
	];
	for (const [line, level] of rows) {
		test(`${line} → ${level}`, () => assert.equal(stderrLevel(line), level));
	}
});
