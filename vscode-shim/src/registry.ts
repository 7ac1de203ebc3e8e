/**
 * Agents from the ACP registry (docs/vscode-shim.md, "Agents from the ACP registry"): the
 * network and disk half. The feed (`registry.json`) is fetched here, over https only (plain
 * http only from 127.0.0.1: a feed served on this machine), and cached in the extension's
 * storage; the daemon reads it (`agents/registry`: which distribution for this platform, the
 * command line that starts it). A `binary` distribution is downloaded here into the
 * extension's storage, checked against the sha256 the registry gives, and unpacked with no
 * entry leaving its folder.
 *
 * Nothing here runs what it installs, and nothing here reads a workspace's settings: the feed
 * URL (`lmbridge.registry.url`) and the installed agents (`lmbridge.agents`) are machine
 * settings (config.ts MACHINE_SETTINGS).
 */
import { createHash, randomBytes } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import * as tar from 'tar';
import { unzipSync } from 'fflate';
import Bunzip from 'seek-bzip';
import type { RegistryAgent } from './wire';

export const DEFAULT_REGISTRY_URL = 'https://cdn.agentclientprotocol.com/registry/v1/latest/registry.json';

/** Bytes: the largest feed read, and the largest archive downloaded or unpacked. */
export const MAX_FEED_BYTES = 8 * 1024 * 1024;
export const MAX_ARCHIVE_BYTES = 1024 * 1024 * 1024;
/** ms: the feed's fetch (a download has no bound: it is as long as the archive). */
export const FEED_TIMEOUT_MS = 20_000;

/** The registry's platform name for this machine (`linux-x86_64`, …), or undefined where it has none. */
export function registryPlatform(platform: string = process.platform, arch: string = process.arch): string | undefined {
	const os = ({ darwin: 'darwin', linux: 'linux', win32: 'windows' } as Record<string, string>)[platform];
	const cpu = ({ x64: 'x86_64', arm64: 'aarch64' } as Record<string, string>)[arch];
	return os && cpu ? `${os}-${cpu}` : undefined;
}

/**
 * The URL, if lmbridge may fetch from it: https, or http to 127.0.0.1 (a feed or an archive
 * served on this machine, as the tests do). Throws an Error saying why not.
 */
export function checkUrl(raw: string, what: string): URL {
	let url: URL;
	try {
		url = new URL(raw);
	} catch {
		throw new Error(`${what} is not a URL: ${JSON.stringify(raw)}`);
	}
	if (url.protocol === 'https:' || (url.protocol === 'http:' && url.hostname === '127.0.0.1')) {
		return url;
	}
	throw new Error(`${what} must be an https URL (plain http only from 127.0.0.1): ${raw}`);
}

export type Fetch = typeof fetch;

/**
 * GET `url` into memory (at most `maxBytes`), or into `file` when given, hashing it (sha256,
 * hex). Redirects are followed, but the final URL must pass `checkUrl` too.
 */
export async function download(url: string, what: string, options: { maxBytes: number; file?: string; timeoutMs?: number; fetchImpl?: Fetch }): Promise<{ body?: Buffer; sha256: string; bytes: number }> {
	checkUrl(url, what);
	const response = await (options.fetchImpl ?? fetch)(url, {
		redirect: 'follow',
		...(options.timeoutMs ? { signal: AbortSignal.timeout(options.timeoutMs) } : {}),
	});
	if (response.url) {
		checkUrl(response.url, `${what} (after a redirect)`);
	}
	if (!response.ok || !response.body) {
		throw new Error(`${what}: HTTP ${response.status} from ${url}`);
	}
	const hash = createHash('sha256');
	const chunks: Buffer[] = [];
	const out = options.file ? fs.createWriteStream(options.file, { mode: 0o600 }) : undefined;
	let bytes = 0;
	try {
		for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
			bytes += chunk.length;
			if (bytes > options.maxBytes) {
				throw new Error(`${what} is larger than ${options.maxBytes} bytes: ${url}`);
			}
			hash.update(chunk);
			if (out) {
				if (!out.write(chunk)) {
					await new Promise<void>(resolve => out.once('drain', () => resolve()));
				}
			} else {
				chunks.push(Buffer.from(chunk));
			}
		}
	} finally {
		if (out) {
			await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
		}
	}
	return { ...(out ? {} : { body: Buffer.concat(chunks) }), sha256: hash.digest('hex'), bytes };
}

// ---------------------------------------------------------------- the feed and its cache

