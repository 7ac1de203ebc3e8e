"""The ACP side of lmbridge, in one home (docs/architecture.md, "The acp/ package").

* ``profiles``: one ``AgentProfile`` per agent, chosen once from ``agentInfo``: its quirks
  as named flags (pure, imported by the pure core).
* ``connection``: JSON-RPC 2.0 over the agent's stdio (``AgentConnection``).
* ``process``: one agent process: spawn, ``initialize``, capabilities, routing by
  ``sessionId``, health (``AgentProcess``, ``AgentPool``).
* ``interfaces``: the seam between the two: ``AgentProcessInterface``, the protocol of what
  a session uses of its process (``session`` imports nothing of ``process``), the mailbox
  (``Mailbox``, ``AgentMessage``) and the records both speak (``AgentGone``, ``AgentFeatures``,
  ``Spare``).
* ``session``: one ACP session (``AcpSession``): the only code that sends ``session/*``.
* ``watchdog``: the process groups of agents and their commands die with the daemon, even
  one killed with SIGKILL (``open_group``).

Nothing is imported here: the pure core imports ``profiles`` alone, and start-up stays light.
"""
