/**
 * JSON-RPC 2.0 over newline-delimited JSON (one object a line), transport-agnostic:
 * bytes from the daemon's stdout go in through `feed`, lines to its stdin go out
 * through the `write` callback. Knows nothing about processes or VS Code.
 *
 * Both sides send requests (docs/protocol.md, "Daemon → shim"): the daemon's (ids are
 * strings starting with `lmbridge-`) go to `onRequest`, and each is answered exactly once,
 * with its result or an error; none after `close` (the daemon is gone).
 */
import { StringDecoder } from 'string_decoder';
import type { RpcError } from './wire';
import { ErrorCode } from './wire';

export interface Logger {
	trace(message: string, ...args: unknown[]): void;
	debug(message: string, ...args: unknown[]): void;
	info(message: string, ...args: unknown[]): void;
	warn(message: string, ...args: unknown[]): void;
	error(message: string | Error, ...args: unknown[]): void;
}

/** A request the daemon answered with a JSON-RPC error. */
export class RpcRequestError extends Error {
	constructor(readonly method: string, readonly rpc: RpcError) {
		super(rpc.message);
		this.name = 'RpcRequestError';
	}
}

interface Pending {
	method: string;
	resolve(result: unknown): void;
	reject(error: Error): void;
}

/** 1, 2, 3, … */
export function counter(start = 1): () => number {
	let next = start;
	return () => next++;
}

export type NotificationHandler = (method: string, params: unknown) => void;
/** Answers one of the daemon's requests: its result, or throws (`RpcHandlerError` for a chosen code). */
export type RequestHandler = (method: string, params: unknown) => unknown;

/** Thrown by a request handler: the daemon gets this code, message and data. */
export class RpcHandlerError extends Error {
	constructor(readonly code: number, message: string, readonly data?: unknown) {
		super(message);
		this.name = 'RpcHandlerError';
	}
}

const MAX_LOGGED_LINE = 200;

export class RpcConnection {
	private readonly pending = new Map<number, Pending>();
	private readonly decoder = new StringDecoder('utf8');
	private buffer = '';
	private closed: Error | undefined;

	constructor(
		private readonly write: (line: string) => void,
		private readonly onNotification: NotificationHandler,
		private readonly log: Logger,
		/** Request ids; the daemon client shares one counter across restarts so ids never repeat. */
		private readonly nextId: () => number = counter(),
		/** The daemon's requests; without it each is answered "method not found". */
		private readonly onRequest?: RequestHandler,
	) { }

	get pendingCount(): number {
		return this.pending.size;
	}

	/** Sends a request; `id` is known at once so the caller can cancel it. */
	request<R>(method: string, params: unknown): { id: number; result: Promise<R> } {
		const id = this.nextId();
		const result = new Promise<R>((resolve, reject) => {
			if (this.closed) {
				reject(this.closed);
				return;
			}
			this.pending.set(id, { method, resolve: resolve as (r: unknown) => void, reject });
			try {
				this.send({ jsonrpc: '2.0', id, method, params });
			} catch (err) {
				this.pending.delete(id);
				reject(err instanceof Error ? err : new Error(String(err)));
			}
		});
		return { id, result };
	}

	notify(method: string, params: unknown): void {
		if (!this.closed) {
			this.send({ jsonrpc: '2.0', method, params });
		}
	}

	/** Stops waiting for `id`: a later answer to it is ignored. */
	forget(id: number): void {
		this.pending.delete(id);
	}

	/** Fails every pending request with `error`, and every later one. */
	close(error: Error): void {
		this.closed ??= error;
		const pending = [...this.pending.values()];
		this.pending.clear();
		for (const p of pending) {
			p.reject(error);
		}
	}

	/** Bytes from the daemon's stdout. */
	feed(chunk: Buffer | string): void {
		this.buffer += typeof chunk === 'string' ? chunk : this.decoder.write(chunk);
		let newline: number;
		while ((newline = this.buffer.indexOf('\n')) >= 0) {
			const line = this.buffer.slice(0, newline).replace(/\r$/, '');
			this.buffer = this.buffer.slice(newline + 1);
			if (line.trim()) {
				this.handleLine(line);
			}
		}
	}

	/** Answers one daemon request, once: its handler's result, or an error. */
	private async answer(id: string | number, method: string, params: unknown): Promise<void> {
		let reply: object;
		if (!this.onRequest) {
			reply = { jsonrpc: '2.0', id, error: { code: ErrorCode.MethodNotFound, message: `unknown method: ${method}` } };
		} else {
			try {
				reply = { jsonrpc: '2.0', id, result: (await this.onRequest(method, params)) ?? null };
			} catch (err) {
				const error: RpcError = err instanceof RpcHandlerError
					? { code: err.code, message: err.message, ...(err.data === undefined ? {} : { data: err.data }) }
					: { code: ErrorCode.InternalError, message: err instanceof Error ? err.message : String(err) };
				reply = { jsonrpc: '2.0', id, error };
			}
		}
		if (this.closed) {
			return; // the daemon is gone: nobody reads the answer
		}
		try {
			this.send(reply);
		} catch (err) {
			this.log.debug(`could not answer the daemon's ${method}: ${err instanceof Error ? err.message : String(err)}`);
		}
	}

	private send(message: object): void {
		this.write(`${JSON.stringify(message)}\n`);
	}

	private handleLine(line: string): void {
		let message: unknown;
		try {
			message = JSON.parse(line);
		} catch {
			this.log.warn(`daemon stdout: skipped a line that is not JSON: ${line.slice(0, MAX_LOGGED_LINE)}`);
			return;
		}
		if (typeof message !== 'object' || message === null || Array.isArray(message)) {
			this.log.warn(`daemon stdout: skipped a line that is not a JSON-RPC object: ${line.slice(0, MAX_LOGGED_LINE)}`);
			return;
		}
		const m = message as { id?: unknown; method?: unknown; params?: unknown; result?: unknown; error?: RpcError };
		if (typeof m.method === 'string') {
			if (m.id === undefined || m.id === null) {
				this.onNotification(m.method, m.params);
			} else if (typeof m.id !== 'string' && typeof m.id !== 'number') {
				this.log.warn(`daemon stdout: skipped a request with no usable id: ${line.slice(0, MAX_LOGGED_LINE)}`);
			} else {
				void this.answer(m.id, m.method, m.params);
			}
			return;
		}
		if (typeof m.id !== 'number') {
			this.log.warn(`daemon stdout: skipped a message with no usable id: ${line.slice(0, MAX_LOGGED_LINE)}`);
			return;
		}
		const pending = this.pending.get(m.id);
		if (!pending) {
			this.log.trace(`daemon answered request ${m.id}, which is no longer awaited`);
			return;
		}
		this.pending.delete(m.id);
		if (m.error !== undefined) {
			const error: RpcError = typeof m.error === 'object' && m.error !== null
				? { code: Number(m.error.code), message: String(m.error.message ?? ''), data: m.error.data }
				: { code: ErrorCode.InternalError, message: String(m.error) };
			pending.reject(new RpcRequestError(pending.method, error));
		} else {
			pending.resolve(m.result);
		}
	}
}
