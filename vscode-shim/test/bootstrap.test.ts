/** Finding or installing the daemon (src/product/bootstrap.ts): the decisions, and the install with a fake runner. */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { afterEach, describe, test } from 'node:test';
import type * as vscode from 'vscode';
import {
	BUILD_REQUIREMENTS, bundledWheelName, choosePython, daemonSource, DaemonBootstrap, findOnPath, INSTALL_TITLE, MARKER, needsInstall, parsePythonVersion,
	pythonCandidates, REQUIREMENTS, resolveCandidates, Runner, spawnRunner, staleEnvironments, venvName, venvPython, VERSION_SCRIPT, wheelStamp,
} from '../src/product/bootstrap';
import { readSettings } from '../src/product/config';
import { DaemonError } from '../src/chat/daemon';
import { tempDir } from './helpers';
import { MockLogOutputChannel, mock } from './vscode-mock';

afterEach(() => mock.reset());

describe('which daemon', () => {
	const rows: Array<[string, Parameters<typeof daemonSource>[0], string]> = [
		['pythonPath first', { pythonPath: '/venv/bin/python', daemonCommandSet: true, lmbridgeOnPath: true }, 'pythonPath'],
		['then daemon.command, when the user set it', { pythonPath: '', daemonCommandSet: true, lmbridgeOnPath: true }, 'command'],
		['then lmbridge on PATH', { pythonPath: '', daemonCommandSet: false, lmbridgeOnPath: true }, 'path'],
		['else the bundled one', { pythonPath: '', daemonCommandSet: false, lmbridgeOnPath: false }, 'bundled'],
	];
	for (const [name, input, expected] of rows) {
		test(name, () => assert.equal(daemonSource(input), expected));
	}
	test('daemon.command counts as set only when the user set it (inspect), not from its default', () => {
		const cfg = (global?: string) => ({
			get: <T>(key: string) => (key === 'daemon.command' ? global ?? 'lmbridge' : undefined) as T,
			inspect: <T>(key: string) => (key === 'daemon.command' ? { globalValue: global as T | undefined } : undefined),
		});
		assert.equal(readSettings(cfg()).daemonCommandSet, false);
		assert.equal(readSettings(cfg('/opt/lmbridge')).daemonCommandSet, true);
		assert.equal(readSettings(cfg(' ')).daemonCommandSet, false);
		assert.equal(readSettings({ get: <T>() => undefined as T }).daemonCommandSet, false);
	});
});

describe('which Python', () => {
	test('candidates: python3, python; py -3 first on Windows', () => {
		assert.deepEqual(pythonCandidates('linux'), [{ command: 'python3', args: [] }, { command: 'python', args: [] }]);
		assert.deepEqual(pythonCandidates('win32').map(c => [c.command, ...c.args].join(' ')), ['py -3', 'python3', 'python']);
	});
	test('versions', () => {
		assert.deepEqual(parsePythonVersion('3.12.1\n'), [3, 12, 1]);
		assert.deepEqual(parsePythonVersion('Python 3.9'), [3, 9, 0]);
		assert.equal(parsePythonVersion(''), undefined);
	});
	const py3 = { command: 'python3', args: [] };
	const py = { command: 'python', args: [] };
	test('the first 3.11+ wins, and the reason says so', () => {
		assert.deepEqual(choosePython([{ candidate: py3, version: [3, 10, 4] }, { candidate: py, version: [3, 11, 0] }]), {
			python: py, version: [3, 11, 0], reason: 'using python (Python 3.11.0): the first Python 3.11+ on PATH (python3: Python 3.10.4, too old)',
		});
		assert.deepEqual(choosePython([{ candidate: py3, version: [4, 0, 0] }]), { python: py3, version: [4, 0, 0], reason: 'using python3 (Python 4.0.0): the first Python 3.11+ on PATH' });
	});
	test('candidates are looked for by their full path on PATH; those not there are left out', () => {
		const files = new Set(['/usr/bin/python', '/opt/py/bin/python3']);
		assert.deepEqual(resolveCandidates(pythonCandidates('linux'), { PATH: '/opt/py/bin:/usr/bin' }, 'linux', p => files.has(p)),
			[{ command: '/opt/py/bin/python3', args: [] }, { command: '/usr/bin/python', args: [] }]);
		assert.deepEqual(resolveCandidates(pythonCandidates('linux'), { PATH: '/nowhere' }, 'linux', p => files.has(p)), []);
	});
	test('too old: says which was found and what to install', () => {
		const r = choosePython([{ candidate: py3, version: [3, 9, 2] }, { candidate: py, error: 'ENOENT' }]);
		assert.deepEqual(r, {
			problem: 'lmbridge needs Python 3.11 or newer to run its daemon, and found only Python 3.9.2 (python3). '
				+ 'Install Python 3.11 or newer (python.org, or your system\'s package manager) and run "lmbridge: Restart Daemon", '
				+ 'or set "lmbridge.pythonPath" to a Python 3.11+ that has lmbridge installed.',
		});
	});
	test('none: says what was tried', () => {
		const r = choosePython([{ candidate: py3, error: 'ENOENT' }, { candidate: py, error: 'ENOENT' }]);
		assert.match((r as { problem: string }).problem, /and found no Python \(tried python3, python on PATH\)\. Install Python 3\.11 or newer/);
	});
});

