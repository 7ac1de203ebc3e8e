/** An agent that needs a sign-in (src/chat/auth.ts): the error data, the notification, the terminal. */
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import type * as vscode from 'vscode';
import { authActions, authMessage, AuthNotifier, authRequired, chosenLogin, loginEnv, loginTerminalOptions, OPEN_AGENT_SETTINGS, SIGN_IN } from '../src/chat/auth';
import type { AuthRequiredData } from '../src/chat/wire';
import { MockLogOutputChannel, mock } from './vscode-mock';

afterEach(() => mock.reset());

const CODEX: AuthRequiredData = {
	reason: 'auth_required', agentId: 'codex', agentName: 'Codex',
	login: { command: 'npx', args: ['-y', '@openai/codex@0.137.0', 'login'], env: { CODEX_HOME: '/home/me/.codex' } },
	env: ['OPENAI_API_KEY', 'CODEX_API_KEY'],
	logins: [],
	methods: [{ id: 'chatgpt', name: 'Log in with ChatGPT', description: 'Use your ChatGPT plan' }, { id: 'openai-api-key', name: 'OPENAI_API_KEY', description: null }],
};
const CLAUDE_ARGS = ['-y', '@agentclientprotocol/claude-agent-acp@0.101.0', '--cli', 'auth', 'login'];
/** claude-agent-acp 0.101 lists two terminal logins (docs/agents.md, "Signing in"). */
const CLAUDE: AuthRequiredData = {
	reason: 'auth_required', agentId: 'claude', agentName: 'Claude Code',
	login: { command: 'npx', args: [...CLAUDE_ARGS, '--claudeai'], env: {} },
	logins: [
		{ id: 'claude-ai-login', name: 'Claude Subscription', description: 'Use Claude subscription ', command: 'npx', args: [...CLAUDE_ARGS, '--claudeai'], env: {} },
		{ id: 'console-login', name: 'Anthropic Console', description: null, command: 'npx', args: [...CLAUDE_ARGS, '--console'], env: {} },
	],
	env: [], methods: [{ id: 'claude-ai-login', name: 'Claude Subscription', description: null }, { id: 'console-login', name: 'Anthropic Console', description: null }],
};
const MESSAGE = 'Codex needs you to sign in: run "codex login" (Sign in…), or set OPENAI_API_KEY in its "env" in lmbridge.agents.';

describe('authRequired', () => {
	const rows: Array<[string, unknown, AuthRequiredData | undefined]> = [
		['the daemon\'s data, whole', CODEX, CODEX],
		['no login, only keys; the name defaults to the id', { reason: 'auth_required', agentId: 'gemini', login: null, env: ['GEMINI_API_KEY'] },
			{ reason: 'auth_required', agentId: 'gemini', agentName: 'gemini', login: null, logins: [], env: ['GEMINI_API_KEY'], methods: [] }],
		['a login without a command is none', { reason: 'auth_required', agentId: 'a', login: { args: ['x'] } },
			{ reason: 'auth_required', agentId: 'a', agentName: 'a', login: null, logins: [], env: [], methods: [] }],
		['junk in the lists is left out', { reason: 'auth_required', agentId: 'a', login: { command: 'x', args: ['l', 3], env: { A: '1', B: 2 } }, env: ['K', null], methods: [{ id: 'm' }, { name: 'no id' }, 'x'] },
			{ reason: 'auth_required', agentId: 'a', agentName: 'a', login: { command: 'x', args: ['l'], env: { A: '1' } }, logins: [], env: ['K'], methods: [{ id: 'm', name: 'm', description: null }] }],
		['every login, whole', CLAUDE, CLAUDE],
		['a login without an id or a command is left out; a name defaults to the id',
			{ reason: 'auth_required', agentId: 'a', logins: [{ id: 'x', command: 'c' }, { name: 'no id', command: 'c' }, { id: 'y' }, 7] },
			{ reason: 'auth_required', agentId: 'a', agentName: 'a', login: null, logins: [{ id: 'x', name: 'x', description: null, command: 'c', args: [], env: {} }], env: [], methods: [] }],
		['another reason', { reason: 'unknown_model', agentId: 'a' }, undefined],
		['no agent id', { reason: 'auth_required' }, undefined],
		['no data', undefined, undefined],
		['data not an object', 'auth_required', undefined],
	];
	for (const [name, data, expected] of rows) {
		test(name, () => assert.deepEqual(authRequired({ code: -32000, message: 'x', data }), expected));
	}
});

