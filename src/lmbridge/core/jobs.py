"""The requests (jobs) of one session waiting for the turn: a small pure queue.

A *job* is one VS Code chat request for a session (``JobInfo``). At most one job streams
at a time (the turn machine holds it); the others wait here, in the order they came, for
the agent to start, a cancelled turn to end, or the job ahead of them to end. A job that
must stop the agent's turn before it can run goes back to the front. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lmbridge.core.permissions import Answer


@dataclass(frozen=True)
class JobInfo:
    """What the turn machine needs of one chat request (from the history core's ``Decision``).

    ``answers``: callId → Answer for the calls the previous response left
    pending. ``cancel_first``: the request stops the open turn (Stop, or
    tool results beside new user content). ``has_prompt``: it brings new user
    content for ``session/prompt``. ``messages``: its context and prompt, handed
    back when it is cancelled before the agent saw them. ``tools``: the names of
    the tools the request offers (``options.tools``). ``cancelled``: the shim
    cancelled it before it got here.
    """

    id: int
    answers: Mapping[str, Answer] = field(default_factory=dict)
    cancel_first: bool = False
    has_prompt: bool = True
    messages: tuple[Any, ...] = ()
    tools: frozenset[str] = frozenset()
    cancelled: bool = False


class JobQueue:
    """Jobs waiting, first come first served. ``put_back`` returns one to the front."""

    def __init__(self) -> None:
        self._jobs: list[JobInfo] = []

    def put(self, job: JobInfo) -> None:
        self._jobs.append(job)

    def put_back(self, job: JobInfo) -> None:
        self._jobs.insert(0, job)

    def peek(self) -> JobInfo:
        """The job next in line (raises ``IndexError`` when none waits)."""
        return self._jobs[0]

    def pop(self) -> JobInfo:
        """Take the job next in line (raises ``IndexError`` when none waits)."""
        return self._jobs.pop(0)

    def take(self, job_id: int) -> JobInfo | None:
        """Take job ``job_id`` out of the line, wherever it is; None if it does not wait."""
        for i, job in enumerate(self._jobs):
            if job.id == job_id:
                return self._jobs.pop(i)
        return None

    def clear(self) -> list[JobInfo]:
        """Take every waiting job, in order."""
        jobs, self._jobs = self._jobs, []
        return jobs

    def __contains__(self, job_id: object) -> bool:
        return any(job.id == job_id for job in self._jobs)

    def __iter__(self) -> Iterator[JobInfo]:
        return iter(list(self._jobs))

    def __len__(self) -> int:
        return len(self._jobs)