describe('PATH, wheel, environment', () => {
	test('findOnPath: the first match, PATHEXT on Windows', () => {
		const files = new Set(['/b/lmbridge', '/c/lmbridge', 'C:\\tools\\lmbridge.EXE']);
		assert.equal(findOnPath('lmbridge', { PATH: '/a:/b:/c' }, 'linux', p => files.has(p)), '/b/lmbridge');
		assert.equal(findOnPath('lmbridge', { PATH: '/a' }, 'linux', p => files.has(p)), undefined);
		assert.equal(findOnPath('lmbridge', { Path: 'C:\\x;C:\\tools', PATHEXT: '.COM;.EXE' }, 'win32', p => files.has(p)), 'C:\\tools\\lmbridge.EXE');
		assert.equal(findOnPath('lmbridge', {}, 'linux', () => true), undefined);
	});
	test('findOnPath: an empty or relative PATH entry (the current folder: perhaps the workspace) is not searched', () => {
		const files = new Set(['python3', 'bin/python3', './python3', '/usr/bin/python3', 'C:\\Python\\python3.EXE']);
		assert.equal(findOnPath('python3', { PATH: ':.:bin:/usr/bin' }, 'linux', p => files.has(p)), '/usr/bin/python3');
		assert.equal(findOnPath('python3', { PATH: '.:bin' }, 'linux', p => files.has(p)), undefined);
		assert.equal(findOnPath('python3', { Path: '.;C:\\Python', PATHEXT: '.EXE' }, 'win32', p => files.has(p)), 'C:\\Python\\python3.EXE');
	});
	test('the bundled wheel', () => {
		assert.equal(bundledWheelName(['README.md', 'lmbridge-0.1.0-py3-none-any.whl']), 'lmbridge-0.1.0-py3-none-any.whl');
		assert.equal(bundledWheelName(['other-1.0-py3-none-any.whl']), undefined);
	});
	test('reinstall when: nothing there, unfinished, another wheel, no python', () => {
		const stamp = wheelStamp('lmbridge-0.1.0-py3-none-any.whl', 'ab'.repeat(32));
		assert.equal(needsInstall(undefined, stamp, false), true);
		assert.equal(needsInstall(undefined, stamp, true), true);
		assert.equal(needsInstall(`${wheelStamp('lmbridge-0.1.0-py3-none-any.whl', 'cd'.repeat(32))}\n`, stamp, true), true);
		assert.equal(needsInstall(`${stamp}\n`, stamp, false), true);
		assert.equal(needsInstall(`${stamp}\n`, stamp, true), false);
	});
	test('one environment per wheel; the others are stale', () => {
		assert.equal(venvName('0123456789abcdef'), 'daemon-0123456789ab');
		assert.deepEqual(staleEnvironments(['daemon-aaa', 'daemon-bbb', 'daemon-bbb.partial-12', 'other'], 'daemon-bbb'), ['daemon-aaa', 'daemon-bbb.partial-12']);
		assert.equal(venvPython('/s/daemon-x', 'linux'), '/s/daemon-x/bin/python');
		assert.equal(venvPython('C:\\s\\daemon-x', 'win32'), 'C:\\s\\daemon-x\\Scripts\\python.exe');
	});
});