describe('the notification and the terminal, pure', () => {
	test('buttons: Sign in… only with a login command', () => {
		assert.deepEqual(authActions(CODEX), [SIGN_IN, OPEN_AGENT_SETTINGS]);
		assert.deepEqual(authActions({ ...CODEX, login: null }), [OPEN_AGENT_SETTINGS]);
	});
	test('several logins: one button each, and each starts its own', () => {
		assert.deepEqual(authActions(CLAUDE), ['Sign in: Claude Subscription', 'Sign in: Anthropic Console', OPEN_AGENT_SETTINGS]);
		assert.deepEqual(chosenLogin(CLAUDE, 'Sign in: Anthropic Console')?.args, [...CLAUDE_ARGS, '--console']);
		assert.deepEqual(chosenLogin(CLAUDE, 'Sign in: Claude Subscription')?.args, [...CLAUDE_ARGS, '--claudeai']);
		assert.equal(chosenLogin(CLAUDE, OPEN_AGENT_SETTINGS), undefined);
		assert.equal(chosenLogin(CLAUDE, undefined), undefined);
		// One login (or only the older `login`): Sign in… starts it.
		const one = { ...CLAUDE, logins: CLAUDE.logins!.slice(1) };
		assert.deepEqual(authActions(one), [SIGN_IN, OPEN_AGENT_SETTINGS]);
		assert.deepEqual(chosenLogin(one, SIGN_IN), CLAUDE.login);
		assert.deepEqual(chosenLogin({ ...one, login: null }, SIGN_IN)?.args, [...CLAUDE_ARGS, '--console']);
		assert.deepEqual(chosenLogin(CODEX, SIGN_IN), CODEX.login);
	});
	test('the text is the daemon\'s sentence; without one, made from the data', () => {
		assert.equal(authMessage(CODEX, MESSAGE), MESSAGE);
		assert.equal(authMessage(CODEX, 'Codex needs you to sign in: sign in by running `npx -y @openai/codex login` in a terminal.'),
			'Codex needs you to sign in: sign in by running npx -y @openai/codex login in a terminal.');
		assert.equal(authMessage(CODEX, ''), 'Codex needs you to sign in (npx -y @openai/codex@0.137.0 login) or set OPENAI_API_KEY or CODEX_API_KEY in its "env" in lmbridge.agents.');
		assert.equal(authMessage({ ...CODEX, login: null, env: ['GEMINI_API_KEY'], agentName: 'Gemini CLI' }, ' '), 'Gemini CLI needs you to set GEMINI_API_KEY in its "env" in lmbridge.agents.');
	});
	test('the terminal: named for the agent, the login command (no shell), transient, its env, the folder given', () => {
		assert.deepEqual(loginTerminalOptions(CODEX, '/home/me'), {
			name: 'Sign in: Codex', shellPath: 'npx', shellArgs: ['-y', '@openai/codex@0.137.0', 'login'], isTransient: true,
			env: { CODEX_HOME: '/home/me/.codex' }, cwd: '/home/me',
		});
		assert.deepEqual(loginTerminalOptions({ ...CODEX, login: { command: 'claude', args: ['/login'], env: {} } }),
			{ name: 'Sign in: Codex', shellPath: 'claude', shellArgs: ['/login'], isTransient: true });
		assert.equal(loginTerminalOptions({ ...CODEX, login: null }), undefined);
	});
	test("the terminal gets only where the agent keeps its state and PATH, none of its keys; the login's own on top", () => {
		const agentEnv = {
			CODEX_HOME: '/elsewhere', CLAUDE_CONFIG_DIR: '/claude', XDG_CONFIG_HOME: '/xdg', HOME: '/scratch-home', PATH: '/opt/node/bin:/usr/bin',
			OPENAI_API_KEY: 'sk-1', ANTHROPIC_AUTH_TOKEN: 't', GITHUB_TOKEN: 'g', AWS_SECRET_ACCESS_KEY: 's', HTTPS_PROXY: 'http://user:pw@proxy', API_KEY_DIR: '/k',
		};
		assert.deepEqual(loginEnv(agentEnv), { CODEX_HOME: '/elsewhere', CLAUDE_CONFIG_DIR: '/claude', XDG_CONFIG_HOME: '/xdg', HOME: '/scratch-home', PATH: '/opt/node/bin:/usr/bin' });
		assert.deepEqual(loginTerminalOptions(CODEX, undefined, agentEnv)?.env,
			{ CODEX_HOME: '/home/me/.codex', CLAUDE_CONFIG_DIR: '/claude', XDG_CONFIG_HOME: '/xdg', HOME: '/scratch-home', PATH: '/opt/node/bin:/usr/bin' });
		assert.deepEqual(loginTerminalOptions({ ...CODEX, login: { command: 'codex', args: ['login'], env: {} } }, undefined, { CODEX_HOME: '/mine', OPENAI_API_KEY: 'sk-1' })?.env,
			{ CODEX_HOME: '/mine' });
	});
});

