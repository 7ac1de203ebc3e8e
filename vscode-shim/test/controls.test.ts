/** The active agent chat's controls, commands and usage (src/product/controls.ts). */
import assert from 'node:assert/strict';
import { beforeEach, describe, test } from 'node:test';
import * as vscode from 'vscode';
import {
	ChatControls, approvalText, commandItems, controlItems, formatTokens, statusText, statusTooltip, stateFromWire, usageText,
} from '../src/product/controls';
import type { SessionStateParams } from '../src/chat/wire';
import { mock } from './vscode-mock';

const CLAUDE: SessionStateParams = {
	chatId: 's1', modelId: 'claude', requestId: 3,
	controls: [{ id: 'mode', name: 'Mode', category: 'mode', current: 'plan', choices: [{ value: 'default', name: 'Default' }, { value: 'plan', name: 'Plan Mode' }] }],
	commands: [{ name: 'compact', description: 'Compact the conversation' }, { name: 'review', description: 'Review', hint: 'what' }],
	usage: { used: 53_000, size: 200_000, cost: { amount: 0.4213, currency: 'USD' } },
};

describe('stateFromWire', () => {
	test('well-formed params are kept', () => assert.deepEqual(stateFromWire(CLAUDE), CLAUDE));
	test('malformed entries are dropped, unusable params refused', () => {
		assert.equal(stateFromWire({ modelId: 'x' }), undefined);
		assert.equal(stateFromWire('junk'), undefined);
		const state = stateFromWire({
			chatId: 's2', modelId: 'x', requestId: null,
			controls: [{ id: 'a', name: 'A', choices: [{ value: 1 }] }, 'junk', { id: 'b', name: 'B', choices: [] }],
			commands: [{ name: 'x' }, { name: 'y', description: 'Y' }],
			usage: { used: -1, size: 'big', cost: { amount: 1 } },
		});
		assert.deepEqual(state, { chatId: 's2', modelId: 'x', controls: [{ id: 'b', name: 'B', choices: [] }], commands: [{ name: 'y', description: 'Y' }], usage: {} });
	});
});

describe('the status bar text', () => {
	const rows: Array<[number, string]> = [[999, '999'], [1234, '1.2k'], [53_000, '53k'], [200_000, '200k'], [1_000_000, '1M'], [1_500_000, '1.5M']];
	for (const [n, text] of rows) {
		test(`${n} tokens: ${text}`, () => assert.equal(formatTokens(n), text));
	}
	test('the mode and the usage', () => assert.equal(statusText(CLAUDE), '$(hubot) Plan Mode · 53k/200k'));
	test('claude sends no tokens used: the context window alone', () => assert.equal(usageText({ size: 200_000 }), '200k context'));
	test('nothing known yet', () => assert.equal(statusText({ chatId: 's', modelId: 'm', controls: [], commands: [] }), '$(hubot) ACP agent'));
	test('no mode: the first control (codex: its reasoning effort)', () => assert.equal(statusText({
		chatId: 's', modelId: 'codex', commands: [],
		controls: [{ id: 'reasoning_effort', name: 'Reasoning Effort', category: 'thought_level', current: 'high', choices: [{ value: 'high', name: 'High' }] }],
	}), '$(hubot) High'));
});

