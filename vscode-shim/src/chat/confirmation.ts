/**
 * What VS Code shows for an agent-action tool call. The daemon renders the whole card
 * (docs/protocol.md, "Permission bridging"): `title` is its heading, `message` its markdown
 * body, both escaped there. The extension adds nothing and reads nothing agent-specific:
 * it only falls back to a safe text when a field is missing, so a card is never blank.
 *
 * Pure: input in, strings out. The tool (tool.ts) wraps the message in an untrusted
 * MarkdownString, so even text that slipped past the daemon's escaping cannot run a
 * command link or render HTML.
 */

export interface Confirmation {
	/** The card's heading: one line. */
	title: string;
	/** The card's body, markdown. */
	message: string;
	/** Shown while the tool runs and, after a Stop or a Skip, on the card's line. */
	invocationMessage: string;
}

export const DEFAULT_TITLE = 'The agent asks for permission';
export const DEFAULT_MESSAGE = 'The lmbridge daemon sent no details of this request. **Skip** it unless you know what the agent wants to do.';

function field(input: unknown, name: string): string | undefined {
	if (typeof input !== 'object' || input === null) {
		return undefined;
	}
	const value = (input as Record<string, unknown>)[name];
	return typeof value === 'string' && value.trim() ? value : undefined;
}

export function confirmationOf(input: unknown): Confirmation {
	// The daemon sends one line; a line break would only hide the rest of the heading.
	const title = field(input, 'title')?.replace(/\s*[\r\n]+\s*/g, ' ').trim() ?? DEFAULT_TITLE;
	return {
		title,
		message: field(input, 'message') ?? DEFAULT_MESSAGE,
		// Never "Allowed": the same line stays after a Stop or a Skip.
		invocationMessage: `Agent action: ${title}`,
	};
}
