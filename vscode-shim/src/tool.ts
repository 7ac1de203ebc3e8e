/**
 * The `symposium-agent-action` tool: how an ACP agent's permission request reaches the
 * user. The daemon emits it as a tool call; VS Code shows the confirmation from
 * `prepareInvocation`; on Allow, `invoke` returns the call's approval token, which the
 * next request carries back to the daemon as the tool result (issue 2, "Permission
 * bridging"). Skip never calls `invoke`, so a token can only come from here.
 */
import * as vscode from 'vscode';
import { renderConfirmation } from './confirmation';
import type { AgentActionInput } from './wire';

export class AgentActionTool implements vscode.LanguageModelTool<AgentActionInput> {
	prepareInvocation(
		options: vscode.LanguageModelToolInvocationPrepareOptions<AgentActionInput>,
		_token?: vscode.CancellationToken,
	): vscode.PreparedToolInvocation {
		const confirmation = renderConfirmation(options.input ?? ({} as AgentActionInput));
		return {
			invocationMessage: confirmation.invocationMessage,
			confirmationMessages: {
				title: confirmation.title,
				message: new vscode.MarkdownString(confirmation.message),
			},
		};
	}

	invoke(
		options: vscode.LanguageModelToolInvocationOptions<AgentActionInput>,
		_token?: vscode.CancellationToken,
	): vscode.LanguageModelToolResult {
		const token = options.input?.approvalToken;
		if (typeof token !== 'string' || token.length === 0) {
			// The result then carries this error text, which the daemon reads as a rejection.
			throw new Error('lmbridge: this permission request has no approval token; it cannot be approved');
		}
		return new vscode.LanguageModelToolResult([new vscode.LanguageModelTextPart(token)]);
	}
}
