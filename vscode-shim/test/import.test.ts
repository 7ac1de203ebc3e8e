/** Importing agents from VS Code's chat.agentHost.acpAgents and Zed's agent_servers (src/product/import.ts). */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';
import * as vscode from 'vscode';
import { candidates, fromAgentHost, fromZed, importAgents, parseJsonc, slug, zedSettingsPath } from '../src/product/import';
import { tempDir } from './helpers';
import { mock, MockLogOutputChannel } from './vscode-mock';

describe('fromAgentHost', () => {
	test('VS Code\'s entries become lmbridge agents', () => {
		assert.deepEqual(fromAgentHost([
			{ id: 'my-agent', displayName: 'My Agent', command: '/opt/agent', args: ['--acp'], env: { KEY: 'k', N: 1 } },
			{ displayName: 'Named Only', command: 'named' },
			{ id: 'x' },
			'junk',
		]), {
			agents: [
				{ id: 'my-agent', name: 'My Agent', command: '/opt/agent', args: ['--acp'], env: { KEY: 'k' } },
				{ id: 'named-only', name: 'Named Only', command: 'named' },
			],
			problems: ['chat.agentHost.acpAgents[2]: no command', 'chat.agentHost.acpAgents[3]: no command'],
		});
	});
	test('unset: nothing; not a list: said', () => {
		assert.deepEqual(fromAgentHost(undefined), { agents: [], problems: [] });
		assert.deepEqual(fromAgentHost({}).problems, ['chat.agentHost.acpAgents: not a list']);
	});
});

describe('fromZed', () => {
	test('custom agents, built-ins as presets, the older nested form', () => {
		assert.deepEqual(fromZed({
			'My Agent': { type: 'custom', command: 'my-agent', args: ['--acp'], env: { A: 'b' }, default_mode: 'plan' },
			'claude': { env: { ANTHROPIC_API_KEY: 'k' }, default_mode: 'acceptEdits' },
			'gemini': {},
			'Old Style': { command: { path: '/bin/old', args: ['x'], env: { E: 'f' } } },
			'mystery': { env: {} },
			'bad': 3,
		}), {
			agents: [
				{ id: 'my-agent', name: 'My Agent', command: 'my-agent', args: ['--acp'], env: { A: 'b' }, mode: 'plan' },
				{ id: 'claude', env: { ANTHROPIC_API_KEY: 'k' }, mode: 'acceptEdits' },
				{ id: 'gemini' },
				{ id: 'old-style', name: 'Old Style', command: '/bin/old', args: ['x'], env: { E: 'f' } },
			],
			problems: ['Zed agent_servers.mystery: no command', 'Zed agent_servers.bad: not an object'],
		});
	});
});

describe('parseJsonc', () => {
	test('comments and trailing commas, strings kept as they are', () => {
		assert.deepEqual(parseJsonc('{\n // a comment\n "a": "http://x/*y*/", /* block */ "b": [1, 2,],\n "c": "say \\"//\\"",\n}'),
			{ a: 'http://x/*y*/', b: [1, 2], c: 'say "//"' });
	});
	test('not JSON: throws', () => assert.throws(() => parseJsonc('{a: 1}'), SyntaxError));
});

test('slug', () => {
	assert.equal(slug(' My Agent! '), 'my-agent');
	assert.equal(slug('***'), 'agent');
});

test('Zed\'s settings file', () => {
	assert.equal(zedSettingsPath('/home/u', 'linux'), '/home/u/.config/zed/settings.json');
	assert.equal(zedSettingsPath('/Users/u', 'darwin'), '/Users/u/.config/zed/settings.json');
});

test('candidates: once by id, the configured set apart', () => {
	const { fresh, known } = candidates([
		{ agents: [{ id: 'a', command: 'a' }, { id: 'claude' }], problems: [] },
		{ agents: [{ id: 'a', command: 'other' }, { id: 'b', command: 'b' }], problems: ['p'] },
	], new Set(['claude']));
	assert.deepEqual(fresh.map(a => [a.id, a.command]), [['a', 'a'], ['b', 'b']]);
	assert.deepEqual(known.map(a => a.id), ['claude']);
});

