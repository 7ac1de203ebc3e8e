/**
 * Which daemon to run, and the one the extension brings along.
 *
 * Order (the first that applies):
 *  1. `lmbridge.pythonPath`: `<pythonPath> -P -m lmbridge serve`;
 *  2. `lmbridge.daemon.command`, when the user set it;
 *  3. `lmbridge` on PATH;
 *  4. a private virtual environment in the extension's global storage, made from the wheel
 *     the vsix carries (`daemon/lmbridge-*.whl`) under a progress notification: created
 *     with the user's Python 3.11+ (the first of `python3`, `python` on PATH, `py -3` first
 *     on Windows; only PATH's absolute folders), then exactly the dependencies the daemon
 *     was tested with: `daemon/requirements.txt`, every package pinned with its sha256
 *     (`make lock`), installed `--require-hashes` (pip refuses any file whose hash differs),
 *     after the hashed build backend of the one that is published only as source
 *     (`daemon/build-requirements.txt`, so nothing unhashed is fetched to build it); then
 *     the wheel itself `--no-deps`. One environment per wheel and locks (named by their
 *     hash): a new extension version gets a new environment; the old ones are removed.
 *
 * Nothing the workspace holds can steer the install: every Python runs with `-I` (no
 * `PYTHON*` variables, no user site, no working directory on `sys.path`), in the
 * extension's storage folder, never the workspace; and the daemon the environment gives is
 * started with `-P` (config.ts launchSpec).
 *
 * The decisions are pure functions (tested in test/bootstrap.test.ts); processes run
 * through an injectable `Runner`, the progress notification through `withProgress`.
 */
import * as cp from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { expandHome, launchSpec, Settings } from './config';
import { DaemonError, LaunchSpec } from '../chat/daemon';

export const MIN_PYTHON = [3, 11] as const;
/** The progress notification's title; VS Code shows it as "<title>: <current step>". */
export const INSTALL_TITLE = 'Installing the lmbridge daemon';
/** Written last into a finished environment: the wheel it was made from. */
export const MARKER = 'lmbridge-wheel.txt';
/** The hashed locks the vsix carries beside the wheel (vscode-shim/Makefile, from ../requirements). */
export const REQUIREMENTS = 'requirements.txt';
export const BUILD_REQUIREMENTS = 'build-requirements.txt';
const VENV_PREFIX = 'daemon-';

// ---------------------------------------------------------------- pure decisions

export type DaemonSource = 'pythonPath' | 'command' | 'path' | 'bundled';

/** Where the daemon comes from, in the order above. */
export function daemonSource(s: { pythonPath: string; daemonCommandSet: boolean; lmbridgeOnPath: boolean }): DaemonSource {
	if (s.pythonPath) {
		return 'pythonPath';
	}
	if (s.daemonCommandSet) {
		return 'command';
	}
	return s.lmbridgeOnPath ? 'path' : 'bundled';
}

export interface Candidate { command: string; args: string[] }

/** The Pythons to try, in order, by name (`resolveCandidates` finds each on PATH). */
export function pythonCandidates(platform: NodeJS.Platform): Candidate[] {
	const plain = [{ command: 'python3', args: [] }, { command: 'python', args: [] }];
	return platform === 'win32' ? [{ command: 'py', args: ['-3'] }, ...plain] : plain;
}

/** Each candidate by its full path on PATH (`findOnPath`), or left out when it is not there. */
export function resolveCandidates(candidates: Candidate[], env: NodeJS.ProcessEnv, platform: NodeJS.Platform, isFile: (p: string) => boolean): Candidate[] {
	return candidates.flatMap(c => {
		const found = findOnPath(c.command, env, platform, isFile);
		return found ? [{ ...c, command: found }] : [];
	});
}

export const VERSION_SCRIPT = 'import sys; print(".".join(map(str, sys.version_info[:3])))';

/** `3.12.1` (the version script's output) → [3, 12, 1]. */
export function parsePythonVersion(output: string): number[] | undefined {
	const m = /(\d+)\.(\d+)(?:\.(\d+))?/.exec(output);
	return m ? [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)] : undefined;
}

