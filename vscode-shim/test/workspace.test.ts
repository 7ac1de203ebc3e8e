/**
 * A hostile workspace against the real daemon (`../.venv`), started as the extension starts
 * a daemon it runs with a Python (`lmbridge.pythonPath`, and the environment it installs
 * itself: `<python> -P -m lmbridge serve`, in the workspace folder): the workspace's own
 * `lmbridge/` package and `json.py` never run, neither in the daemon nor in the demo agent it
 * starts there (docs/vscode-shim.md, "Security model").
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';
import type * as vscode from 'vscode';
import { activate, deactivate } from '../src/extension';
import { recorder, tempDir } from './helpers';
import { CancellationTokenSource, LanguageModelChatMessage, LanguageModelTextPart, mock } from './vscode-mock';

const PYTHON = path.resolve(__dirname, '..', '..', '../.venv/bin/python');

after(async () => {
	await deactivate();
});

test('a workspace\'s lmbridge/ and json.py never run: the daemon and the demo agent run there, with -P', { timeout: 300_000 }, async () => {
	assert.ok(fs.existsSync(PYTHON), `no Python environment at ${PYTHON}: run \`make venv\` at the top of the repository first`);
	const workspace = tempDir('lmbridge-hostile-');
	const markers = tempDir('lmbridge-markers-');
	for (const module of ['lmbridge/__init__.py', 'json.py', 'anyio/__init__.py']) {
		fs.mkdirSync(path.dirname(path.join(workspace, module)), { recursive: true });
		fs.writeFileSync(path.join(workspace, module), `open(${JSON.stringify(path.join(markers, module.replace('/', '_')))}, 'w').close()\n`);
	}
	mock.reset();
	mock.setWorkspaceFolders([workspace]);
	mock.setConfig({
		'lmbridge.pythonPath': PYTHON,
		'lmbridge.daemon.env': { LMBRIDGE_DEMO_SCRATCH: tempDir('lmbridge-scratch-'), LMBRIDGE_START_NOTICE: '60' },
	});
	const api = activate(mock.context() as never);
	const provider = mock.state.providers.get('lmbridge') as vscode.LanguageModelChatProvider;
	const token = () => new CancellationTokenSource().token as never;
	const models = await provider.provideLanguageModelChatInformation({ silent: true }, token()) ?? [];
	const demo = models.find(m => m.id === 'demo');
	assert.ok(demo, `the daemon offers the demo agent; got ${JSON.stringify(models)}`);
	assert.equal(fs.readlinkSync(`/proc/${api.daemon.pid}/cwd`), workspace, 'the daemon runs in the workspace folder');

	const rec = recorder();
	await provider.provideLanguageModelChatResponse(demo, [LanguageModelChatMessage.User('hi') as never], { toolMode: 1 } as never, rec.progress, token());
	const text = rec.parts.filter(p => p instanceof LanguageModelTextPart).map(p => (p as LanguageModelTextPart).value).join('');
	assert.match(text, /Hello from the demo agent\. You said: hi/);
	assert.deepEqual(fs.readdirSync(markers), [], 'nothing of the workspace was imported');
});
