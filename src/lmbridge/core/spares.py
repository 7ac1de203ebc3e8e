"""How many spare sessions an agent process opens, and when (docs/sessions.md, "When they are
opened"). Pure: no I/O; ``acp.process.AgentProcess.want_spare`` asks it.

A spare session is opened ahead so that a new chat need not wait for ``session/new``. Opening
one costs the agent CPU (claude-agent-acp 0.101.0 starts a Claude Code child per session), so
a spare opened while a chat answers slows that answer; and back to back, the next chat comes
the moment the answer ends. The rule, one row per case (``to_open``):

| spares ready or being opened | the process | opened now |
|---|---|---|
| at least ``keep`` | any | none |
| fewer than ``keep`` | quiet | up to ``keep`` |
| none | busy | ``min(keep, AT_ONCE)``: a chat that comes next must not find none |
| some, fewer than ``keep`` | busy | none: the next chats take the ones left; no start beside an answer |

The process is **quiet** once no prompt of it has been in flight, and no chat has taken a
spare, for ``QUIET`` seconds (a chat sent back to back follows its previous answer within
milliseconds; a user typing the next chat's words takes longer). ``keep`` is the agent's
(``AgentProfile.spares``), or ``$LMBRIDGE_SPARE_SESSIONS`` for every agent: enough for a burst
of new chats, weighed against the RSS each spare holds (docs/performance.md, "A burst of
new chats").
"""

from __future__ import annotations

#: Seconds with no prompt of the process in flight and no spare taken, after which the
#: spares taken are replaced: longer than a client takes to send the next chat when one comes
#: back to back.
QUIET = 0.5

#: Spares opened at once when none is left (ready or being opened): the next chat waits for
#: the first, the one after it finds the second.
AT_ONCE = 2


def to_open(keep: int, ready: int, opening: int, quiet: bool) -> int:
    """How many spare sessions to begin opening now (the table in this module's docstring):
    ``keep`` the number the process keeps, ``ready`` and ``opening`` its spares ready and being
    opened, ``quiet`` whether the process is quiet (``QUIET``). Never negative."""
    have = ready + opening
    if have >= keep:
        return 0
    if quiet:
        return keep - have
    return min(keep, AT_ONCE) if have == 0 else 0
