/** client/readTextFile and client/writeTextFile (src/chat/files.ts): the path rule on a real
 *  file system (symlinks, `..`), line cutting, the edit, against the mock's documents. */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { changedMiddle, cutLines, inside, readTextFile, resolveReal, RESOURCE_NOT_FOUND, writeTextFile } from '../src/chat/files';
import { RpcHandlerError } from '../src/chat/rpc';
import { mock } from './vscode-mock';

afterEach(() => mock.reset());

/** A workspace folder and a folder beside it, both real (resolved) paths. */
function layout(): { work: string; outside: string } {
	const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'lmbridge-files-')));
	const work = path.join(root, 'work');
	const outside = path.join(root, 'outside');
	fs.mkdirSync(work);
	fs.mkdirSync(outside);
	fs.writeFileSync(path.join(work, 'a.txt'), 'one\ntwo\nthree\n');
	fs.writeFileSync(path.join(outside, 'secret.txt'), 'secret\n');
	fs.symlinkSync(outside, path.join(work, 'escape'));
	fs.symlinkSync(path.join(work, 'a.txt'), path.join(outside, 'link-in.txt'));
	mock.setWorkspaceFolders([work]);
	return { work, outside };
}

/** Parts joined with "/" as they are (path.join would take the `..` away before the test). */
const raw = (...parts: string[]) => parts.join('/');

async function refused(promise: Promise<unknown>, pattern: RegExp): Promise<void> {
	await assert.rejects(promise, (e: unknown) => {
		assert.ok(e instanceof RpcHandlerError, String(e));
		assert.equal(e.code, -32602);
		assert.match(e.message, pattern);
		return true;
	});
}

describe('files: the pure parts', () => {
	test('cutLines: line is 1-based, limit counts lines, line ends kept', () => {
		const text = 'a\nb\nc\nd';
		assert.equal(cutLines(text), text);
		assert.equal(cutLines(text, 2), 'b\nc\nd');
		assert.equal(cutLines(text, 2, 2), 'b\nc\n');
		assert.equal(cutLines(text, undefined, 1), 'a\n');
		assert.equal(cutLines(text, 9, 3), '');
		assert.equal(cutLines(text, 1, 0), '');
		assert.equal(cutLines('', 1, 5), '');
	});

	test('changedMiddle: one replacement that turns before into after', () => {
		const cases: Array<[string, string]> = [
			['abc', 'abc'], ['abc', 'abXc'], ['one\ntwo\n', 'one\n2\n'], ['', 'new'], ['old', ''], ['aaa', 'aa'],
			['x😀y', 'x😁y'], ['😀', '😀😀'], ['ab', 'ba'],
		];
		for (const [before, after] of cases) {
			const [start, end, text] = changedMiddle(before, after);
			assert.equal(before.slice(0, start) + text + before.slice(end), after, JSON.stringify([before, after]));
			assert.ok(start <= end && end <= before.length);
		}
		assert.deepEqual(changedMiddle('one\ntwo\nthree\n', 'one\n2\nthree\n'), [4, 7, '2']);
	});

	test('inside: the folder itself and what lies under it, not a sibling with the same prefix', () => {
		assert.ok(inside('/w', ['/w']));
		assert.ok(inside('/w/a/b', ['/x', '/w']));
		assert.ok(!inside('/work2/a', ['/work']));
		assert.ok(!inside('/', ['/w']));
		assert.ok(!inside('/w/a', []));
	});

	test('resolveReal follows symlinks, takes .. after them, keeps a missing tail', async () => {
		const { work, outside } = layout();
		assert.equal(await resolveReal(path.join(work, 'escape', 'secret.txt')), path.join(outside, 'secret.txt'));
		assert.equal(await resolveReal(raw(work, 'escape', '..', 'work', 'a.txt')), path.join(work, 'a.txt'));
		assert.equal(await resolveReal(raw(work, 'sub', '..', '..', 'outside')), outside);
		assert.equal(await resolveReal(raw(work, 'escape', '..', 'outside', 'secret.txt')), path.join(outside, 'secret.txt'));
		assert.equal(await resolveReal(path.join(work, 'new', 'file.txt')), path.join(work, 'new', 'file.txt'));
		assert.equal(await resolveReal(path.join(outside, 'link-in.txt')), path.join(work, 'a.txt'));
	});
});