describe('AuthNotifier', () => {
	const notifier = () => {
		const log = new MockLogOutputChannel('lmbridge');
		return { log, notifier: new AuthNotifier(log as unknown as vscode.LogOutputChannel, () => '/home/me', (id): Record<string, string> => (id === 'codex' ? { XDG_DATA_HOME: '/d', OPENAI_API_KEY: 'sk' } : {})) };
	};

	test('Sign in… opens and shows a terminal running the login command', async () => {
		const { notifier: n, log } = notifier();
		mock.state.warningResponse = () => SIGN_IN;
		await n.notify(CODEX, MESSAGE);
		assert.deepEqual(mock.state.warningMessages, [{ message: MESSAGE, items: [SIGN_IN, OPEN_AGENT_SETTINGS] }]);
		assert.equal(mock.state.terminals.length, 1);
		assert.deepEqual(mock.state.terminals[0].options, { ...loginTerminalOptions(CODEX, '/home/me'), env: { XDG_DATA_HOME: '/d', CODEX_HOME: '/home/me/.codex' } });
		assert.equal(mock.state.terminals[0].shown, 1);
		assert.equal(log.matching('Codex needs a sign-in', 'warn').length, 1);
	});

	test('the second of two logins opens a terminal running it, named for it', async () => {
		const { notifier: n } = notifier();
		mock.state.warningResponse = () => 'Sign in: Anthropic Console';
		await n.notify(CLAUDE, 'Claude Code needs you to sign in.');
		assert.deepEqual(mock.state.warningMessages[0].items, ['Sign in: Claude Subscription', 'Sign in: Anthropic Console', OPEN_AGENT_SETTINGS]);
		assert.equal(mock.state.terminals.length, 1);
		assert.deepEqual(mock.state.terminals[0].options, {
			name: 'Sign in: Claude Code (Anthropic Console)', shellPath: 'npx', shellArgs: [...CLAUDE_ARGS, '--console'], isTransient: true, cwd: '/home/me',
		});
	});

	test('Open Settings opens lmbridge.agents', async () => {
		const { notifier: n } = notifier();
		mock.state.warningResponse = () => OPEN_AGENT_SETTINGS;
		await n.notify({ ...CODEX, login: null }, MESSAGE);
		assert.deepEqual(mock.state.warningMessages[0].items, [OPEN_AGENT_SETTINGS]);
		assert.deepEqual(mock.state.executed, [{ command: 'workbench.action.openSettings', args: ['lmbridge.agents'] }]);
		assert.equal(mock.state.terminals.length, 0);
	});

	test('one notification per agent while it is on screen; again once it is closed', async () => {
		const { notifier: n } = notifier();
		let close!: (choice: string | undefined) => void;
		mock.state.warningResponse = m => (m.message === MESSAGE ? new Promise(resolve => { close = resolve; }) : undefined);
		const first = n.notify(CODEX, MESSAGE);
		await n.notify(CODEX, MESSAGE);
		await n.notify({ ...CODEX, agentId: 'gemini', agentName: 'Gemini CLI' }, 'Gemini CLI needs a key.');
		assert.equal(mock.state.warningMessages.length, 2);
		assert.ok(n.isShowing('codex'));
		close(undefined); // dismissed
		await first;
		assert.ok(!n.isShowing('codex'));
		assert.equal(mock.state.terminals.length, 0);
		mock.state.warningResponse = () => undefined;
		await n.notify(CODEX, MESSAGE);
		assert.equal(mock.state.warningMessages.length, 3);
	});
});
