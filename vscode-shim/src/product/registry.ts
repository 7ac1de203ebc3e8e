/**
 * Agents from the ACP registry (docs/vscode-shim.md, "Agents from the ACP registry"): the
 * network and disk half. The feed (`registry.json`) is fetched here, over https only (plain
 * http only from 127.0.0.1: a feed served on this machine), and cached in the extension's
 * storage; the daemon reads it (`agents/registry`: which distribution for this platform, the
 * command line that starts it). A `binary` distribution is downloaded here into the
 * extension's storage, checked against the sha256 the registry gives, and unpacked with no
 * entry or link (followed link by link) leaving its folder, and no more than
 * `UNPACK_LIMITS` written.
 *
 * What a registry entry may not do is refused here as in the daemon (core/registry.py, the
 * same rules, both tested against tests/fixtures/registry_rules.json): a package that is not
 * a plain npm or PyPI package spec (an option such as `--call=CMD`), a command that is not a
 * plain name, a control or format character in what the install dialog shows, an
 * environment variable a package manager, loader or interpreter reads, a URL that is not
 * what it seems (a user name, a backslash: docs/vscode-shim.md, "What the registry may not do").
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
import type { RegistryAgent } from '../chat/wire';

export const DEFAULT_REGISTRY_URL = 'https://cdn.agentclientprotocol.com/registry/v1/latest/registry.json';

/** Bytes: the largest feed read, and the largest archive downloaded (or a .tar.bz2's decompressed .tar). */
export const MAX_FEED_BYTES = 8 * 1024 * 1024;
export const MAX_ARCHIVE_BYTES = 1024 * 1024 * 1024;
/** What unpacking an archive may write at most: bytes of its files, and entries. */
export interface UnpackLimits {
	maxBytes: number;
	maxEntries: number;
}
export const UNPACK_LIMITS: UnpackLimits = { maxBytes: 1024 * 1024 * 1024, maxEntries: 100_000 };
/** ms: the feed's fetch (a download has no bound: it is as long as the archive). */
export const FEED_TIMEOUT_MS = 20_000;

/** The registry's platform name for this machine (`linux-x86_64`, …), or undefined where it has none. */
export function registryPlatform(platform: string = process.platform, arch: string = process.arch): string | undefined {
	const os = ({ darwin: 'darwin', linux: 'linux', win32: 'windows' } as Record<string, string>)[platform];
	const cpu = ({ x64: 'x86_64', arm64: 'aarch64' } as Record<string, string>)[arch];
	return os && cpu ? `${os}-${cpu}` : undefined;
}

// ---------------------------------------------------------------- what a registry entry may not do

const NPM_PART = '[a-z0-9][a-z0-9._~-]*';
const PY_NAME = '[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?';
const PY_VERSION = '[A-Za-z0-9][A-Za-z0-9.+!*_-]*';
const PY_OP = '(?:===|==|!=|<=|>=|~=|<|>)';

/**
 * A package spec each package manager reads as a package of its registry and nothing else:
 * npm `[@scope/]name[@version|@tag|@range]` (lower case), PyPI `name[extras][@version|<op>version,…]`.
 * No leading `-` (an option: `--call=CMD`, `--with=PKG`), whitespace, `:`, `/` outside an
 * npm scope, `#` or `\`: no URL, path, git, `github:` or `npm:` alias spec, no `user/repo`.
 */
