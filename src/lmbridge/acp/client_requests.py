"""The agent's requests to lmbridge as its ACP client, for one chat: ``fs/*`` and ``terminal/*``.

What they may do is decided by ``core.permissions`` (``Grants``: what the cards the user
approved in this prompt turn allow; docs/agents.md, "What protects what"); ``acp.files``
and ``acp.terminals`` carry them out. This is the part of a session actor that serves them:
each request in a task of its own (the shim may take a while to read a file, a command to
end), answered exactly once, also when the session ends first (docs/reliability.md,
"Nothing left unanswered").

Owned by one session actor and used from its tasks only: ``grants`` changes when a card is
approved (``granted``), at each prompt (``revoke``) and at a Stop (``stop``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from lmbridge.acp import files as acp_files
from lmbridge.acp import terminals as acp_terminals
from lmbridge.acp.terminals import TerminalError, Terminals
from lmbridge.core import errors, paths, permissions
from lmbridge.log import get_logger

log = get_logger("session")

#: JSON-RPC error code of a request the session ended before it was served, and of any other
#: agent request left unread at its end (a server error; docs/protocol.md, "Terminals").
SESSION_ENDED = errors.REFUSED
#: JSON-RPC error code of a ``terminal/*`` request for a session that is not this chat's.
NOT_THIS_SESSION = errors.RESOURCE_NOT_FOUND


def session_ended(method: str) -> dict[str, Any]:
    """The error answering an agent's ``method`` request its session ended before serving."""
    return {"code": SESSION_ENDED, "message": f"{method}: the session has ended before this request was served"}


class QueueAnswer(Protocol):
    """Queues the answer to one of the agent's requests (the session actor's writer sends it)."""

    def __call__(self, rid: int | str | None, result: Any = None, error: Mapping[str, Any] | None = None) -> None: ...