describe('importAgents', () => {
	beforeEach(() => mock.reset());
	test('both sources offered, the picked added to the user\'s lmbridge.agents', async () => {
		mock.setConfig({
			'chat.agentHost.acpAgents': [{ id: 'vsc', displayName: 'From VS Code', command: 'vsc-agent' }],
			'lmbridge.agents': [{ id: 'claude' }],
		});
		const zed = '{ "agent_servers": { "claude": {}, "Zed Agent": { "command": "zed-agent" }, }, }';
		mock.state.quickPickResponse = items => items as unknown as Record<string, unknown>; // canPickMany: every item
		const log = vscode.window.createOutputChannel('t', { log: true }) as unknown as vscode.LogOutputChannel;
		const added = await importAgents({ log, home: '/home/u', readFile: file => (file === '/home/u/.config/zed/settings.json' ? zed : undefined) });
		assert.deepEqual(added.map(a => a.id), ['vsc', 'zed-agent']);
		const offered = mock.state.quickPicks[0].items.map(i => i.label);
		assert.deepEqual(offered, ['From VS Code', 'Zed Agent']); // claude is configured already
		assert.deepEqual(mock.state.updates.at(-1), ['lmbridge.agents', [
			{ id: 'claude' }, { id: 'vsc', name: 'From VS Code', command: 'vsc-agent' }, { id: 'zed-agent', name: 'Zed Agent', command: 'zed-agent' },
		], vscode.ConfigurationTarget.Global]);
	});
	test('nothing found: said, nothing changed', async () => {
		const channel = vscode.window.createOutputChannel('t', { log: true }) as unknown as MockLogOutputChannel;
		assert.deepEqual(await importAgents({ log: channel as unknown as vscode.LogOutputChannel, home: '/h', readFile: () => 'not json' }), []);
		assert.equal(mock.state.updates.length, 0);
		assert.match(mock.state.infoMessages[0].message, /No agents found/);
		assert.equal(channel.matching('/h/.config/zed/settings.json', 'warn').length, 1); // the unreadable file is said
	});
	test('only the user\'s own values: a workspace\'s chat.agentHost.acpAgents and a project\'s .zed/settings.json play no part', async () => {
		const project = tempDir('project-');
		fs.mkdirSync(path.join(project, '.zed'));
		fs.writeFileSync(path.join(project, '.zed', 'settings.json'), '{"agent_servers": {"Repo Agent": {"command": "./repo-agent"}}}');
		mock.setWorkspaceFolders([project]);
		mock.setConfig({ 'chat.agentHost.acpAgents': [{ id: 'mine', displayName: 'Mine', command: 'my-agent' }] });
		mock.state.workspaceConfig = {
			'chat.agentHost.acpAgents': [{ id: 'evil', displayName: 'Looks Fine', command: '/repo/evil', env: { NODE_OPTIONS: '--require ./x.js' } }],
		};
		mock.state.quickPickResponse = items => items as unknown as Record<string, unknown>;
		const read: string[] = [];
		const log = vscode.window.createOutputChannel('t', { log: true }) as unknown as vscode.LogOutputChannel;
		const added = await importAgents({ log, home: '/home/u', readFile: file => { read.push(file); return fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : undefined; } });
		assert.deepEqual(added.map(a => a.id), ['mine']);
		assert.deepEqual(mock.state.quickPicks[0].items.map(i => i.label), ['Mine']);
		assert.deepEqual(read, ['/home/u/.config/zed/settings.json'], 'only the user\'s Zed settings are read');
		assert.equal((log as unknown as MockLogOutputChannel).matching('chat.agentHost.acpAgents set by the workspace is ignored', 'warn').length, 1);
		// Nothing with no user value: the workspace's alone is not offered either.
		mock.reset();
		mock.state.workspaceConfig = { 'chat.agentHost.acpAgents': [{ id: 'evil', command: '/repo/evil' }] };
		assert.deepEqual(await importAgents({ log, home: '/home/u', readFile: () => undefined }), []);
		assert.match(mock.state.infoMessages[0].message, /No agents found/);
	});
});