export function isSupportedPython(version: number[]): boolean {
	return version[0] > MIN_PYTHON[0] || (version[0] === MIN_PYTHON[0] && version[1] >= MIN_PYTHON[1]);
}

export interface Probe { candidate: Candidate; version?: number[]; error?: string }

const show = (c: Candidate) => [c.command, ...c.args].join(' ');

/** Why that Python: said in the log and the progress notification of the first run. */
export function choiceReason(chosen: Candidate, version: number[], probes: Probe[]): string {
	const skipped = probes.filter(p => p.candidate !== chosen).map(p => `${show(p.candidate)}: ${p.version ? `Python ${p.version.join('.')}, too old` : 'not usable'}`);
	return `using ${show(chosen)} (Python ${version.join('.')}): the first Python ${MIN_PYTHON.join('.')}+ on PATH`
		+ (skipped.length ? ` (${skipped.join('; ')})` : '');
}

/**
 * The first supported Python among the probes (and why, `choiceReason`), or the message
 * telling the user what to install. `tried`: the names looked for on PATH.
 */
export function choosePython(probes: Probe[], tried: Candidate[] = probes.map(p => p.candidate)): { python: Candidate; version: number[]; reason: string } | { problem: string } {
	const good = probes.find(p => p.version && isSupportedPython(p.version));
	if (good) {
		return { python: good.candidate, version: good.version!, reason: choiceReason(good.candidate, good.version!, probes.slice(0, probes.indexOf(good))) };
	}
	const found = probes.filter(p => p.version).map(p => `Python ${p.version!.join('.')} (${show(p.candidate)})`);
	const need = `Python ${MIN_PYTHON.join('.')} or newer`;
	const what = found.length > 0
		? `found only ${found.join(', ')}`
		: `found no Python (tried ${tried.map(show).join(', ')} on PATH)`;
	return {
		problem: `lmbridge needs ${need} to run its daemon, and ${what}. `
			+ `Install ${need} (python.org, or your system's package manager) and run "lmbridge: Restart Daemon", `
			+ 'or set "lmbridge.pythonPath" to a Python 3.11+ that has lmbridge installed.',
	};
}

/**
 * The executable `name` on PATH, or undefined. Only PATH's absolute folders count: an empty
 * or relative entry (`.`, `bin`) would find a program in whatever folder is current.
 */
export function findOnPath(name: string, env: NodeJS.ProcessEnv, platform: NodeJS.Platform, isFile: (p: string) => boolean): string | undefined {
	const { join, isAbsolute } = platform === 'win32' ? path.win32 : path.posix;
	const dirs = (env.PATH ?? env.Path ?? '').split(platform === 'win32' ? ';' : ':').filter(d => d && isAbsolute(d));
	const exts = platform === 'win32' ? (env.PATHEXT ?? '.EXE;.CMD;.BAT').split(';').filter(Boolean) : [''];
	for (const dir of dirs) {
		for (const ext of exts) {
			const candidate = join(dir, name + ext);
			if (isFile(candidate)) {
				return candidate;
			}
		}
	}
	return undefined;
}

/** What identifies a bundled daemon: the wheel's name and the hash of the wheel and its locks. */
export function wheelStamp(wheelName: string, sha256: string): string {
	return `${wheelName} sha256:${sha256}`;
}

/** The pip runs (arguments of the new environment's Python) that fill it, in order. */
export function installSteps(wheelDir: string, wheel: string): Array<{ message: string; args: string[] }> {
	const pip = ['-I', '-m', 'pip', 'install', '--disable-pip-version-check', '--no-input'];
	return [
		{ message: 'installing the build tools it needs (pinned, hashed)…',
			args: [...pip, '--require-hashes', '--only-binary=:all:', '-r', path.join(wheelDir, BUILD_REQUIREMENTS)] },
		{ message: 'installing its dependencies from PyPI (pinned, hashed)…',
			args: [...pip, '--require-hashes', '--no-build-isolation', '-r', path.join(wheelDir, REQUIREMENTS)] },
		{ message: 'installing lmbridge…', args: [...pip, '--no-deps', path.join(wheelDir, wheel)] },
	];
}