/** A fake of python3 (version per test, by its name), `-m venv` (makes bin/python) and `pip install`. */
function fakeRunner(opts: { versions?: Record<string, string | null>; pipFails?: boolean } = {}) {
	const calls: string[][] = [];
	const cwds: Array<string | undefined> = [];
	const run: Runner = async (command, args, options) => {
		calls.push([command, ...args]);
		cwds.push(options?.cwd);
		if (args.at(-2) === '-c' && args.at(-1) === VERSION_SCRIPT) {
			const v = opts.versions?.[path.basename(command)];
			return v ? { code: 0, stdout: `${v}\n`, stderr: '' } : { code: null, stdout: '', stderr: '', error: `spawn ${command} ENOENT` };
		}
		const venv = args.indexOf('venv');
		if (args[venv - 1] === '-m' && venv >= 0) {
			fs.mkdirSync(path.join(args[venv + 1], 'bin'), { recursive: true });
			fs.writeFileSync(path.join(args[venv + 1], 'bin', 'python'), '');
			return { code: 0, stdout: '', stderr: '' };
		}
		if (args.includes('pip')) {
			return opts.pipFails
				? { code: 1, stdout: '', stderr: 'ERROR: Could not find a version that satisfies the requirement mcp==2.3.0' }
				: { code: 0, stdout: 'Successfully installed lmbridge-0.1.0\n', stderr: '' };
		}
		return { code: 127, stdout: '', stderr: 'unexpected' };
	};
	return { run, calls, cwds };
}

