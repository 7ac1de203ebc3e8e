/** The two halves of src/ (docs/vscode-shim.md, "Layout"): the chat path never imports the product surface. */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

test('src/chat imports nothing of src/product or the extension', () => {
	const chat = path.resolve(__dirname, '../../src/chat');
	const files = fs.readdirSync(chat).filter(f => f.endsWith('.ts'));
	assert.ok(files.includes('provider.ts') && files.includes('wire.ts'), files.join(' '));
	for (const file of files) {
		const imports = [...fs.readFileSync(path.join(chat, file), 'utf8').matchAll(/from '([^']+)'/g)].map(m => m[1]);
		for (const target of imports.filter(i => i.startsWith('.'))) {
			assert.ok(target.startsWith('./'), `src/chat/${file} imports ${target}`);
		}
	}
});
