/** Activation, settings and commands (src/extension.ts, src/product/config.ts), with the fake daemon. */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, describe, test } from 'node:test';
import type * as vscode from 'vscode';
import { BUILD_REQUIREMENTS, REQUIREMENTS } from '../src/product/bootstrap';
import { launchSpec, MACHINE_SETTINGS, parseAgents, PRESET_IDS, readSettings, workspaceMachineSettings } from '../src/product/config';
import { activate, COMMANDS, deactivate, initializeParams, LmBridgeApi, VENDOR } from '../src/extension';
import { folderPaths } from '../src/chat/files';
import { DEFAULT_REGISTRY_URL } from '../src/product/registry';
import { FAKE_DAEMON, isAlive, tempDir, waitFor } from './helpers';
import { CancellationTokenSource, LanguageModelChatMessage, mock, Uri } from './vscode-mock';
import { AGENT_ACTION_TOOLS } from '../src/chat/wire';

const manifest = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../package.json'), 'utf8'));

function config(values: Record<string, unknown>) {
	return { get: <T>(key: string) => values[key] as T | undefined };
}

afterEach(async () => {
	await deactivate();
	mock.reset();
});

describe('readSettings and launchSpec', () => {
	test('defaults: `lmbridge serve` on PATH, info, thinking auto', () => {
		const s = readSettings(config({}));
		assert.deepEqual(launchSpec(s), { command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' }, cwd: undefined });
		assert.equal(s.thinking, 'auto');
	});
	const rows: Array<[string, Record<string, unknown>, { command: string; args: string[]; env: Record<string, string> }]> = [
		['a daemon command and args', { 'daemon.command': '/opt/lmbridge/bin/lmbridge', 'daemon.args': ['serve', '--idle-timeout', '60'] },
			{ command: '/opt/lmbridge/bin/lmbridge', args: ['serve', '--idle-timeout', '60'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' } }],
		['a python path wins over the command', { pythonPath: '/venv/bin/python', 'daemon.command': 'ignored' },
			{ command: '/venv/bin/python', args: ['-P', '-m', 'lmbridge', 'serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' } }],
		['env and log level', { 'daemon.env': { A: 'b', N: 1 }, logLevel: 'debug' },
			{ command: 'lmbridge', args: ['serve'], env: { A: 'b', N: '1', LMBRIDGE_LOG_LEVEL: 'debug', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' } }],
		['a log level the daemon would refuse falls back to info', { logLevel: 'trace' },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' } }],
		['a process cap', { maxAgentProcesses: 2 },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '2', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' } }],
		['no pre-warming, no spare session', { prewarm: false, spareSession: false },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '0', LMBRIDGE_SPARE_SESSION: '0', LMBRIDGE_SESSION_WAIT: '120' } }],
		['a number of spare sessions', { spareSessions: 2 },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SPARE_SESSIONS: '2', LMBRIDGE_SESSION_WAIT: '120' } }],
		['a number of spare sessions the daemon would refuse: each agent\'s own', { spareSessions: 0 },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' } }],
		['a session wait', { sessionWait: 30 },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '30' } }],
		['no wait: the busy error at once', { sessionWait: 0 },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '0' } }],
		['a wait the daemon would refuse falls back to 120', { sessionWait: -1 },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' } }],
		['not booleans: the defaults', { prewarm: 'no', spareSession: 1 },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' } }],
		['a cap the daemon would refuse falls back to 4', { maxAgentProcesses: 0 },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' } }],
		['blank command: the default', { 'daemon.command': '  ' },
			{ command: 'lmbridge', args: ['serve'], env: { LMBRIDGE_LOG_LEVEL: 'info', LMBRIDGE_MAX_AGENT_PROCESSES: '4', LMBRIDGE_PREWARM: '1', LMBRIDGE_SPARE_SESSION: '1', LMBRIDGE_SESSION_WAIT: '120' } }],
	];
	for (const [name, values, expected] of rows) {
		test(name, () => {
			const spec = launchSpec(readSettings(config(values)));
			assert.deepEqual({ command: spec.command, args: spec.args, env: spec.env }, expected);
		});
	}
	test('a workspace value of a setting that chooses what runs is ignored, even when VS Code passes it on', () => {
		const workspace: Record<string, unknown> = {
			'daemon.command': '/repo/evil', 'daemon.args': ['serve', '--record', '/home/me/.bashrc'], 'daemon.env': { PYTHONPATH: '/repo' },
			pythonPath: '/repo/python', agents: [{ id: 'x', command: '/repo/x' }], logLevel: 'debug', 'registry.url': 'https://evil.example/registry.json',
		};
		const user: Record<string, unknown> = { 'daemon.env': { A: '1' } };
		const defaults: Record<string, unknown> = { 'daemon.command': 'lmbridge', 'daemon.args': ['serve'], pythonPath: '', agents: [] };
		const leaky = {
			get: <T>(key: string) => (workspace[key] ?? user[key] ?? defaults[key]) as T,
			inspect: <T>(key: string) => ({ defaultValue: defaults[key] as T, globalValue: user[key] as T, workspaceValue: workspace[key] as T }),
		};
		const s = readSettings(leaky);
		assert.deepEqual(launchSpec(s).command, 'lmbridge');
		assert.deepEqual(launchSpec(s).args, ['serve']);
		assert.deepEqual([s.daemonEnv, s.pythonPath, s.agents, s.daemonCommandSet, s.logLevel], [{ A: '1' }, '', [], false, 'debug']);
		assert.equal(s.registryUrl, DEFAULT_REGISTRY_URL, 'a workspace cannot choose the registry agents are installed from');
		assert.deepEqual(workspaceMachineSettings(leaky), ['lmbridge.agents', 'lmbridge.daemon.command', 'lmbridge.daemon.args', 'lmbridge.daemon.env', 'lmbridge.pythonPath', 'lmbridge.registry.url']);
	});
	test('~ expands to the home folder', () => {
		assert.ok(!launchSpec(readSettings(config({ pythonPath: '~/venv/bin/python' }))).command.startsWith('~'));
	});
	test('an unknown thinking value falls back to auto', () => {
		assert.equal(readSettings(config({ thinking: 'loud' })).thinking, 'auto');
		assert.equal(readSettings(config({ thinking: 'hidden' })).thinking, 'hidden');
	});
});

describe('parseAgents', () => {
	const rows: Array<[string, unknown, object[], string[]]> = [
		['unset', undefined, [], []],
		['full entry', [{ id: 'claude', name: 'Claude Code', command: 'npx', args: ['@zed-industries/claude-agent-acp'], env: { A: '1' } }],
			[{ id: 'claude', name: 'Claude Code', command: 'npx', args: ['@zed-industries/claude-agent-acp'], env: { A: '1' } }], []],
		['minimal entry', [{ id: 'g', command: 'gemini' }], [{ id: 'g', command: 'gemini' }], []],
		['a preset: the id alone, for the daemon to resolve', [{ id: 'claude' }], [{ id: 'claude' }], []],
		['a preset with overrides', [{ id: 'gemini', env: { GEMINI_API_KEY: 'k' }, mode: 'yolo' }], [{ id: 'gemini', env: { GEMINI_API_KEY: 'k' }, mode: 'yolo' }], []],
		['a command that is not a string is ignored', [{ id: 'codex', command: 7 }], [{ id: 'codex' }], ['lmbridge.agents[0].command must be a string (ignored)']],
		['missing id', [{ command: 'x' }], [], ['lmbridge.agents[0] needs an "id" (a preset such as "claude", "codex", "gemini", "fast-agent", or any id with a "command")']],
		['duplicate id', [{ id: 'a', command: 'x' }, { id: 'a', command: 'y' }], [{ id: 'a', command: 'x' }], ['lmbridge.agents[1]: the id "a" is used twice']],
		['bad args ignored', [{ id: 'a', command: 'x', args: 'nope' }], [{ id: 'a', command: 'x' }], ['lmbridge.agents[0].args must be an array of strings (ignored)']],
		['tools filters reach the daemon', [{ id: 'a', command: 'x', tools: { allow: ['search_*'], deny: ['copilot_*'] } }],
			[{ id: 'a', command: 'x', tools: { allow: ['search_*'], deny: ['copilot_*'] } }], []],
		['bad tools filters ignored', [{ id: 'a', command: 'x', tools: { allow: 'search_*' } }], [{ id: 'a', command: 'x' }],
			['lmbridge.agents[0].tools: allow and deny must be arrays of glob patterns (ignored)']],
		['a mode reaches the daemon', [{ id: 'claude', command: 'x', mode: ' acceptEdits ' }], [{ id: 'claude', command: 'x', mode: 'acceptEdits' }], []],
		['a mode that is not a string is ignored', [{ id: 'a', command: 'x', mode: 3 }], [{ id: 'a', command: 'x' }],
			['lmbridge.agents[0].mode must be a string, one of the agent\'s modes (ignored)']],
		['not an array', { id: 'a' }, [], ['lmbridge.agents must be an array']],
		['not an object', ['a'], [], ['lmbridge.agents[0] is not an object']],
	];
	for (const [name, raw, agents, problems] of rows) {
		test(name, () => assert.deepEqual(parseAgents(raw), { agents, problems }));
	}
});

describe('package.json contributions', () => {
	test('engines and typings are pinned together at 1.104', () => {
		assert.equal(manifest.engines.vscode, '^1.104.0');
		assert.equal(manifest.devDependencies['@types/vscode'], '1.104.0');
	});
	test('activated when VS Code asks for the vendor\'s models', () => {
		assert.deepEqual(manifest.activationEvents, [`onLanguageModelChatProvider:${VENDOR}`]);
	});
	test('the provider vendor, its display name and management command', () => {
		assert.deepEqual(manifest.contributes.languageModelChatProviders, [{ vendor: VENDOR, displayName: 'ACP Agents', managementCommand: COMMANDS.manage }]);
	});
	// One tool per risk class (docs/vscode-shim.md): the ACP kinds each one's description names.
	const KINDS: Record<string, string[]> = {
		'symposium-agent-action': ['execute', 'other', 'unknown', 'command'],
		'symposium-agent-action-read': ['read', 'search', 'think'],
		'symposium-agent-action-edit': ['edit', 'delete', 'move'],
		'symposium-agent-action-fetch': ['fetch'],
		'symposium-agent-action-mode': ['switch_mode'],
		'symposium-agent-action-protected': ['protected'],
	};
	interface ToolContribution {
		name: string; displayName: string; userDescription: string; modelDescription: string; when?: string;
		canBeReferencedInPrompt: boolean; toolReferenceName: string; icon: string;
		inputSchema: { type: string; properties: Record<string, { type: string }>; required: string[] };
	}
	const tools = () => manifest.contributes.languageModelTools as ToolContribution[];
	test('six agent-action tools, one per risk class, each with its own names', () => {
		assert.deepEqual(tools().map(t => t.name).sort(), [...AGENT_ACTION_TOOLS].sort());
		assert.deepEqual(Object.keys(KINDS).sort(), [...AGENT_ACTION_TOOLS].sort());
		for (const key of ['displayName', 'userDescription', 'modelDescription', 'toolReferenceName', 'icon'] as const) {
			const values = tools().map(t => t[key]);
			assert.ok(values.every(v => typeof v === 'string' && v.length > 0), `every tool has a ${key}`);
			assert.equal(new Set(values).size, values.length, `no two tools share a ${key}: ${values.join(' | ')}`);
		}
	});
	test('each tool\'s model description names its own kinds and no other class\'s', () => {
		const all = Object.values(KINDS).flat().filter(k => k !== 'unknown' && k !== 'command');
		for (const tool of tools()) {
			const own = KINDS[tool.name];
			for (const kind of own) {
				assert.match(tool.modelDescription, new RegExp(`\\b${kind}\\b`), `${tool.name} names ${kind}`);
			}
			for (const kind of all.filter(k => !own.includes(k))) {
				assert.doesNotMatch(tool.modelDescription, new RegExp(`\\b${kind}\\b`), `${tool.name} does not name ${kind}`);
			}
			assert.match(tool.modelDescription, /never call it yourself/);
		}
	});
	test('Agent mode can call each tool: canBeReferencedInPrompt and a toolReferenceName, no `when`', () => {
		for (const tool of tools()) {
			// Without both keys Agent mode refuses the call and no card is shown (docs/vscode-shim.md).
			assert.equal(tool.canBeReferencedInPrompt, true, tool.name);
			assert.match(tool.toolReferenceName, /^[\w-]+$/, tool.name);
			// A `when` is read in VS Code's global context, which knows nothing of the chat's model:
			// one that hid the tool would make every permission of that class fail (docs/vscode-shim.md).
			assert.equal(tool.when, undefined, tool.name);
		}
	});
	test('each tool\'s input schema is the daemon\'s card: title, message, approvalToken (required)', () => {
		for (const tool of tools()) {
			assert.equal(tool.inputSchema.type, 'object');
			assert.deepEqual(Object.keys(tool.inputSchema.properties).sort(), ['approvalToken', 'message', 'title'], tool.name);
			assert.ok(Object.values(tool.inputSchema.properties).every(p => p.type === 'string'), tool.name);
			assert.deepEqual(tool.inputSchema.required, ['approvalToken'], tool.name);
		}
	});
	test('the vsix carries the daemon\'s wheel and its hashed locks (bootstrap.ts installs them)', () => {
		const ignore = fs.readFileSync(path.resolve(__dirname, '../../.vscodeignore'), 'utf8').split('\n');
		for (const file of ['lmbridge-*.whl', REQUIREMENTS, BUILD_REQUIREMENTS]) {
			assert.ok(ignore.includes(`!daemon/${file}`), file);
		}
		const makefile = fs.readFileSync(path.resolve(__dirname, '../../Makefile'), 'utf8');
		assert.match(makefile, /^vsix: deps wheel$/m);
		assert.match(makefile, new RegExp(`^\tcp \\.\\./requirements/daemon\\.txt \\$\\(WHEELDIR\\)/${REQUIREMENTS}$`, 'm'));
		assert.match(makefile, new RegExp(`^\tcp \\.\\./requirements/build\\.txt \\$\\(WHEELDIR\\)/${BUILD_REQUIREMENTS}$`, 'm'));
	});
	test('the settings that choose what runs are machine settings: no workspace can set them', () => {
		const properties = manifest.contributes.configuration.properties as Record<string, { scope?: string }>;
		const machine = Object.keys(properties).filter(key => properties[key].scope === 'machine').sort();
		assert.deepEqual(machine, MACHINE_SETTINGS.map(key => `lmbridge.${key}`).sort());
		assert.deepEqual(machine, ['lmbridge.agents', 'lmbridge.daemon.args', 'lmbridge.daemon.command', 'lmbridge.daemon.env', 'lmbridge.pythonPath', 'lmbridge.registry.url']);
		assert.equal((properties['lmbridge.registry.url'] as { default?: string }).default, DEFAULT_REGISTRY_URL);
		for (const [key, schema] of Object.entries(properties)) {
			assert.ok(schema.scope === undefined || schema.scope === 'machine', `${key}: ${schema.scope}`); // the others: window (the default)
		}
	});
	test('not enabled in an untrusted workspace, and says why', () => {
		const untrusted = manifest.capabilities.untrustedWorkspaces;
		assert.equal(untrusted.supported, false);
		assert.match(untrusted.description, /agents .* workspace/);
	});
	test('lmbridge.agents: an id alone is valid (a preset), and the preset ids are offered', () => {
		const items = manifest.contributes.configuration.properties['lmbridge.agents'].items;
		assert.deepEqual(items.required, ['id']);
		assert.deepEqual(items.properties.id.examples, [...PRESET_IDS]);
		assert.deepEqual(items.defaultSnippets.slice(0, 4).map((s: { body: unknown }) => s.body), PRESET_IDS.map(id => ({ id })));
	});
	test('every command is contributed, every setting read is declared', () => {
		const contributed = manifest.contributes.commands.map((c: { command: string }) => c.command).sort();
		assert.deepEqual(contributed, Object.values(COMMANDS).sort());
		assert.deepEqual(Object.keys(manifest.contributes.configuration.properties).sort(), [
			'lmbridge.agents', 'lmbridge.daemon.args', 'lmbridge.daemon.command', 'lmbridge.daemon.env',
			'lmbridge.logLevel', 'lmbridge.maxAgentProcesses', 'lmbridge.prewarm', 'lmbridge.pythonPath', 'lmbridge.registry.url', 'lmbridge.sessionWait', 'lmbridge.spareSession', 'lmbridge.spareSessions', 'lmbridge.thinking', 'lmbridge.userTurns',
		]);
	});
});

describe('activate', () => {
	function start(extra: Record<string, unknown> = {}): { api: LmBridgeApi; context: ReturnType<typeof mock.context>; record: string } {
		const record = path.join(tempDir(), 'frames.jsonl');
		mock.setConfig({
			'lmbridge.daemon.command': process.execPath,
			'lmbridge.daemon.args': [FAKE_DAEMON],
			'lmbridge.daemon.env': { FAKE_DAEMON_RECORD: record },
			// No ACP registry (the fake daemon has no agents/registry): registry.test.ts and registry-daemon.test.ts.
			'lmbridge.registry.url': '',
			...extra,
		});
		const context = mock.context();
		return { api: activate(context as unknown as vscode.ExtensionContext), context, record };
	}
	const frames = (record: string) => (fs.existsSync(record) ? fs.readFileSync(record, 'utf8').split('\n').filter(Boolean).map(l => JSON.parse(l)) : []);
	const token = () => new CancellationTokenSource().token as unknown as vscode.CancellationToken;

	test('registers the provider, the tool and the commands; starts nothing', () => {
		const { api, context } = start();
		assert.equal(mock.state.providers.get('lmbridge'), api.provider);
		assert.equal(mock.state.tools.get('symposium-agent-action'), api.tool);
		assert.deepEqual([...mock.state.commands.keys()].sort(), Object.values(COMMANDS).sort());
		assert.equal(api.daemon.pid, undefined);
		assert.ok(context.subscriptions.length >= 7);
	});

	test('a workspace that sets a setting choosing what runs: ignored, and the log says so', async () => {
		mock.state.workspaceConfig = { 'lmbridge.daemon.args': ['serve', '--record', '/home/me/.bashrc'] };
		const { api, record } = start();
		await api.provider.provideLanguageModelChatInformation({ silent: true }, token());
		assert.equal(mock.state.channels[0].matching('settings: lmbridge.daemon.args set by the workspace is ignored', 'warn').length, 1);
		assert.ok(frames(record).some(f => f.method === 'initialize'), 'the daemon ran with the user\'s arguments');
	});

	test('initialize carries the workspace folders and the agents from settings', async () => {
		const project = tempDir('project-');
		mock.setWorkspaceFolders([project, '/home/me/missing-folder']);
		const { api, record } = start({ 'lmbridge.agents': [{ id: 'claude', name: 'Claude', command: 'claude-agent-acp' }] });
		const models = await api.provider.provideLanguageModelChatInformation({ silent: true }, token());
		assert.deepEqual(models.map(m => m.id), ['claude']);
		assert.deepEqual(frames(record)[0].params, {
			protocolVersion: 1,
			clientInfo: { name: 'lmbridge-vscode', version: '0.1.0' },
			workspaceFolders: [project, '/home/me/missing-folder'],
			agents: [{ id: 'claude', name: 'Claude', command: 'claude-agent-acp' }],
			userTurns: 'request',
			clientCapabilities: { fs: true, terminal: true, sessionState: true },
		});
	});

	test('a multi-root workspace: every folder on disk in VS Code\'s order, and a change reaches the running daemon', async () => {
		const [a, b, c] = [tempDir('a-'), tempDir('b-'), tempDir('c-')];
		mock.setWorkspaceFolders([a]);
		mock.changeWorkspaceFolders([{ uri: Uri.file(a) }, { uri: Uri.parse('vscode-remote://ssh/home/me/x') }, { uri: Uri.file(b) }]);
		const { api, record } = start();
		mock.changeWorkspaceFolders([{ uri: Uri.file(a) }, { uri: Uri.file(b) }]); // no daemon yet: nothing to tell, nothing started
		assert.equal(api.daemon.pid, undefined);
		await api.provider.provideLanguageModelChatInformation({ silent: true }, token());
		assert.deepEqual(frames(record)[0].params.workspaceFolders, [a, b], 'the remote folder is none: the daemon cannot read it');
		mock.changeWorkspaceFolders([{ uri: Uri.file(a) }, { uri: Uri.file(c) }, { uri: Uri.file(b) }]);
		await waitFor(() => frames(record).some(f => f.method === '$/workspaceFolders'), 5000, '$/workspaceFolders');
		const told = frames(record).filter(f => f.method === '$/workspaceFolders');
		assert.deepEqual(told.map(f => [f.id, f.params]), [[undefined, { workspaceFolders: [a, c, b] }]], 'one notification, every folder in order');
	});

	test('folderPaths: file folders only, in order', () => {
		assert.deepEqual(folderPaths(undefined), []);
		assert.deepEqual(folderPaths([{ uri: Uri.file('/w/a') }, { uri: Uri.parse('vscode-vfs://github/x') }, { uri: Uri.file('/w/b') }]), ['/w/a', '/w/b']);
	});

	test('the six agent-action tools are all registered, to one implementation', () => {
		const { api } = start();
		assert.deepEqual([...mock.state.tools.keys()].sort(), [...AGENT_ACTION_TOOLS].sort());
		for (const name of AGENT_ACTION_TOOLS) {
			assert.equal(mock.state.tools.get(name), api.tool, name);
		}
	});

	test('a first workspace folder that does not exist does not stop the daemon from starting', async () => {
		mock.setWorkspaceFolders(['/home/me/missing-folder']);
		const { api } = start();
		assert.equal((await api.provider.provideLanguageModelChatInformation({ silent: true }, token())).length, 1);
	});

	test('changing the agents restarts the daemon with them and tells VS Code the models changed', async () => {
		const { api } = start({ 'lmbridge.agents': [{ id: 'one', command: 'x' }] });
		let changes = 0;
		api.provider.onDidChangeLanguageModelChatInformation!(() => changes++);
		assert.deepEqual((await api.provider.provideLanguageModelChatInformation({ silent: true }, token())).map(m => m.id), ['one']);
		const firstPid = api.daemon.pid;
		mock.changeConfig({ 'lmbridge.agents': [{ id: 'two', command: 'y' }] });
		await waitFor(() => changes === 1, 5000, 'onDidChangeLanguageModelChatInformation');
		assert.ok(!isAlive(firstPid), 'the old daemon was stopped');
		assert.deepEqual((await api.provider.provideLanguageModelChatInformation({ silent: true }, token())).map(m => m.id), ['two']);
		assert.notEqual(api.daemon.pid, firstPid);
	});

	test('an unrelated setting change leaves the daemon alone', async () => {
		const { api } = start();
		let changes = 0;
		api.provider.onDidChangeLanguageModelChatInformation!(() => changes++);
		await api.provider.provideLanguageModelChatInformation({ silent: true }, token());
		const pid = api.daemon.pid;
		mock.changeConfig({ 'lmbridge.thinking': 'hidden', 'editor.fontSize': 14 });
		await new Promise(resolve => setTimeout(resolve, 100));
		assert.equal(changes, 0);
		assert.equal(api.daemon.pid, pid);
	});

	test('commands: manage offers "Open Settings", show logs shows the channel, restart restarts', async () => {
		const { api } = start();
		await api.provider.provideLanguageModelChatInformation({ silent: true }, token());
		const pid = api.daemon.pid;
		let changes = 0;
		api.provider.onDidChangeLanguageModelChatInformation!(() => changes++);

		mock.state.quickPickResponse = items => items.find(i => i.openSettings);
		await mock.state.commands.get(COMMANDS.manage)!();
		assert.deepEqual(mock.state.executed.at(-1), { command: 'workbench.action.openSettings', args: ['@ext:lmbridge.lmbridge'] });
		await mock.state.commands.get(COMMANDS.showLogs)!();
		assert.equal(mock.state.channels[0].shown, 1);
		await mock.state.commands.get(COMMANDS.restart)!();
		assert.ok(!isAlive(pid));
		assert.equal(changes, 1);
	});

	test('Manage ACP Agents: the daemon\'s presets, the configured one marked, then Open Settings', async () => {
		start({ 'lmbridge.agents': [{ id: 'codex', env: { OPENAI_API_KEY: 'k' } }] });
		await mock.state.commands.get(COMMANDS.manage)!();
		const [{ items }] = mock.state.quickPicks;
		assert.deepEqual(items.map(i => [i.label, i.description]), [
			['Claude Code', 'claude'],
			['$(check) Codex', 'codex · configured'],
			['Gemini CLI', 'gemini'],
			['fast-agent', 'fast-agent'],
			['', undefined],
			['$(gear) Open Settings', 'lmbridge.agents'],
		]);
		assert.equal(items[0].detail, 'Anthropic\'s Claude Code, through claude-agent-acp. Needs Node.js 22+.');
	});

	test('Manage ACP Agents: picking a preset adds {id} to the user settings and the daemon restarts with it', async () => {
		const { api, record } = start({ 'lmbridge.agents': [{ id: 'mine', command: 'my-agent' }] });
		assert.deepEqual((await api.provider.provideLanguageModelChatInformation({ silent: true }, token())).map(m => m.id), ['mine']);
		const firstPid = api.daemon.pid;
		let changes = 0;
		api.provider.onDidChangeLanguageModelChatInformation!(() => changes++);
		mock.state.quickPickResponse = items => items.find(i => i.presetId === 'claude');
		assert.equal(await mock.state.commands.get(COMMANDS.manage)!(), 'claude');
		assert.deepEqual(mock.state.updates, [['lmbridge.agents', [{ id: 'mine', command: 'my-agent' }, { id: 'claude' }], 1]]);
		assert.match(mock.state.infoMessages.at(-1)!.message, /Claude Code was added: pick it in the chat's model picker/);
		await waitFor(() => changes === 1, 5000, 'the models changed');
		assert.ok(!isAlive(firstPid), 'the old daemon was stopped');
		const models = await api.provider.provideLanguageModelChatInformation({ silent: true }, token());
		assert.deepEqual(models.map(m => [m.id, m.name]), [['mine', 'mine'], ['claude', 'Claude Code']]);
		const inits = frames(record).filter(f => f.method === 'initialize');
		assert.deepEqual(inits.at(-1).params.agents, [{ id: 'mine', command: 'my-agent' }, { id: 'claude' }]);
	});

	test('Manage ACP Agents: picking a configured preset changes nothing and says where to find it', async () => {
		start({ 'lmbridge.agents': [{ id: 'claude' }] });
		mock.state.quickPickResponse = items => items.find(i => i.presetId === 'claude');
		mock.state.infoResponse = m => m.items[0];
		assert.equal(await mock.state.commands.get(COMMANDS.manage)!(), undefined);
		assert.deepEqual(mock.state.updates, []);
		assert.match(mock.state.infoMessages[0].message, /Claude Code is already in lmbridge.agents/);
		assert.equal(mock.state.executed.at(-1)?.command, 'workbench.action.openSettings');
	});

	test('Manage ACP Agents: a workspace value of lmbridge.agents (a machine setting) plays no part', async () => {
		start({ 'lmbridge.agents': [{ id: 'mine', command: 'my-agent' }] });
		mock.state.workspaceConfig = { 'lmbridge.agents': [{ id: 'gemini', command: '/repo/evil' }] };
		mock.state.quickPickResponse = items => items.find(i => i.presetId === 'gemini');
		await mock.state.commands.get(COMMANDS.manage)!();
		assert.ok(!mock.state.quickPicks[0].items.find(i => i.presetId === 'gemini')?.configured, 'only the user\'s agents count as configured');
		assert.deepEqual(mock.state.updates, [['lmbridge.agents', [{ id: 'mine', command: 'my-agent' }, { id: 'gemini' }], 1]]);
		assert.match(mock.state.infoMessages.at(-1)!.message, /^Gemini CLI was added: pick it in the chat's model picker/);
	});

	test('Manage ACP Agents: a daemon without agents/presets still offers the settings, and says why', async () => {
		start({ 'lmbridge.daemon.env': { FAKE_DAEMON_MODE: 'no-presets' } });
		await mock.state.commands.get(COMMANDS.manage)!();
		const [{ items }] = mock.state.quickPicks;
		assert.equal(items.length, 1);
		assert.ok(items[0].openSettings);
		assert.match(String(items[0].detail), /did not list its agents \(unknown method: agents\/presets\)/);
		assert.equal(mock.state.channels[0].matching('could not list the agent presets', 'warn').length, 1);
	});

	test('an agent that needs a sign-in: the chat gets the message, the notification Sign in… opens its terminal', async () => {
		const record = path.join(tempDir(), 'frames.jsonl');
		const { api } = start({
			'lmbridge.daemon.env': { FAKE_DAEMON_RECORD: record, XDG_CONFIG_HOME: '/xdg' },
			'lmbridge.agents': [{ id: 'fake', command: 'fake-agent', env: { OPENAI_API_KEY: 'sk-never-in-the-terminal', CODEX_HOME: '/ignored' } }],
		});
		mock.state.warningResponse = () => 'Sign in…';
		const message = 'Codex needs you to sign in: click "Sign in…", or set OPENAI_API_KEY in its "env" in lmbridge.agents.';
		const data = { reason: 'auth_required', agentId: 'fake', agentName: 'Codex', login: { command: 'codex', args: ['login'], env: { CODEX_HOME: '/h' } }, env: ['OPENAI_API_KEY'], methods: [] };
		const messages = [LanguageModelChatMessage.User(`script:${JSON.stringify([{ error: { code: -32000, message, data } }])}`)] as unknown as vscode.LanguageModelChatRequestMessage[];
		const fake = { id: 'fake', name: 'fake', family: 'acp', version: '1', maxInputTokens: 1, maxOutputTokens: 1, capabilities: {} };
		await assert.rejects(api.provider.provideLanguageModelChatResponse(fake, messages, { toolMode: 1 } as never, { report: () => undefined }, token()), { message });
		await waitFor(() => mock.state.terminals.length === 1, 5000, 'the sign-in terminal');
		assert.deepEqual(mock.state.warningMessages, [{ message, items: ['Sign in…', 'Open Settings'] }]);
		// Transient, in the home folder (not the workspace); of the agent's environment
		// (lmbridge.daemon.env, then its own) only where it keeps its state, the login's on top.
		const options = mock.state.terminals[0].options as vscode.TerminalOptions;
		assert.deepEqual(options, {
			name: 'Sign in: Codex', shellPath: 'codex', shellArgs: ['login'], isTransient: true, cwd: os.homedir(),
			env: { XDG_CONFIG_HOME: '/xdg', CODEX_HOME: '/h' },
		});
		assert.equal(mock.state.terminals[0].shown, 1);
	});

	test('deactivate stops the daemon', async () => {
		const { api } = start();
		await api.provider.provideLanguageModelChatInformation({ silent: true }, token());
		const pid = api.daemon.pid;
		assert.ok(isAlive(pid));
		await deactivate();
		assert.ok(!isAlive(pid));
	});
});

describe('initialize tells the daemon which files are protected', () => {
	test('the user\'s chat.tools.edits.autoApprove, its booleans in order', () => {
		mock.setConfig({ 'chat.tools.edits.autoApprove': { '**/*': true, '**/.git/**': false, '**/package.json': true, bad: 'yes' } });
		const params = initializeParams('0.1.0', readSettings(config({})));
		assert.deepEqual(params.editAutoApprove, { '**/*': true, '**/.git/**': false, '**/package.json': true });
		assert.deepEqual(Object.keys(params.editAutoApprove ?? {}), ['**/*', '**/.git/**', '**/package.json']);
	});
	test('none in this VS Code: nothing sent (the daemon uses VS Code\'s default)', () => {
		assert.equal(initializeParams('0.1.0', readSettings(config({}))).editAutoApprove, undefined);
	});
});