describe('the tooltip', () => {
	test('the agent, its mode, the context, the cost and the commands (as //name)', () => {
		const text = statusTooltip(CLAUDE, 'Claude Code');
		assert.match(text, /\*\*Claude Code\*\*/);
		assert.match(text, /- Mode: Plan Mode/);
		assert.match(text, /- Context: 53,000 of 200,000 tokens \(27%\)/);
		assert.match(text, /- Cost: 0\.42 USD/);
		assert.match(text, /Commands: `\/\/compact` `\/\/review`/);
	});
	test("the session's title and the last answer's tokens (claude 0.101, codex 2.6)", () => {
		const state = stateFromWire({ chatId: 's', modelId: 'claude', controls: [], commands: [], title: '  Fix *the* test ',
			usage: { size: 200_000, tokens: { inputTokens: 1200, outputTokens: 34, totalTokens: 1234, junk: 'x', minus: -1 } } })!;
		assert.equal(state.title, 'Fix *the* test');
		assert.deepEqual(state.usage, { size: 200_000, tokens: { inputTokens: 1200, outputTokens: 34, totalTokens: 1234 } });
		const text = statusTooltip(state, 'Claude Code');
		assert.match(text, /^\*\*Claude Code\*\* \(this chat's ACP agent\)\n_Fix \\\*the\\\* test_\n/);
		assert.match(text, /- Last answer: 1,234 tokens \(1,200 in, 34 out\)/);
		assert.equal(stateFromWire({ chatId: 's', modelId: 'm', title: 7 })?.title, undefined);
	});
	test('what the agent named is escaped', () => {
		const text = statusTooltip({ ...CLAUDE, controls: [{ id: 'm', name: '[x](command:evil)', current: 'a', choices: [{ value: 'a', name: '<b>' }] }] }, undefined);
		assert.ok(!text.includes('](command:'), text);
		assert.ok(!text.includes('<b>'), text);
	});
});

/** claude-agent-acp 0.101's modes, marked with who approves in each (docs/agents.md). */
const MODES = { id: 'mode', name: 'Mode', category: 'mode', choices: [
	{ value: 'default', name: 'Manual', approver: 'user' as const }, { value: 'acceptEdits', name: 'Accept Edits', approver: 'agent' as const },
	{ value: 'plan', name: 'Plan Mode', approver: 'agent' as const }, { value: 'auto', name: 'Auto', approver: 'agent' as const },
] };
const inMode = (current: string): SessionStateParams => ({ ...CLAUDE, controls: [{ ...MODES, current }] });

describe('who approves', () => {
	test('the approver is kept as sent, anything else dropped', () => {
		assert.deepEqual(stateFromWire(inMode('auto'))?.controls[0].choices, MODES.choices);
		const state = stateFromWire({ ...CLAUDE, controls: [{ ...MODES, current: 'x', choices: [{ value: 'x', name: 'X', approver: 'root' }] }] });
		assert.deepEqual(state?.controls[0].choices, [{ value: 'x', name: 'X' }]);
	});
	test('a self-approving mode: the status bar item says the agent approves', () => {
		assert.equal(statusText(inMode('auto')), '$(warning) Auto: agent approves · 53k/200k');
		assert.equal(statusText(inMode('acceptEdits')), '$(warning) Accept Edits: agent approves · 53k/200k');
	});
	test('the asking mode, or a mode not known: as before', () => {
		assert.equal(statusText(inMode('default')), '$(hubot) Manual · 53k/200k');
		assert.equal(statusText(CLAUDE), '$(hubot) Plan Mode · 53k/200k');
		assert.equal(approvalText(CLAUDE), undefined);
	});
	test('the tooltip says who approves, and which mode asks', () => {
		assert.equal(approvalText(inMode('auto')),
			'**The agent approves its own actions** in Auto: some edits and commands run without asking you. Choose Manual to approve each one yourself.');
		assert.equal(approvalText(inMode('default')), '**You approve**: in Manual the agent asks you before it changes anything.');
		assert.match(statusTooltip(inMode('plan'), 'Claude Code'), /\*\*The agent approves its own actions\*\* in Plan Mode/);
	});
	test('the quick pick says it of each mode', () => {
		assert.deepEqual(controlItems(inMode('auto')).slice(1).map(i => [i.label, i.description]), [
			['$(blank) Manual', 'default · asks you first'],
			['$(blank) Accept Edits', 'acceptEdits · the agent approves its own actions'],
			['$(blank) Plan Mode', 'plan · the agent approves its own actions'],
			['$(check) Auto', 'auto · the agent approves its own actions'],
		]);
	});
});

describe('the quick picks', () => {
	test('controls: a separator per control, the current value checked', () => {
		assert.deepEqual(controlItems(CLAUDE).map(i => [i.label, i.kind, i.controlId, i.value]), [
			['Mode', vscode.QuickPickItemKind.Separator, undefined, undefined],
			['$(blank) Default', undefined, 'mode', 'default'],
			['$(check) Plan Mode', undefined, 'mode', 'plan'],
		]);
	});
	test('commands: //name, the description, the input hint', () => {
		assert.deepEqual(commandItems(CLAUDE).map(i => [i.label, i.description, i.detail, i.command]), [
			['//compact', 'Compact the conversation', undefined, 'compact'],
			['//review', 'Review', 'Input: what', 'review'],
		]);
	});
});

describe('ChatControls', () => {
	beforeEach(() => mock.reset());
	const log = () => vscode.window.createOutputChannel('t', { log: true }) as unknown as vscode.LogOutputChannel;

	test('the chat that got the latest request is shown; a choice is set on its session', async () => {
		const sets: Array<[string, string, string]> = [];
		const controls = new ChatControls({
			setControl: (chat, control, value) => {
				sets.push([chat, control, value]);
				return Promise.resolve({ controls: [{ ...CLAUDE.controls[0], current: value }], commands: CLAUDE.commands, usage: CLAUDE.usage });
			},
			modelName: id => (id === 'claude' ? 'Claude Code' : undefined),
			log: log(),
			clickCommand: 'lmbridge.agentControls',
		});
		const item = mock.state.statusBarItems[0];
		assert.equal(item.visible, false);
		controls.onState(CLAUDE);
		assert.equal(item.visible, true);
		assert.equal(item.text, '$(hubot) Plan Mode · 53k/200k');
		assert.equal(item.command, 'lmbridge.agentControls');
		assert.equal((item.tooltip as vscode.MarkdownString).isTrusted, false);
		// Another chat's late update does not take the item; its next request does.
		controls.onState({ ...CLAUDE, chatId: 's2', requestId: undefined, usage: { used: 1, size: 10 } });
		assert.equal(controls.active?.chatId, 's1');
		controls.onState({ ...CLAUDE, chatId: 's2', requestId: 9, usage: { used: 1, size: 10 } });
		assert.equal(controls.active?.chatId, 's2');
		assert.equal(item.text, '$(hubot) Plan Mode · 1/10');

		mock.state.quickPickResponse = items => items.find(i => i.value === 'default');
		await controls.pickControl();
		assert.deepEqual(sets, [['s2', 'mode', 'default']]);
		assert.equal(item.text, '$(hubot) Default · 53k/200k');

		mock.state.quickPickResponse = items => items.find(i => i.command === 'review');
		await controls.pickCommand();
		assert.deepEqual(mock.state.executed.at(-1), { command: 'workbench.action.chat.open', args: [{ query: '//review ', isPartialQuery: true }] });

		// A self-approving mode: the item turns to the warning colour, and back.
		controls.onState({ ...inMode('auto'), chatId: 's2', requestId: 10 });
		assert.equal(item.text, '$(warning) Auto: agent approves · 53k/200k');
		assert.equal((item.backgroundColor as { id: string } | undefined)?.id, 'statusBarItem.warningBackground');
		controls.onState({ ...inMode('default'), chatId: 's2', requestId: 11 });
		assert.equal(item.backgroundColor, undefined);

		controls.reset();
		assert.equal(item.visible, false);
		controls.dispose();
		assert.equal(item.disposed, true);
	});

	test('a refused choice is said, the state kept', async () => {
		const controls = new ChatControls({
			setControl: () => Promise.reject(new Error('the agent refused')),
			modelName: () => undefined, log: log(), clickCommand: 'x',
		});
		controls.onState(CLAUDE);
		mock.state.quickPickResponse = items => items.find(i => i.value === 'default');
		await controls.pickControl();
		assert.match(mock.state.warningMessages[0].message, /the agent refused/);
		assert.equal(controls.active?.controls[0].current, 'plan');
	});

	test('nothing to show: a sentence, no quick pick', async () => {
		const controls = new ChatControls({ setControl: () => Promise.resolve({}), modelName: () => undefined, log: log(), clickCommand: 'x' });
		await controls.pickControl();
		await controls.pickCommand();
		assert.equal(mock.state.quickPicks.length, 0);
		assert.equal(mock.state.infoMessages.length, 2);
	});
});
