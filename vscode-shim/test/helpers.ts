/** Shared helpers for the unit tests (bundled with the vscode mock). */
import { createHash } from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import type { AddressInfo } from 'net';
import * as os from 'os';
import * as path from 'path';
import * as tar from 'tar';
import * as vscode from 'vscode';
import { DaemonClient, DaemonClientOptions } from '../src/chat/daemon';
import { LanguageModelChatMessage, MockLogOutputChannel } from './vscode-mock';

/** The bundled fake daemon sits beside the bundled tests. */
export const FAKE_DAEMON = path.join(__dirname, 'fake-daemon.js');

export function tempDir(prefix = 'lmbridge-shim-'): string {
	return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export interface FakeClient {
	client: DaemonClient;
	log: MockLogOutputChannel;
	/** Frames the daemon(s) received, in order. */
	frames(): Array<{ id?: number; method?: string; params?: any }>;
}

export function fakeClient(options: {
	mode?: string | (() => string);
	restart?: DaemonClientOptions['restart'];
	stop?: DaemonClientOptions['stop'];
	initializeTimeoutMs?: number;
	initializeParams?: DaemonClientOptions['initializeParams'];
	command?: string;
	onModelsChanged?: DaemonClientOptions['onModelsChanged'];
	/** More environment for the fake daemon (FAKE_DAEMON_MODELS, …). */
	env?: Record<string, string>;
} = {}): FakeClient {
	const log = new MockLogOutputChannel('lmbridge');
	const record = path.join(tempDir(), 'frames.jsonl');
	const client = new DaemonClient({
		launch: () => ({
			command: options.command ?? process.execPath,
			args: [FAKE_DAEMON],
			env: {
				FAKE_DAEMON_MODE: typeof options.mode === 'function' ? options.mode() : options.mode ?? 'normal',
				FAKE_DAEMON_RECORD: record,
				...options.env,
			},
		}),
		initializeParams: options.initializeParams ?? (() => ({ protocolVersion: 1, clientInfo: { name: 'test', version: '0' } })),
		log: log as unknown as vscode.LogOutputChannel,
		restart: options.restart,
		stop: options.stop,
		initializeTimeoutMs: options.initializeTimeoutMs,
		onModelsChanged: options.onModelsChanged,
	});
	return {
		client, log,
		frames: () => fs.existsSync(record)
			? fs.readFileSync(record, 'utf8').split('\n').filter(Boolean).map(l => JSON.parse(l))
			: [],
	};
}

/** A user message whose text scripts the fake daemon (see fake-daemon.ts). */
export function script(steps: object[]): vscode.LanguageModelChatRequestMessage[] {
	return [LanguageModelChatMessage.User(`script:${JSON.stringify(steps)}`) as unknown as vscode.LanguageModelChatRequestMessage];
}

export interface Recorded {
	parts: unknown[];
	times: number[];
	progress: vscode.Progress<vscode.LanguageModelResponsePart>;
}

export function recorder(): Recorded {
	const parts: unknown[] = [];
	const times: number[] = [];
	return {
		parts, times,
		progress: { report: part => { parts.push(part); times.push(Date.now()); } },
	};
}

export async function waitFor(predicate: () => boolean, timeoutMs = 5000, what = 'condition'): Promise<void> {
	const deadline = Date.now() + timeoutMs;
	while (!predicate()) {
		if (Date.now() > deadline) {
			throw new Error(`timed out waiting for ${what}`);
		}
		await new Promise(resolve => setTimeout(resolve, 10));
	}
}

export function isAlive(pid: number | undefined): boolean {
	if (!pid) {
		return false;
	}
	try {
		process.kill(pid, 0);
		return true;
	} catch {
		return false;
	}
}

export const model = (id = 'fake'): vscode.LanguageModelChatInformation => ({
	id, name: id, family: 'acp', version: '1', maxInputTokens: 100000, maxOutputTokens: 8000, capabilities: {},
});

export const noOptions = { toolMode: 1 } as unknown as vscode.ProvideLanguageModelChatResponseOptions;

/** A server on 127.0.0.1 answering from `routes` (path → body, or a redirect `{ location }`). */
export async function serve(routes: Map<string, Buffer | string | { location: string }>): Promise<{ url: string; hits: string[]; close(): Promise<void> }> {
	const hits: string[] = [];
	const server = http.createServer((req, res) => {
		hits.push(req.url ?? '');
		const body = routes.get(req.url ?? '');
		if (body === undefined) {
			res.writeHead(404).end('not found');
		} else if (typeof body === 'object' && !Buffer.isBuffer(body)) {
			res.writeHead(302, { location: body.location }).end();
		} else {
			res.writeHead(200).end(body);
		}
	});
	await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve));
	const { port } = server.address() as AddressInfo;
	return { url: `http://127.0.0.1:${port}`, hits, close: () => new Promise(resolve => server.close(() => resolve())) };
}

export const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** A .tar.gz of the files under `dir` (paths as given: `preservePaths` keeps `../x` for hostile archives). */
export async function tarGz(dir: string, entries: string[], preservePaths = false): Promise<Buffer> {
	const out = path.join(tempDir('lmbridge-tar-'), 'a.tar.gz');
	await tar.c({ gzip: true, file: out, cwd: dir, preservePaths, portable: true }, entries);
	return fs.readFileSync(out);
}