export interface Feed {
	/** The feed as fetched (or as cached): the daemon parses it. */
	feed: unknown;
	from: 'network' | 'cache';
	/** ISO time it was fetched. */
	fetchedAt: string;
	/** Why the network's copy was not used (only with `from: 'cache'`). */
	problem?: string;
}

export function feedCachePath(storageDir: string): string {
	return path.join(storageDir, 'registry', 'registry.json');
}

/**
 * The feed: fetched from `url` and cached in `storageDir`; on failure the copy cached from the
 * same URL; else throws (the caller falls back on the daemon's presets).
 */
export async function loadFeed(url: string, storageDir: string, fetchImpl?: Fetch, now: () => Date = () => new Date()): Promise<Feed> {
	const cache = feedCachePath(storageDir);
	let problem: string;
	try {
		const { body } = await download(url, 'the ACP registry feed', { maxBytes: MAX_FEED_BYTES, timeoutMs: FEED_TIMEOUT_MS, fetchImpl });
		const feed = JSON.parse(body!.toString('utf8')) as unknown;
		if (typeof feed !== 'object' || feed === null || !Array.isArray((feed as { agents?: unknown }).agents)) {
			throw new Error(`the ACP registry feed at ${url} has no "agents" list`);
		}
		const fetchedAt = now().toISOString();
		fs.mkdirSync(path.dirname(cache), { recursive: true });
		const tmp = `${cache}.${process.pid}.tmp`;
		fs.writeFileSync(tmp, JSON.stringify({ url, fetchedAt, feed }));
		fs.renameSync(tmp, cache);
		return { feed, from: 'network', fetchedAt };
	} catch (err) {
		problem = err instanceof Error ? err.message : String(err);
	}
	let cached: { url?: unknown; fetchedAt?: unknown; feed?: unknown } | undefined;
	try {
		cached = JSON.parse(fs.readFileSync(cache, 'utf8'));
	} catch {
		cached = undefined;
	}
	if (cached && cached.url === url && typeof cached.fetchedAt === 'string' && cached.feed !== undefined) {
		return { feed: cached.feed, from: 'cache', fetchedAt: cached.fetchedAt, problem };
	}
	throw new Error(problem);
}

// ---------------------------------------------------------------- installing

/** What an installed registry agent's `lmbridge.agents` entry records of where it came from. */
export interface RegistryMark {
	version: string;
	distribution: RegistryAgent['distribution'];
}

/** An `lmbridge.agents` entry for a registry agent. */
export interface RegistryEntry {
	id: string;
	name: string;
	command: string;
	args: string[];
	env?: Record<string, string>;
	registry: RegistryMark;
}

const ID = /^[a-z][a-z0-9-]*$/;
const VERSION = /^[0-9A-Za-z][0-9A-Za-z.+_-]*$/;

/** Where a registry agent's binary versions are unpacked: `<storage>/agents/<id>`. */
export function agentDir(storageDir: string, id: string): string {
	if (!ID.test(id)) {
		throw new Error(`not a registry agent id: ${JSON.stringify(id)}`);
	}
	return path.join(storageDir, 'agents', id);
}

/**
 * `rel` (an archive's entry, the registry's `cmd`) as a path under `root`, or throws: no
 * absolute path, drive letter or `..` that leaves `root`.
 */
export function inside(root: string, rel: string, what: string): string {
	const normal = rel.replace(/\\/g, '/');
	if (normal === '' || normal.startsWith('/') || /^[A-Za-z]:/.test(normal) || normal.includes('\0')) {
		throw new Error(`${what} is not a relative path: ${JSON.stringify(rel)}`);
	}
	const full = path.resolve(root, normal);
	const back = path.relative(root, full);
	if (back === '..' || back.startsWith(`..${path.sep}`) || path.isAbsolute(back)) {
		throw new Error(`${what} leaves its folder: ${JSON.stringify(rel)}`);
	}
	return full;
}

type ArchiveKind = 'tar.gz' | 'tar.bz2' | 'tar' | 'zip' | 'raw';

