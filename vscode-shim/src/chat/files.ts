/**
 * `client/readTextFile` and `client/writeTextFile` (docs/protocol.md, "Daemon → shim";
 * docs/vscode-shim.md, "Files through the editor"): an agent's `fs/read_text_file` and
 * `fs/write_text_file`, served by VS Code.
 *
 * - Read: the document as VS Code has it, unsaved changes included (an open editor's text;
 *   else the file, loaded by VS Code); `line` (1-based) and `limit` (lines) cut it.
 * - Write: a WorkspaceEdit (only the changed middle of the text is replaced), then the
 *   document is saved: the change is one step on the editor's undo stack (Ctrl+Z restores
 *   the old text) and VS Code's own file events see it. A new file is created by the edit.
 * - Both only inside the workspace folders: the path is resolved as the OS would (`..`,
 *   symlinks; a missing tail is taken as written) and must then lie in a folder (itself
 *   resolved). The daemon checks the same before it asks; this is the second lock.
 */
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { RpcHandlerError } from './rpc';
import type { ReadTextFileParams, ReadTextFileResult, WriteTextFileParams } from './wire';
import { ErrorCode } from './wire';

/** ACP's "Resource not found" (agents recognise a missing file by it). */
export const RESOURCE_NOT_FOUND = ErrorCode.ResourceNotFound;

/** `path` as the OS resolves it: each existing component's symlinks followed, `..` taken
 *  after them; a component that does not exist (a file to create) is kept as written. */
export async function resolveReal(p: string): Promise<string> {
	let current = path.parse(p).root || path.sep;
	for (const part of p.split(/[\\/]+/).slice(1)) {
		if (!part || part === '.') {
			continue;
		}
		if (part === '..') {
			current = path.dirname(current);
			continue;
		}
		const next = path.join(current, part);
		try {
			current = await fs.promises.realpath(next);
		} catch (err) {
			const code = (err as NodeJS.ErrnoException).code;
			if (code !== 'ENOENT' && code !== 'ENOTDIR') {
				throw err;
			}
			current = next;
		}
	}
	return current;
}

/** Whether `real` is one of `folders` or lies inside one (all resolved already). */
export function inside(real: string, folders: readonly string[]): boolean {
	return folders.some(f => real === f || real.startsWith(f.endsWith(path.sep) ? f : f + path.sep));
}

/** The lines `line` (1-based) … `line + limit - 1` of `text`, line ends kept. */
export function cutLines(text: string, line?: number | null, limit?: number | null): string {
	if ((line === undefined || line === null) && (limit === undefined || limit === null)) {
		return text;
	}
	const lines = text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
	const start = Math.max(0, (line ?? 1) - 1);
	const end = limit === undefined || limit === null ? lines.length : start + Math.max(0, limit);
	return lines.slice(start, end).join('');
}

/** The smallest single replacement turning `before` into `after`: `[start, end, text]`
 *  in offsets of `before` (common prefix and suffix kept: cursors and folds elsewhere stay). */
export function changedMiddle(before: string, after: string): [number, number, string] {
	let start = 0;
	const shorter = Math.min(before.length, after.length);
	while (start < shorter && before.charCodeAt(start) === after.charCodeAt(start)) {
		start++;
	}
	let tail = 0;
	while (tail < shorter - start && before.charCodeAt(before.length - 1 - tail) === after.charCodeAt(after.length - 1 - tail)) {
		tail++;
	}
	// Never split a surrogate pair.
	if (start > 0 && isHighSurrogate(before.charCodeAt(start - 1))) {
		start--;
	}
	if (tail > 0 && isLowSurrogate(before.charCodeAt(before.length - tail))) {
		tail--;
	}
	return [start, before.length - tail, after.slice(start, after.length - tail)];
}

function isHighSurrogate(c: number): boolean {
	return c >= 0xd800 && c <= 0xdbff;
}

function isLowSurrogate(c: number): boolean {
	return c >= 0xdc00 && c <= 0xdfff;
}