export const PACKAGE_GRAMMAR: Record<'npx' | 'uvx', RegExp> = {
	npx: new RegExp(`^(?:@${NPM_PART}/)?${NPM_PART}(?:@[A-Za-z0-9^~<>=*][A-Za-z0-9.+_^~<>=*-]*)?$`),
	uvx: new RegExp(`^${PY_NAME}(?:\\[${PY_NAME}(?:,${PY_NAME})*\\])?(?:@${PY_VERSION}|${PY_OP}${PY_VERSION}(?:,${PY_OP}${PY_VERSION})*)?$`),
};
/** npm reads a spec ending so as a file to install, uv as a local archive. */
export const ARCHIVE_ENDINGS = ['.tgz', '.tar', '.gz', '.bz2', '.xz', '.zip', '.whl', '.egg'];
/** The command a package runs (`npx --package P <cmd>`, which npx runs through a shell unquoted; `uvx --from P <cmd>`). */
export const COMMAND_GRAMMAR = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
/** A binary's `cmd`: a relative path of plain names (`./bin/agent`, `agent.exe`). */
export const BINARY_CMD_GRAMMAR = /^(?:\.\/)?[A-Za-z0-9_.][A-Za-z0-9._+-]*(?:\/[A-Za-z0-9_.][A-Za-z0-9._+-]*)*$/;
export const ENV_NAME_GRAMMAR = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Variables a registry entry may not set, by why (compared in upper case: npm reads
 * `npm_config_*` in any case, curl and pip `https_proxy`): each changes what a package
 * manager fetches, where configuration is read, which certificates are trusted, or what a
 * loader or interpreter runs before the agent. `[names, prefixes]`: the daemon's table
 * (core/registry.py REFUSED_ENV); both are checked against tests/fixtures/registry_rules.json.
 */
export const REFUSED_ENV: Record<string, [string, string]> = {
	'where programs and configuration are found': [
		'PATH PATHEXT HOME USERPROFILE APPDATA LOCALAPPDATA COMSPEC SHELL TMPDIR TEMP TMP '
		+ 'XDG_CONFIG_HOME XDG_CONFIG_DIRS XDG_DATA_HOME XDG_DATA_DIRS XDG_CACHE_HOME XDG_RUNTIME_DIR',
		'',
	],
	'shells, and the programs tools start': [
		'BASH_ENV ENV SHELLOPTS BASHOPTS PS4 IFS CDPATH PROMPT_COMMAND EDITOR VISUAL PAGER BROWSER LESSOPEN LESSCLOSE SSH_ASKPASS SUDO_ASKPASS',
		'BASH_FUNC_',
	],
	'the network: proxies, trusted certificates, name resolution': [
		'HTTP_PROXY HTTPS_PROXY ALL_PROXY NO_PROXY FTP_PROXY REQUESTS_CA_BUNDLE CURL_CA_BUNDLE HOSTALIASES RES_OPTIONS LOCALDOMAIN SSLKEYLOGFILE',
		'SSL_ OPENSSL_',
	],
	'package managers (npm_config_registry, npm_config_userconfig, UV_INDEX_URL, PIP_INDEX_URL, git\'s GIT_SSH_COMMAND)': [
		'GOFLAGS GOPROXY GOPATH GOTOOLCHAIN',
		'NPM_ NODE_ YARN_ PNPM_ COREPACK_ BUN_ DENO_ PYTHON PIP_ PIPX_ UV_ VIRTUAL_ENV CONDA CARGO_ GEM_ BUNDLE_ GIT_',
	],
	'loaders, runtimes and their hooks (LD_PRELOAD, NODE_OPTIONS, PYTHONPATH)': [
		'GCONV_PATH GLIBC_TUNABLES LOCPATH NLSPATH CLASSPATH JAVA_TOOL_OPTIONS _JAVA_OPTIONS JDK_JAVA_OPTIONS PERLLIB',
		'LD_ DYLD_ MALLOC_ DOTNET_ CORECLR_ COMPLUS_ ELECTRON_ RUBY PERL5',
	],
	'compilers an install may run (native npm modules, source distributions)': [
		'CC CXX CPP LD CFLAGS CXXFLAGS CPPFLAGS LDFLAGS MAKEFLAGS RUSTC_WRAPPER RUSTFLAGS',
		'',
	],
	'lmbridge\'s own (the MCP relay an agent starts reads them)': ['', 'LMBRIDGE_'],
};
const words = (text: string) => text.split(' ').filter(Boolean);
export const REFUSED_ENV_NAMES: ReadonlySet<string> = new Set(Object.values(REFUSED_ENV).flatMap(([names]) => words(names)));
export const REFUSED_ENV_PREFIXES: readonly string[] = Object.values(REFUSED_ENV).flatMap(([, prefixes]) => words(prefixes));

const UNSEEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Co}\p{Cs}]/u;

/** Whether `text` shows as it is: no control, format (bidi, zero-width), line or paragraph separator, private-use or surrogate character. */
export function plainText(text: string): boolean {
	return !UNSEEN.test(text);
}

/** Whether `spec` is a plain package spec of npm (`npx`) or PyPI (`uvx`): `PACKAGE_GRAMMAR`. */
export function packageAllowed(kind: 'npx' | 'uvx', spec: string): boolean {
	return PACKAGE_GRAMMAR[kind].test(spec) && !ARCHIVE_ENDINGS.some(end => spec.toLowerCase().endsWith(end));
}

/** Whether `cmd` is a plain command name: `COMMAND_GRAMMAR`. */
export function commandAllowed(cmd: string): boolean {
	return COMMAND_GRAMMAR.test(cmd);
}

/** Whether `cmd` (`./bin/agent`) is a plain relative path that stays in its folder: `BINARY_CMD_GRAMMAR`, no `..`. */
export function binaryCmdAllowed(cmd: string): boolean {
	const parts = cmd.split('/');
	return BINARY_CMD_GRAMMAR.test(cmd) && !parts.includes('..') && parts.some(p => p !== '' && p !== '.');
}

/** Whether a registry entry may not set the variable `name` (not a plain name, or a refused one, in any case). */
export function envRefused(name: string): boolean {
	const upper = name.toUpperCase();
	return !ENV_NAME_GRAMMAR.test(name) || REFUSED_ENV_NAMES.has(upper) || REFUSED_ENV_PREFIXES.some(prefix => upper.startsWith(prefix));
}

const LABEL = '[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?';
const PCHAR = "(?:[A-Za-z0-9\\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})";
/**
 * A URL lmbridge fetches: `scheme://host[:port][/path][?query]` and nothing more: no user
 * name (`http://evil@127.0.0.1`), no backslash (`http://evil\@127.0.0.1/` is host `evil` to
 * `URL`, `127.0.0.1` to Python's urllib), no fragment, whitespace, non-ASCII or IPv6 literal.
 */
export const URL_GRAMMAR = new RegExp(`^(https|http)://(${LABEL}(?:\\.${LABEL})*)(?::([1-9][0-9]{0,4}))?((?:/${PCHAR}*)*)(?:\\?(?:${PCHAR}|[/?])*)?$`);
const IPV4_PART = '(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])';
const IPV4 = new RegExp(`^${IPV4_PART}(?:\\.${IPV4_PART}){3}$`);
const NUMBER = /^(?:[0-9]+|0[xX][0-9A-Fa-f]*)$/;

/**
 * The URL, if lmbridge may fetch from it: `URL_GRAMMAR`, https, or plain http to 127.0.0.1
 * (a feed or an archive served on this machine, as the tests do); a host whose last label
 * is a number only as a dotted-decimal IPv4 address (`URL` reads `0x7f.1` and `2130706433`
 * as 127.0.0.1); and `URL` must read the host the grammar read. The daemon's rule
 * (core/registry.py `url_allowed`). Throws an Error saying why not.
 */
export function checkUrl(raw: string, what: string): URL {
	const m = URL_GRAMMAR.exec(raw);
	const host = m?.[2] ?? '';
	if (!m || (m[3] !== undefined && Number(m[3]) > 65535) || (NUMBER.test(host.split('.').at(-1)!) && !IPV4.test(host))) {
		throw new Error(`${what} is not a URL lmbridge accepts (https://host/path, with no user name, backslash, space, fragment or numeric host): ${JSON.stringify(raw)}`);
	}
	if (m[1] !== 'https' && host !== '127.0.0.1') {
		throw new Error(`${what} must be an https URL (plain http only from 127.0.0.1): ${raw}`);
	}
	let url: URL;
	try {
		url = new URL(raw);
	} catch {
		throw new Error(`${what} is not a URL: ${JSON.stringify(raw)}`);
	}
	if (url.hostname !== host.toLowerCase()) {
		throw new Error(`${what} is not what it seems (its host reads as ${url.hostname}, not ${host}): ${raw}`);
	}
	return url;
}

