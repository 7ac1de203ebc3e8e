/**
 * The ACP registry's network and disk half (src/product/registry.ts) and the quick pick's registry
 * items (src/product/manage.ts), against a feed and archives served on 127.0.0.1: the feed cached and
 * used when the network fails; a binary agent downloaded, checked against its sha256 (a wrong
 * one refused), unpacked with no entry leaving its folder (link chains followed) and no more
 * than its bound written; npx and uvx entries as the daemon describes them; what a registry
 * entry may not do, row by row from the table the daemon's tests read too
 * (tests/fixtures/registry_rules.json). The whole path with the real daemon is in
 * registry-daemon.test.ts.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { zipSync } from 'fflate';
import { installedVersions, installPrompt, offerUpdates, registryFromWire, registryItems, updatesAvailable, withRegistryEntry } from '../src/product/manage';
import {
	archiveKind, binaryCmdAllowed, bunzip, checkUrl, commandAllowed, envRefused, feedCachePath, inside, installAgent, linkProblems, loadFeed,
	packageAllowed, plainText, REFUSED_ENV_NAMES, REFUSED_ENV_PREFIXES, registryPlatform, registryRefusal, removeOtherVersions, UNPACK_LIMITS,
} from '../src/product/registry';
import type { RegistryAgent } from '../src/chat/wire';
import { serve, sha256, tarGz, tempDir } from './helpers';
import { MockLogOutputChannel, mock } from './vscode-mock';

function binaryAgent(url: string, archive: Buffer | undefined, extra: Partial<RegistryAgent> = {}): RegistryAgent {
	return {
		id: 'tiny', name: 'Tiny Agent', version: '1.0.0', description: 'A tiny test agent', distribution: 'binary',
		archive: url, cmd: './bin/tiny', args: ['--acp'], env: {}, ...(archive ? { sha256: sha256(archive) } : {}), ...extra,
	};
}

describe('what lmbridge fetches from', () => {
	const rows: Array<[string, boolean]> = [
		['https://cdn.example.com/registry.json', true],
		['http://127.0.0.1:8123/registry.json', true],
		['http://localhost:8123/registry.json', false],
		['http://cdn.example.com/registry.json', false],
		['http://127.0.0.2/registry.json', false],
		['file:///etc/passwd', false],
		['ftp://127.0.0.1/x', false],
		['not a url', false],
	];
	for (const [url, ok] of rows) {
		test(`${url}: ${ok ? 'allowed' : 'refused'}`, () => {
			if (ok) {
				assert.equal(checkUrl(url, 'the feed').href, new URL(url).href);
			} else {
				assert.throws(() => checkUrl(url, 'the feed'), /the feed (must be an https URL|is not a URL)/);
			}
		});
	}
	test('the registry\'s platform names', () => {
		assert.equal(registryPlatform('linux', 'x64'), 'linux-x86_64');
		assert.equal(registryPlatform('darwin', 'arm64'), 'darwin-aarch64');
		assert.equal(registryPlatform('win32', 'x64'), 'windows-x86_64');
		assert.equal(registryPlatform('freebsd', 'x64'), undefined);
		assert.equal(registryPlatform('linux', 'ia32'), undefined);
	});
	test('archive kinds by name; installers refused', () => {
		assert.equal(archiveKind('https://h/a/agent-1.0.0.tar.gz'), 'tar.gz');
		assert.equal(archiveKind('https://h/a/agent.TGZ'), 'tar.gz');
		assert.equal(archiveKind('https://h/a/agent.zip?x=1'), 'zip');
		assert.equal(archiveKind('https://h/a/agent-linux'), 'raw');
		assert.equal(archiveKind('https://h/a/agent.tar.bz2'), 'tar.bz2');
		assert.equal(archiveKind('https://h/a/agent.tbz2'), 'tar.bz2');
		assert.equal(archiveKind('https://h/a/agent.tar'), 'tar');
		assert.throws(() => archiveKind('https://h/a/agent.dmg'), /installers are not supported/);
	});
	test('paths inside a folder', () => {
		assert.equal(inside('/s/root', './bin/tiny', 'x'), '/s/root/bin/tiny');
		assert.equal(inside('/s/root', 'a/../b', 'x'), '/s/root/b');
		for (const bad of ['../x', 'a/../../x', '/etc/passwd', 'C:/x', '\\\\server\\x', '']) {
			assert.throws(() => inside('/s/root', bad, 'the entry'), /the entry (leaves its folder|is not a relative path)/, bad);
		}
	});
});

describe('the feed, fetched and cached', () => {
	const feed = { version: '1.0.0', agents: [{ id: 'a', name: 'A', version: '1.0.0', description: 'd', distribution: { npx: { package: 'a@1.0.0' } } }] };
	let server: Awaited<ReturnType<typeof serve>>;
	before(async () => {
		server = await serve(new Map([['/registry.json', JSON.stringify(feed)], ['/broken.json', '{"agents": '], ['/none.json', '{"version": "1"}']]));
	});
	after(() => server.close());

	test('fetched, then cached in the storage; the cached copy when the network fails', async () => {
		const storage = tempDir();
		const url = `${server.url}/registry.json`;
		const first = await loadFeed(url, storage, undefined, () => new Date('2026-11-25T10:00:00Z'));
		assert.deepEqual(first, { feed, from: 'network', fetchedAt: '2026-11-25T10:00:00.000Z' });
		assert.deepEqual(JSON.parse(fs.readFileSync(feedCachePath(storage), 'utf8')), { url, fetchedAt: '2026-11-25T10:00:00.000Z', feed });
		const offline = (() => Promise.reject(new TypeError('fetch failed'))) as unknown as typeof fetch;
		assert.deepEqual(await loadFeed(url, storage, offline), { feed, from: 'cache', fetchedAt: '2026-11-25T10:00:00.000Z', problem: 'fetch failed' });
		// A cache of another URL is not this feed's.
		await assert.rejects(loadFeed(`${server.url}/other.json`, storage, offline), /fetch failed/);
	});

	test('a 404, a broken feed, a feed without agents, a non-https URL: refused, nothing cached', async () => {
		const storage = tempDir();
		await assert.rejects(loadFeed(`${server.url}/missing.json`, storage), /HTTP 404/);
		await assert.rejects(loadFeed(`${server.url}/broken.json`, storage), /JSON/);
		await assert.rejects(loadFeed(`${server.url}/none.json`, storage), /has no "agents" list/);
		const port = new URL(server.url).port;
		await assert.rejects(loadFeed(`http://localhost:${port}/registry.json`, storage), /must be an https URL/);
		assert.ok(!fs.existsSync(feedCachePath(storage)));
	});

	test('a redirect from 127.0.0.1 to a plain-http host is refused', async () => {
		const port = new URL(server.url).port;
		const redirecting = await serve(new Map([['/registry.json', { location: `http://localhost:${port}/registry.json` }]]));
		try {
			await assert.rejects(loadFeed(`${redirecting.url}/registry.json`, tempDir()), /after a redirect\) must be an https URL/);
		} finally {
			await redirecting.close();
		}
	});
});

describe('installing a binary agent', () => {
	let server: Awaited<ReturnType<typeof serve>>;
	const routes = new Map<string, Buffer | string | { location: string }>();
	let good: Buffer;
	before(async () => {
		const src = tempDir('lmbridge-agent-src-');
		fs.mkdirSync(path.join(src, 'bin'));
		fs.writeFileSync(path.join(src, 'bin', 'tiny'), '#!/bin/sh\necho "tiny agent $*"\n', { mode: 0o755 });
		fs.writeFileSync(path.join(src, 'README'), 'tiny\n');
		good = await tarGz(src, ['bin', 'README']);
		routes.set('/tiny.tar.gz', good);
		// Hostile archives: an entry with `..`, an absolute one, a link out of the folder.
		const outer = tempDir('lmbridge-evil-');
		const inner = path.join(outer, 'inner');
		fs.mkdirSync(path.join(inner, 'bin'), { recursive: true });
		fs.writeFileSync(path.join(inner, 'bin', 'tiny'), '#!/bin/sh\n', { mode: 0o755 });
		fs.writeFileSync(path.join(outer, 'evil'), 'escaped\n');
		routes.set('/dotdot.tar.gz', await tarGz(inner, ['bin', '../evil'], true));
		routes.set('/absolute.tar.gz', await tarGz(inner, ['bin', path.join(outer, 'evil')], true));
		fs.symlinkSync('/etc', path.join(inner, 'etc-link'));
		routes.set('/symlink.tar.gz', await tarGz(inner, ['bin', 'etc-link']));
		routes.set('/tiny.zip', Buffer.from(zipSync({ 'bin/tiny': Buffer.from('#!/bin/sh\necho "zipped agent"\n'), 'doc/': new Uint8Array() })));
		routes.set('/dotdot.zip', Buffer.from(zipSync({ 'bin/tiny': Buffer.from('#!/bin/sh\n'), '../evil-zip': Buffer.from('escaped\n') })));
		routes.set('/tiny-linux', '#!/bin/sh\necho "raw agent"\n');
		server = await serve(routes);
	});
	after(() => server.close());

	test('downloaded, checked against its sha256, unpacked into the storage; it runs', async () => {
		const storage = tempDir();
		const progress: string[] = [];
		const entry = await installAgent(binaryAgent(`${server.url}/tiny.tar.gz`, good), { storageDir: storage, report: m => progress.push(m) });
		const command = path.join(storage, 'agents', 'tiny', '1.0.0', 'bin', 'tiny');
		assert.deepEqual(entry, { id: 'tiny', name: 'Tiny Agent', command, args: ['--acp'], registry: { version: '1.0.0', distribution: 'binary' } });
		assert.equal(execFileSync(command, entry.args, { encoding: 'utf8' }), 'tiny agent --acp\n');
		assert.deepEqual(fs.readdirSync(path.join(storage, 'agents', 'tiny')), ['1.0.0'], 'nothing else left behind');
		assert.deepEqual(progress, [`Downloading ${server.url}/tiny.tar.gz`, 'Unpacking']);
	});

	test('a wrong sha256 is refused: nothing installed', async () => {
		const storage = tempDir();
		const agent = binaryAgent(`${server.url}/tiny.tar.gz`, undefined, { sha256: 'ab'.repeat(32) });
		await assert.rejects(installAgent(agent, { storageDir: storage }), new RegExp(`does not match the registry's sha256 \\(expected ${'ab'.repeat(32)}, got ${sha256(good)}\\): not installed`));
		assert.deepEqual(fs.readdirSync(path.join(storage, 'agents', 'tiny')), []);
	});

	test('no sha256 in the registry: installed (the confirmation said so)', async () => {
		const entry = await installAgent(binaryAgent(`${server.url}/tiny.tar.gz`, undefined), { storageDir: tempDir() });
		assert.ok(fs.existsSync(entry.command));
		assert.match(installPrompt(binaryAgent(`${server.url}/tiny.tar.gz`, undefined)).detail, /The registry gives no checksum/);
	});

	for (const [name, file, pattern] of [
		['an entry with ..', 'dotdot.tar.gz', /refused the archive: the archive's entry \.\.\/evil leaves its folder/],
		['an absolute entry', 'absolute.tar.gz', /refused the archive: the archive's entry .*evil (is not a relative path|leaves its folder)/],
		['a link out of the folder', 'symlink.tar.gz', /refused the archive: the archive's link etc-link (points to an absolute path|leaves its folder)/],
		['a zip entry with ..', 'dotdot.zip', /the archive's entry \.\.\/evil-zip leaves its folder/],
	] as const) {
		test(`an archive with ${name} is refused whole: nothing written, in the storage or outside`, async () => {
			const storage = tempDir();
			const archive = routes.get(`/${file}`) as Buffer;
			await assert.rejects(installAgent(binaryAgent(`${server.url}/${file}`, archive), { storageDir: storage }), pattern);
			assert.deepEqual(fs.readdirSync(path.join(storage, 'agents', 'tiny')), []);
			const written = (fs.readdirSync(storage, { recursive: true }) as string[]).filter(f => /(^|\/)evil(-zip)?$/.test(f));
			assert.deepEqual(written, [], 'no entry of the archive was written');
		});
	}

	test('a cmd that is a link to a file inside the archive', async () => {
		const src = tempDir('lmbridge-linked-');
		fs.mkdirSync(path.join(src, 'lib'));
		fs.mkdirSync(path.join(src, 'bin'));
		fs.writeFileSync(path.join(src, 'lib', 'tiny-1.0'), '#!/bin/sh\necho "linked agent"\n', { mode: 0o755 });
		fs.symlinkSync('../lib/tiny-1.0', path.join(src, 'bin', 'tiny'));
		routes.set('/linked.tar.gz', await tarGz(src, ['lib', 'bin']));
		const entry = await installAgent(binaryAgent(`${server.url}/linked.tar.gz`, undefined, { args: [] }), { storageDir: tempDir() });
		assert.equal(execFileSync(entry.command, { encoding: 'utf8' }), 'linked agent\n');
	});

	test('a .tar.bz2, and a bzip2 bomb refused', async () => {
		const src = tempDir('lmbridge-bz2-');
		fs.mkdirSync(path.join(src, 'bin'));
		fs.writeFileSync(path.join(src, 'bin', 'tiny'), '#!/bin/sh\necho "bzipped agent"\n', { mode: 0o755 });
		const archive = path.join(tempDir(), 'tiny.tar.bz2');
		execFileSync('tar', ['-cjf', archive, '-C', src, 'bin']);
		routes.set('/tiny.tar.bz2', fs.readFileSync(archive));
		const entry = await installAgent(binaryAgent(`${server.url}/tiny.tar.bz2`, fs.readFileSync(archive), { args: [] }), { storageDir: tempDir() });
		assert.equal(execFileSync(entry.command, { encoding: 'utf8' }), 'bzipped agent\n');
		const zeros = path.join(tempDir(), 'zeros');
		fs.writeFileSync(zeros, Buffer.alloc(4 * 1024 * 1024));
		execFileSync('bzip2', [zeros]);
		assert.ok(fs.statSync(`${zeros}.bz2`).size < 1024);
		assert.throws(() => bunzip(`${zeros}.bz2`, path.join(tempDir(), 'out'), 1024 * 1024), /unpacks to more than 1048576 bytes/);
	});

	test('a .zip and a raw binary', async () => {
		const storage = tempDir();
		const zipped = await installAgent(binaryAgent(`${server.url}/tiny.zip`, routes.get('/tiny.zip') as Buffer, { args: [] }), { storageDir: storage });
		assert.equal(execFileSync(zipped.command, { encoding: 'utf8' }), 'zipped agent\n');
		const raw = await installAgent(binaryAgent(`${server.url}/tiny-linux`, undefined, { version: '2.0.0', cmd: 'tiny-linux', args: [] }), { storageDir: storage });
		assert.equal(raw.command, path.join(storage, 'agents', 'tiny', '2.0.0', 'tiny-linux'));
		assert.equal(execFileSync(raw.command, { encoding: 'utf8' }), 'raw agent\n');
		removeOtherVersions(storage, 'tiny', '2.0.0');
		assert.deepEqual(fs.readdirSync(path.join(storage, 'agents', 'tiny')), ['2.0.0']);
	});

	test('a cmd the archive does not hold, a non-https archive, an id that is no path name: refused', async () => {
		const storage = tempDir();
		await assert.rejects(installAgent(binaryAgent(`${server.url}/tiny.tar.gz`, good, { cmd: './bin/other' }), { storageDir: storage }), /holds no file \.\/bin\/other/);
		const port = new URL(server.url).port;
		await assert.rejects(installAgent(binaryAgent(`http://localhost:${port}/tiny.tar.gz`, good), { storageDir: storage }), /archive must be an https URL/);
		await assert.rejects(installAgent(binaryAgent(`${server.url}/tiny.tar.gz`, good, { id: '../x' }), { storageDir: storage }), /refused \.\.\/x: its id "\.\.\/x" is not a registry id/);
		await assert.rejects(installAgent(binaryAgent(`${server.url}/tiny.tar.gz`, good, { cmd: '../../bin/sh' }), { storageDir: storage }), /its cmd "\.\.\/\.\.\/bin\/sh" is not a relative path inside the archive/);
	});
});

describe('npx and uvx agents', () => {
	test('their entry is the daemon\'s command line; nothing downloaded', async () => {
		const storage = tempDir();
		const npx: RegistryAgent = { id: 'n', name: 'N', version: '1.2.3', description: '', distribution: 'npx', command: 'npx', args: ['-y', 'n-acp@1.2.3'], env: { N_MODE: 'acp' } };
		assert.deepEqual(await installAgent(npx, { storageDir: storage }), { id: 'n', name: 'N', command: 'npx', args: ['-y', 'n-acp@1.2.3'], env: { N_MODE: 'acp' }, registry: { version: '1.2.3', distribution: 'npx' } });
		const uvx: RegistryAgent = { id: 'u', name: 'U', version: '0.1.0', description: '', distribution: 'uvx', command: 'uvx', args: ['--from', 'u==0.1.0', 'u-acp'], env: {} };
		assert.deepEqual(await installAgent(uvx, { storageDir: storage }), { id: 'u', name: 'U', command: 'uvx', args: ['--from', 'u==0.1.0', 'u-acp'], registry: { version: '0.1.0', distribution: 'uvx' } });
		assert.ok(!fs.existsSync(path.join(storage, 'agents')));
		assert.match(installPrompt(uvx).detail, /The agent runs as: uvx --from u==0\.1\.0 u-acp/);
	});
});

describe('the quick pick\'s registry part', () => {
	const agents: RegistryAgent[] = [
		{ id: 'new-one', name: 'New One', version: '1.0.0', description: 'Not installed', distribution: 'npx', command: 'npx', args: ['-y', 'new-one@1.0.0'], env: {} },
		{ id: 'current', name: 'Current', version: '2.0.0', description: 'Installed at this version.', distribution: 'uvx', command: 'uvx', args: ['current==2.0.0'], env: {} },
		{ id: 'old', name: 'Old', version: '3.1.0', description: '', distribution: 'binary', archive: 'https://e.com/old-3.1.0.tar.gz', cmd: './old', args: [], env: {} },
		{ id: 'mine', name: 'Mine', version: '1.0.0', description: 'd', distribution: 'npx', command: 'npx', args: ['-y', 'mine@1.0.0'], env: {} },
	];
	const installed = installedVersions([
		{ id: 'current', registry: { version: '2.0.0' } }, { id: 'old', registry: { version: '3.0.0', distribution: 'binary' } }, { id: 'mine', command: 'x' }, 'junk',
	]);
	test('not installed, installed, an update offered, an id of the user\'s own', () => {
		const items = registryItems({ agents, installed });
		assert.deepEqual(items.map(i => [i.label, i.description, i.detail, i.update, i.configured, i.kind]), [
			['ACP Registry', undefined, undefined, undefined, undefined, -1],
			['New One', 'new-one · 1.0.0 · npx', 'Not installed.', undefined, false, undefined],
			['$(check) Current', 'current · 2.0.0 · installed', 'Installed at this version.', undefined, true, undefined],
			['$(arrow-up) Old', 'old · update 3.0.0 → 3.1.0', undefined, true, true, undefined],
			['$(check) Mine', 'mine · in lmbridge.agents, not from the registry', 'd.', undefined, true, undefined],
		]);
	});
	test('from the cache; unreachable with no cache', () => {
		assert.equal(registryItems({ agents, installed, cachedAt: '2026-11-20T08:00:00.000Z', problem: 'fetch failed' })[0].label, 'ACP Registry (cached 2026-11-20)');
		const offline = registryItems({ agents: [], installed, problem: 'fetch failed' });
		assert.deepEqual(offline.slice(1).map(i => [i.label, i.detail, i.openSettings]), [
			['$(warning) The ACP registry could not be read', 'fetch failed. The built-in agents below need no registry.', true],
		]);
	});
	test('the daemon\'s answer: well-formed agents only', () => {
		assert.deepEqual(registryFromWire({ agents: [agents[0], { id: 'x', name: 'X', version: '1', distribution: 'pip', args: [] }, null], problems: ['p', 3] }), { agents: [agents[0]], problems: ['p'] });
		assert.deepEqual(registryFromWire(undefined), { agents: [], problems: [] });
	});
	const entry = { id: 'old', name: 'Old', command: '/s/agents/old/3.1.0/old', args: ['--acp'], env: { FROM_FEED: '1' }, registry: { version: '3.1.0', distribution: 'binary' as const } };
	test('an update keeps what the user added to the entry', () => {
		const before = [{ id: 'a', command: 'x' }, { id: 'old', name: 'My name', command: '/s/agents/old/3.0.0/old', args: [], env: { API_KEY: 'k', FROM_FEED: '0' }, mode: 'plan', registry: { version: '3.0.0', distribution: 'binary' } }];
		assert.deepEqual(withRegistryEntry(before, entry), [
			{ id: 'a', command: 'x' },
			{ id: 'old', name: 'Old', command: '/s/agents/old/3.1.0/old', args: ['--acp'], env: { FROM_FEED: '0', API_KEY: 'k' }, mode: 'plan', registry: { version: '3.1.0', distribution: 'binary' } },
		]);
		assert.deepEqual(withRegistryEntry(undefined, entry), [entry]);
	});
	test('an id the user uses for an agent of their own is not replaced', () => {
		assert.throws(() => withRegistryEntry([{ id: 'old', command: 'mine' }], entry), /already has an agent "old" of your own/);
	});
});

describe('updates offered when a window starts', () => {
	const feed = { agents: [{ id: 'tiny', name: 'Tiny', version: '1.1.0' }] };
	const fromDaemon: RegistryAgent[] = [
		{ id: 'tiny', name: 'Tiny', version: '1.1.0', description: '', distribution: 'binary', archive: 'https://e.com/tiny-1.1.0.tar.gz', cmd: './tiny', args: [], env: {} },
		{ id: 'same', name: 'Same', version: '2.0.0', description: '', distribution: 'npx', command: 'npx', args: ['-y', 'same@2.0.0'], env: {} },
		{ id: 'mine', name: 'Mine', version: '9.0.0', description: '', distribution: 'npx', command: 'npx', args: ['-y', 'mine@9.0.0'], env: {} },
	];
	test('the installed agents the feed has at another version', () => {
		const installed = installedVersions([{ id: 'tiny', registry: { version: '1.0.0' } }, { id: 'same', registry: { version: '2.0.0' } }, { id: 'mine', command: 'x' }]);
		assert.deepEqual(updatesAvailable(fromDaemon, installed).map(([a, from]) => [a.id, from, a.version]), [['tiny', '1.0.0', '1.1.0']]);
	});
	test('a notification naming them, whose button opens Manage ACP Agents; no fetch without a registry agent', async () => {
		const server = await serve(new Map([['/registry.json', JSON.stringify(feed)]]));
		try {
			const asked: unknown[] = [];
			let opened = 0;
			const deps = {
				presets: () => Promise.resolve({ presets: [] }),
				registry: (f: unknown) => { asked.push(f); return Promise.resolve({ agents: fromDaemon, problems: [] }); },
				registryUrl: () => `${server.url}/registry.json`,
				storageDir: tempDir(),
				log: new MockLogOutputChannel('lmbridge') as never,
				openSettings: () => Promise.resolve(),
			};
			mock.reset();
			mock.setConfig({ 'lmbridge.agents': [{ id: 'mine', command: 'x' }, { id: 'claude' }] });
			assert.deepEqual(await offerUpdates(deps, () => Promise.resolve()), []);
			assert.deepEqual(server.hits, [], 'nothing fetched');
			mock.setConfig({ 'lmbridge.agents': [{ id: 'tiny', command: '/s/tiny', registry: { version: '1.0.0', distribution: 'binary' } }, { id: 'same', command: 'npx', registry: { version: '2.0.0' } }] });
			mock.state.infoResponse = m => m.items[0];
			assert.deepEqual(await offerUpdates(deps, () => { opened++; return Promise.resolve(); }), ['tiny']);
			assert.deepEqual(asked, [feed]);
			assert.deepEqual(mock.state.infoMessages, [{ message: 'ACP agent update available: Tiny 1.0.0 → 1.1.0.', items: ['Manage ACP Agents'] }]);
			await new Promise(resolve => setImmediate(resolve));
			assert.equal(opened, 1);
		} finally {
			await server.close();
			mock.reset();
		}
	});
});

// ---------------------------------------------------------------- what a registry entry may not do

type Row = [string, boolean, string];
const RULES = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../../tests/fixtures/registry_rules.json'), 'utf8')) as Record<string, Row[]> & { refusedEnv: { names: string[]; prefixes: string[] } };

describe('the registry\'s rules, row by row (the daemon\'s table: tests/fixtures/registry_rules.json)', () => {
	const accepts = (check: (value: string) => void) => (value: string) => {
		try {
			check(value);
			return true;
		} catch {
			return false;
		}
	};
	const checks: Record<string, (value: string) => boolean> = {
		npmPackage: v => packageAllowed('npx', v),
		pypiPackage: v => packageAllowed('uvx', v),
		command: commandAllowed,
		binaryCmd: binaryCmdAllowed,
		url: accepts(v => checkUrl(v, 'the URL')),
		envName: v => !envRefused(v),
		text: plainText,
	};
	for (const [table, check] of Object.entries(checks)) {
		test(table, () => {
			const wrong = RULES[table].filter(([value, ok]) => check(value) !== ok).map(([value, ok, why]) => `${JSON.stringify(value)} should be ${ok ? 'accepted' : 'refused'} (${why})`);
			assert.deepEqual(wrong, []);
			assert.ok(RULES[table].length >= 15);
		});
	}
	test('the refused variables are the table\'s (and the daemon\'s)', () => {
		assert.deepEqual([...REFUSED_ENV_NAMES].sort(), RULES.refusedEnv.names);
		assert.deepEqual([...REFUSED_ENV_PREFIXES].sort(), RULES.refusedEnv.prefixes);
	});
	test('a URL that reads as another host: the reason says so', () => {
		assert.throws(() => checkUrl('http://evil\\@127.0.0.1/a.tar.gz', 'the archive'), /the archive is not a URL lmbridge accepts .*"http:\/\/evil\\\\@127\.0\.0\.1\/a\.tar\.gz"/);
		assert.throws(() => checkUrl('http://evil@127.0.0.1/', 'the archive'), /is not a URL lmbridge accepts/);
		assert.throws(() => checkUrl('https://0x7f.1/', 'the archive'), /is not a URL lmbridge accepts/);
	});
});

describe('a registry agent that is not what it seems is refused, before any dialog', () => {
	const npx = (args: string[], env: Record<string, string> = {}): RegistryAgent => ({ id: 'n', name: 'N', version: '1.0.0', description: '', distribution: 'npx', command: 'npx', args, env });
	const uvx = (args: string[]): RegistryAgent => ({ id: 'u', name: 'U', version: '1.0.0', description: '', distribution: 'uvx', command: 'uvx', args, env: {} });
	const rows: Array<[string, RegistryAgent, RegExp]> = [
		['an npx package that is an option running a command', npx(['-y', '--call=touch /tmp/pwned']), /its command line is not npx -y <npm package>/],
		['an npx --package that is an option', npx(['-y', '--package', '--call=id', 'a']), /its command line is not npx/],
		['an npx command the shell reads', npx(['-y', '--package', 'a@1.0.0', 'a;id']), /its command line is not npx/],
		['an npx package from GitHub', npx(['-y', 'user/repo']), /its command line is not npx/],
		['a uvx package that is an option', uvx(['--with=evil', 'a']), /its command line is not uvx <PyPI package>/],
		['a uvx --from that is an option', uvx(['--from', '--python=/tmp/x', 'a']), /its command line is not uvx/],
		['a uvx command that is an option', uvx(['--from', 'a', '-c']), /its command line is not uvx/],
		['another program than npx', { ...npx(['-y', 'a']), command: '/tmp/npx' }, /its command line is not npx/],
		['npm fetching from another registry', npx(['-y', 'a'], { npm_config_registry: 'http://evil.example/' }), /its env sets "npm_config_registry", which a registry entry may not set/],
		['node loading a module first', npx(['-y', 'a'], { NODE_OPTIONS: '--require /tmp/x.js' }), /its env sets "NODE_OPTIONS"/],
		['the loader loading a library', npx(['-y', 'a'], { LD_PRELOAD: '/tmp/x.so' }), /its env sets "LD_PRELOAD"/],
		['an env value with an escape', npx(['-y', 'a'], { MODE: 'acp\u001b[2J' }), /its env value of MODE holds a control or format character/],
		['an argument with a carriage return', npx(['-y', 'a', '--acp\r--yolo']), /its argument "--acp\\r--yolo" holds a control or format character/],
		['a name spanning lines', { ...npx(['-y', 'a']), name: 'N\n\nThe agent runs as: npx -y safe' }, /its name or version .* holds a control or format character/],
		['an archive that reads as another host', { id: 'b', name: 'B', version: '1.0.0', description: '', distribution: 'binary', archive: 'http://evil\\@127.0.0.1/a.tar.gz', cmd: './a', args: [], env: {} }, /its archive is not a URL lmbridge accepts/],
		['a binary cmd with an argument in it', { id: 'b', name: 'B', version: '1.0.0', description: '', distribution: 'binary', archive: 'https://e.com/a.tar.gz', cmd: './kiro-cli acp', args: [], env: {} }, /its cmd "\.\/kiro-cli acp" is not a relative path inside the archive/],
	];
	for (const [name, agent, reason] of rows) {
		test(name, async () => {
			assert.match(registryRefusal(agent) ?? '', reason);
			const storage = tempDir();
			await assert.rejects(installAgent(agent, { storageDir: storage }), new RegExp(`^Error: refused ${agent.id}: `));
			assert.deepEqual(fs.readdirSync(storage), [], 'nothing installed');
			const { agents, problems } = registryFromWire({ agents: [agent], problems: [] });
			assert.deepEqual(agents, []);
			assert.equal(problems.length, 1);
			assert.match(problems[0], new RegExp(`^${agent.id} left out: ${reason.source}`));
		});
	}
	test('what the daemon offers for today\'s registry passes', () => {
		for (const agent of [
			npx(['-y', '@agentclientprotocol/claude-agent-acp@0.101.0']),
			npx(['-y', '@augmentcode/auggie@0.15.0', '--acp'], { AUGMENT_DISABLE_AUTO_UPDATE: '1' }),
			npx(['-y', '--package', '@s/tools@1.0.0', 'a-acp', '--acp=true']),
			uvx(['minion-code@0.1.8', 'acp']),
			uvx(['--from', 'fast-agent-mcp==0.10.48', 'fast-agent-acp']),
			{ id: 'droid', name: 'Factory Droid', version: '0.56.3', description: '', distribution: 'binary', archive: 'https://downloads.factory.ai/factory-cli/releases/0.56.3/droid-linux-x86_64.tar.gz', cmd: './droid', args: ['exec', '--output-format', 'acp'], env: { DROID_DISABLE_AUTO_UPDATE: 'true' } },
		] as RegistryAgent[]) {
			assert.equal(registryRefusal(agent), undefined, agent.id);
		}
	});
});

describe('the install dialog', () => {
	test('shows every variable of the environment with its value', () => {
		const agent: RegistryAgent = { id: 'n', name: 'N', version: '1.0.0', description: '', distribution: 'npx', command: 'npx', args: ['-y', 'n@1.0.0'], env: { N_MODE: 'acp', N_ENDPOINT: 'https://api.example.com/v1', N_GREETING: 'hello world', N_EMPTY: '' } };
		const { detail } = installPrompt(agent);
		assert.match(detail, /\n\nIts environment:\nN_MODE=acp\nN_ENDPOINT=https:\/\/api\.example\.com\/v1\nN_GREETING="hello world"\nN_EMPTY=""\n\n/);
	});
});

describe('symbolic links followed link by link', () => {
	const link = (p: string, linkpath: string) => ({ path: p, type: 'SymbolicLink', linkpath });
	const hard = (p: string, linkpath: string) => ({ path: p, type: 'Link', linkpath });
	const file = (p: string) => ({ path: p, type: 'File' });
	const rows: Array<[string, Array<{ path: string; type: string; linkpath?: string }>, RegExp[]]> = [
		['a link to a file inside', [file('lib/tiny'), link('bin/tiny', '../lib/tiny')], []],
		['a link to a folder inside, and one through it', [link('cur', 'v1'), file('v1/a'), link('bin/a', '../cur/a')], []],
		['a chain whose links each stay inside (c/d -> .., b -> c/d, a -> b/../x)', [link('c/d', '..'), link('b', 'c/d'), link('a', 'b/../x')], [/the archive's link a leaves its folder \(through b\/\.\.\/x\)/]],
		['a link to the folder itself, climbed through (d -> ., e -> d/d/d/..)', [link('d', '.'), link('e', 'd/d/d/..')], [/the archive's link e leaves its folder/]],
		['a deeper chain (p/q/r/b -> ../../../c/d/e/f -> the folder)', [link('c/d/e/f', '../../..'), link('p/q/r/b', '../../../c/d/e/f'), link('p/q/r/a', 'b/../../../../etc/passwd')], [/the archive's link p\/q\/r\/a leaves its folder/]],
		['a loop', [link('x', 'y'), link('y', 'x')], [/the archive's link x is a loop of links/, /the archive's link y is a loop of links/]],
		['a link to an absolute path', [link('etc', '/etc')], [/the archive's link etc points to an absolute path/]],
		['a chain to an absolute path', [link('a', 'b'), link('b', '/etc')], [/the archive's link a points to an absolute path/, /the archive's link b points to an absolute path/]],
		['a backslash as a separator (as on Windows)', [link('c\\d', '..'), link('b', 'c/d'), link('a', 'b\\..\\x')], [/the archive's link a leaves its folder/]],
		['a hard link through a link out', [link('c/d', '..'), link('b', 'c/d'), hard('h', 'b/../etc/passwd')], [/the archive's hard link h leaves its folder/]],
		['an entry written through a link', [link('sub', 'elsewhere'), file('sub/x')], [/the archive's entry sub\/x is written through its link sub/]],
	];
	for (const [name, entries, expected] of rows) {
		test(name, () => {
			const problems = linkProblems(entries);
			assert.equal(problems.length, expected.length, problems.join('; '));
			expected.forEach((pattern, i) => assert.match(problems[i], pattern));
		});
	}
});

describe('an archive that is not what it seems is not unpacked', () => {
	let server: Awaited<ReturnType<typeof serve>>;
	const routes = new Map<string, Buffer | string | { location: string }>();
	const tree = (build: (dir: string) => void) => {
		const dir = tempDir('lmbridge-archive-');
		fs.mkdirSync(path.join(dir, 'bin'));
		fs.writeFileSync(path.join(dir, 'bin', 'tiny'), '#!/bin/sh\necho tiny\n', { mode: 0o755 });
		build(dir);
		return dir;
	};
	before(async () => {
		// Each link, read alone, stays in the folder; followed, `a` is the folder's parent's `x`.
		const chain = tree(dir => {
			fs.mkdirSync(path.join(dir, 'c'));
			fs.symlinkSync('..', path.join(dir, 'c', 'd'));
			fs.symlinkSync('c/d', path.join(dir, 'b'));
			fs.symlinkSync('b/../x', path.join(dir, 'a'));
		});
		routes.set('/chain.tar.gz', await tarGz(chain, ['bin', 'c', 'b', 'a']));
		// 4 MiB of zeros: a few KiB compressed.
		const bomb = tree(dir => fs.writeFileSync(path.join(dir, 'zeros'), Buffer.alloc(4 * 1024 * 1024)));
		routes.set('/bomb.tar.gz', await tarGz(bomb, ['bin', 'zeros']));
		routes.set('/bomb.zip', Buffer.from(zipSync({ 'bin/tiny': Buffer.from('#!/bin/sh\n'), 'zeros': new Uint8Array(4 * 1024 * 1024) })));
		const many = tree(dir => {
			fs.mkdirSync(path.join(dir, 'many'));
			for (let i = 0; i < 50; i++) {
				fs.writeFileSync(path.join(dir, 'many', `f${i}`), '');
			}
		});
		routes.set('/many.tar.gz', await tarGz(many, ['bin', 'many']));
		server = await serve(routes);
	});
	after(() => server.close());

	const refused = async (file: string, pattern: RegExp, limits?: { maxBytes: number; maxEntries: number }) => {
		const storage = tempDir();
		const archive = routes.get(`/${file}`) as Buffer;
		await assert.rejects(installAgent(binaryAgent(`${server.url}/${file}`, archive), { storageDir: storage, ...(limits ? { limits } : {}) }), pattern);
		assert.deepEqual(fs.readdirSync(path.join(storage, 'agents', 'tiny')), [], 'nothing installed');
		assert.deepEqual((fs.readdirSync(storage, { recursive: true }) as string[]).filter(f => /(^|\/)(a|zeros|x)$/.test(f)), [], 'nothing of the archive left');
	};
	test('a chain of links leading out of the folder', () => refused('chain.tar.gz', /refused the archive: the archive's link a leaves its folder/));
	test('a .tar.gz that unpacks to more than the bound', async () => {
		assert.ok((routes.get('/bomb.tar.gz') as Buffer).length < 64 * 1024);
		await refused('bomb.tar.gz', /refused the archive: it unpacks to more than 1048576 bytes/, { maxBytes: 1024 * 1024, maxEntries: 1000 });
	});
	test('a .zip that unpacks to more than the bound', () => refused('bomb.zip', /refused the archive: it unpacks to more than 1048576 bytes/, { maxBytes: 1024 * 1024, maxEntries: 1000 }));
	test('a .tar.gz with more entries than the bound', () => refused('many.tar.gz', /refused the archive: it holds more than 20 entries/, { maxBytes: 1024 * 1024, maxEntries: 20 }));
	test('within the bounds, the same archives install', async () => {
		const entry = await installAgent(binaryAgent(`${server.url}/bomb.tar.gz`, routes.get('/bomb.tar.gz') as Buffer), { storageDir: tempDir(), limits: { maxBytes: 5 * 1024 * 1024, maxEntries: 1000 } });
		assert.equal(fs.statSync(path.join(path.dirname(path.dirname(entry.command)), 'zeros')).size, 4 * 1024 * 1024);
	});
	test('the bound by default: 1 GiB written, 100000 entries', () => {
		assert.deepEqual(UNPACK_LIMITS, { maxBytes: 1024 * 1024 * 1024, maxEntries: 100_000 });
	});
});