describe('files: client/readTextFile', () => {
	test('an open document is read with its unsaved changes; line and limit cut it', async () => {
		const { work } = layout();
		const file = path.join(work, 'a.txt');
		mock.openDocument(file, 'one\nTWO (unsaved)\nthree\n');
		assert.deepEqual(await readTextFile({ path: file }), { content: 'one\nTWO (unsaved)\nthree\n' });
		assert.deepEqual(await readTextFile({ path: file, line: 2, limit: 1 }), { content: 'TWO (unsaved)\n' });
		assert.equal(fs.readFileSync(file, 'utf8'), 'one\ntwo\nthree\n', 'nothing saved by a read');
	});

	test('a file not open is read from VS Code\'s file', async () => {
		const { work } = layout();
		assert.deepEqual(await readTextFile({ path: path.join(work, 'a.txt'), line: 3 }), { content: 'three\n' });
	});

	test('a missing file is "Resource not found" (-32002), as ACP agents expect', async () => {
		const { work } = layout();
		await assert.rejects(readTextFile({ path: path.join(work, 'nope.txt') }), (e: unknown) => {
			assert.ok(e instanceof RpcHandlerError && e.code === RESOURCE_NOT_FOUND && /Resource not found/.test(e.message));
			return true;
		});
		assert.equal(RESOURCE_NOT_FOUND, -32002);
	});

	test('outside the workspace is refused: directly, through .., through a symlink', async () => {
		const { work, outside } = layout();
		await refused(readTextFile({ path: path.join(outside, 'secret.txt') }), /outside the workspace folders/);
		await refused(readTextFile({ path: raw(work, '..', 'outside', 'secret.txt') }), /outside the workspace folders/);
		await refused(readTextFile({ path: path.join(work, 'escape', 'secret.txt') }), /outside the workspace folders/);
		await refused(readTextFile({ path: 'a.txt' }), /absolute path/);
		await refused(readTextFile({}), /absolute path/);
		// A symlink outside that points in is fine: what is read lies inside.
		assert.deepEqual(await readTextFile({ path: path.join(outside, 'link-in.txt'), limit: 1 }), { content: 'one\n' });
	});

	test('with no workspace folder everything is refused', async () => {
		const { work } = layout();
		mock.setWorkspaceFolders(undefined);
		await refused(readTextFile({ path: path.join(work, 'a.txt') }), /none is open/);
	});
});

describe('files: client/writeTextFile', () => {
	test('an edit of the changed part, saved; the old text is one undo step away', async () => {
		const { work } = layout();
		const file = path.join(work, 'a.txt');
		assert.deepEqual(await writeTextFile({ path: file, content: 'one\n2\nthree\n' }), {});
		assert.equal(fs.readFileSync(file, 'utf8'), 'one\n2\nthree\n');
		const [edit] = mock.state.appliedEdits as any[];
		assert.equal(edit.edits.length, 1);
		assert.deepEqual(JSON.parse(JSON.stringify(edit.edits[0].range)), { start: { line: 1, character: 0 }, end: { line: 1, character: 3 } });
		assert.equal(edit.edits[0].text, '2');
		const [document] = mock.state.documents;
		assert.deepEqual(document.undo, ['one\ntwo\nthree\n']);
		assert.equal(document.saves, 1);
		assert.equal(document.isDirty, false);
	});

	test('a new file is created by the edit and saved', async () => {
		const { work } = layout();
		const file = path.join(work, 'new.txt');
		await writeTextFile({ path: file, content: 'hello\n' });
		assert.equal(fs.readFileSync(file, 'utf8'), 'hello\n');
		assert.deepEqual((mock.state.appliedEdits[0] as any).edits.map((e: any) => e.kind), ['create', 'replace']);
	});

	test('outside the workspace nothing is written', async () => {
		const { work, outside } = layout();
		await refused(writeTextFile({ path: path.join(work, 'escape', 'secret.txt'), content: 'x' }), /outside the workspace folders/);
		await refused(writeTextFile({ path: path.join(work, 'escape', 'new.txt'), content: 'x' }), /outside the workspace folders/);
		await refused(writeTextFile({ path: raw(work, '..', 'outside', 'secret.txt'), content: 'x' }), /outside the workspace folders/);
		assert.equal(fs.readFileSync(path.join(outside, 'secret.txt'), 'utf8'), 'secret\n');
		assert.ok(!fs.existsSync(path.join(outside, 'new.txt')));
		assert.equal(mock.state.appliedEdits.length, 0);
	});

	test('content must be a string', async () => {
		const { work } = layout();
		await refused(writeTextFile({ path: path.join(work, 'a.txt') }), /content must be a string/);
	});
});