/** The environment's folder name for a wheel (a new wheel, a new folder). */
export function venvName(sha256: string): string {
	return `${VENV_PREFIX}${sha256.slice(0, 12)}`;
}

/** Whether the environment has to be (re)built: no marker (missing or unfinished), another wheel, no Python in it. */
export function needsInstall(marker: string | undefined, stamp: string, pythonExists: boolean): boolean {
	return !pythonExists || marker?.trim() !== stamp;
}

/** Environments (and unfinished ones) from other wheels, to remove. */
export function staleEnvironments(entries: string[], current: string): string[] {
	return entries.filter(e => e.startsWith(VENV_PREFIX) && e !== current);
}

export function venvPython(venv: string, platform: NodeJS.Platform): string {
	return platform === 'win32' ? path.win32.join(venv, 'Scripts', 'python.exe') : path.posix.join(venv, 'bin', 'python');
}

/** The bundled wheel among a folder's files: the newest-named `lmbridge-*.whl`. */
export function bundledWheelName(files: string[]): string | undefined {
	return files.filter(f => /^lmbridge-.*\.whl$/.test(f)).sort().pop();
}

// ---------------------------------------------------------------- running processes

export interface RunResult { code: number | null; stdout: string; stderr: string; error?: string }
export type Runner = (command: string, args: string[], options?: { cwd?: string; timeoutMs?: number; onLine?(line: string): void }) => Promise<RunResult>;

/** The real runner: no shell, output collected (and each line passed on, for the log). */
export const spawnRunner: Runner = (command, args, options = {}) => new Promise(resolve => {
	let stdout = '';
	let stderr = '';
	let pending = '';
	const lines = (chunk: string) => {
		pending += chunk;
		let i: number;
		while ((i = pending.indexOf('\n')) >= 0) {
			const line = pending.slice(0, i).replace(/\r$/, '');
			pending = pending.slice(i + 1);
			if (line.trim()) {
				options.onLine?.(line);
			}
		}
	};
	let proc: cp.ChildProcess;
	try {
		proc = cp.spawn(command, args, { cwd: options.cwd, windowsHide: true, stdio: ['ignore', 'pipe', 'pipe'] });
	} catch (err) {
		resolve({ code: null, stdout, stderr, error: err instanceof Error ? err.message : String(err) });
		return;
	}
	const timer = options.timeoutMs ? setTimeout(() => proc.kill('SIGKILL'), options.timeoutMs) : undefined;
	proc.stdout?.setEncoding('utf8').on('data', (c: string) => { stdout += c; lines(c); });
	proc.stderr?.setEncoding('utf8').on('data', (c: string) => { stderr += c; lines(c); });
	proc.once('error', err => { clearTimeout(timer); resolve({ code: null, stdout, stderr, error: err.message }); });
	proc.once('close', code => { clearTimeout(timer); resolve({ code, stdout, stderr }); });
});

// ---------------------------------------------------------------- the bootstrap

export interface BootstrapDeps {
	/** The extension's global storage folder (context.globalStorageUri.fsPath). */
	storageDir: string;
	/** Where the vsix keeps the wheel (<extension>/daemon). */
	wheelDir: string;
	log: vscode.LogOutputChannel;
	run?: Runner;
	platform?: NodeJS.Platform;
	env?: NodeJS.ProcessEnv;
	/** Runs the installation under a progress notification. */
	withProgress?<T>(title: string, task: (report: (message: string) => void) => Promise<T>): Promise<T>;
}

const defaultProgress = <T>(title: string, task: (report: (message: string) => void) => Promise<T>): Promise<T> =>
	Promise.resolve(vscode.window.withProgress(
		{ location: vscode.ProgressLocation.Notification, title, cancellable: false },
		progress => task(message => progress.report({ message })),
	));

const INSTALL_TIMEOUT_MS = 10 * 60_000;

