"""The JSON-RPC methods of an Agora node, by their wire names: the one table the client's
namespaces are built from (``client.state.create_session`` is ``state.createSession``)."""

from __future__ import annotations

import re
from typing import Final

METHODS: Final[tuple[str, ...]] = (
    "state.createSession",
    "state.getSession",
    "state.setState",
    "state.getState",
    "state.endSession",
    "state.recordEpisode",
    "guard.validate",
    "guard.checkSafety",
    "guard.checkBudget",
    "guard.consumeBudget",
    "guard.checkRateLimit",
    "guard.getBudgetStatus",
    "tool.discover",
    "tool.register",
    "tool.invoke",
    "tool.getAnalytics",
    "tool.listRegistered",
    "memory.store",
    "memory.search",
    "memory.get",
    "memory.list",
    "memory.delete",
    "memory.archive",
    "memory.reembed",
    "recursive.analyze",
    "recursive.track",
    "recursive.getTrace",
    "recursive.setMaxDepth",
    "learning.getPlaybook",
    "learning.reflect",
    "learning.curate",
    "learning.addBullet",
    "learning.feedback",
    "learning.getStats",
    "improving.recordTrajectory",
    "improving.getExemplars",
    "improving.curate",
    "improving.augment",
    "improving.assessDifficulty",
    "improving.getLibraryStats",
    "micropayments.challenge",
    "micropayments.verify",
    "micropayments.channel.open",
    "micropayments.channel.pay",
    "micropayments.channel.close",
    "bridge.registerMCPServer",
    "bridge.listMCPServers",
    "bridge.unregisterMCPServer",
    "bridge.announceA2AAgent",
    "bridge.withdrawA2AAgent",
    "bridge.listA2AAgents",
    "node.info",
    "directory.search",
)

_ACRONYM = re.compile(r"([A-Z]+)([A-Z][a-z])")
_HUMP = re.compile(r"([a-z])([A-Z])")


def snake(name: str) -> str:
    """``getExemplars`` → ``get_exemplars``, ``registerMCPServer`` → ``register_mcp_server``."""
    return _HUMP.sub(r"\1_\2", _ACRONYM.sub(r"\1_\2", name)).lower()


def camel(name: str) -> str:
    """``session_id`` → ``sessionId``; a name without ``_`` is left as it is."""
    if "_" not in name:
        return name
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def by_namespace() -> dict[str, dict[str, str]]:
    """``{"micropayments.channel": {"open": "micropayments.channel.open"}, …}``."""
    out: dict[str, dict[str, str]] = {}
    for method in METHODS:
        space, _, leaf = method.rpartition(".")
        out.setdefault(space, {})[snake(leaf)] = method
    return out
