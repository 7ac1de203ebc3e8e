/**
 * Entry point: wires settings, the daemon client, the provider and the tool together.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as vscode from 'vscode';
import { AuthNotifier } from './chat/auth';
import { BootstrapDeps, DaemonBootstrap } from './product/bootstrap';
import { AgentActionTool } from './chat/tool';
import { DAEMON_SETTINGS, readSettings, SECTION, Settings, workspaceMachineSettings } from './product/config';
import { DaemonClient, DaemonClientOptions } from './chat/daemon';
import { ChatControls } from './product/controls';
import { importAgents } from './product/import';
import { folderPaths, readTextFile, writeTextFile } from './chat/files';
import { manageAgents, ManageDeps, offerUpdates } from './product/manage';
import { LmBridgeProvider } from './chat/provider';
import type { Fetch } from './product/registry';
import { TerminalMirror } from './chat/terminals';
import { AGENT_ACTION_TOOLS, InitializeParams, Method, PROTOCOL_VERSION } from './chat/wire';

export const VENDOR = 'lmbridge';
export const COMMANDS = {
	manage: 'lmbridge.manage',
	showLogs: 'lmbridge.showLogs',
	restart: 'lmbridge.restartDaemon',
	controls: 'lmbridge.agentControls',
	commands: 'lmbridge.agentCommands',
	importAgents: 'lmbridge.importAgents',
} as const;

export interface LmBridgeApi {
	daemon: DaemonClient;
	provider: LmBridgeProvider;
	tool: AgentActionTool;
	auth: AuthNotifier;
	bootstrap: DaemonBootstrap;
	controls: ChatControls;
	/** The registry agents with an update, checked once at activation (manage.ts offerUpdates). */
	updates: Promise<string[]>;
}

/** Test seams: the daemon client's options, and the bootstrap's process runner and platform. */
export interface ActivateOverrides extends Partial<DaemonClientOptions> {
	bootstrap?: Partial<Pick<BootstrapDeps, 'run' | 'platform' | 'env' | 'withProgress' | 'storageDir' | 'wheelDir'>>;
	/** The ACP registry's downloads (the feed, binary agents). */
	fetchImpl?: Fetch;
}

let active: DaemonClient | undefined;

function settings(): Settings {
	return readSettings(vscode.workspace.getConfiguration(SECTION));
}

/** The daemon runs in the first local workspace folder (when it exists), else where VS Code runs. */
function daemonCwd(): string | undefined {
	const first = vscode.workspace.workspaceFolders?.[0];
	return first?.uri.scheme === 'file' && fs.existsSync(first.uri.fsPath) ? first.uri.fsPath : undefined;
}

export function initializeParams(version: string, current: Settings = settings()): InitializeParams {
	const folders = folderPaths();
	const params: InitializeParams = {
		protocolVersion: PROTOCOL_VERSION,
		clientInfo: { name: 'lmbridge-vscode', version },
		workspaceFolders: folders,
		userTurns: current.userTurns,
		// What this extension serves of the daemon's client/* requests and notifications (registered in activate).
		clientCapabilities: { fs: true, terminal: true, sessionState: true },
	};
	if (current.agents.length > 0) {
		params.agents = current.agents;
	}
	const editAutoApprove = editAutoApproveSetting();
	if (editAutoApprove) {
		params.editAutoApprove = editAutoApprove;
	}
	return params;
}

/**
 * The user's `chat.tools.edits.autoApprove` (an application-scoped setting: a workspace cannot
 * set it), its boolean entries in VS Code's order; undefined when this VS Code has none.
 */
export function editAutoApproveSetting(): Record<string, boolean> | undefined {
	const value: unknown = vscode.workspace.getConfiguration('chat.tools.edits').get('autoApprove');
	if (typeof value !== 'object' || value === null || Array.isArray(value)) {
		return undefined;
	}
	const rules = Object.entries(value).filter((entry): entry is [string, boolean] => typeof entry[1] === 'boolean');
	return rules.length > 0 ? Object.fromEntries(rules) : undefined;
}

