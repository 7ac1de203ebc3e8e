/**
 * The ACP registry's network and disk half (src/registry.ts) and the quick pick's registry
 * items (src/manage.ts), against a feed and archives served on 127.0.0.1: the feed cached and
 * used when the network fails; a binary agent downloaded, checked against its sha256 (a wrong
 * one refused), unpacked with no entry leaving its folder; npx and uvx entries as the daemon
 * describes them. The whole path with the real daemon is in registry-daemon.test.ts.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { zipSync } from 'fflate';
import { installedVersions, installPrompt, offerUpdates, registryFromWire, registryItems, updatesAvailable, withRegistryEntry } from '../src/manage';
import { archiveKind, bunzip, checkUrl, feedCachePath, inside, installAgent, loadFeed, registryPlatform, removeOtherVersions } from '../src/registry';
import type { RegistryAgent } from '../src/wire';
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
		await assert.rejects(installAgent(binaryAgent(`${server.url}/tiny.tar.gz`, good, { id: '../x' }), { storageDir: storage }), /not a registry agent id/);
		await assert.rejects(installAgent(binaryAgent(`${server.url}/tiny.tar.gz`, good, { cmd: '../../bin/sh' }), { storageDir: storage }), /leaves its folder/);
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
		{ id: 'new-one', name: 'New One', version: '1.0.0', description: 'Not installed', distribution: 'npx', command: 'npx', args: [], env: {} },
		{ id: 'current', name: 'Current', version: '2.0.0', description: 'Installed at this version.', distribution: 'uvx', command: 'uvx', args: [], env: {} },
		{ id: 'old', name: 'Old', version: '3.1.0', description: '', distribution: 'binary', args: [], env: {} },
		{ id: 'mine', name: 'Mine', version: '1.0.0', description: 'd', distribution: 'npx', command: 'npx', args: [], env: {} },
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
		{ id: 'tiny', name: 'Tiny', version: '1.1.0', description: '', distribution: 'binary', args: [], env: {} },
		{ id: 'same', name: 'Same', version: '2.0.0', description: '', distribution: 'npx', command: 'npx', args: [], env: {} },
		{ id: 'mine', name: 'Mine', version: '9.0.0', description: '', distribution: 'npx', command: 'npx', args: [], env: {} },
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
