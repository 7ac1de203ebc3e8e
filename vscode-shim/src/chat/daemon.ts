/**
 * The daemon process: everything about running `lmbridge serve` lives in this class.
 *
 * Theory of operation
 * - Lazy: nothing runs until the first request. The first request spawns the daemon,
 *   sends `initialize` (workspace folders, agents from settings) and then itself; requests
 *   arriving meanwhile wait for the same start.
 * - stdout carries protocol frames only (rpc.ts); stderr lines go to the LogOutputChannel,
 *   and the last few are kept to explain a crash.
 * - An exit we did not ask for is a crash: every pending request fails with a message
 *   saying so, and the next request respawns, after a backoff that doubles with each
 *   recent crash. Past `crashLimit` crashes within `crashWindowMs` it stops respawning:
 *   requests fail at once and the user gets one error with a button to the logs, until
 *   `restart()` (the "lmbridge: Restart Daemon" command or a settings change).
 * - A spawn failure (command not found) is not a crash: it is reported with how to
 *   install the daemon, and the next request tries again.
 * - `stop()`/`dispose()`: close stdin (the daemon ends on EOF and takes its agents with
 *   it), then SIGTERM, then SIGKILL, each after a grace period.
 * - Cancellation: the request's token sends `$/cancelRequest {id}` and the call settles
 *   at once with RequestCancelled; the daemon's later parts and answer for it are dropped.
 * - The daemon's own requests and notifications (`client/*`, docs/protocol.md "Daemon →
 *   shim") go to the handlers registered with `onRequest` / `onNotification`; a request
 *   with no handler is answered "method not found". `initialize` says which the shim
 *   serves (`clientCapabilities`).
 */
import * as cp from 'child_process';
import * as vscode from 'vscode';
import { counter, Logger, RpcConnection, RpcHandlerError } from './rpc';
import type { InitializeParams, InitializeResult, ResponsePartParams, WireResponsePart } from './wire';
import { ErrorCode, Method, PROTOCOL_VERSION } from './wire';

export interface LaunchSpec {
	command: string;
	args: string[];
	/** Added to the extension host's environment. */
	env: Record<string, string>;
	cwd?: string;
}

export type DaemonErrorKind = 'spawn' | 'exited' | 'crash_loop' | 'stopped' | 'protocol';

/** A failure of the daemon process itself (as opposed to an error answer from it). */
export class DaemonError extends Error {
	constructor(readonly kind: DaemonErrorKind, message: string) {
		super(message);
		this.name = 'DaemonError';
	}
}

/** The request's token was cancelled; the caller returns quietly. */
export class RequestCancelled extends Error {
	constructor() {
		super('cancelled');
		this.name = 'RequestCancelled';
	}
}

export interface RestartPolicy {
	/** Wait before the first respawn after a crash; doubles with each recent crash. */
	baseDelayMs: number;
	maxDelayMs: number;
	/** This many crashes within crashWindowMs stop the respawning. */
	crashLimit: number;
	crashWindowMs: number;
}

export interface StopPolicy {
	/** After closing stdin, wait this long before SIGTERM. */
	eofGraceMs: number;
	/** After SIGTERM, wait this long before SIGKILL. */
	termGraceMs: number;
}

export const DEFAULT_RESTART: RestartPolicy = { baseDelayMs: 500, maxDelayMs: 8000, crashLimit: 5, crashWindowMs: 3 * 60_000 };
export const DEFAULT_STOP: StopPolicy = { eofGraceMs: 3000, termGraceMs: 2000 };
export const INITIALIZE_TIMEOUT_MS = 30_000;
const STDERR_TAIL_LINES = 20;

export const SHOW_LOGS = 'Show Logs';
export const OPEN_SETTINGS = 'Open Settings';

