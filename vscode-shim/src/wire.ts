/**
 * The shim ↔ daemon wire contract, v1 (docs/protocol.md).
 *
 * Transport: the daemon's stdin/stdout, UTF-8, one JSON-RPC 2.0 object per line.
 * Names follow VS Code's classes so the conversion in convert.ts is one-to-one.
 * Types only: nothing here does anything at run time except the constants.
 */

export const PROTOCOL_VERSION = 1;

/**
 * The tools that carry an ACP agent's permission requests, one per risk class. VS Code's
 * "Allow in this Session" approves one tool for the rest of the session, so a session
 * approval of one class never covers a more dangerous one. The daemon picks the tool
 * (docs/protocol.md, "Permission bridging"); the extension treats all five alike.
 */
export const AGENT_ACTION_TOOL = 'symposium-agent-action';
export const AGENT_ACTION_TOOLS = [
	/** Commands (and any request that carries one, whatever its kind), other and unknown actions. */
	AGENT_ACTION_TOOL,
	/** Reading, searching, thinking. */
	'symposium-agent-action-read',
	/** Editing, deleting, moving files. */
	'symposium-agent-action-edit',
	/** Fetching from the network. */
	'symposium-agent-action-fetch',
	/** Switching the agent's mode (leaving plan mode). */
	'symposium-agent-action-mode',
	/**
	 * Changing a protected file (VS Code's `chat.tools.edits.autoApprove` says no), or files the
	 * request does not name: never covered by a session approval of the edit tool.
	 */
	'symposium-agent-action-protected',
] as const;

// ---------------------------------------------------------------- methods

export const Method = {
	initialize: 'initialize',
	chatInformation: 'lm/provideLanguageModelChatInformation',
	chatResponse: 'lm/provideLanguageModelChatResponse',
	tokenCount: 'lm/provideTokenCount',
	shutdown: 'shutdown',
	/** The agents the daemon knows by id alone (`{"id": "claude"}` in lmbridge.agents). */
	agentPresets: 'agents/presets',
	/** The agents of an ACP registry feed the shim fetched, for this platform. */
	agentRegistry: 'agents/registry',
	/** Notification daemon → shim while a chat response runs. */
	responsePart: 'lm/responsePart',
	/** Notification daemon → shim: the models changed (an agent's own models were learnt). */
	modelsChanged: 'lm/modelsChanged',
	/** Notification shim → daemon. */
	cancelRequest: '$/cancelRequest',
	/** Notification daemon → shim: a chat's modes and options, commands and usage (when the shim says `sessionState`). */
	sessionState: 'client/sessionState',
	/** Request shim → daemon: set one of a chat's controls on its live agent session. */
	setControl: 'chat/setControl',
	/** Request daemon → shim: a file's text as the editor has it (unsaved changes included). */
	readTextFile: 'client/readTextFile',
	/** Request daemon → shim: a file's new text, applied as a WorkspaceEdit and saved. */
	writeTextFile: 'client/writeTextFile',
	/** Request daemon → shim: mirror a command lmbridge runs for an agent in a VS Code terminal. */
	terminalOpen: 'client/terminal/open',
	/** Notifications daemon → shim: that command's output, then its end. */
	terminalOutput: 'client/terminal/output',
	terminalExit: 'client/terminal/exit',
	/** Notification shim → daemon: the user closed (or Ctrl+C'd) that terminal: kill the command. */
	terminalKilled: '$/terminalKilled',
	workspaceFolders: '$/workspaceFolders',
} as const;

// ---------------------------------------------------------------- shapes

export type WireRole = 'user' | 'assistant' | 'system';

export interface WireTextPart { type: 'text'; value: string }
export interface WireThinkingPart { type: 'thinking'; value: string; id?: string }
export interface WireToolCallPart { type: 'tool_call'; callId: string; name: string; input: Record<string, unknown> }
export interface WireDataPart { type: 'data'; mimeType: string; /** base64 */ data: string }
export interface WireToolResultPart { type: 'tool_result'; callId: string; content: Array<WireTextPart | WireDataPart> }

export type WireInputPart = WireTextPart | WireThinkingPart | WireToolCallPart | WireToolResultPart | WireDataPart;
/** The daemon's data parts: `stateful_marker` first in an answer, `usage` last (docs/protocol.md, "Shapes"). */
export type WireResponsePart = WireTextPart | WireThinkingPart | WireToolCallPart | WireDataPart;

