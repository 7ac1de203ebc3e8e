/** The confirmation text (src/confirmation.ts) and the tool around it (src/tool.ts). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
	codeBlock, commandOf, escapeMarkdown, inlineCode, MAX_BLOCK_LINES, MAX_LOCATIONS, renderConfirmation, simpleDiff, truncate,
} from '../src/confirmation';
import { AgentActionTool } from '../src/tool';
import type { AgentActionInput } from '../src/wire';
import { CancellationTokenSource, LanguageModelTextPart, LanguageModelToolResult, MarkdownString } from './vscode-mock';

const OPTIONS = [
	{ optionId: 'allow', name: 'Allow', kind: 'allow_once' },
	{ optionId: 'allow_always', name: 'Always Allow', kind: 'allow_always' },
	{ optionId: 'reject', name: 'Reject', kind: 'reject_once' },
];

function input(overrides: Partial<AgentActionInput>): AgentActionInput {
	return { title: 'Do something', kind: 'other', rawInput: {}, options: OPTIONS, approvalToken: 'tok-123', ...overrides };
}

describe('renderConfirmation: what the user sees, per kind of request', () => {
	const rows: Array<{ name: string; input: AgentActionInput; title: string; contains: string[]; excludes?: string[] }> = [
		{
			name: 'execute: the command, its description and cwd (claude-agent-acp Bash)',
			input: input({ title: 'Run `rm -rf build`', kind: 'execute', rawInput: { command: 'rm -rf build', description: 'Clean the build folder' }, locations: [] }),
			title: 'Run `rm -rf build`',
			contains: ['**run a command**', 'kind: `execute`', '```sh\nrm -rf build\n```', '*Clean the build folder*', 'Allow · Always Allow · Reject'],
			excludes: ['**Details**'],
		},
		{
			name: 'execute: argv with a shell wrapper shows the script (codex)',
			input: input({ kind: 'execute', rawInput: { command: ['bash', '-lc', 'npm test && echo ok'], cwd: '/work/repo' } }),
			title: 'Do something',
			contains: ['```sh\nnpm test && echo ok\n```', 'in `/work/repo`'],
		},
		{
			name: 'execute: plain argv is shell-quoted',
			input: input({ kind: 'execute', rawInput: { command: ['git', 'commit', '-m', 'two words'] } }),
			title: 'Do something',
			contains: ["git commit -m 'two words'"],
		},
		{
			name: 'edit: a diff from the content, and the file list',
			input: input({
				title: 'Edit src/app.py', kind: 'edit',
				content: [{ type: 'diff', path: '/w/src/app.py', oldText: 'a\nb\nc\n', newText: 'a\nB\nc\n' }],
				locations: [{ path: '/w/src/app.py', line: 2 }],
			}),
			title: 'Edit src/app.py',
			contains: ['**edit files**', '**Changes to `/w/src/app.py`**', '```diff\n--- /w/src/app.py\n+++ /w/src/app.py', '-b\n+B', '**Files**', '- `/w/src/app.py` (line 2)'],
			excludes: ['**Details**'],
		},
		{
			name: 'edit: a new file (no old text)',
			input: input({ kind: 'edit', content: [{ type: 'diff', path: 'new.txt', oldText: null, newText: 'hello\nworld' }] }),
			title: 'Do something',
			contains: ['--- /dev/null', '+++ new.txt', '+hello\n+world'],
		},
		{
			name: 'edit: only in rawInput (Claude Edit tool)',
			input: input({ kind: 'edit', rawInput: { file_path: 'x.ts', old_string: 'let a = 1;', new_string: 'const a = 1;' } }),
			title: 'Do something',
			contains: ['**Changes to `x.ts`**', '-let a = 1;', '+const a = 1;'],
		},
		{
			name: 'read: locations only',
			input: input({ title: 'Read secrets', kind: 'read', rawInput: undefined, locations: [{ path: '/etc/passwd' }, { path: '/etc/shadow', line: null }] }),
			title: 'Read secrets',
			contains: ['**read files**', '- `/etc/passwd`', '- `/etc/shadow`'],
			excludes: ['(line'],
		},
		{
			name: 'fetch: other rawInput shown as JSON details',
			input: input({ kind: 'fetch', rawInput: { url: 'https://example.com', method: 'GET' } }),
			title: 'Do something',
			contains: ['**fetch from the network**', '**Details**', '```json', '"url": "https://example.com"'],
		},
		{
			name: 'text content is shown in a block',
			input: input({ content: [{ type: 'content', content: { type: 'text', text: 'I will now deploy.' } }] }),
			title: 'Do something',
			contains: ['```text\nI will now deploy.\n```'],
		},
		{
			name: 'no title, no kind, no options: sensible defaults',
			input: { approvalToken: 't' },
			title: 'The agent asks for permission',
			contains: ['**act** (kind: `other`)', '**Allow** lets the agent do this once. **Skip** declines'],
			excludes: ['The agent offered'],
		},
		{
			name: 'unknown kind is shown as is',
			input: input({ kind: 'teleport' }),
			title: 'Do something',
			contains: ['**teleport**'],
		},
		{
			name: 'markdown in option names is escaped',
			input: input({ options: [{ optionId: 'a', name: '**Yes** [now](http://x)', kind: 'allow_once' }] }),
			title: 'Do something',
			contains: ['\\*\\*Yes\\*\\* \\[now\\]\\(http://x\\)'],
		},
	];
	for (const row of rows) {
		test(row.name, () => {
			const c = renderConfirmation(row.input);
			assert.equal(c.title, row.title);
			for (const text of row.contains) {
				assert.ok(c.message.includes(text), `expected ${JSON.stringify(text)} in:\n${c.message}`);
			}
			for (const text of row.excludes ?? []) {
				assert.ok(!c.message.includes(text), `did not expect ${JSON.stringify(text)} in:\n${c.message}`);
			}
			assert.equal(c.invocationMessage, `Agent action: ${row.title}`);
		});
	}

	test('a command containing a code fence cannot break out of its block', () => {
		const c = renderConfirmation(input({ kind: 'execute', rawInput: { command: 'echo "```"\n**not bold**' } }));
		assert.ok(c.message.includes('````sh\necho "```"\n**not bold**\n````'), c.message);
	});

	test('long values are cut and say so', () => {
		const command = Array.from({ length: 100 }, (_, i) => `echo ${i}`).join('\n');
		const c = renderConfirmation(input({ kind: 'execute', rawInput: { command } }));
		assert.ok(c.message.includes(`echo ${MAX_BLOCK_LINES - 1}\n… (${100 - MAX_BLOCK_LINES} more lines)`), c.message);
		assert.ok(!c.message.includes(`echo ${MAX_BLOCK_LINES}\n`));
	});

	test('many locations are capped', () => {
		const locations = Array.from({ length: MAX_LOCATIONS + 5 }, (_, i) => ({ path: `f${i}` }));
		const c = renderConfirmation(input({ locations }));
		assert.ok(c.message.includes('… and 5 more'));
		assert.ok(!c.message.includes(`\`f${MAX_LOCATIONS}\``));
	});

	test('the approval token never appears in the confirmation', () => {
		const c = renderConfirmation(input({ kind: 'execute', rawInput: { command: 'ls' } }));
		assert.ok(!c.message.includes('tok-123') && !c.title.includes('tok-123'));
	});
});

describe('markdown helpers', () => {
	const escapes: Array<[string, string]> = [
		['plain', 'plain'],
		['*a* _b_', '\\*a\\* \\_b\\_'],
		['[x](y)', '\\[x\\]\\(y\\)'],
		['<img>', '\\<img\\>'],
		['two\nlines', 'two lines'],
	];
	for (const [text, expected] of escapes) {
		test(`escapeMarkdown(${JSON.stringify(text)})`, () => assert.equal(escapeMarkdown(text), expected));
	}
	const inline: Array<[string, string]> = [
		['a.ts', '`a.ts`'],
		['a`b', '``a`b``'],
		['`x', '`` `x ``'],
	];
	for (const [text, expected] of inline) {
		test(`inlineCode(${JSON.stringify(text)})`, () => assert.equal(inlineCode(text), expected));
	}
	test('codeBlock fence outgrows the content', () => {
		assert.equal(codeBlock('a ```` b', 'sh'), '`````sh\na ```` b\n`````');
	});
	test('truncate by characters', () => {
		assert.equal(truncate('abcdef', 10, 3), 'abc…');
		assert.equal(truncate('a\nb\nc', 2), 'a\nb\n… (1 more line)');
		assert.equal(truncate('short'), 'short');
	});
});

describe('simpleDiff', () => {
	const rows: Array<[string, string | null, string, string]> = [
		['one line changed, context kept', 'a\nb\nc\nd\ne', 'a\nb\nX\nd\ne', '--- f\n+++ f\n@@ -1 +1 @@\n a\n b\n-c\n+X\n d\n e'],
		['addition at the end', 'a', 'a\nb', '--- f\n+++ f\n@@ -1 +1 @@\n a\n+b'],
		['new file', null, 'x\ny', '--- /dev/null\n+++ f\n@@ -0 +1 @@\n+x\n+y'],
		['deleted content', 'x\ny', '', '--- f\n+++ f\n@@ -1 +0 @@\n-x\n-y'],
		['final newlines are not an extra line', 'a\n', 'a\nb\n', '--- f\n+++ f\n@@ -1 +1 @@\n a\n+b'],
		['new file ending in a newline', null, 'Hello\n', '--- /dev/null\n+++ f\n@@ -0 +1 @@\n+Hello'],
		['far context trimmed', '1\n2\n3\n4\n5\n6\n7', '1\n2\n3\n4\n5\n6\nS', '--- f\n+++ f\n@@ -4 +4 @@\n 4\n 5\n 6\n-7\n+S'],
	];
	for (const [name, before, after, expected] of rows) {
		test(name, () => assert.equal(simpleDiff('f', before, after), expected));
	}
});

describe('commandOf', () => {
	const rows: Array<[string, unknown, ReturnType<typeof commandOf>]> = [
		['string', { command: 'ls -la' }, { command: 'ls -la', cwd: undefined, description: undefined }],
		['cmd key', { cmd: 'make' }, { command: 'make', cwd: undefined, description: undefined }],
		['sh -c', { command: ['/bin/sh', '-c', 'a | b'], workdir: '/w' }, { command: 'a | b', cwd: '/w', description: undefined }],
		['empty string', { command: '  ' }, undefined],
		['no command', { path: 'x' }, undefined],
		['not an object', 'ls', undefined],
		['mixed array', { command: ['a', 1] }, undefined],
	];
	for (const [name, raw, expected] of rows) {
		test(name, () => assert.deepEqual(commandOf(raw), expected));
	}
});

describe('AgentActionTool', () => {
	const tool = new AgentActionTool();
	const token = new CancellationTokenSource().token;

	test('prepareInvocation: the confirmation, as a MarkdownString, and the progress message', () => {
		const prepared = tool.prepareInvocation({ input: input({ title: 'Run tests', kind: 'execute', rawInput: { command: 'npm test' } }) } as any);
		assert.equal(prepared.confirmationMessages?.title, 'Run tests');
		const message = prepared.confirmationMessages?.message;
		assert.ok(message instanceof MarkdownString);
		assert.ok(message.value.includes('```sh\nnpm test\n```'));
		assert.equal(message.isTrusted, false);
		assert.equal(prepared.invocationMessage, 'Agent action: Run tests');
	});

	test('invoke returns exactly one text part equal to the approval token', async () => {
		const result = await tool.invoke({ input: input({ approvalToken: 'lmbridge-approve-9f2c' }) } as any, token as any);
		assert.ok(result instanceof LanguageModelToolResult);
		assert.equal(result.content.length, 1);
		assert.ok(result.content[0] instanceof LanguageModelTextPart);
		assert.equal((result.content[0] as LanguageModelTextPart).value, 'lmbridge-approve-9f2c');
	});

	test('invoke without a token throws (the result then carries an error, which the daemon treats as a rejection)', () => {
		assert.throws(() => tool.invoke({ input: { title: 'x' } } as any, token as any), /no approval token/);
		assert.throws(() => tool.invoke({ input: { approvalToken: '' } } as any, token as any), /no approval token/);
	});
});