/** The archive's format from its URL's name (the registry's: .tar.gz, .tgz, .tar.bz2, .tbz2, .zip, or a raw binary). */
export function archiveKind(url: string): ArchiveKind {
	const name = new URL(url).pathname.toLowerCase();
	if (name.endsWith('.tar.gz') || name.endsWith('.tgz')) {
		return 'tar.gz';
	}
	if (name.endsWith('.tar.bz2') || name.endsWith('.tbz2')) {
		return 'tar.bz2';
	}
	if (name.endsWith('.tar')) {
		return 'tar';
	}
	if (name.endsWith('.zip')) {
		return 'zip';
	}
	for (const installer of ['.dmg', '.pkg', '.deb', '.rpm', '.msi', '.appimage']) {
		if (name.endsWith(installer)) {
			throw new Error(`installers are not supported (the registry does not allow them): ${url}`);
		}
	}
	return 'raw';
}

/**
 * Unpacks a .tar.gz into `dest`, refusing the whole archive when one entry would land outside
 * it (absolute path, `..`, a link pointing out) or is not a file, folder or link.
 */
export async function untar(file: string, dest: string): Promise<void> {
	const problems: string[] = [];
	const links: Array<{ path: string; target: string; hard: boolean }> = [];
	await tar.t({
		file,
		onReadEntry: entry => {
			try {
				const where = inside(dest, entry.path, `the archive's entry ${entry.path}`);
				if (entry.type === 'SymbolicLink') {
					const target = String(entry.linkpath ?? '');
					if (path.isAbsolute(target) || target.replace(/\\/g, '/').startsWith('/')) {
						throw new Error(`the archive's link ${entry.path} points to an absolute path`);
					}
					inside(dest, path.relative(dest, path.resolve(path.dirname(where), target)) || '.', `the archive's link ${entry.path}`);
					links.push({ path: entry.path, target, hard: false });
				} else if (entry.type === 'Link') {
					inside(dest, String(entry.linkpath ?? ''), `the archive's hard link ${entry.path}`);
					links.push({ path: entry.path, target: String(entry.linkpath), hard: true });
				} else if (!['File', 'OldFile', 'ContiguousFile', 'Directory'].includes(entry.type)) {
					throw new Error(`the archive's entry ${entry.path} is a ${entry.type}`);
				}
			} catch (err) {
				problems.push(err instanceof Error ? err.message : String(err));
			}
			entry.resume();
		},
	});
	if (problems.length > 0) {
		throw new Error(`refused the archive: ${problems.slice(0, 3).join('; ')}`);
	}
	// tar itself also refuses absolute paths, `..` and writing through a link (its defaults);
	// strict: any such warning fails the extraction rather than being skipped.
	await tar.x({ file, cwd: dest, strict: true, preservePaths: false, noChmod: false });
}

/** Decompresses a bzip2 file into `out` (a new file), refusing more than `maxBytes` of output. */
export function bunzip(file: string, out: string, maxBytes: number = MAX_ARCHIVE_BYTES): void {
	const fd = fs.openSync(out, 'wx', 0o600);
	const chunk = Buffer.alloc(1 << 20);
	let pos = 0;
	let total = 0;
	try {
		Bunzip.decode(fs.readFileSync(file), {
			writeByte(byte: number) {
				if (++total > maxBytes) {
					throw new Error(`refused the archive: it unpacks to more than ${maxBytes} bytes`);
				}
				chunk[pos++] = byte;
				if (pos === chunk.length) {
					fs.writeSync(fd, chunk, 0, pos);
					pos = 0;
				}
			},
		}, true);
		fs.writeSync(fd, chunk, 0, pos);
	} finally {
		fs.closeSync(fd);
	}
}

/** Unpacks a .zip into `dest` under the same rules as `untar` (a zip holds files and folders only here). */
export function unzip(file: string, dest: string): void {
	let total = 0;
	const files = unzipSync(fs.readFileSync(file), {
		filter: entry => {
			total += entry.originalSize;
			if (total > MAX_ARCHIVE_BYTES) {
				throw new Error(`refused the archive: it unpacks to more than ${MAX_ARCHIVE_BYTES} bytes`);
			}
			return true;
		},
	});
	const targets = Object.keys(files).map(name => ({ name, where: inside(dest, name, `the archive's entry ${name}`) }));
	for (const { name, where } of targets) {
		if (name.endsWith('/')) {
			fs.mkdirSync(where, { recursive: true });
		} else {
			fs.mkdirSync(path.dirname(where), { recursive: true });
			fs.writeFileSync(where, files[name], { flag: 'wx' });
		}
	}
}

export interface InstallDeps {
	storageDir: string;
	fetchImpl?: Fetch;
	/** Progress for the user ("Downloading…"). */
	report?(message: string): void;
}