export interface WireMessage {
	role: WireRole;
	name?: string;
	content: WireInputPart[];
}

export interface WireTool { name: string; description: string; inputSchema?: object }

export interface WireChatOptions {
	tools?: WireTool[];
	toolMode?: 'auto' | 'required';
	modelOptions?: Record<string, unknown>;
	/** VS Code's model configuration (`options.modelConfiguration`): control id → value. */
	configuration?: Record<string, unknown>;
}

/**
 * An `lmbridge.agents` entry as sent in `initialize`. `{id}` alone names one of the
 * daemon's presets (`agents/presets`); any field given overrides the preset's.
 */
export interface AgentSpec {
	id: string;
	name?: string;
	command?: string;
	args?: string[];
	env?: Record<string, string>;
	/** Which VS Code tools the agent is offered, as glob patterns on their names (docs/tools.md). */
	tools?: { allow?: string[]; deny?: string[] };
	/** The agent's mode (its `configOptions` option of category `mode`, e.g. claude's `acceptEdits`), set on each new session unless the chat chose another. */
	mode?: string;
}

export interface ModelInfo {
	id: string;
	name: string;
	family: string;
	version: string;
	maxInputTokens: number;
	maxOutputTokens: number;
	capabilities: { toolCalling: boolean | number; imageInput: boolean };
	tooltip?: string;
	detail?: string;
	/** VS Code's per-model configuration: the agent's modes and options (an enum property each). */
	configurationSchema?: { properties?: Record<string, unknown> };
}

export type StopReason = 'end_turn' | 'tool_calls' | 'cancelled' | 'max_tokens' | 'max_turn_requests' | 'refusal';

// ---------------------------------------------------------------- params and results

export interface InitializeParams {
	protocolVersion: number;
	clientInfo?: { name: string; version: string };
	/** Every workspace folder on disk, in VS Code's order: agents run in the first, and are given the others (ACP `additionalDirectories`) where they take them. */
	workspaceFolders?: string[];
	agents?: AgentSpec[];
	/** What the agent gets of a Copilot-rendered user turn: the user's words (default) or the text as it came. */
	userTurns?: 'request' | 'verbatim';
	/** What the shim serves of the daemon's `client/*` requests and notifications. */
	clientCapabilities?: ClientCapabilities;
	/**
	 * The user's `chat.tools.edits.autoApprove` (glob → VS Code's agent may edit it unasked), as
	 * VS Code gives it: which files are protected. Absent: VS Code's default.
	 */
	editAutoApprove?: Record<string, boolean>;
}

/** `initialize`'s `clientCapabilities` (docs/protocol.md, "Daemon → shim"). */
export interface ClientCapabilities {
	/** `client/readTextFile`, `client/writeTextFile`. */
	fs?: boolean;
	/** `client/terminal/*`. */
	terminal?: boolean;
	/** `client/sessionState`. */
	sessionState?: boolean;
}

/** `client/readTextFile`: `line` is 1-based, `limit` a number of lines. → `{content}`. */
export interface ReadTextFileParams { path: string; line?: number | null; limit?: number | null }
export interface ReadTextFileResult { content: string }
/** `client/writeTextFile` → `{}`. */
export interface WriteTextFileParams { path: string; content: string }
export interface InitializeResult { protocolVersion: number; serverInfo: { name: string; version: string } }

export interface ChatInformationParams { silent?: boolean }
export interface ChatInformationResult { models: ModelInfo[] }

export interface ChatResponseParams { modelId: string; messages: WireMessage[]; options?: WireChatOptions }
export interface ChatResponseResult { stopReason: StopReason }

/** One of the agents the daemon can start from its id alone (`agents/presets`). */
export interface AgentPreset {
	id: string;
	name: string;
	description?: string;
	/** What has to be installed first, e.g. "Node.js 22+ (npx)". */
	requires?: string;
	command?: string;
	args?: string[];
	/** The package `command` runs, e.g. "@agentclientprotocol/claude-agent-acp". */
	package?: string;
	/** The id of the same agent in the ACP registry, e.g. "claude-acp": the two are one agent. */
	registryId?: string;
}
export interface AgentPresetsResult { presets: AgentPreset[] }