export function activate(context: vscode.ExtensionContext, overrides: ActivateOverrides = {}): LmBridgeApi {
	const { bootstrap: bootstrapOverrides, fetchImpl, ...clientOverrides } = overrides;
	const log = vscode.window.createOutputChannel('lmbridge', { log: true });
	const version = String((context.extension?.packageJSON as { version?: string } | undefined)?.version ?? '0.0.0');

	const reportAgentProblems = (s: Settings) => {
		for (const problem of s.agentProblems) {
			log.warn(`settings: ${problem}`);
		}
		for (const key of workspaceMachineSettings(vscode.workspace.getConfiguration(SECTION))) {
			log.warn(`settings: ${key} set by the workspace is ignored: it chooses what runs, so only your user settings can set it`);
		}
	};
	reportAgentProblems(settings());

	// The daemon: the user's (pythonPath, daemon.command, PATH) or the one the vsix carries.
	const extensionPath = context.extensionUri?.fsPath ?? context.extensionPath ?? path.resolve(__dirname, '..');
	const storageDir = context.globalStorageUri?.fsPath ?? path.join(extensionPath, '.storage');
	const bootstrap = new DaemonBootstrap({
		storageDir,
		wheelDir: path.join(extensionPath, 'daemon'),
		log,
		...bootstrapOverrides,
	});
	let provider!: LmBridgeProvider; // set below; the daemon only notifies once it runs
	let controls!: ChatControls;
	const daemon = new DaemonClient({
		launch: () => bootstrap.launch(settings(), daemonCwd()),
		initializeParams: () => initializeParams(version),
		log,
		onModelsChanged: () => provider.modelsChanged(),
		onExited: () => controls.reset(),
		...clientOverrides,
	});
	active = daemon;
	const auth = new AuthNotifier(log, () => os.homedir(), agentId => {
		const current = settings();
		return { ...current.daemonEnv, ...(current.agents.find(a => a.id === agentId)?.env ?? {}) };
	});
	provider = new LmBridgeProvider(daemon, log, () => settings(), {
		onAuthRequired: (data, message) => { void auth.notify(data, message); },
	});
	controls = new ChatControls({
		setControl: (chatId, controlId, value) => daemon.request(Method.setControl, { chatId, controlId, value }),
		modelName: modelId => provider.modelName(modelId),
		log,
		clickCommand: COMMANDS.controls,
	});
	const tool = new AgentActionTool();
	// Commands the daemon runs for agents, mirrored in VS Code terminals (terminals.ts).
	const terminals = new TerminalMirror(terminalId => daemon.notify(Method.terminalKilled, { terminalId }), log);
	const openSettings = () => vscode.commands.executeCommand('workbench.action.openSettings', `@ext:${context.extension?.id ?? 'lmbridge.lmbridge'}`);

	const manageDeps: ManageDeps = {
		presets: () => daemon.request(Method.agentPresets, {}),
		registry: (feed, platform) => daemon.request(Method.agentRegistry, { feed, ...(platform ? { platform } : {}) }),
		registryUrl: () => settings().registryUrl,
		storageDir,
		fetchImpl,
		log,
		openSettings,
	};

	context.subscriptions.push(
		log,
		provider,
		vscode.lm.registerLanguageModelChatProvider(VENDOR, provider),
		...AGENT_ACTION_TOOLS.map(name => vscode.lm.registerTool(name, tool)),
		vscode.commands.registerCommand(COMMANDS.manage, () => manageAgents(manageDeps)),
		daemon.onRequest(Method.readTextFile, readTextFile),
		daemon.onRequest(Method.writeTextFile, writeTextFile),
		terminals,
		daemon.onRequest(Method.terminalOpen, params => terminals.open(params)),
		daemon.onNotification(Method.terminalOutput, params => terminals.output(params)),
		daemon.onNotification(Method.terminalExit, params => terminals.exit(params)),
		daemon.onNotification(Method.sessionState, params => controls.onState(params)),
		vscode.commands.registerCommand(COMMANDS.showLogs, () => log.show()),
		controls,
		vscode.commands.registerCommand(COMMANDS.controls, () => controls.pickControl()),
		vscode.commands.registerCommand(COMMANDS.commands, () => controls.pickCommand()),
		vscode.commands.registerCommand(COMMANDS.importAgents, () => importAgents({ log, home: os.homedir() })),
		vscode.commands.registerCommand(COMMANDS.restart, async () => {
			bootstrap.reset();
			await daemon.restart('restart requested');
			provider.modelsChanged();
		}),
		// A folder added to or removed from the workspace: the daemon's file and terminal rule and
		// the sessions it opens from now on take the new folders (docs/protocol.md).
		vscode.workspace.onDidChangeWorkspaceFolders(() => daemon.notify(Method.workspaceFolders, { workspaceFolders: folderPaths() })),
		vscode.workspace.onDidChangeConfiguration(async event => {
			if (!DAEMON_SETTINGS.some(key => event.affectsConfiguration(key))) {
				return;
			}
			reportAgentProblems(settings());
			bootstrap.reset();
			// The daemon reads agents and its own options at start-up: start a fresh one.
			await daemon.restart('its settings changed');
			provider.modelsChanged();
		}),
		{ dispose: () => { void daemon.dispose(); } },
	);
	// Agents installed from the ACP registry: say once when the feed has a new version of one.
	const updates = offerUpdates(manageDeps, () => vscode.commands.executeCommand(COMMANDS.manage)).catch(err => {
		log.warn(`could not check the ACP registry for updates: ${err instanceof Error ? err.message : String(err)}`);
		return [];
	});
	return { daemon, provider, tool, auth, bootstrap, updates, controls };
}

export async function deactivate(): Promise<void> {
	const daemon = active;
	active = undefined;
	await daemon?.dispose();
}