describe('DaemonBootstrap', () => {
	const settings = (values: Record<string, unknown> = {}) => readSettings({ get: <T>(k: string) => values[k] as T });
	function setup(opts: Parameters<typeof fakeRunner>[0] & { wheel?: string | null; locks?: boolean; env?: NodeJS.ProcessEnv } = {}) {
		const storageDir = path.join(tempDir(), 'storage');
		const wheelDir = tempDir('wheel-');
		if (opts.wheel !== null) {
			fs.writeFileSync(path.join(wheelDir, 'lmbridge-0.1.0-py3-none-any.whl'), opts.wheel ?? 'wheel one');
		}
		if (opts.locks !== false) {
			fs.writeFileSync(path.join(wheelDir, REQUIREMENTS), 'mcp==2.3.0 \\\n    --hash=sha256:00\n');
			fs.writeFileSync(path.join(wheelDir, BUILD_REQUIREMENTS), 'setuptools==84.2.1 \\\n    --hash=sha256:00\n');
		}
		const log = new MockLogOutputChannel('lmbridge');
		const runner = fakeRunner({ versions: { python3: '3.12.3' }, ...opts });
		// The Pythons the test knows, as files on PATH (the bootstrap runs them by their full path).
		const bin = tempDir('bin-');
		for (const name of Object.keys(opts.versions ?? { python3: '3.12.3' })) {
			fs.writeFileSync(path.join(bin, name), '');
		}
		const progress: Array<{ title: string; messages: string[] }> = [];
		const make = () => new DaemonBootstrap({
			storageDir, wheelDir, log: log as unknown as vscode.LogOutputChannel, run: runner.run, platform: 'linux',
			env: opts.env ?? { PATH: bin },
			withProgress: async (title, task) => {
				const entry = { title, messages: [] as string[] };
				progress.push(entry);
				return task(m => entry.messages.push(m));
			},
		});
		return { storageDir, wheelDir, bin, log, runner, progress, make };
	}

	test('pythonPath, an explicit daemon.command, lmbridge on PATH: used as they are, nothing installed', async () => {
		const bin = tempDir('bin-');
		fs.writeFileSync(path.join(bin, 'lmbridge'), '');
		const { make, runner } = setup({ env: { PATH: bin } });
		const b = make();
		assert.deepEqual((await b.launch(settings({ pythonPath: '/venv/bin/python' }))).command, '/venv/bin/python');
		assert.deepEqual((await b.launch(settings({ 'daemon.command': '/opt/lmbridge' }))).command, '/opt/lmbridge');
		const onPath = await b.launch(settings());
		assert.deepEqual([onPath.command, onPath.args], [path.join(bin, 'lmbridge'), ['serve']]);
		assert.deepEqual(runner.calls, []);
	});

	test('a bare name is run by its full path from PATH\'s absolute folders: never a workspace\'s program found through `.`', async () => {
		const bin = tempDir('bin-');
		const workspace = tempDir('ws-');
		for (const name of ['lmbridge', 'python3']) {
			fs.writeFileSync(path.join(bin, name), '');
			fs.writeFileSync(path.join(workspace, name), '');
		}
		const b = setup({ env: { PATH: `.:${bin}` } }).make();
		assert.equal((await b.launch(settings(), workspace)).command, path.join(bin, 'lmbridge'));
		assert.equal((await b.launch(settings({ 'daemon.command': 'lmbridge' }), workspace)).command, path.join(bin, 'lmbridge'));
		assert.equal((await b.launch(settings({ pythonPath: 'python3' }), workspace)).command, path.join(bin, 'python3'));
	});

	test('not found anywhere: the private environment, made once from the bundled wheel and its hashed locks, under a progress notification', async () => {
		const { make, runner, progress, storageDir, wheelDir, bin, log } = setup();
		const spec = await make().launch(settings({ 'daemon.args': ['serve', '--no-prewarm'], logLevel: 'debug' }), '/work');
		const envs = fs.readdirSync(storageDir);
		assert.equal(envs.length, 1);
		const python = path.join(storageDir, envs[0], 'bin', 'python');
		assert.deepEqual([spec.command, spec.args, spec.cwd, spec.env.LMBRIDGE_LOG_LEVEL], [python, ['-P', '-m', 'lmbridge', 'serve', '--no-prewarm'], '/work', 'debug']);
		const wheel = path.join(wheelDir, 'lmbridge-0.1.0-py3-none-any.whl');
		const partial = `${path.join(storageDir, envs[0])}.partial/bin/python`;
		const pip = '-I -m pip install --disable-pip-version-check --no-input';
		// Every Python isolated (-I) and run in the storage folder, never the workspace; the
		// dependencies only as pinned and hashed (--require-hashes), the wheel without them.
		assert.deepEqual(runner.calls.map(c => c.join(' ').replace(/\.partial-\d+/, '.partial')), [
			`${path.join(bin, 'python3')} -I -c ${VERSION_SCRIPT}`,
			`${path.join(bin, 'python3')} -I -m venv ${path.join(storageDir, envs[0])}.partial`,
			`${partial} ${pip} --require-hashes --only-binary=:all: -r ${path.join(wheelDir, BUILD_REQUIREMENTS)}`,
			`${partial} ${pip} --require-hashes --no-build-isolation -r ${path.join(wheelDir, REQUIREMENTS)}`,
			`${partial} ${pip} --no-deps ${wheel}`,
		]);
		assert.deepEqual(new Set(runner.cwds), new Set([storageDir]));
		assert.deepEqual(progress, [{ title: INSTALL_TITLE, messages: [
			'looking for Python 3.11+…', `using Python 3.12.3 (${path.join(bin, 'python3')})…`, 'creating a Python environment…',
			'installing the build tools it needs (pinned, hashed)…', 'installing its dependencies from PyPI (pinned, hashed)…', 'installing lmbridge…',
		] }]);
		assert.equal(log.matching(`bootstrap: using ${path.join(bin, 'python3')} (Python 3.12.3): the first Python 3.11+ on PATH`).length, 1);
		assert.match(fs.readFileSync(path.join(storageDir, envs[0], MARKER), 'utf8'), /^lmbridge-0\.1\.0-py3-none-any\.whl sha256:[0-9a-f]{64}\n$/);
		assert.equal(log.matching('the lmbridge daemon is installed in').length, 1);

		// The next start (another window, the next session) finds it: nothing runs.
		runner.calls.length = 0;
		assert.equal((await make().launch(settings())).command, python);
		assert.deepEqual(runner.calls, []);
		assert.equal(progress.length, 1);
	});

	test('a new wheel (the extension was updated): a new environment; the old one is removed', async () => {
		const { make, storageDir, wheelDir, runner } = setup();
		const first = (await make().launch(settings())).command;
		fs.writeFileSync(path.join(wheelDir, 'lmbridge-0.1.0-py3-none-any.whl'), 'wheel two');
		runner.calls.length = 0;
		const second = (await make().launch(settings())).command;
		assert.notEqual(second, first);
		assert.equal(runner.calls.length, 5);
		assert.deepEqual(fs.readdirSync(storageDir), [path.basename(path.dirname(path.dirname(second)))]);
	});

	test('new locks, the same wheel: a new environment too', async () => {
		const { make, wheelDir, runner } = setup();
		const first = (await make().launch(settings())).command;
		fs.appendFileSync(path.join(wheelDir, REQUIREMENTS), 'anyio==4.16.0 \\\n    --hash=sha256:11\n');
		runner.calls.length = 0;
		assert.notEqual((await make().launch(settings())).command, first);
		assert.equal(runner.calls.length, 5);
	});

	test('a build without the hashed locks installs nothing unpinned: it says what is missing', async () => {
		const { make, runner } = setup({ locks: false });
		await assert.rejects(make().launch(settings()), /carries no requirements\.txt or build-requirements\.txt \(the pinned, hashed dependencies it installs\)/);
		assert.deepEqual(runner.calls, []);
	});

	test('an unfinished environment (no marker) is rebuilt', async () => {
		const { make, storageDir, runner } = setup();
		const python = (await make().launch(settings())).command;
		fs.rmSync(path.join(storageDir, fs.readdirSync(storageDir)[0], MARKER));
		runner.calls.length = 0;
		assert.equal((await make().launch(settings())).command, python);
		assert.equal(runner.calls.length, 5);
	});

	test('Python too old: a clear error naming the version found, nothing created', async () => {
		const { make, storageDir } = setup({ versions: { python3: '3.9.2', python: '3.10.12' } });
		await assert.rejects(make().launch(settings()), (e: unknown) => {
			assert.ok(e instanceof DaemonError && e.kind === 'spawn');
			assert.match((e as Error).message, /needs Python 3\.11 or newer to run its daemon, and found only Python 3\.9\.2 \(\/\S+\/python3\), Python 3\.10\.12 \(\/\S+\/python\)\. Install Python 3\.11 or newer/);
			return true;
		});
		assert.ok(!fs.existsSync(storageDir) || fs.readdirSync(storageDir).length === 0);
	});

	test('no Python at all; not looked for again until reset() (Restart Daemon), then found', async () => {
		const versions: Record<string, string | null> = {};
		const { make, runner, bin } = setup({ versions });
		const b = make();
		await assert.rejects(b.launch(settings()), /found no Python \(tried python3, python on PATH\)/);
		const calls = runner.calls.length;
		await assert.rejects(b.launch(settings()), /found no Python/);
		assert.equal(runner.calls.length, calls, 'the failure is remembered');
		versions.python3 = '3.13.0'; // the user installed Python
		fs.writeFileSync(path.join(bin, 'python3'), '');
		b.reset();
		assert.match((await b.launch(settings())).command, /daemon-[0-9a-f]+\/bin\/python$/);
	});

	test('pip fails (no network): the error says so, shows pip\'s last words, leaves nothing half-made', async () => {
		const { make, storageDir } = setup({ pipFails: true });
		await assert.rejects(make().launch(settings()), (e: unknown) => {
			assert.match((e as Error).message, /^Could not install the lmbridge daemon \(installing the build tools it needs \(pinned, hashed\)\): exit code 1\. ERROR: Could not find a version that satisfies the requirement mcp==2\.3\.0/);
			return true;
		});
		assert.deepEqual(fs.readdirSync(storageDir), []);
	});

	test('a build without a bundled daemon: how to install one', async () => {
		const { make } = setup({ wheel: null });
		await assert.rejects(make().launch(settings()), /"lmbridge" is not on PATH and this build of the extension carries no daemon\. Install it with `pip install/);
	});
});

describe('spawnRunner', () => {
	test('collects the output, passes each line on, gives the exit code', async () => {
		const lines: string[] = [];
		const r = await spawnRunner(process.execPath, ['-e', 'console.log("3.12.1"); console.error("warn\\nmore"); process.exit(3)'], { onLine: l => lines.push(l) });
		assert.deepEqual([r.code, r.stdout, r.stderr, r.error], [3, '3.12.1\n', 'warn\nmore\n', undefined]);
		assert.deepEqual(lines.sort(), ['3.12.1', 'more', 'warn']);
	});
	test('a missing program: an error, no exception', async () => {
		const r = await spawnRunner('/nonexistent/python3', ['-c', VERSION_SCRIPT]);
		assert.equal(r.code, null);
		assert.match(r.error ?? '', /ENOENT/);
	});
	test('the version script, with this machine\'s python3 when there is one', async (t) => {
		const r = await spawnRunner('python3', ['-c', VERSION_SCRIPT]);
		if (r.code !== 0) {
			t.skip('no python3 here');
			return;
		}
		assert.ok(parsePythonVersion(r.stdout));
	});
});