/** A command line as one string, for the confirmation and the log. */
export function commandLine(command: string, args: string[]): string {
	return [command, ...args].map(a => (/^[\w@%+=:,./-]+$/.test(a) ? a : JSON.stringify(a))).join(' ');
}

/**
 * Installs a registry agent (as `agents/registry` described it) and returns its
 * `lmbridge.agents` entry. `npx` and `uvx`: nothing to download (the package manager fetches
 * the package when the agent starts). `binary`: the archive is downloaded into
 * `<storage>/agents/<id>/`, checked against `sha256` (a mismatch is refused), unpacked into
 * `<id>/<version>/`, and the entry's command is the registry's `cmd` there.
 */
export async function installAgent(agent: RegistryAgent, deps: InstallDeps): Promise<RegistryEntry> {
	const mark: RegistryMark = { version: agent.version, distribution: agent.distribution };
	const env = agent.env && Object.keys(agent.env).length > 0 ? { env: { ...agent.env } } : {};
	if (agent.distribution !== 'binary') {
		if (!agent.command) {
			throw new Error(`the daemon gave no command for ${agent.id}`);
		}
		return { id: agent.id, name: agent.name, command: agent.command, args: [...agent.args], ...env, registry: mark };
	}
	if (!agent.archive || !agent.cmd) {
		throw new Error(`the registry gives no archive for ${agent.id} on this platform`);
	}
	if (!VERSION.test(agent.version)) {
		throw new Error(`not a version: ${JSON.stringify(agent.version)}`);
	}
	const kind = archiveKind(checkUrl(agent.archive, `${agent.name}'s archive`).href);
	const base = agentDir(deps.storageDir, agent.id);
	fs.mkdirSync(base, { recursive: true });
	const work = fs.mkdtempSync(path.join(base, '.partial-'));
	try {
		const archive = path.join(work, `archive-${randomBytes(4).toString('hex')}`);
		deps.report?.(`Downloading ${agent.archive}`);
		const got = await download(agent.archive, `${agent.name}'s archive`, { maxBytes: MAX_ARCHIVE_BYTES, file: archive, fetchImpl: deps.fetchImpl });
		if (agent.sha256 && got.sha256.toLowerCase() !== agent.sha256.toLowerCase()) {
			throw new Error(`${agent.name}'s archive does not match the registry's sha256 (expected ${agent.sha256.toLowerCase()}, got ${got.sha256}): not installed`);
		}
		const root = path.join(work, 'root');
		fs.mkdirSync(root);
		deps.report?.('Unpacking');
		const cmdRel = agent.cmd.replace(/^\.\//, '');
		if (kind === 'tar.gz' || kind === 'tar') {
			await untar(archive, root);
		} else if (kind === 'tar.bz2') {
			bunzip(archive, `${archive}.tar`);
			await untar(`${archive}.tar`, root);
		} else if (kind === 'zip') {
			unzip(archive, root);
		} else {
			fs.copyFileSync(archive, inside(root, cmdRel, `${agent.name}'s command`));
		}
		const cmd = inside(root, cmdRel, `${agent.name}'s command`);
		// It may be a link (bin/agent → ../lib/agent), to a file inside the archive only.
		let target: string | undefined;
		try {
			target = inside(fs.realpathSync(root), path.relative(fs.realpathSync(root), fs.realpathSync(cmd)), `${agent.name}'s command`);
		} catch (err) {
			if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
				throw err;
			}
		}
		const stat = target ? fs.statSync(target) : undefined;
		if (!stat?.isFile()) {
			throw new Error(`${agent.name}'s archive holds no file ${agent.cmd}`);
		}
		fs.chmodSync(target!, stat.mode | 0o755);
		const dest = path.join(base, agent.version);
		fs.rmSync(dest, { recursive: true, force: true });
		fs.renameSync(root, dest);
		return { id: agent.id, name: agent.name, command: path.join(dest, path.relative(root, cmd)), args: [...agent.args], ...env, registry: mark };
	} finally {
		fs.rmSync(work, { recursive: true, force: true });
	}
}

/** Removes the versions of a binary agent other than `keep` (after an update); errors ignored. */
export function removeOtherVersions(storageDir: string, id: string, keep: string): void {
	let base: string;
	try {
		base = agentDir(storageDir, id);
	} catch {
		return;
	}
	for (const name of fs.existsSync(base) ? fs.readdirSync(base) : []) {
		if (name !== keep && !name.startsWith('.partial-')) {
			fs.rmSync(path.join(base, name), { recursive: true, force: true });
		}
	}
}
