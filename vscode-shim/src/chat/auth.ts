/**
 * An agent that needs a sign-in or a key. The daemon answers the chat request with a
 * JSON-RPC error whose `message` is one sentence saying what to do (the chat shows it, as
 * any daemon error) and whose `data` is `{reason: "auth_required", agentId, agentName,
 * login, env, methods}` (docs/protocol.md). Here: recognise that data (pure) and offer the
 * user a notification with **Sign in…** (a terminal running the agent's login command; one
 * **Sign in: <name>** button per login when the agent lists several, as claude-agent-acp does:
 * "Claude Subscription", "Anthropic Console") and **Open Settings** (lmbridge.agents, where
 * an API key goes in the agent's `env`).
 * Signing in needs no restart: the daemon tries the agent again on the next message.
 */
import * as os from 'os';
import * as vscode from 'vscode';
import type { AuthRequiredData, LoginCommand, NamedLogin, RpcError } from './wire';

export const SIGN_IN = 'Sign in…';
export const OPEN_AGENT_SETTINGS = 'Open Settings';

function isObject(value: unknown): value is Record<string, unknown> {
	return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function strings(value: unknown): string[] {
	return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

function stringRecord(value: unknown): Record<string, string> | undefined {
	if (!isObject(value)) {
		return undefined;
	}
	const out = Object.fromEntries(Object.entries(value).filter(([, v]) => typeof v === 'string')) as Record<string, string>;
	return Object.keys(out).length > 0 ? out : undefined;
}

function loginCommand(value: unknown): LoginCommand | null {
	if (!isObject(value) || typeof value.command !== 'string' || !value.command.trim()) {
		return null;
	}
	return { command: value.command, args: strings(value.args), env: stringRecord(value.env) ?? {} };
}

function namedLogins(value: unknown): NamedLogin[] {
	if (!Array.isArray(value)) {
		return [];
	}
	const out: NamedLogin[] = [];
	for (const item of value) {
		const login = loginCommand(item);
		if (login && isObject(item) && typeof item.id === 'string' && item.id) {
			const name = typeof item.name === 'string' && item.name.trim() ? item.name.trim() : item.id;
			out.push({ id: item.id, name, description: typeof item.description === 'string' && item.description ? item.description : null, ...login });
		}
	}
	return out;
}

/** The error's auth data when the daemon says the agent needs a sign-in, else undefined. */
export function authRequired(error: RpcError): AuthRequiredData | undefined {
	const data = error.data;
	if (!isObject(data) || data.reason !== 'auth_required' || typeof data.agentId !== 'string' || !data.agentId) {
		return undefined;
	}
	return {
		reason: 'auth_required',
		agentId: data.agentId,
		agentName: typeof data.agentName === 'string' && data.agentName ? data.agentName : data.agentId,
		login: loginCommand(data.login),
		logins: namedLogins(data.logins),
		env: strings(data.env),
		methods: Array.isArray(data.methods)
			? data.methods.filter(isObject).filter(m => typeof m.id === 'string').map(m => ({
				id: m.id as string,
				name: typeof m.name === 'string' ? m.name : m.id as string,
				description: typeof m.description === 'string' ? m.description : null,
			}))
			: [],
	};
}

/** The button of one login among several: `Sign in: <its name>`. */
export function signInWith(login: NamedLogin): string {
	return `Sign in: ${login.name}`;
}

/**
 * The notification's buttons: one `Sign in: <name>` per login when the agent lists several,
 * else Sign in… when there is a login command; and Open Settings.
 */
export function authActions(auth: AuthRequiredData): string[] {
	const logins = auth.logins ?? [];
	if (logins.length > 1) {
		return [...logins.map(signInWith), OPEN_AGENT_SETTINGS];
	}
	return auth.login || logins.length ? [SIGN_IN, OPEN_AGENT_SETTINGS] : [OPEN_AGENT_SETTINGS];
}

/** The login a button starts (`authActions`), or undefined for any other choice. */
export function chosenLogin(auth: AuthRequiredData, choice: string | undefined): LoginCommand | undefined {
	const logins = auth.logins ?? [];
	if (choice === SIGN_IN) {
		return auth.login ?? logins[0];
	}
	return logins.length > 1 ? logins.find(login => signInWith(login) === choice) : undefined;
}

/**
 * The notification's text: the daemon's sentence (its `code` marks dropped: a notification
 * shows them as they are, unlike the chat), else one of ours from the data.
 */
export function authMessage(auth: AuthRequiredData, daemonMessage: string): string {
	if (daemonMessage.trim()) {
		return daemonMessage.trim().replace(/`([^`\n]+)`/g, '$1');
	}
	const name = auth.agentName ?? auth.agentId;
	const env = auth.env?.length ? `set ${auth.env.join(' or ')} in its "env" in lmbridge.agents` : '';
	const how = auth.login ? `sign in (${[auth.login.command, ...(auth.login.args ?? [])].join(' ')})${env ? ` or ${env}` : ''}` : env || 'sign in to it';
	return `${name} needs you to ${how}.`;
}

/** A variable name that looks like it holds a credential: never passed to a sign-in terminal. */
const SECRET_NAME = /KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION/i;

/**
 * What of the agent's environment a login needs: where the agent keeps its state, so the
 * login lands where the agent looks (`CODEX_HOME`, `CLAUDE_CONFIG_DIR`, `XDG_CONFIG_HOME`:
 * names ending in `HOME` or `_DIR`) and `PATH` (to find the login's program); none of its
 * keys or tokens, which no login needs and a terminal would hand to everything run in it.
 */
export function loginEnv(agentEnv: Record<string, string>): Record<string, string> {
	return Object.fromEntries(Object.entries(agentEnv).filter(([name]) =>
		(name === 'PATH' || /(HOME|_DIR)$/i.test(name)) && !SECRET_NAME.test(name)));
}

/**
 * The terminal Sign in… opens: named for the agent, running its login command (no shell),
 * transient (not restored when VS Code restarts), with `loginEnv` of the environment the
 * agent runs with (`agentEnv`: lmbridge.daemon.env, then the agent's own `env` from
 * lmbridge.agents) plus the login's own. The daemon never sends environment values back;
 * the shim has them. It runs in `cwd`, the user's home folder, not the workspace: a login
 * started through npx would take a workspace's `.npmrc` (another registry) or `node_modules`.
 */
export function loginTerminalOptions(auth: AuthRequiredData, cwd?: string, agentEnv: Record<string, string> = {}, login: LoginCommand | null | undefined = auth.login): vscode.TerminalOptions | undefined {
	if (!login) {
		return undefined;
	}
	const named = (login as Partial<NamedLogin>).name;
	const options: vscode.TerminalOptions = {
		name: `Sign in: ${auth.agentName ?? auth.agentId}${named && (auth.logins?.length ?? 0) > 1 ? ` (${named})` : ''}`,
		shellPath: login.command,
		shellArgs: login.args ?? [],
		isTransient: true,
	};
	const env = { ...loginEnv(agentEnv), ...(login.env ?? {}) };
	if (Object.keys(env).length) {
		options.env = env;
	}
	if (cwd) {
		options.cwd = cwd;
	}
	return options;
}

/**
 * Shows the notification for an agent that needs a sign-in, at most one at a time per agent
 * (Copilot may retry, and every chat with that agent fails the same way until then).
 */
export class AuthNotifier {
	private readonly open = new Set<string>();

	constructor(
		private readonly log: vscode.LogOutputChannel,
		private readonly cwd: () => string | undefined = () => os.homedir(),
		private readonly agentEnv: (agentId: string) => Record<string, string> = () => ({}),
	) { }

	/** Whether a notification for this agent is on screen. */
	isShowing(agentId: string): boolean {
		return this.open.has(agentId);
	}

	notify(auth: AuthRequiredData, daemonMessage: string): Promise<void> {
		if (this.open.has(auth.agentId)) {
			return Promise.resolve();
		}
		this.open.add(auth.agentId);
		this.log.warn(`${auth.agentName ?? auth.agentId} needs a sign-in: ${daemonMessage}`
			+ (auth.login ? ` (login: ${[auth.login.command, ...(auth.login.args ?? [])].join(' ')})` : '')
			+ (auth.env?.length ? ` (or set ${auth.env.join(', ')})` : ''));
		return Promise.resolve(vscode.window.showWarningMessage(authMessage(auth, daemonMessage), ...authActions(auth))).then(choice => {
			this.open.delete(auth.agentId);
			const login = chosenLogin(auth, choice);
			if (login) {
				const options = loginTerminalOptions(auth, this.cwd(), this.agentEnv(auth.agentId), login);
				if (options) {
					const terminal = vscode.window.createTerminal(options);
					terminal.show();
				}
			} else if (choice === OPEN_AGENT_SETTINGS) {
				void vscode.commands.executeCommand('workbench.action.openSettings', 'lmbridge.agents');
			}
		}, err => {
			this.open.delete(auth.agentId);
			this.log.error(`could not show the sign-in notification: ${err instanceof Error ? err.message : String(err)}`);
		});
	}
}