export class DaemonBootstrap {
	private readonly run: Runner;
	private readonly platform: NodeJS.Platform;
	private readonly env: NodeJS.ProcessEnv;
	/** The last install failure: not retried on every request (pip, the network), only after reset(). */
	private failure: Error | undefined;

	constructor(private readonly deps: BootstrapDeps) {
		this.run = deps.run ?? spawnRunner;
		this.platform = deps.platform ?? process.platform;
		this.env = deps.env ?? process.env;
	}

	/** How to start the daemon with these settings; builds the private environment when needed. */
	async launch(settings: Settings, cwd?: string): Promise<LaunchSpec> {
		const isFile = (p: string) => { try { return fs.statSync(p).isFile(); } catch { return false; } };
		// A bare name is looked up here, in PATH's absolute folders only, and run by its full
		// path: the daemon runs in the workspace folder, where a relative PATH entry (`.`)
		// would find the workspace's own `lmbridge` or `python3`.
		const resolve = (command: string) => (/[\\/]/.test(command) ? command : findOnPath(command, this.env, this.platform, isFile) ?? command);
		const onPath = settings.pythonPath || settings.daemonCommandSet ? undefined : findOnPath(settings.daemonCommand, this.env, this.platform, isFile);
		const source = daemonSource({ pythonPath: settings.pythonPath, daemonCommandSet: settings.daemonCommandSet, lmbridgeOnPath: !!onPath });
		if (source === 'pythonPath') {
			return launchSpec({ ...settings, pythonPath: resolve(expandHome(settings.pythonPath)) }, cwd);
		}
		if (source === 'command' || source === 'path') {
			return launchSpec({ ...settings, daemonCommand: onPath ?? resolve(expandHome(settings.daemonCommand)) }, cwd);
		}
		if (this.failure) {
			throw this.failure;
		}
		try {
			const python = await this.ensureEnvironment();
			return launchSpec({ ...settings, pythonPath: python }, cwd);
		} catch (err) {
			this.failure = err instanceof Error ? err : new Error(String(err));
			throw err;
		}
	}

	/** Try the install again on the next start ("lmbridge: Restart Daemon", a settings change). */
	reset(): void {
		this.failure = undefined;
	}

