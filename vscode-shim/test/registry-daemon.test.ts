/**
 * "lmbridge: Manage ACP Agents" with an ACP registry feed served on 127.0.0.1 and the real
 * daemon (`../.venv`, as workspace.test.ts): the feed's npx, uvx and binary agents listed (the
 * daemon reads the feed: `agents/registry`); installing each adds it to the user's
 * lmbridge.agents and the daemon offers it as a model; the binary one (a tiny agent in a
 * .tar.gz with its sha256: a script starting lmbridge's demo agent) answers a chat; a binary
 * whose download does not match its sha256 is refused; a new version in the feed is offered
 * as an update and installed in place of the old one.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import type * as vscode from 'vscode';
import { activate, COMMANDS, deactivate } from '../src/extension';
import { registryPlatform } from '../src/product/registry';
import { recorder, serve, sha256, tarGz, tempDir, waitFor } from './helpers';
import { CancellationTokenSource, LanguageModelChatMessage, LanguageModelTextPart, mock } from './vscode-mock';

const PYTHON = path.resolve(__dirname, '..', '..', '../.venv/bin/python');

after(async () => {
	await deactivate();
});

/** A tiny ACP agent as a registry "binary": a script that starts lmbridge's demo agent. */
async function tinyAgent(version: string): Promise<Buffer> {
	const dir = tempDir('lmbridge-tiny-');
	fs.mkdirSync(path.join(dir, 'bin'));
	fs.writeFileSync(path.join(dir, 'bin', 'tiny-agent'), `#!/bin/sh\n# tiny-agent ${version}\nexec "${PYTHON}" -P -m lmbridge demo-agent "$@"\n`, { mode: 0o755 });
	return tarGz(dir, ['bin']);
}