/** A URL a download was redirected to (not shown to the user, nor read by the daemon): https, or http to 127.0.0.1; no user name. */
function checkRedirect(raw: string, what: string): void {
	const url = new URL(raw);
	if (url.username || url.password || !(url.protocol === 'https:' || (url.protocol === 'http:' && url.hostname === '127.0.0.1'))) {
		throw new Error(`${what} must be an https URL (plain http only from 127.0.0.1), with no user name: ${raw}`);
	}
}

/**
 * Why the daemon's description of a registry agent is refused, or undefined: the rules above
 * applied to what will run (the command line, the archive and its `cmd`, the environment)
 * and to what the install dialog shows.
 */
export function registryRefusal(agent: RegistryAgent): string | undefined {
	if (!ID.test(agent.id)) {
		return `its id ${JSON.stringify(agent.id)} is not a registry id`;
	}
	if (!plainText(agent.name) || !plainText(agent.version)) {
		return `its name or version ${JSON.stringify(`${agent.name} ${agent.version}`)} holds a control or format character`;
	}
	const bad = agent.args.find(a => typeof a !== 'string' || !plainText(a));
	if (bad !== undefined) {
		return `its argument ${JSON.stringify(bad)} holds a control or format character`;
	}
	for (const [name, value] of Object.entries(agent.env ?? {})) {
		if (envRefused(name)) {
			return `its env sets ${JSON.stringify(name)}, which a registry entry may not set (a package manager, loader or interpreter reads it)`;
		}
		if (typeof value !== 'string' || !plainText(value)) {
			return `its env value of ${name} holds a control or format character`;
		}
	}
	const a = agent.args;
	if (agent.distribution === 'npx') {
		const withCmd = a[0] === '-y' && a[1] === '--package';
		const [pkg, cmd] = withCmd ? [a[2], a[3]] : [a[1], undefined];
		if (agent.command !== 'npx' || a[0] !== '-y' || !packageAllowed('npx', pkg ?? '') || (withCmd && !commandAllowed(cmd ?? ''))) {
			return `its command line is not npx -y <npm package> or npx -y --package <npm package> <command>: ${commandLine(agent.command ?? '', a)}`;
		}
	} else if (agent.distribution === 'uvx') {
		const withCmd = a[0] === '--from';
		const [pkg, cmd] = withCmd ? [a[1], a[2]] : [a[0], undefined];
		if (agent.command !== 'uvx' || !packageAllowed('uvx', pkg ?? '') || (withCmd && !commandAllowed(cmd ?? ''))) {
			return `its command line is not uvx <PyPI package> or uvx --from <PyPI package> <command>: ${commandLine(agent.command ?? '', a)}`;
		}
	} else {
		try {
			checkUrl(agent.archive ?? '', 'its archive');
		} catch (err) {
			return (err as Error).message;
		}
		if (!binaryCmdAllowed(agent.cmd ?? '')) {
			return `its cmd ${JSON.stringify(agent.cmd)} is not a relative path inside the archive`;
		}
		if (agent.sha256 !== undefined && !/^[0-9A-Fa-f]{64}$/.test(agent.sha256)) {
			return `its sha256 ${JSON.stringify(agent.sha256)} is not one`;
		}
	}
	return undefined;
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
		checkRedirect(response.url, `${what} (after a redirect)`);
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

/** One entry of an archive, as its listing gives it. */
export interface ArchiveEntry {
	path: string;
	type: string;
	linkpath?: string;
}

/** A path's names: `/` and `\\` both separate (as on Windows), `''` and `.` are dropped, `..` kept. */
function names(p: string): string[] {
	return p.split(/[\\/]/).filter(n => n !== '' && n !== '.');
}

const absolute = (target: string) => /^[\\/]/.test(target) || /^[A-Za-z]:/.test(target);

/** Links followed at most while resolving one path (a loop is refused). */
const MAX_LINK_HOPS = 40;

/**
 * Why the archive's links would reach outside its folder once unpacked, if they would: each
 * symbolic link is resolved as the system will, following the archive's other links name
 * by name (a chain `b -> c/d`, `c/d -> ..`, `a -> b/../x` in which each link alone stays
 * inside), and so is each hard link's target; an entry written through a link is refused
 * too. Pure: the archive's listing in, problems out.
 */
export function linkProblems(entries: ArchiveEntry[]): string[] {
	const links = new Map<string, string>();
	for (const e of entries) {
		if (e.type === 'SymbolicLink') {
			links.set(names(e.path).join('/'), String(e.linkpath ?? ''));
		}
	}
	/** The names `queue` reaches from the folder `stack` once every link is followed; a string: why it leaves. */
	const resolve = (stack: string[], queue: string[]): string[] | string => {
		let hops = 0;
		stack = [...stack];
		queue = [...queue];
		while (queue.length > 0) {
			const next = queue.shift()!;
			if (next === '..') {
				if (stack.length === 0) {
					return 'leaves its folder';
				}
				stack.pop();
				continue;
			}
			stack.push(next);
			const target = links.get(stack.join('/'));
			if (target !== undefined) {
				if (++hops > MAX_LINK_HOPS) {
					return 'is a loop of links';
				}
				if (absolute(target)) {
					return 'points to an absolute path';
				}
				stack.pop();
				queue = [...names(target), ...queue];
			}
		}
		return stack;
	};
	const problems: string[] = [];
	for (const e of entries) {
		const own = names(e.path);
		const through = own.slice(0, -1).findIndex((_, i) => links.has(own.slice(0, i + 1).join('/')));
		if (through >= 0) {
			problems.push(`the archive's entry ${e.path} is written through its link ${own.slice(0, through + 1).join('/')}`);
			continue;
		}
		const target = String(e.linkpath ?? '');
		const why = e.type === 'SymbolicLink' ? (absolute(target) ? 'points to an absolute path' : resolve(own.slice(0, -1), names(target)))
			: e.type === 'Link' ? (absolute(target) ? 'points to an absolute path' : resolve([], names(target)))
				: [];
		if (typeof why === 'string') {
			problems.push(`the archive's ${e.type === 'Link' ? 'hard link' : 'link'} ${e.path} ${why}${e.type === 'SymbolicLink' ? ` (through ${target})` : ''}`);
		}
	}
	return problems;
}

/**
 * The entries of a tar (gzip-compressed or not), refusing it as soon as its files add up to
 * more than `limits.maxBytes` or it lists more than `limits.maxEntries` entries: the
 * listing stops there, nothing more is decompressed.
 */
async function listTar(file: string, limits: UnpackLimits): Promise<{ entries: ArchiveEntry[]; bytes: number }> {
	const entries: ArchiveEntry[] = [];
	let bytes = 0;
	let aborted = false;
	await new Promise<void>((resolve, reject) => {
		const parser = new tar.Parser({
			strict: true,
			onReadEntry: entry => {
				entries.push({ path: entry.path, type: entry.type, ...(entry.linkpath !== undefined ? { linkpath: entry.linkpath } : {}) });
				bytes += entry.size ?? 0;
				if (bytes > limits.maxBytes || entries.length > limits.maxEntries) {
					aborted = true;
					parser.abort(new Error(bytes > limits.maxBytes
						? `refused the archive: it unpacks to more than ${limits.maxBytes} bytes`
						: `refused the archive: it holds more than ${limits.maxEntries} entries`));
				}
				entry.resume();
			},
		});
		parser.on('error', reject);
		parser.on('end', () => resolve());
		const input = fs.createReadStream(file);
		input.on('error', reject);
		input.on('data', chunk => {
			if (aborted) {
				input.destroy();
			} else if (!parser.write(chunk as Buffer)) {
				input.pause();
				parser.once('drain', () => input.resume());
			}
		});
		input.on('end', () => aborted || parser.end());
	});
	return { entries, bytes };
}

/**
 * Unpacks a tar (.tar.gz or .tar) into `dest`, refusing the whole archive when one entry
 * would land outside it (absolute path, `..`, a link that leads out, also through other
 * links), is not a file, folder or link, or when its files add up to more than
 * `limits.maxBytes` (or it has more than `limits.maxEntries` entries): nothing is written then.
 */
export async function untar(file: string, dest: string, limits: UnpackLimits = UNPACK_LIMITS): Promise<void> {
	const { entries } = await listTar(file, limits);
	const problems: string[] = [];
	for (const entry of entries) {
		try {
			inside(dest, entry.path, `the archive's entry ${entry.path}`);
			if (entry.type === 'SymbolicLink') {
				const target = String(entry.linkpath ?? '');
				if (absolute(target)) {
					throw new Error(`the archive's link ${entry.path} points to an absolute path`);
				}
				inside(dest, path.relative(dest, path.resolve(path.dirname(path.resolve(dest, entry.path)), target)) || '.', `the archive's link ${entry.path}`);
			} else if (entry.type === 'Link') {
				inside(dest, String(entry.linkpath ?? ''), `the archive's hard link ${entry.path}`);
			} else if (!['File', 'OldFile', 'ContiguousFile', 'Directory'].includes(entry.type)) {
				throw new Error(`the archive's entry ${entry.path} is a ${entry.type}`);
			}
		} catch (err) {
			problems.push(err instanceof Error ? err.message : String(err));
		}
	}
	problems.push(...linkProblems(entries));
	if (problems.length > 0) {
		throw new Error(`refused the archive: ${problems.slice(0, 3).join('; ')}`);
	}
	// tar itself also refuses absolute paths, `..` and writing through a link (its defaults);
	// strict: any such warning fails the extraction rather than being skipped. The bytes
	// written are counted again as they are: what was listed is what is written.
	let written = 0;
	await tar.x({
		file, cwd: dest, strict: true, preservePaths: false, noChmod: false,
		filter: (_path, entry) => (written += (entry as tar.ReadEntry).size ?? 0) <= limits.maxBytes,
	});
	if (written > limits.maxBytes) {
		throw new Error(`refused the archive: it unpacks to more than ${limits.maxBytes} bytes`);
	}
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

/**
 * Unpacks a .zip into `dest` under the same rules as `untar` (a zip holds files and folders
 * only here). Its files' sizes are those its directory declares (fflate writes no more than
 * that of each), refused above `limits.maxBytes` before anything is decompressed.
 */
export function unzip(file: string, dest: string, limits: UnpackLimits = UNPACK_LIMITS): void {
	let total = 0;
	let count = 0;
	const files = unzipSync(fs.readFileSync(file), {
		filter: entry => {
			total += entry.originalSize;
			if (total > limits.maxBytes) {
				throw new Error(`refused the archive: it unpacks to more than ${limits.maxBytes} bytes`);
			}
			if (++count > limits.maxEntries) {
				throw new Error(`refused the archive: it holds more than ${limits.maxEntries} entries`);
			}
			return true;
		},
	});
	const targets = Object.keys(files).map(name => ({ name, where: inside(dest, name, `the archive's entry ${name}`) }));
	let written = 0;
	for (const { name, where } of targets) {
		if (name.endsWith('/')) {
			fs.mkdirSync(where, { recursive: true });
		} else {
			if ((written += files[name].length) > limits.maxBytes) {
				throw new Error(`refused the archive: it unpacks to more than ${limits.maxBytes} bytes`);
			}
			fs.mkdirSync(path.dirname(where), { recursive: true });
			fs.writeFileSync(where, files[name], { flag: 'wx' });
		}
	}
}

export interface InstallDeps {
	storageDir: string;
	fetchImpl?: Fetch;
	/** What unpacking may write (default `UNPACK_LIMITS`). */
	limits?: UnpackLimits;
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
	const refusal = registryRefusal(agent);
	if (refusal) {
		throw new Error(`refused ${agent.id}: ${refusal}`);
	}
	const limits = deps.limits ?? UNPACK_LIMITS;
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
			await untar(archive, root, limits);
		} else if (kind === 'tar.bz2') {
			bunzip(archive, `${archive}.tar`);
			await untar(`${archive}.tar`, root, limits);
		} else if (kind === 'zip') {
			unzip(archive, root, limits);
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
