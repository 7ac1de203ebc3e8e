/** JSON-RPC framing and routing (src/chat/rpc.ts), fed byte by byte where it matters. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { counter, RpcConnection, RpcHandlerError, RpcRequestError } from '../src/chat/rpc';
import { MockLogOutputChannel } from './vscode-mock';

function connection() {
	const written: any[] = [];
	const notifications: Array<[string, unknown]> = [];
	const log = new MockLogOutputChannel('test');
	const conn = new RpcConnection(line => {
		assert.ok(line.endsWith('\n') && !line.slice(0, -1).includes('\n'), 'one object per line');
		written.push(JSON.parse(line));
	}, (method, params) => notifications.push([method, params]), log);
	return { conn, written, notifications, log };
}

describe('RpcConnection', () => {
	test('requests get increasing numeric ids and JSON-RPC 2.0 framing', async () => {
		const { conn, written } = connection();
		const a = conn.request('initialize', { protocolVersion: 1 });
		const b = conn.request('lm/provideTokenCount', { modelId: 'm', text: 't' });
		assert.deepEqual([a.id, b.id], [1, 2]);
		assert.deepEqual(written, [
			{ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: 1 } },
			{ jsonrpc: '2.0', id: 2, method: 'lm/provideTokenCount', params: { modelId: 'm', text: 't' } },
		]);
		conn.close(new Error('done'));
		await Promise.allSettled([a.result, b.result]);
	});

	test('responses are routed by id, in any order', async () => {
		const { conn } = connection();
		const a = conn.request<string>('x', {});
		const b = conn.request<string>('y', {});
		conn.feed(`${JSON.stringify({ jsonrpc: '2.0', id: b.id, result: 'B' })}\n${JSON.stringify({ jsonrpc: '2.0', id: a.id, result: 'A' })}\n`);
		assert.deepEqual(await Promise.all([a.result, b.result]), ['A', 'B']);
	});

	test('a frame split across chunks, even inside a multi-byte character, is reassembled', async () => {
		const { conn } = connection();
		const r = conn.request<{ text: string }>('x', {});
		const frame = Buffer.from(`${JSON.stringify({ jsonrpc: '2.0', id: r.id, result: { text: 'héllo → 世界' } })}\n`);
		for (let i = 0; i < frame.length; i++) {
			conn.feed(frame.subarray(i, i + 1));
		}
		assert.deepEqual(await r.result, { text: 'héllo → 世界' });
	});

	test('CRLF line ends and blank lines are accepted', async () => {
		const { conn } = connection();
		const r = conn.request('x', {});
		conn.feed(`\r\n\n${JSON.stringify({ jsonrpc: '2.0', id: r.id, result: 1 })}\r\n`);
		assert.equal(await r.result, 1);
	});

	test('a 10 MB line arrives whole', async () => {
		const { conn, notifications } = connection();
		const big = 'x'.repeat(10 * 1024 * 1024);
		const frame = Buffer.from(`${JSON.stringify({ jsonrpc: '2.0', method: 'lm/responsePart', params: { requestId: 1, part: { type: 'text', value: big } } })}\n`);
		for (let i = 0; i < frame.length; i += 65536) {
			conn.feed(frame.subarray(i, i + 65536));
		}
		assert.equal(notifications.length, 1);
		assert.equal((notifications[0][1] as any).part.value.length, big.length);
	});

	test('an error answer rejects with the daemon\'s code, message and data', async () => {
		const { conn } = connection();
		const r = conn.request('lm/provideLanguageModelChatResponse', {});
		conn.feed(`${JSON.stringify({ jsonrpc: '2.0', id: r.id, error: { code: -32602, message: "unknown model 'x'", data: { kind: 'unknown_model' } } })}\n`);
		await assert.rejects(r.result, (e: unknown) => {
			assert.ok(e instanceof RpcRequestError);
			assert.deepEqual(e.rpc, { code: -32602, message: "unknown model 'x'", data: { kind: 'unknown_model' } });
			assert.equal(e.method, 'lm/provideLanguageModelChatResponse');
			return true;
		});
	});

	test('notifications go to the handler in order', () => {
		const { conn, notifications } = connection();
		conn.feed('{"jsonrpc":"2.0","method":"lm/responsePart","params":{"requestId":1,"part":{"type":"text","value":"a"}}}\n'
			+ '{"jsonrpc":"2.0","method":"lm/responsePart","params":{"requestId":1,"part":{"type":"text","value":"b"}}}\n');
		assert.deepEqual(notifications.map(([, p]) => (p as any).part.value), ['a', 'b']);
	});

	test('non-JSON and non-object lines are logged and skipped, the stream goes on', async () => {
		const { conn, log } = connection();
		const r = conn.request('x', {});
		conn.feed(`Traceback: not json\n[1,2]\n{"jsonrpc":"2.0","result":3}\n${JSON.stringify({ jsonrpc: '2.0', id: r.id, result: 'ok' })}\n`);
		assert.equal(await r.result, 'ok');
		assert.equal(log.matching('not JSON: Traceback', 'warn').length, 1);
		assert.equal(log.matching('not a JSON-RPC object', 'warn').length, 1);
		assert.equal(log.matching('no usable id', 'warn').length, 1);
	});

	test('a request from the daemon without a handler gets "method not found"', async () => {
		const { conn, written } = connection();
		conn.feed('{"jsonrpc":"2.0","id":"d1","method":"fs/readTextFile","params":{}}\n');
		await new Promise(resolve => setImmediate(resolve));
		assert.deepEqual(written, [{ jsonrpc: '2.0', id: 'd1', error: { code: -32601, message: 'unknown method: fs/readTextFile' } }]);
	});

	test('the daemon\'s requests are answered once each: result, chosen error, or internal error', async () => {
		const written: any[] = [];
		const log = new MockLogOutputChannel('test');
		const conn = new RpcConnection(line => written.push(JSON.parse(line)), () => undefined, log, counter(), async (method, params) => {
			if (method === 'client/readTextFile') {
				return { content: (params as any).path };
			}
			if (method === 'client/writeTextFile') {
				return undefined; // answered {"result": null}
			}
			if (method === 'client/refused') {
				throw new RpcHandlerError(-32602, 'outside the workspace', { path: '/etc' });
			}
			throw new Error('boom');
		});
		conn.feed('{"jsonrpc":"2.0","id":"lmbridge-1","method":"client/readTextFile","params":{"path":"/w/a"}}\n'
			+ '{"jsonrpc":"2.0","id":"lmbridge-2","method":"client/writeTextFile","params":{}}\n'
			+ '{"jsonrpc":"2.0","id":"lmbridge-3","method":"client/refused","params":{}}\n'
			+ '{"jsonrpc":"2.0","id":"lmbridge-4","method":"client/other","params":{}}\n'
			+ '{"jsonrpc":"2.0","id":{"bad":1},"method":"client/readTextFile","params":{}}\n');
		await new Promise(resolve => setTimeout(resolve, 10));
		const byId = new Map(written.map(f => [f.id, f]));
		assert.equal(written.length, 4);
		assert.deepEqual(byId.get('lmbridge-1'), { jsonrpc: '2.0', id: 'lmbridge-1', result: { content: '/w/a' } });
		assert.deepEqual(byId.get('lmbridge-2'), { jsonrpc: '2.0', id: 'lmbridge-2', result: null });
		assert.deepEqual(byId.get('lmbridge-3'), { jsonrpc: '2.0', id: 'lmbridge-3', error: { code: -32602, message: 'outside the workspace', data: { path: '/etc' } } });
		assert.deepEqual(byId.get('lmbridge-4'), { jsonrpc: '2.0', id: 'lmbridge-4', error: { code: -32603, message: 'boom' } });
		assert.equal(log.matching('no usable id', 'warn').length, 1);
	});

	test('a daemon request still running when the connection closes is not answered', async () => {
		const written: any[] = [];
		let release!: () => void;
		const conn = new RpcConnection(line => written.push(JSON.parse(line)), () => undefined, new MockLogOutputChannel('test'), counter(),
			() => new Promise(resolve => { release = () => resolve({}); }));
		conn.feed('{"jsonrpc":"2.0","id":"lmbridge-1","method":"client/writeTextFile","params":{}}\n');
		conn.close(new Error('daemon exited'));
		release();
		await new Promise(resolve => setTimeout(resolve, 10));
		assert.deepEqual(written, []);
	});

	test('a forgotten request ignores its late answer', async () => {
		const { conn, log } = connection();
		const r = conn.request('x', {});
		conn.forget(r.id);
		conn.feed(`${JSON.stringify({ jsonrpc: '2.0', id: r.id, result: 'late' })}\n`);
		assert.equal(conn.pendingCount, 0);
		assert.equal(log.matching('no longer awaited').length, 1);
		const settled = await Promise.race([r.result.then(() => 'settled'), new Promise(resolve => setTimeout(() => resolve('pending'), 20))]);
		assert.equal(settled, 'pending');
	});

	test('close fails pending and later requests with the given error; notify becomes a no-op', async () => {
		const { conn, written } = connection();
		const r = conn.request('x', {});
		conn.close(new Error('daemon exited'));
		await assert.rejects(r.result, /daemon exited/);
		await assert.rejects(conn.request('y', {}).result, /daemon exited/);
		const before = written.length;
		conn.notify('$/cancelRequest', { id: 1 });
		assert.equal(written.length, before);
	});

	test('notify sends a frame without id', () => {
		const { conn, written } = connection();
		conn.notify('$/cancelRequest', { id: 4 });
		assert.deepEqual(written, [{ jsonrpc: '2.0', method: '$/cancelRequest', params: { id: 4 } }]);
	});
});