test('a registry feed on 127.0.0.1: npx, uvx and binary agents installed into the picker; the binary one answers; a wrong sha256 refused; an update offered', { timeout: 300_000 }, async () => {
	assert.ok(fs.existsSync(PYTHON), `no Python environment at ${PYTHON}: run \`make venv\` at the top of the repository first`);
	const platform = registryPlatform();
	assert.ok(platform, `this machine (${process.platform}-${process.arch}) has no registry platform`);
	const v1 = await tinyAgent('1.0.0');
	const v2 = await tinyAgent('1.1.0');
	const routes = new Map<string, Buffer | string | { location: string }>([['/tiny-agent-1.0.0.tar.gz', v1], ['/tiny-agent-1.1.0.tar.gz', v2]]);
	const server = await serve(routes);
	const binary = (version: string, hash: string) => ({ [platform!]: { archive: `${server.url}/tiny-agent-${version}.tar.gz`, sha256: hash, cmd: './bin/tiny-agent' } });
	const feed = (tinyVersion: string, tinyHash: string) => JSON.stringify({
		version: '1.0.0',
		agents: [
			{ id: 'npx-agent', name: 'Npx Agent', version: '2.0.0', description: 'An agent from npm', distribution: { npx: { package: '@example/npx-agent@2.0.0', args: ['--acp'] } } },
			{ id: 'uvx-agent', name: 'Uvx Agent', version: '0.3.0', description: 'An agent from PyPI', distribution: { uvx: { package: 'uvx-agent==0.3.0', cmd: 'uvx-agent-acp' } } },
			{ id: 'tiny-agent', name: 'Tiny Agent', version: tinyVersion, description: 'A tiny test agent', distribution: { binary: binary(tinyVersion, tinyHash) } },
			{ id: 'bad-hash', name: 'Bad Hash', version: '1.0.0', description: 'Its download is not what the registry says', distribution: { binary: { [platform!]: { archive: `${server.url}/tiny-agent-1.0.0.tar.gz`, sha256: sha256(v2), cmd: './bin/tiny-agent' } } } },
			{ id: 'elsewhere', name: 'Elsewhere', version: '1.0.0', description: 'No build for this platform', distribution: { binary: { 'windows-aarch64': { archive: 'https://example.com/e.zip', cmd: 'e.exe' } } } },
		],
	});
	routes.set('/registry.json', feed('1.0.0', sha256(v1)));
	const storage = tempDir('lmbridge-storage-');
	try {
		mock.reset();
		mock.setConfig({
			'lmbridge.pythonPath': PYTHON,
			'lmbridge.registry.url': `${server.url}/registry.json`,
			// A state folder of its own: what another run learnt of the agents' models plays no part.
			'lmbridge.daemon.env': { LMBRIDGE_DEMO_SCRATCH: tempDir('lmbridge-scratch-'), LMBRIDGE_START_NOTICE: '60', LMBRIDGE_PREWARM: '0', XDG_STATE_HOME: tempDir('lmbridge-state-') },
		});
		const api = activate(mock.context(storage) as never);
		const provider = mock.state.providers.get('lmbridge') as vscode.LanguageModelChatProvider;
		const token = () => new CancellationTokenSource().token as never;
		let changes = 0;
		provider.onDidChangeLanguageModelChatInformation!(() => changes++);
		mock.state.infoResponse = m => (m.options?.modal ? m.items[0] : undefined); // the user confirms

		const install = async (id: string) => {
			mock.state.quickPickResponse = items => items.find(i => (i.registryAgent as { id?: string } | undefined)?.id === id);
			return mock.state.commands.get(COMMANDS.manage)!();
		};
		assert.equal(await install('npx-agent'), 'npx-agent');
		const [{ items }] = mock.state.quickPicks;
		assert.deepEqual(items.map(i => [i.label, i.description]), [
			['ACP Registry', undefined],
			['Npx Agent', 'npx-agent · 2.0.0 · npx'],
			['Uvx Agent', 'uvx-agent · 0.3.0 · uvx'],
			['Tiny Agent', 'tiny-agent · 1.0.0 · binary'],
			['Bad Hash', 'bad-hash · 1.0.0 · binary'],
			['Built in', undefined],
			['Claude Code', 'claude'],
			['Codex', 'codex'],
			['Gemini CLI', 'gemini'],
			['fast-agent', 'fast-agent'],
			['', undefined],
			['$(gear) Open Settings', 'lmbridge.agents'],
		]);
		const confirm = mock.state.infoMessages.find(m => m.options?.modal)!;
		assert.equal(confirm.message, 'Install Npx Agent 2.0.0 from the ACP registry?');
		assert.match(confirm.options!.detail!, /The agent runs as: npx -y @example\/npx-agent@2\.0\.0 --acp/);
		assert.deepEqual(confirm.items, ['Install']);
		assert.equal(mock.state.channels[0].matching('ACP registry: agents[4] (elsewhere) left out: no distribution for').length, 1);

		assert.equal(await install('uvx-agent'), 'uvx-agent');
		assert.equal(await install('tiny-agent'), 'tiny-agent');
		assert.equal(await install('bad-hash'), undefined);
		assert.match(mock.state.errorMessages.at(-1)!.message, /^Bad Hash was not installed: Bad Hash's archive does not match the registry's sha256/);

		const tinyCommand = path.join(storage, 'agents', 'tiny-agent', '1.0.0', 'bin', 'tiny-agent');
		const agents = () => mock.state.config['lmbridge.agents'];
		assert.deepEqual(agents(), [
			{ id: 'npx-agent', name: 'Npx Agent', command: 'npx', args: ['-y', '@example/npx-agent@2.0.0', '--acp'], registry: { version: '2.0.0', distribution: 'npx' } },
			{ id: 'uvx-agent', name: 'Uvx Agent', command: 'uvx', args: ['--from', 'uvx-agent==0.3.0', 'uvx-agent-acp'], registry: { version: '0.3.0', distribution: 'uvx' } },
			{ id: 'tiny-agent', name: 'Tiny Agent', command: tinyCommand, args: [], registry: { version: '1.0.0', distribution: 'binary' } },
		]);
		assert.ok(mock.state.updates.every(([key, , target]) => key === 'lmbridge.agents' && target === 1), 'user settings only');
		assert.ok(!fs.existsSync(path.join(storage, 'agents', 'bad-hash', '1.0.0')));

		// The daemon restarted with them: they are models; the binary one answers.
		await waitFor(() => changes >= 3, 60_000, 'the models changed');
		const models = async () => (await provider.provideLanguageModelChatInformation({ silent: true }, token()) ?? []).map(m => [m.id, m.name]);
		assert.deepEqual(await models(), [['npx-agent', 'Npx Agent'], ['uvx-agent', 'Uvx Agent'], ['tiny-agent', 'Tiny Agent']]);
		const ask = async (text: string) => {
			const tiny = (await provider.provideLanguageModelChatInformation({ silent: true }, token()))!.find(m => m.id === 'tiny-agent')!;
			const rec = recorder();
			await provider.provideLanguageModelChatResponse(tiny, [LanguageModelChatMessage.User(text) as never], { toolMode: 1 } as never, rec.progress, token());
			return rec.parts.filter(p => p instanceof LanguageModelTextPart).map(p => (p as LanguageModelTextPart).value).join('');
		};
		assert.match(await ask('hi from the registry'), /Hello from the demo agent\. You said: hi from the registry/);

		// A new version in the feed: offered as an update, installed in place of the old one.
		routes.set('/registry.json', feed('1.1.0', sha256(v2)));
		mock.state.quickPicks.length = 0;
		const before = changes;
		assert.equal(await install('tiny-agent'), 'tiny-agent');
		const offered = mock.state.quickPicks[0].items.find(i => (i.registryAgent as { id?: string } | undefined)?.id === 'tiny-agent')!;
		assert.deepEqual([offered.label, offered.description], ['$(arrow-up) Tiny Agent', 'tiny-agent · update 1.0.0 → 1.1.0']);
		assert.equal(mock.state.infoMessages.filter(m => m.options?.modal).at(-1)!.message, 'Update Tiny Agent from 1.0.0 to 1.1.0?');
		const updated = (agents() as Array<{ id: string; command: string; registry: { version: string } }>).find(a => a.id === 'tiny-agent')!;
		assert.equal(updated.command, path.join(storage, 'agents', 'tiny-agent', '1.1.0', 'bin', 'tiny-agent'));
		assert.equal(updated.registry.version, '1.1.0');
		assert.deepEqual(fs.readdirSync(path.join(storage, 'agents', 'tiny-agent')), ['1.1.0'], 'the old version removed');
		assert.match(fs.readFileSync(updated.command, 'utf8'), /# tiny-agent 1\.1\.0/);
		await waitFor(() => changes > before, 60_000, 'the models changed after the update');
		assert.match(await ask('and after the update'), /You said: and after the update/);

		// Offline: the cached feed still lists them.
		routes.delete('/registry.json');
		mock.state.quickPicks.length = 0;
		mock.state.quickPickResponse = () => undefined;
		await mock.state.commands.get(COMMANDS.manage)!();
		assert.match(String(mock.state.quickPicks[0].items[0].label), /^ACP Registry \(cached \d{4}-\d\d-\d\d\)$/);
		assert.equal(mock.state.quickPicks[0].items.find(i => (i.registryAgent as { id?: string } | undefined)?.id === 'tiny-agent')?.label, '$(check) Tiny Agent');
		assert.ok(api.daemon.pid);
	} finally {
		await server.close();
	}
});
