/** The Manage ACP Agents quick pick's pure parts (src/product/manage.ts); the command itself is in extension.test.ts. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { configuredIds, manageItems, presetCommandLine, presetsFromWire, sameAgents, withPreset } from '../src/product/manage';
import type { AgentPreset, RegistryAgent } from '../src/chat/wire';

/** A preset as the daemon sends it (agents/presets: every field, null where it has none). */
const preset = (p: Pick<AgentPreset, 'id' | 'name'> & Partial<AgentPreset>): AgentPreset =>
	({ description: null, requires: null, command: null, args: [], package: null, ...p });

describe('presetsFromWire', () => {
	test('keeps well-formed presets only', () => {
		assert.deepEqual(presetsFromWire({ presets: [{ id: 'claude', name: 'Claude Code' }, { id: '', name: 'x' }, { name: 'no id' }, null, 'claude'] }),
			[{ id: 'claude', name: 'Claude Code' }]);
	});
	test('no answer, or not the expected shape: none', () => {
		assert.deepEqual(presetsFromWire(undefined), []);
		assert.deepEqual(presetsFromWire({ presets: 'claude' }), []);
	});
});

describe('withPreset', () => {
	const rows: Array<[string, unknown, string, unknown[]]> = [
		['unset', undefined, 'claude', [{ id: 'claude' }]],
		['appended after the user\'s own', [{ id: 'mine', command: 'x' }], 'codex', [{ id: 'mine', command: 'x' }, { id: 'codex' }]],
		['already there (with overrides): unchanged', [{ id: 'gemini', env: { GEMINI_API_KEY: 'k' } }], 'gemini', [{ id: 'gemini', env: { GEMINI_API_KEY: 'k' } }]],
		['not an array: replaced', { id: 'x' }, 'claude', [{ id: 'claude' }]],
	];
	for (const [name, current, id, expected] of rows) {
		test(name, () => assert.deepEqual(withPreset(current, id), expected));
	}
});

describe('manageItems', () => {
	test('presets, the configured marked, a separator, Open Settings', () => {
		const items = manageItems([
			preset({ id: 'claude', name: 'Claude Code', description: 'Claude Code through claude-agent-acp.', requires: 'Node.js 18+' }),
			preset({ id: 'gemini', name: 'Gemini CLI' }),
		], configuredIds([{ id: 'gemini' }, { id: ' x ' }, 'junk']));
		assert.deepEqual(items.map(i => ({ label: i.label, description: i.description, detail: i.detail, presetId: i.presetId, configured: i.configured, kind: i.kind })), [
			{ label: 'Claude Code', description: 'claude', detail: 'Claude Code through claude-agent-acp. Needs Node.js 18+.', presetId: 'claude', configured: false, kind: undefined },
			{ label: '$(check) Gemini CLI', description: 'gemini · configured', detail: undefined, presetId: 'gemini', configured: true, kind: undefined },
			{ label: '', description: undefined, detail: undefined, presetId: undefined, configured: undefined, kind: -1 },
			{ label: '$(gear) Open Settings', description: 'lmbridge.agents', detail: 'Other ACP agents, API keys (an agent\'s "env"), modes and tool filters.', presetId: undefined, configured: undefined, kind: undefined },
		]);
	});
	test('the daemon\'s descriptions become sentences', () => {
		const [item] = manageItems([preset({ id: 'codex', name: 'Codex', description: 'OpenAI\'s Codex through codex-acp', requires: 'Node.js 18+ (npx)' })], new Set());
		assert.equal(item.detail, 'OpenAI\'s Codex through codex-acp. Needs Node.js 18+ (npx).');
	});
	test('no presets: only Open Settings, with the reason', () => {
		const items = manageItems([], new Set(), 'The daemon did not list its agents (timeout).');
		assert.equal(items.length, 1);
		assert.equal(items[0].detail, 'The daemon did not list its agents (timeout).');
	});
	test('a preset and the registry entry of the same agent are one: either added marks both', () => {
		const presets = [
			preset({ id: 'claude', name: 'Claude Code', registryId: 'claude-acp' }),
			preset({ id: 'codex', name: 'Codex', registryId: 'codex-acp' }),
			preset({ id: 'gemini', name: 'Gemini CLI' }),
		];
		assert.deepEqual([...sameAgents(presets)], [['claude-acp', 'claude'], ['codex-acp', 'codex']]);
		const agent = (id: string, name: string): RegistryAgent => ({ id, name, version: '1.0.0', description: '', distribution: 'npx', command: 'npx', args: ['-y', `${id}@1.0.0`], env: {} });
		const registry = { agents: [agent('claude-acp', 'Claude Agent'), agent('codex-acp', 'Codex')], installed: new Map([['codex-acp', '1.0.0']]) };
		// claude added as the preset, codex from the registry.
		const items = manageItems(presets, configuredIds([{ id: 'claude' }, { id: 'codex-acp', command: 'npx', registry: { version: '1.0.0' } }]), undefined, registry);
		const shown = items.filter(i => i.registryAgent || i.presetId).map(i => [i.label, i.description, i.configured, i.sameAs]);
		assert.deepEqual(shown, [
			['$(check) Claude Agent', 'claude-acp · added as the built-in claude', true, 'claude'],
			['$(check) Codex', 'codex-acp · 1.0.0 · installed', true, undefined],
			['$(check) Claude Code', 'claude · configured', true, undefined],
			['$(check) Codex', 'codex · added from the ACP registry as codex-acp', true, 'codex-acp'],
			['Gemini CLI', 'gemini', false, undefined],
		]);
	});
	test('the command line of a preset', () => {
		assert.equal(presetCommandLine(preset({ id: 'c', name: 'C', command: 'npx', args: ['-y', 'pkg@1'] })), 'npx -y pkg@1');
		assert.equal(presetCommandLine(preset({ id: 'c', name: 'C' })), '');
	});
});