export interface DaemonClientOptions {
	/** How to start the daemon; may first install it (bootstrap.ts). A DaemonError it throws is shown to the user. */
	launch(): LaunchSpec | Promise<LaunchSpec>;
	initializeParams(): InitializeParams;
	log: vscode.LogOutputChannel;
	restart?: Partial<RestartPolicy>;
	stop?: Partial<StopPolicy>;
	initializeTimeoutMs?: number;
	now?(): number;
	/** The daemon sent `lm/modelsChanged`: VS Code should ask for the models again. */
	onModelsChanged?(): void;
	/** The daemon process ended (asked to, or not): what it said about its chats is void. */
	onExited?(): void;
}

export interface RequestOptions {
	token?: vscode.CancellationToken;
	/** `lm/responsePart` parts for this request, in order, until it settles. */
	onPart?(part: WireResponsePart): void;
}

interface Running {
	proc: cp.ChildProcess;
	conn: RpcConnection;
	exited: Promise<void>;
	/** Set when we asked it to stop: its exit is then not a crash. */
	stopping: boolean;
	/** Set as soon as the process has exited (before its exit is handled). */
	dead: boolean;
}

function describeExit(code: number | null, signal: NodeJS.Signals | null): string {
	return signal ? `killed by ${signal}` : `exit code ${code}`;
}

export function commandLine(spec: LaunchSpec): string {
	return [spec.command, ...spec.args].map(a => (/\s/.test(a) ? JSON.stringify(a) : a)).join(' ');
}

/** `[info ] …`, `level=warning`, `"level": "error"` → the log method to use. */
export function stderrLevel(line: string): 'trace' | 'debug' | 'info' | 'warn' | 'error' {
	const m = /\[\s*(trace|debug|info|warn(?:ing)?|error|critical|exception)\s*\]|\blevel"?\s*[=:]\s*"?(trace|debug|info|warn(?:ing)?|error|critical|exception)/i.exec(line)
		?? /^\s*(TRACE|DEBUG|INFO|WARN(?:ING)?|ERROR|CRITICAL)\b/.exec(line);
	const level = (m?.[1] ?? m?.[2] ?? '').toLowerCase();
	if (level.startsWith('warn')) {
		return 'warn';
	}
	if (level === 'error' || level === 'critical' || level === 'exception') {
		return 'error';
	}
	if (level === 'trace' || level === 'debug') {
		return level;
	}
	if (/^Traceback \(most recent call last\)/.test(line)) {
		return 'error';
	}
	return 'info';
}

/** Serves one of the daemon's requests: its result, or throws (`RpcHandlerError` for a chosen code). */
export type ClientRequestHandler = (params: unknown) => unknown;

export class DaemonClient {
	private running: Running | undefined;
	private readonly requestHandlers = new Map<string, ClientRequestHandler>();
	private readonly notificationHandlers = new Map<string, (params: unknown) => void>();
	private starting: Promise<Running> | undefined;
	private readonly parts = new Map<number, (part: WireResponsePart) => void>();
	private crashes: number[] = [];
	private stderrTail: string[] = [];
	private crashLoopNotified = false;
	private spawnErrorNotified: string | undefined;
	private disposed = false;
	/** Ends a backoff wait early (stop, restart, dispose). */
	private cutBackoff: (() => void) | undefined;
	/** Request ids never repeat, even across daemon restarts. */
	private readonly ids = counter();
	private readonly restartPolicy: RestartPolicy;
	private readonly stopPolicy: StopPolicy;
	private readonly now: () => number;
	private readonly log: Logger;

	constructor(private readonly options: DaemonClientOptions) {
		this.restartPolicy = { ...DEFAULT_RESTART, ...options.restart };
		this.stopPolicy = { ...DEFAULT_STOP, ...options.stop };
		this.now = options.now ?? Date.now;
		this.log = options.log;
	}

	/** The running daemon's pid, if any (for tests and the log). */
	get pid(): number | undefined {
		return this.running?.proc.pid;
	}

	// ------------------------------------------------------------ requests