/** `agents/registry` params: the feed (`registry.json`) as fetched, and the registry's name of this platform. */
export interface AgentRegistryParams { feed: unknown; platform?: string }

/**
 * One agent of the ACP registry feed, by the distribution the daemon chose for this platform
 * (`npx`, then `uvx`, then `binary`). `npx`/`uvx`: `command` and `args` start it. `binary`:
 * `archive` (with `sha256` where the registry gives one) is unpacked and `cmd` (relative to
 * the unpacked folder) run with `args`.
 */
export interface RegistryAgent {
	id: string;
	name: string;
	version: string;
	description: string;
	website?: string;
	repository?: string;
	license?: string;
	distribution: 'npx' | 'uvx' | 'binary';
	command?: string;
	args: string[];
	env: Record<string, string>;
	archive?: string;
	sha256?: string;
	cmd?: string;
}
export interface AgentRegistryResult {
	agents: RegistryAgent[];
	/** Entries left out, and why (no distribution for this platform, malformed, …). */
	problems: string[];
}

/** A command to run in a terminal to sign in to an agent. */
export interface LoginCommand { command: string; args?: string[]; env?: Record<string, string> }

/** One of an agent's logins: its auth method's id and name, and the command a terminal runs. */
export interface NamedLogin extends LoginCommand { id: string; name: string; description?: string }

/** `error.data` of a chat request whose agent needs a sign-in or a key. */
export interface AuthRequiredData {
	reason: 'auth_required';
	agentId: string;
	agentName?: string;
	login?: LoginCommand | null;
	/** Every login the agent lists (its `terminal` auth methods, else the preset's), `login` the first. */
	logins?: NamedLogin[];
	/** Environment variables any of which would do, set in the agent's `env` in lmbridge.agents. */
	env?: string[];
	methods?: Array<{ id: string; name?: string; description?: string | null }>;
}

export interface ResponsePartParams { requestId: number | string; part: WireResponsePart }

/** One choice of a chat: an agent's mode or another select option. */
export interface WireControl {
	id: string;
	name: string;
	category?: string;
	current?: string;
	/** `approver` (a mode's choices only, where the daemon knows): who approves the agent's
	 * edits and commands in that mode, the user (the agent asks first) or the agent itself. */
	choices: Array<{ value: string; name: string; approver?: Approver }>;
}
/** Who approves an agent's actions in a mode (docs/protocol.md, "Per-chat controls"). */
export type Approver = 'user' | 'agent';
/** One of the agent's slash commands. */
export interface WireCommand { name: string; description: string; hint?: string }
/** The agent's `usage_update`: tokens in the context, the context window, the session's cost. */
export interface WireUsage {
	used?: number;
	size?: number;
	cost?: { amount: number; currency: string };
	/** The latest prompt result's token counts, in ACP's names (`inputTokens`, `outputTokens`, `totalTokens`, …). */
	tokens?: Record<string, number>;
}

/** `client/sessionState`: one chat's state; `requestId` when the chat just got that request. */
export interface SessionStateParams {
	chatId: string;
	modelId: string;
	requestId?: number | string;
	controls: WireControl[];
	commands: WireCommand[];
	usage?: WireUsage;
	/** The agent's title for the chat's session (its `session_info_update`). */
	title?: string;
}
export interface SetControlParams { chatId: string; controlId: string; value: string }

// ---------------------------------------------------------------- the agent-action tools' input

/**
 * `input` of an agent-action tool call. The daemon renders the whole card; the extension
 * shows it as it is and never reads the agent's request itself.
 */
export interface AgentActionInput {
	/** The card's heading: one line. */
	title: string;
	/** The card's body: markdown, the agent's text escaped by the daemon. */
	message: string;
	/** What `invoke` returns; the next request carries it back as the tool result. */
	approvalToken: string;
}

// ---------------------------------------------------------------- JSON-RPC 2.0

export interface RpcError { code: number; message: string; data?: unknown }

export const ErrorCode = {
	ParseError: -32700,
	InvalidRequest: -32600,
	MethodNotFound: -32601,
	InvalidParams: -32602,
	InternalError: -32603,
} as const;