class ClientRequests:
    """Serves one chat's ``fs/*`` and ``terminal/*`` requests under the permission rule.

    ``files``: how files are read and written (through VS Code, or the disk); ``respond``:
    queues an answer; ``prompt_open``: whether a prompt turn is open now (nothing runs or is
    written between turns). ``start`` gives it its task group and terminals."""

    def __init__(self, session_id: str, files: acp_files.Files, respond: QueueAnswer, prompt_open: Callable[[], bool]) -> None:
        self.session_id = session_id
        self.files = files
        self._respond = respond
        self._prompt_open = prompt_open
        self.grants = permissions.NO_GRANTS
        self.terminals: Terminals | None = None  # terminal/* served (acp.terminals), from start() on
        self._tg: TaskGroup | None = None
        # The requests being served: rid → (method, its task's scope).
        self._serving: dict[int | str, tuple[str, anyio.CancelScope]] = {}

    def start(self, tg: TaskGroup, terminals: Terminals | None) -> None:
        """Serve from now on, in ``tg``; ``terminals``: None when the daemon runs none."""
        self._tg, self.terminals = tg, terminals

    def serves(self, method: str) -> bool:
        """Whether ``method`` is one of the requests served here (others get -32601)."""
        return method in acp_files.METHODS or (self.terminals is not None and method in acp_terminals.METHODS)

    def handle(self, rid: int | str, method: str, params: Mapping[str, Any], acp_session: str | None) -> None:
        """One request (``serves(method)``) for ``acp_session``, the chat's ACP session: served
        in a task of its own, or refused at once (another session's, a command nobody approved)."""
        if method in acp_files.METHODS:
            self._serve(rid, method, self._file(rid, method, params, acp_session))
        elif params.get("sessionId") != acp_session:
            self._respond(rid, error={"code": NOT_THIS_SESSION, "message": f"{method}: not a session of this client"})
        elif method != "terminal/create" or self._may_run(rid, params):
            self._serve(rid, method, self._terminal(rid, method, params))

    # -- the grants (core.permissions) ----------------------------------------------

    def granted(self, approved: permissions.Permission) -> None:
        """A card the user approved (``turn.AnswerPermission.approved``): what it lets the agent do."""
        self.grants = permissions.grant(self.grants, approved, self._writable)

    def revoke(self) -> None:
        """A new prompt: an approval covers the turn it was given in."""
        self.grants = permissions.NO_GRANTS

    def stop(self) -> None:
        """A Stop: what the turn's approvals allowed ends, and so do the commands it runs."""
        self.grants = permissions.NO_GRANTS
        if self.terminals is not None:
            self.terminals.kill_running()

    def workspace(self) -> permissions.Workspace:
        """Where a permission's files are judged now (``permissions.Workspace``): the workspace
        folders resolved, the user's edit rules, and paths resolved as a write would."""
        folders = []
        for folder in self.files.folders():
            try:
                folders.append(paths.resolve(folder, acp_files.readlink))
            except paths.Unresolvable:
                continue
        return permissions.Workspace(tuple(folders), paths.edit_rules(self.files.edit_rules()), self._writable)

    def _writable(self, path: str) -> str | None:
        """``path`` resolved as a write would resolve it; None outside the workspace."""
        try:
            return self.files.allowed(path)
        except acp_files.FsError:
            return None

    def _may_run(self, rid: int | str, params: Mapping[str, Any]) -> bool:
        """Whether the grants let this ``terminal/create`` run (its grant used up if so);
        refused, the agent is answered with the reason and nothing runs."""
        action = permissions.run_command(params)
        decision: permissions.Permit | permissions.Deny = action if isinstance(action, permissions.Deny) else permissions.Permit()
        if isinstance(action, permissions.RunCommand):
            self.grants, decision = permissions.permit(self.grants, action, self._prompt_open())
        if isinstance(decision, permissions.Deny):
            log.warning("terminal/create refused", session=self.session_id, reason=decision.message)
            self._respond(rid, error=decision.error)
            return False
        return True

    # -- serving ------------------------------------------------------------------

    async def _file(self, rid: int | str, method: str, params: Mapping[str, Any], acp_session: str | None) -> None:
        """Answer one fs/* request."""
        try:
            if params.get("sessionId") != acp_session:
                raise acp_files.FsError(errors.INVALID_PARAMS, "invalid params: sessionId is not this session's")
            if method == acp_files.READ:
                result = await self.files.read(params)
            else:
                p = acp_files.write_params(params)
                real = self.files.allowed(p.path)
                self.grants, decision = permissions.permit(self.grants, permissions.WriteFile(p.path, real, p.content), self._prompt_open())
                if isinstance(decision, permissions.Deny):
                    raise acp_files.FsError(decision.code, decision.message)
                result = await self.files.write(p, real)
        except acp_files.FsError as exc:
            log.info("file request refused", session=self.session_id, method=method, error=exc.message)
            self._respond(rid, error=exc.error())
            return
        except Exception as exc:  # a bug here answers this request, and ends nothing else
            log.exception("file request failed", session=self.session_id, method=method)
            self._respond(rid, error=errors.error(errors.INTERNAL_ERROR, f"{exc!r}"[:480]))
            return
        log.info("file request served", session=self.session_id, method=method, through="vscode" if self.files.through_vscode else "disk")
        self._respond(rid, result)

    async def _terminal(self, rid: int | str, method: str, params: Mapping[str, Any]) -> None:
        """Answer one ``terminal/*`` request."""
        assert self.terminals is not None
        result: Any = None
        error: dict[str, Any] | None = None
        try:
            result = await self.terminals.handle(method, params)
        except TerminalError as exc:
            error = exc.error()
        except Exception as exc:  # a bug here answers this request, and ends nothing else (not the chat's session)
            log.exception("terminal request failed", session=self.session_id, method=method)
            error = {"code": errors.INTERNAL_ERROR, "message": f"{method}: {errors.message(errors.INTERNAL_ERROR, repr(exc))}"[:500]}
        try:
            self._respond(rid, result, error=error)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session has ended: the agent is being left

    def _serve(self, rid: int | str, method: str, work: Awaitable[None]) -> None:
        """Run ``work``, which serves the agent's request ``rid`` and answers it, in a task of
        its own; should the session end first, ``end`` cancels it and answers."""
        scope = anyio.CancelScope()
        self._serving[rid] = (method, scope)

        async def run() -> None:
            try:
                with scope:
                    await work
            finally:
                if self._serving.get(rid, (None, None))[1] is scope:
                    del self._serving[rid]

        assert self._tg is not None
        self._tg.start_soon(run)

    # -- ending ---------------------------------------------------------------------

    def end(self) -> None:
        """The session is ending: each request still being served is cancelled (a client/*
        request it waits on leaves the shim channel with it) and answered here, once, with
        ``SESSION_ENDED``. The agent lives on (the pool's), so it is owed the answer."""
        serving, self._serving = self._serving, {}
        for rid, (method, scope) in serving.items():
            scope.cancel()
            log.info("agent request ended with its session", session=self.session_id, method=method)
            self._respond(rid, error=session_ended(method))

    async def aclose(self) -> None:
        """Every command this chat's agent runs is ended (``acp.terminals``)."""
        if self.terminals is not None:
            await self.terminals.aclose()