	async request<R>(method: string, params: unknown, options: RequestOptions = {}): Promise<R> {
		const { token, onPart } = options;
		if (token?.isCancellationRequested) {
			throw new RequestCancelled();
		}
		const running = await this.raceCancellation(this.ensureStarted(), token);
		const { id, result } = running.conn.request<R>(method, params);
		if (onPart) {
			this.parts.set(id, onPart);
		}
		return new Promise<R>((resolve, reject) => {
			let settled = false;
			const subscription = token?.onCancellationRequested(() => {
				if (settled) {
					return;
				}
				settled = true;
				this.parts.delete(id);
				running.conn.forget(id);
				running.conn.notify(Method.cancelRequest, { id });
				this.log.debug(`request ${id} (${method}) cancelled`);
				reject(new RequestCancelled());
			});
			const finish = () => {
				settled = true;
				this.parts.delete(id);
				subscription?.dispose();
			};
			result.then(
				value => { if (!settled) { finish(); resolve(value); } },
				error => { if (!settled) { finish(); reject(error); } },
			);
		});
	}

	/** Sends the daemon a notification if it runs (never starts it: with no daemon there is
	 *  nothing to tell). */
	notify(method: string, params: unknown): void {
		if (this.running && !this.running.dead) {
			this.running.conn.notify(method, params);
		}
	}

	/** Serves the daemon's request `method` (one handler a method) until disposed. */
	onRequest(method: string, handler: ClientRequestHandler): vscode.Disposable {
		this.requestHandlers.set(method, handler);
		return { dispose: () => { if (this.requestHandlers.get(method) === handler) { this.requestHandlers.delete(method); } } };
	}

	/** Takes the daemon's notification `method` (one handler a method) until disposed. */
	onNotification(method: string, handler: (params: unknown) => void): vscode.Disposable {
		this.notificationHandlers.set(method, handler);
		return { dispose: () => { if (this.notificationHandlers.get(method) === handler) { this.notificationHandlers.delete(method); } } };
	}

	private serveRequest(method: string, params: unknown): unknown {
		const handler = this.requestHandlers.get(method);
		if (!handler) {
			throw new RpcHandlerError(ErrorCode.MethodNotFound, `unknown method: ${method}`);
		}
		return handler(params);
	}

	// ------------------------------------------------------------ lifecycle

	/** Forget past crashes and stop the daemon; the next request starts a fresh one. */
	async restart(reason: string): Promise<void> {
		this.crashes = [];
		this.crashLoopNotified = false;
		this.spawnErrorNotified = undefined;
		await this.stop(reason);
	}

	/** Stops the running daemon, if any: stdin closed, then SIGTERM, then SIGKILL. */
	async stop(reason: string): Promise<void> {
		this.cutBackoff?.();
		const starting = this.starting;
		if (starting) {
			await starting.catch(() => undefined);
		}
		const running = this.running;
		if (!running) {
			return;
		}
		running.stopping = true;
		this.log.info(`stopping the lmbridge daemon (pid ${running.proc.pid}): ${reason}`);
		running.conn.close(new DaemonError('stopped', `The lmbridge daemon was stopped: ${reason}`));
		running.proc.stdin?.end();
		if (await this.waitExit(running, this.stopPolicy.eofGraceMs)) {
			return;
		}
		this.log.warn(`the lmbridge daemon did not exit ${this.stopPolicy.eofGraceMs} ms after its stdin closed; sending SIGTERM`);
		running.proc.kill('SIGTERM');
		if (await this.waitExit(running, this.stopPolicy.termGraceMs)) {
			return;
		}
		this.log.warn(`the lmbridge daemon did not exit ${this.stopPolicy.termGraceMs} ms after SIGTERM; sending SIGKILL`);
		running.proc.kill('SIGKILL');
		await this.waitExit(running, 2000);
	}

	async dispose(): Promise<void> {
		this.disposed = true;
		await this.stop('the extension is shutting down');
	}

	// ------------------------------------------------------------ starting

