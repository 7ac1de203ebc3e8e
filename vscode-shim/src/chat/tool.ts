/**
 * The agent-action tools: how an ACP agent's permission request reaches the user. The
 * daemon emits a call of one of AGENT_ACTION_TOOLS (one per risk class, wire.ts) with
 * `{title, message, approvalToken}`; VS Code shows the confirmation from
 * `prepareInvocation`; on Allow, `invoke` returns the call's approval token, which the next
 * request carries back to the daemon as the tool result (docs/protocol.md, "Permission
 * bridging"). Skip never calls `invoke`, so a token can only come from here. All five
 * tools are this one class: which tool it is matters only to VS Code's session approval.
 */
import * as vscode from 'vscode';
import { confirmationOf } from './confirmation';
import type { AgentActionInput } from './wire';

/**
 * The card's body as VS Code will render it: not trusted (command links do nothing), no
 * HTML, no `$(icon)` syntax. The daemon escapes the agent's text; this is the second wall.
 */
export function untrustedMarkdown(value: string): vscode.MarkdownString {
	const markdown = new vscode.MarkdownString(value, false);
	markdown.isTrusted = false;
	markdown.supportHtml = false;
	markdown.supportThemeIcons = false;
	return markdown;
}

export class AgentActionTool implements vscode.LanguageModelTool<AgentActionInput> {
	prepareInvocation(
		options: vscode.LanguageModelToolInvocationPrepareOptions<AgentActionInput>,
		_token?: vscode.CancellationToken,
	): vscode.PreparedToolInvocation {
		const confirmation = confirmationOf(options.input);
		return {
			invocationMessage: confirmation.invocationMessage,
			confirmationMessages: {
				title: confirmation.title,
				message: untrustedMarkdown(confirmation.message),
			},
		};
	}

	invoke(
		options: vscode.LanguageModelToolInvocationOptions<AgentActionInput>,
		_token?: vscode.CancellationToken,
	): vscode.LanguageModelToolResult {
		const token = (options.input as Partial<AgentActionInput> | undefined)?.approvalToken;
		if (typeof token !== 'string' || token.length === 0) {
			// The result then carries this error text, which the daemon reads as a rejection.
			throw new Error('lmbridge: this permission request has no approval token; it cannot be approved');
		}
		return new vscode.LanguageModelToolResult([new vscode.LanguageModelTextPart(token)]);
	}
}
