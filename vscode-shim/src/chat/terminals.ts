/**
 * `client/terminal/*` (docs/protocol.md, "client/terminal/*"; docs/vscode-shim.md,
 * "Commands in a terminal"): a command lmbridge runs for an agent (ACP `terminal/create`)
 * mirrored in a VS Code terminal, a Pseudoterminal the user can watch and close.
 *
 * - `client/terminal/open {terminalId, title, cwd}` (request → `{}`): a terminal named
 *   `lmbridge: <title>` is created and shown without taking the focus.
 * - `client/terminal/output {terminalId, data}` and `client/terminal/exit {terminalId,
 *   exitCode, signal}` (notifications): its output as it comes (line ends as a terminal
 *   wants them), then how it ended; the terminal stays for reading until the user closes it.
 * - Closing the terminal, or Ctrl+C in it, while the command runs sends `$/terminalKilled
 *   {terminalId}`: the daemon kills the command and the agent sees it end killed.
 *
 * Output that comes before VS Code opened the terminal is kept (bounded, `EARLY_LIMIT`) and
 * written once it opens: a Pseudoterminal drops what is written before `open`.
 */
import * as vscode from 'vscode';
import type { Logger } from './rpc';
import { RpcHandlerError } from './rpc';
import { ErrorCode } from './wire';

/** Characters kept of the output that comes before the terminal is open. */
export const EARLY_LIMIT = 1 << 20;

export interface TerminalOpenParams { terminalId: string; title: string; cwd: string }
export interface TerminalOutputParams { terminalId: string; data: string }
export interface TerminalExitParams { terminalId: string; exitCode: number | null; signal: string | null }

/** How a command ended, as the terminal's last line says it. */
export function exitLine(exitCode: number | null, signal: string | null): string {
	if (signal) {
		return `[lmbridge: killed by ${signal}]`;
	}
	return exitCode === null ? '[lmbridge: ended]' : `[lmbridge: exit code ${exitCode}]`;
}

/** Text for a terminal: every line end as CR LF. */
export function toTerminal(data: string): string {
	return data.replace(/\r?\n/g, '\r\n');
}

class Mirrored {
	readonly write = new vscode.EventEmitter<string>();
	readonly closed = new vscode.EventEmitter<number | void>();
	terminal: vscode.Terminal | undefined;
	opened = false;
	running = true;
	early = '';

	constructor(readonly id: string, private readonly onKill: () => void, private readonly onClosed: () => void) { }

	readonly pty: vscode.Pseudoterminal = {
		onDidWrite: this.write.event,
		onDidClose: this.closed.event,
		open: () => {
			this.opened = true;
			if (this.early) {
				this.write.fire(this.early);
				this.early = '';
			}
		},
		close: () => {
			// The user closed the terminal: a command still running is killed.
			if (this.running) {
				this.running = false;
				this.onKill();
			}
			this.onClosed();
		},
		handleInput: (data: string) => {
			if (data === '\x03' && this.running) { // Ctrl+C
				this.put('^C\r\n');
				this.onKill();
			}
		},
	};

	put(text: string): void {
		if (this.opened) {
			this.write.fire(text);
			return;
		}
		this.early += text;
		if (this.early.length > EARLY_LIMIT) {
			this.early = this.early.slice(this.early.length - EARLY_LIMIT);
		}
	}

	dispose(): void {
		this.terminal?.dispose();
		this.write.dispose();
		this.closed.dispose();
	}
}

/** The VS Code terminals of the commands the daemon runs. `kill`: sends `$/terminalKilled`. */
export class TerminalMirror implements vscode.Disposable {
	private readonly terminals = new Map<string, Mirrored>();

	constructor(private readonly kill: (terminalId: string) => void, private readonly log: Logger) { }

	get size(): number {
		return this.terminals.size;
	}

	/** `client/terminal/open`. */
	open(params: unknown): Record<string, never> {
		const p = params as Partial<TerminalOpenParams> | null;
		if (!p || typeof p.terminalId !== 'string' || typeof p.title !== 'string' || typeof p.cwd !== 'string') {
			throw new RpcHandlerError(ErrorCode.InvalidParams, 'client/terminal/open: params must be {terminalId, title, cwd} strings');
		}
		const id = p.terminalId;
		this.terminals.get(id)?.dispose();
		const mirrored = new Mirrored(id, () => {
			this.log.info(`terminal ${id} stopped by the user: the daemon kills its command`);
			this.kill(id);
		}, () => {
			if (this.terminals.get(id) === mirrored) {
				this.terminals.delete(id);
				mirrored.dispose();
			}
		});
		this.terminals.set(id, mirrored);
		mirrored.terminal = vscode.window.createTerminal({ name: `lmbridge: ${p.title}`, pty: mirrored.pty, isTransient: true });
		mirrored.terminal.show(true); // watchable at once; the chat keeps the focus
		mirrored.put(`\x1b[2m${p.cwd}$ ${p.title}\x1b[0m\r\n`);
		return {};
	}

	/** `client/terminal/output`. */
	output(params: unknown): void {
		const p = params as Partial<TerminalOutputParams> | null;
		const mirrored = typeof p?.terminalId === 'string' ? this.terminals.get(p.terminalId) : undefined;
		if (mirrored && typeof p?.data === 'string') {
			mirrored.put(toTerminal(p.data));
		}
	}

	/** `client/terminal/exit`: the last line says how it ended; the terminal stays. */
	exit(params: unknown): void {
		const p = params as Partial<TerminalExitParams> | null;
		const mirrored = typeof p?.terminalId === 'string' ? this.terminals.get(p.terminalId) : undefined;
		if (!mirrored) {
			return;
		}
		mirrored.running = false;
		const code = typeof p?.exitCode === 'number' ? p.exitCode : null;
		const signal = typeof p?.signal === 'string' ? p.signal : null;
		mirrored.put(`\r\n${exitLine(code, signal)}\r\n`);
	}

	/** The daemon stopped: its commands are gone with it. */
	daemonGone(): void {
		for (const mirrored of this.terminals.values()) {
			if (mirrored.running) {
				mirrored.running = false;
				mirrored.put('\r\n[lmbridge: the daemon stopped]\r\n');
			}
		}
	}

	dispose(): void {
		for (const mirrored of this.terminals.values()) {
			mirrored.dispose();
		}
		this.terminals.clear();
	}
}