	private async raceCancellation<T>(promise: Promise<T>, token: vscode.CancellationToken | undefined): Promise<T> {
		if (!token) {
			return promise;
		}
		let subscription: vscode.Disposable | undefined;
		const cancelled = new Promise<never>((_, reject) => {
			subscription = token.onCancellationRequested(() => reject(new RequestCancelled()));
		});
		try {
			return await Promise.race([promise, cancelled]);
		} finally {
			subscription?.dispose();
		}
	}

	private ensureStarted(): Promise<Running> {
		if (this.disposed) {
			return Promise.reject(new DaemonError('stopped', 'lmbridge is shutting down'));
		}
		if (this.running && !this.running.stopping && !this.running.dead) {
			return Promise.resolve(this.running);
		}
		if (!this.starting) {
			this.starting = this.start().finally(() => { this.starting = undefined; });
		}
		return this.starting;
	}

	private recentCrashes(): number {
		const since = this.now() - this.restartPolicy.crashWindowMs;
		this.crashes = this.crashes.filter(t => t >= since);
		return this.crashes.length;
	}

	/** How long to wait before respawning, given the recent crashes. */
	backoffDelay(): number {
		const n = this.recentCrashes();
		if (n === 0) {
			return 0;
		}
		const delay = Math.min(this.restartPolicy.baseDelayMs * 2 ** (n - 1), this.restartPolicy.maxDelayMs);
		const last = this.crashes[this.crashes.length - 1];
		return Math.max(0, last + delay - this.now());
	}

	private crashLoopError(): DaemonError {
		const { crashLimit, crashWindowMs } = this.restartPolicy;
		return new DaemonError('crash_loop',
			`The lmbridge daemon crashed ${crashLimit} times within ${Math.round(crashWindowMs / 1000)} s, so lmbridge stopped restarting it. `
			+ `See the "lmbridge" output for why; after fixing it, run "lmbridge: Restart Daemon".${this.tailSuffix()}`);
	}

	private notifyCrashLoop(error: DaemonError): void {
		if (this.crashLoopNotified) {
			return;
		}
		this.crashLoopNotified = true;
		void vscode.window.showErrorMessage(error.message, SHOW_LOGS).then(choice => {
			if (choice === SHOW_LOGS) {
				this.options.log.show();
			}
		});
	}

	private notifySpawnError(error: DaemonError): void {
		if (this.spawnErrorNotified === error.message) {
			return;
		}
		this.spawnErrorNotified = error.message;
		void vscode.window.showErrorMessage(error.message, OPEN_SETTINGS, SHOW_LOGS).then(choice => {
			if (choice === SHOW_LOGS) {
				this.options.log.show();
			} else if (choice === OPEN_SETTINGS) {
				void vscode.commands.executeCommand('workbench.action.openSettings', 'lmbridge');
			}
		});
	}

	private tailSuffix(lines = 5): string {
		const tail = this.stderrTail.slice(-lines).join('\n').trim();
		return tail ? `\nLast daemon output:\n${tail}` : '';
	}