/**
 * The workspace folders as the daemon gets them (`initialize`'s and `$/workspaceFolders`'s
 * `workspaceFolders`) and as this file judges paths: every folder on disk (`file:`), in
 * VS Code's order (the first is where agents run; the daemon gives them the others as ACP
 * `additionalDirectories`). A remote folder (`vscode-remote:`, `vscode-vfs:`) is none.
 */
export function folderPaths(folders: readonly { uri: { scheme: string; fsPath: string } }[] | undefined = vscode.workspace.workspaceFolders): string[] {
	return (folders ?? []).filter(f => f.uri.scheme === 'file').map(f => f.uri.fsPath);
}

function workspaceFolders(): string[] {
	return folderPaths();
}

/** `p` resolved, if it lies in a workspace folder; else a clear error. */
async function allowed(p: unknown): Promise<string> {
	if (typeof p !== 'string' || !path.isAbsolute(p)) {
		throw new RpcHandlerError(ErrorCode.InvalidParams, `invalid params: path must be an absolute path, not ${JSON.stringify(p)?.slice(0, 200)}`);
	}
	let real: string;
	let folders: string[];
	try {
		real = await resolveReal(p);
		folders = await Promise.all(workspaceFolders().map(resolveReal));
	} catch (err) {
		throw new RpcHandlerError(ErrorCode.InvalidParams, `refused: ${p} cannot be resolved (${err instanceof Error ? err.message : String(err)})`);
	}
	if (!inside(real, folders)) {
		const where = folders.length ? folders.join(', ') : 'none is open';
		throw new RpcHandlerError(ErrorCode.InvalidParams, `refused: ${p} is outside the workspace folders (${where})`);
	}
	return real;
}

async function exists(uri: vscode.Uri): Promise<boolean> {
	try {
		await vscode.workspace.fs.stat(uri);
		return true;
	} catch {
		return false;
	}
}

export async function readTextFile(params: unknown): Promise<ReadTextFileResult> {
	const p = (params ?? {}) as ReadTextFileParams;
	const real = await allowed(p.path);
	const uri = vscode.Uri.file(real);
	// An open document (dirty or not) is read as the editor has it, even if not on disk.
	const open = vscode.workspace.textDocuments.find(d => d.uri.scheme === 'file' && d.uri.fsPath === real);
	if (!open && !(await exists(uri))) {
		throw new RpcHandlerError(RESOURCE_NOT_FOUND, `Resource not found: ${p.path} (ENOENT: no such file)`);
	}
	const document = open ?? await vscode.workspace.openTextDocument(uri);
	return { content: cutLines(document.getText(), p.line, p.limit) };
}

export async function writeTextFile(params: unknown): Promise<Record<string, never>> {
	const p = (params ?? {}) as WriteTextFileParams;
	if (typeof p.content !== 'string') {
		throw new RpcHandlerError(ErrorCode.InvalidParams, 'invalid params: content must be a string');
	}
	const real = await allowed(p.path);
	const uri = vscode.Uri.file(real);
	const edit = new vscode.WorkspaceEdit();
	const open = vscode.workspace.textDocuments.find(d => d.uri.scheme === 'file' && d.uri.fsPath === real);
	if (open || await exists(uri)) {
		const document = open ?? await vscode.workspace.openTextDocument(uri);
		const [start, end, text] = changedMiddle(document.getText(), p.content);
		edit.replace(uri, new vscode.Range(document.positionAt(start), document.positionAt(end)), text);
	} else {
		edit.createFile(uri, { ignoreIfExists: true });
		edit.insert(uri, new vscode.Position(0, 0), p.content);
	}
	if (!(await vscode.workspace.applyEdit(edit))) {
		throw new RpcHandlerError(ErrorCode.InternalError, `VS Code did not apply the edit to ${p.path}`);
	}
	const document = await vscode.workspace.openTextDocument(uri);
	if (!(await document.save()) && document.isDirty) {
		throw new RpcHandlerError(ErrorCode.InternalError, `VS Code applied the edit to ${p.path} but could not save it`);
	}
	return {};
}
