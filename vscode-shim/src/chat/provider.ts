/**
 * The language-model provider VS Code calls: converts (convert.ts), asks the daemon
 * (daemon.ts), reports what comes back. No bridge logic lives here.
 */
import * as vscode from 'vscode';
import {
	errorFromRpc, estimateTokens, messagesToWire, modelInfoFromWire, optionsToWire, responsePartFromWire,
	ThinkingDisplay,
} from './convert';
import { authRequired } from './auth';
import { DaemonClient, RequestCancelled } from './daemon';
import { RpcRequestError } from './rpc';
import type {
	AuthRequiredData, ChatInformationResult, ChatResponseParams, ChatResponseResult, WireResponsePart,
} from './wire';
import { Method } from './wire';

export interface ProviderSettings {
	thinking: ThinkingDisplay;
}

export interface ProviderHooks {
	/** A chat request failed because its agent needs a sign-in (the chat shows the daemon's message). */
	onAuthRequired?(auth: AuthRequiredData, message: string): void;
}

export class LmBridgeProvider implements vscode.LanguageModelChatProvider, vscode.Disposable {
	private readonly changed = new vscode.EventEmitter<void>();
	readonly onDidChangeLanguageModelChatInformation = this.changed.event;
	/** Set when reporting a thinking part threw: the host rejects them, so stop sending them. */
	private thinkingRejected = false;
	/** Drop reasons already logged at warning level. */
	private readonly warned = new Set<string>();
	/** Model id → the name VS Code shows, from the daemon's last list. */
	private readonly names = new Map<string, string>();

	constructor(
		private readonly daemon: DaemonClient,
		private readonly log: vscode.LogOutputChannel,
		private readonly settings: () => ProviderSettings,
		private readonly hooks: ProviderHooks = {},
	) { }

	/** The name VS Code shows for `modelId`, as the daemon last listed it. */
	modelName(modelId: string): string | undefined {
		return this.names.get(modelId);
	}

	/** Tells VS Code to ask for the models again (the agents setting changed). */
	modelsChanged(): void {
		this.changed.fire();
	}

	dispose(): void {
		this.changed.dispose();
	}

	async provideLanguageModelChatInformation(
		options: vscode.PrepareLanguageModelChatModelOptions,
		token: vscode.CancellationToken,
	): Promise<vscode.LanguageModelChatInformation[]> {
		try {
			const result = await this.daemon.request<ChatInformationResult>(
				Method.chatInformation, { silent: !!options?.silent }, { token });
			const models = Array.isArray(result?.models) ? result.models : [];
			const infos = models.map(modelInfoFromWire);
			this.names.clear();
			for (const info of infos) {
				this.names.set(info.id, info.name);
			}
			return infos;
		} catch (err) {
			if (!(err instanceof RequestCancelled)) {
				// The daemon client has already told the user when the daemon itself failed.
				this.log.error(`could not list the agents: ${err instanceof Error ? err.message : String(err)}`);
			}
			return [];
		}
	}

	async provideLanguageModelChatResponse(
		model: vscode.LanguageModelChatInformation,
		messages: readonly vscode.LanguageModelChatRequestMessage[],
		options: vscode.ProvideLanguageModelChatResponseOptions,
		progress: vscode.Progress<vscode.LanguageModelResponsePart>,
		token: vscode.CancellationToken,
	): Promise<void> {
		const converted = messagesToWire(messages);
		for (const dropped of converted.dropped) {
			// Copilot re-sends the whole history: say it once, not on every request.
			const level = this.warned.has(dropped) ? 'trace' : 'warn';
			if (this.warned.size < 1000) {
				this.warned.add(dropped);
			}
			this.log[level](`not sent to the agent: ${dropped}`);
		}
		const params: ChatResponseParams = { modelId: model.id, messages: converted.value, options: optionsToWire(options) };
		const thinking = this.settings().thinking;
		let open = true;
		const onPart = (part: WireResponsePart) => {
			if (!open || token.isCancellationRequested) {
				return;
			}
			if (part?.type === 'thinking' && this.thinkingRejected && thinking === 'auto') {
				return;
			}
			const vsPart = responsePartFromWire(part, thinking);
			if (!vsPart) {
				if (part?.type !== 'thinking') {
					this.log.warn(`dropped a response part of unknown type ${JSON.stringify(part?.type)}`);
				}
				return;
			}
			try {
				progress.report(vsPart as vscode.LanguageModelResponsePart);
			} catch (err) {
				if (part.type !== 'thinking') {
					throw err;
				}
				this.thinkingRejected = true;
				this.log.warn(`VS Code refused a thinking part (${err instanceof Error ? err.message : String(err)}); thinking is hidden from now on`);
			}
		};
		try {
			const result = await this.daemon.request<ChatResponseResult>(Method.chatResponse, params, { token, onPart });
			this.log.debug(`response from ${model.id} ended: ${result?.stopReason}`);
		} catch (err) {
			if (err instanceof RequestCancelled) {
				return;
			}
			if (err instanceof RpcRequestError) {
				const auth = authRequired(err.rpc);
				if (auth) {
					this.hooks.onAuthRequired?.(auth, err.rpc.message);
				}
				throw errorFromRpc(err.rpc);
			}
			throw err;
		} finally {
			open = false;
		}
	}

	provideTokenCount(
		_model: vscode.LanguageModelChatInformation,
		text: string | vscode.LanguageModelChatRequestMessage,
		_token?: vscode.CancellationToken,
	): Promise<number> {
		return Promise.resolve(estimateTokens(text));
	}
}