	/** The private environment's Python, built from the bundled wheel if it is not there yet. */
	async ensureEnvironment(): Promise<string> {
		let files: string[] = [];
		try {
			files = fs.readdirSync(this.deps.wheelDir);
		} catch { /* no bundled daemon */ }
		const wheel = bundledWheelName(files);
		if (!wheel) {
			throw new DaemonError('spawn', 'Could not start the lmbridge daemon: "lmbridge" is not on PATH and this build of the extension carries no daemon. '
				+ 'Install it with `pip install <path to the lmbridge repository>` (into a Python 3.11+ environment) and put `lmbridge` on PATH, '
				+ 'or set "lmbridge.daemon.command" to its full path, or "lmbridge.pythonPath" to that environment\'s python.');
		}
		const locks = [REQUIREMENTS, BUILD_REQUIREMENTS].map(name => path.join(this.deps.wheelDir, name));
		const missing = locks.filter(file => !fs.existsSync(file));
		if (missing.length) {
			throw new DaemonError('spawn', `Could not install the lmbridge daemon: this build of the extension carries no ${missing.map(f => path.basename(f)).join(' or ')} `
				+ '(the pinned, hashed dependencies it installs). Rebuild it with `make vsix`, or install the daemon yourself and set "lmbridge.pythonPath".');
		}
		const wheelPath = path.join(this.deps.wheelDir, wheel);
		const hash = crypto.createHash('sha256');
		for (const file of [wheelPath, ...locks]) {
			hash.update(fs.readFileSync(file));
		}
		const sha = hash.digest('hex');
		const stamp = wheelStamp(wheel, sha);
		const name = venvName(sha);
		const venv = path.join(this.deps.storageDir, name);
		const python = venvPython(venv, this.platform);
		if (!needsInstall(readText(path.join(venv, MARKER)), stamp, fs.existsSync(python))) {
			return python;
		}
		const started = Date.now();
		await (this.deps.withProgress ?? defaultProgress)(INSTALL_TITLE, report => this.install(wheel, stamp, venv, report));
		this.deps.log.info(`the lmbridge daemon is installed in ${venv} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
		this.removeStale(name);
		return python;
	}

	private async install(wheel: string, stamp: string, venv: string, report: (message: string) => void): Promise<void> {
		const log = this.deps.log;
		// Every run happens in the storage folder, never the workspace (or wherever VS Code started).
		fs.mkdirSync(this.deps.storageDir, { recursive: true });
		const cwd = this.deps.storageDir;
		report('looking for Python 3.11+…');
		const isFile = (p: string) => { try { return fs.statSync(p).isFile(); } catch { return false; } };
		const named = pythonCandidates(this.platform);
		const probes: Probe[] = [];
		for (const candidate of resolveCandidates(named, this.env, this.platform, isFile)) {
			const r = await this.run(candidate.command, [...candidate.args, '-I', '-c', VERSION_SCRIPT], { cwd, timeoutMs: 30_000 });
			const version = r.code === 0 ? parsePythonVersion(r.stdout) : undefined;
			probes.push({ candidate, version, error: version ? undefined : r.error ?? r.stderr.trim().split('\n').pop() });
			log.info(`bootstrap: ${show(candidate)}: ${version ? `Python ${version.join('.')}` : `not usable (${r.error ?? `exit ${r.code}`})`}`);
			if (version && isSupportedPython(version)) {
				break;
			}
		}
		const chosen = choosePython(probes, named);
		if ('problem' in chosen) {
			throw new DaemonError('spawn', chosen.problem);
		}
		log.info(`bootstrap: ${chosen.reason}`);
		report(`using Python ${chosen.version.join('.')} (${show(chosen.python)})…`);
		// Built beside its final place, then renamed: an unfinished one is never taken for done.
		const partial = `${venv}.partial-${process.pid}`;
		fs.rmSync(partial, { recursive: true, force: true });
		const step = async (message: string, command: string, args: string[]) => {
			report(message);
			log.info(`bootstrap: ${[command, ...args].join(' ')}`);
			const r = await this.run(command, args, { cwd, timeoutMs: INSTALL_TIMEOUT_MS, onLine: line => log.info(`[bootstrap] ${line}`) });
			if (r.code !== 0) {
				const tail = (r.stderr || r.stdout).trim().split('\n').slice(-3).join('\n');
				fs.rmSync(partial, { recursive: true, force: true });
				throw new DaemonError('spawn', `Could not install the lmbridge daemon (${message.replace(/…$/, '')}): ${r.error ?? `exit code ${r.code}`}. `
					+ `${tail ? `${tail}\n` : ''}See the "lmbridge" output for the details.`);
			}
		};
		await step('creating a Python environment…', chosen.python.command, [...chosen.python.args, '-I', '-m', 'venv', partial]);
		for (const { message, args } of installSteps(this.deps.wheelDir, wheel)) {
			await step(message, venvPython(partial, this.platform), args);
		}
		fs.writeFileSync(path.join(partial, MARKER), `${stamp}\n`);
		fs.rmSync(venv, { recursive: true, force: true });
		try {
			fs.renameSync(partial, venv);
		} catch (err) {
			// Another window finished first: use its environment when it is complete.
			fs.rmSync(partial, { recursive: true, force: true });
			if (readText(path.join(venv, MARKER))?.trim() !== stamp) {
				throw err;
			}
		}
	}

	private removeStale(current: string): void {
		let entries: string[] = [];
		try {
			entries = fs.readdirSync(this.deps.storageDir);
		} catch {
			return;
		}
		for (const stale of staleEnvironments(entries, current)) {
			if (/\.partial-\d+$/.test(stale)) {
				continue; // perhaps another window's, still being built
			}
			this.deps.log.info(`bootstrap: removing ${stale}, made from another wheel`);
			fs.rmSync(path.join(this.deps.storageDir, stale), { recursive: true, force: true });
		}
	}
}

function readText(file: string): string | undefined {
	try {
		return fs.readFileSync(file, 'utf8');
	} catch {
		return undefined;
	}
}