	private async start(): Promise<Running> {
		if (this.recentCrashes() >= this.restartPolicy.crashLimit) {
			const error = this.crashLoopError();
			this.notifyCrashLoop(error);
			throw error;
		}
		const delay = this.backoffDelay();
		if (delay > 0) {
			this.log.info(`restarting the lmbridge daemon in ${delay} ms (${this.crashes.length} recent crash${this.crashes.length === 1 ? '' : 'es'})`);
			await new Promise<void>(resolve => {
				const timer = setTimeout(resolve, delay);
				this.cutBackoff = () => { clearTimeout(timer); resolve(); };
			});
			this.cutBackoff = undefined;
			if (this.disposed) {
				throw new DaemonError('stopped', 'lmbridge is shutting down');
			}
		}

		let spec: LaunchSpec;
		try {
			spec = await this.options.launch();
		} catch (err) {
			const error = err instanceof DaemonError ? err
				: new DaemonError('spawn', `Could not prepare the lmbridge daemon: ${err instanceof Error ? err.message : String(err)}`);
			this.log.error(error.message);
			this.notifySpawnError(error);
			throw error;
		}
		if (this.disposed) {
			throw new DaemonError('stopped', 'lmbridge is shutting down');
		}
		const display = commandLine(spec);
		const started = this.now();
		this.log.info(`starting the lmbridge daemon: ${display}`);
		this.stderrTail = [];

		const proc = cp.spawn(spec.command, spec.args, {
			cwd: spec.cwd,
			env: { ...process.env, ...spec.env },
			stdio: ['pipe', 'pipe', 'pipe'],
			windowsHide: true,
		});
		try {
			await new Promise<void>((resolve, reject) => {
				proc.once('spawn', resolve);
				proc.once('error', reject);
			});
		} catch (err) {
			const e = err as NodeJS.ErrnoException;
			const error = new DaemonError('spawn', e.code === 'ENOENT'
				? `Could not start the lmbridge daemon: "${spec.command}" was not found. `
				+ 'Install the daemon with `pip install <path to the lmbridge repository>` (into a Python 3.11+ environment), '
				+ 'then put `lmbridge` on PATH, or set "lmbridge.daemon.command" to its full path (or clear it: the extension then uses the daemon it carries), or "lmbridge.pythonPath" to that environment\'s python.'
				: `Could not start the lmbridge daemon (${display}): ${e.message}`);
			this.log.error(error.message);
			this.notifySpawnError(error);
			throw error;
		}
		this.spawnErrorNotified = undefined;

		const conn = new RpcConnection(
			line => { proc.stdin?.write(line); },
			(method, params) => this.takeNotification(method, params),
			this.log,
			this.ids,
			(method, params) => this.serveRequest(method, params),
		);
		let resolveExited!: () => void;
		const running: Running = {
			proc, conn, stopping: false, dead: false,
			exited: new Promise<void>(resolve => { resolveExited = resolve; }),
		};
		this.running = running;

		proc.stdout?.on('data', (chunk: Buffer) => conn.feed(chunk));
		proc.stdin?.on('error', err => this.log.debug(`daemon stdin: ${err.message}`));
		this.readStderr(proc);
		// Frames the daemon wrote just before exiting are still in the pipe when 'exit'
		// fires: read them (until stdout ends, briefly) before failing what is pending.
		const stdoutEnded = new Promise<void>(resolve => {
			proc.stdout?.once('end', resolve);
			proc.stdout?.once('close', resolve);
		});
		proc.on('exit', (code, signal) => {
			running.dead = true;
			let timer: NodeJS.Timeout | undefined;
			void Promise.race([stdoutEnded, new Promise<void>(resolve => { timer = setTimeout(resolve, 500); })]).then(() => {
				clearTimeout(timer);
				this.onExit(running, code, signal);
				resolveExited();
			});
		});

		try {
			const result = await this.withTimeout(
				conn.request<InitializeResult>(Method.initialize, this.options.initializeParams()).result,
				this.options.initializeTimeoutMs ?? INITIALIZE_TIMEOUT_MS,
				`The lmbridge daemon did not answer "initialize" within ${Math.round((this.options.initializeTimeoutMs ?? INITIALIZE_TIMEOUT_MS) / 1000)} s.`,
			);
			if (result?.protocolVersion !== PROTOCOL_VERSION) {
				throw new DaemonError('protocol',
					`The lmbridge daemon speaks protocol version ${String(result?.protocolVersion)}, this extension speaks ${PROTOCOL_VERSION}: update whichever is older.`);
			}
			this.log.info(`lmbridge daemon ready: ${result.serverInfo?.name ?? 'lmbridge'} ${result.serverInfo?.version ?? ''} (pid ${proc.pid}, ${this.now() - started} ms)`);
			return running;
		} catch (err) {
			const error = err instanceof Error ? err : new Error(String(err));
			this.log.error(`the lmbridge daemon failed to start: ${error.message}`);
			if (!(error instanceof DaemonError && error.kind === 'exited')) {
				// Alive but unusable (timeout, wrong protocol): count it as a crash and stop it.
				// Marked stopping at once so that no request picks it up meanwhile.
				this.crashes.push(this.now());
				running.stopping = true;
				void this.stop(error.message);
			}
			throw error;
		}
	}

