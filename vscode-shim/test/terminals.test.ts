/** client/terminal/* (src/chat/terminals.ts): a command the daemon runs, mirrored in a Pseudoterminal
 *  the user can watch and close, against the mock's terminals. */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import type * as vscode from 'vscode';
import { RpcHandlerError } from '../src/chat/rpc';
import { EARLY_LIMIT, exitLine, TerminalMirror, toTerminal } from '../src/chat/terminals';
import { mock } from './vscode-mock';

afterEach(() => mock.reset());

const quiet = { trace() { }, debug() { }, info() { }, warn() { }, error() { } };

function mirror(): { terminals: TerminalMirror; killed: string[] } {
	const killed: string[] = [];
	return { terminals: new TerminalMirror(id => killed.push(id), quiet), killed };
}

/** The pty of the last terminal created, and everything it wrote once opened. */
function opened(): { pty: vscode.Pseudoterminal; written: string[]; closed: Array<number | void> } {
	const terminal = mock.state.terminals.at(-1);
	assert.ok(terminal, 'no terminal was created');
	const pty = terminal.options.pty as vscode.Pseudoterminal;
	const written: string[] = [];
	const closed: Array<number | void> = [];
	pty.onDidWrite(text => written.push(text));
	pty.onDidClose?.(code => closed.push(code));
	pty.open(undefined);
	return { pty, written, closed };
}

describe('terminals: a command mirrored in VS Code', () => {
	test('open creates a named terminal, shown without the focus; output before and after open arrives in order', () => {
		const { terminals } = mirror();
		assert.deepEqual(terminals.open({ terminalId: 'term-1', title: 'make test', cwd: '/work' }), {});
		const terminal = mock.state.terminals.at(-1)!;
		assert.equal(terminal.options.name, 'lmbridge: make test');
		assert.equal(terminal.shown, 1);
		terminals.output({ terminalId: 'term-1', data: 'one\n' }); // before VS Code opened it
		const { written } = opened();
		terminals.output({ terminalId: 'term-1', data: 'two\nthree' });
		terminals.exit({ terminalId: 'term-1', exitCode: 2, signal: null });
		const text = written.join('');
		assert.ok(text.includes('/work$ make test'), text);
		assert.ok(text.endsWith('one\r\ntwo\r\nthree\r\n[lmbridge: exit code 2]\r\n'), JSON.stringify(text));
	});

	test('closing the terminal while the command runs asks the daemon to kill it; after its end it does not', () => {
		const { terminals, killed } = mirror();
		terminals.open({ terminalId: 'term-1', title: 'sleep 60', cwd: '/w' });
		opened().pty.close();
		assert.deepEqual(killed, ['term-1']);
		assert.equal(terminals.size, 0); // forgotten once closed
		terminals.open({ terminalId: 'term-2', title: 'true', cwd: '/w' });
		const second = opened();
		terminals.exit({ terminalId: 'term-2', exitCode: 0, signal: null });
		second.pty.close();
		assert.deepEqual(killed, ['term-1']);
	});

	test('Ctrl+C in the terminal kills the command', () => {
		const { terminals, killed } = mirror();
		terminals.open({ terminalId: 'term-7', title: 'yes', cwd: '/w' });
		const { pty, written } = opened();
		pty.handleInput?.('x');
		assert.deepEqual(killed, []);
		pty.handleInput?.('\x03');
		assert.deepEqual(killed, ['term-7']);
		assert.ok(written.join('').endsWith('^C\r\n'));
	});

	test('bad params are refused; output for an unknown terminal is ignored', () => {
		const { terminals } = mirror();
		assert.throws(() => terminals.open({ terminalId: 3 }), (e: unknown) => e instanceof RpcHandlerError && e.code === -32602);
		terminals.output({ terminalId: 'nope', data: 'x' });
		terminals.exit({ terminalId: 'nope', exitCode: 0, signal: null });
		assert.equal(mock.state.terminals.length, 0);
	});

	test('output before the terminal opens is bounded', () => {
		const { terminals } = mirror();
		terminals.open({ terminalId: 'term-1', title: 'flood', cwd: '/w' });
		for (let i = 0; i < 40; i++) {
			terminals.output({ terminalId: 'term-1', data: 'y'.repeat(64 * 1024) });
		}
		const { written } = opened();
		assert.ok(written.join('').length <= EARLY_LIMIT);
	});

	test('exitLine and toTerminal', () => {
		assert.equal(exitLine(0, null), '[lmbridge: exit code 0]');
		assert.equal(exitLine(null, 'SIGTERM'), '[lmbridge: killed by SIGTERM]');
		assert.equal(toTerminal('a\nb\r\nc'), 'a\r\nb\r\nc');
	});
});