	private withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
		let timer: NodeJS.Timeout | undefined;
		const timeout = new Promise<never>((_, reject) => {
			timer = setTimeout(() => reject(new DaemonError('protocol', message)), ms);
		});
		return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
	}

	private readStderr(proc: cp.ChildProcess): void {
		let buffer = '';
		proc.stderr?.setEncoding('utf8');
		proc.stderr?.on('data', (chunk: string) => {
			buffer += chunk;
			let newline: number;
			while ((newline = buffer.indexOf('\n')) >= 0) {
				this.onStderrLine(buffer.slice(0, newline).replace(/\r$/, ''));
				buffer = buffer.slice(newline + 1);
			}
		});
		proc.stderr?.on('end', () => {
			if (buffer) {
				this.onStderrLine(buffer);
				buffer = '';
			}
		});
	}

	private onStderrLine(line: string): void {
		if (!line.trim()) {
			return;
		}
		this.stderrTail.push(line);
		if (this.stderrTail.length > STDERR_TAIL_LINES) {
			this.stderrTail.shift();
		}
		this.log[stderrLevel(line)](`[daemon] ${line}`);
	}

	private takeNotification(method: string, params: unknown): void {
		if (method === Method.modelsChanged) {
			this.options.onModelsChanged?.();
			return;
		}
		const taker = this.notificationHandlers.get(method);
		if (taker) {
			try {
				taker(params);
			} catch (err) {
				this.log.error(`daemon notification ${method}: ${err instanceof Error ? err.message : String(err)}`);
			}
			return;
		}
		if (method !== Method.responsePart) {
			this.log.debug(`daemon notification ignored: ${method}`);
			return;
		}
		const p = params as ResponsePartParams | undefined;
		const handler = typeof p?.requestId === 'number' ? this.parts.get(p.requestId) : undefined;
		if (!handler) {
			this.log.trace(`dropped a part for request ${String(p?.requestId)}, which is no longer streaming`);
			return;
		}
		handler(p!.part);
	}

	private onExit(running: Running, code: number | null, signal: NodeJS.Signals | null): void {
		if (this.running === running) {
			this.running = undefined;
		}
		this.options.onExited?.();
		const how = describeExit(code, signal);
		if (running.stopping) {
			this.log.info(`the lmbridge daemon (pid ${running.proc.pid}) exited: ${how}`);
			running.conn.close(new DaemonError('stopped', 'The lmbridge daemon was stopped.'));
			return;
		}
		this.crashes.push(this.now());
		const looping = this.recentCrashes() >= this.restartPolicy.crashLimit;
		const error = new DaemonError('exited',
			`The lmbridge daemon exited unexpectedly (${how}) while handling this request. `
			+ (looping ? 'It crashed too often and will not be restarted; see the "lmbridge" output.' : 'The next request starts it again.')
			+ this.tailSuffix(3));
		this.log.error(`the lmbridge daemon (pid ${running.proc.pid}) exited unexpectedly: ${how}`);
		running.conn.close(error);
		if (looping) {
			this.notifyCrashLoop(this.crashLoopError());
		}
	}

	private async waitExit(running: Running, ms: number): Promise<boolean> {
		if (running.proc.exitCode !== null || running.proc.signalCode !== null) {
			await running.exited;
			return true;
		}
		let timer: NodeJS.Timeout | undefined;
		const timedOut = new Promise<boolean>(resolve => { timer = setTimeout(() => resolve(false), ms); });
		const exited = running.exited.then(() => true);
		const result = await Promise.race([exited, timedOut]);
		clearTimeout(timer);
		return result;
	}
}
