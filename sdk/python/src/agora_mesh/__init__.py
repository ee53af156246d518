"""agora_mesh: the Python SDK of Agora, a node of the Hyperspace Gossiping Agents Protocol.

``client = await agora_mesh.connect("ws://127.0.0.1:3100")``, then the spec's primitives as
``client.state``, ``client.guard``, ``client.tool``, ``client.memory``, ``client.recursive``,
``client.learning``, ``client.improving``, ``client.micropayments``, plus ``client.bridge`` and
``client.node``. The AGH agent client is :mod:`agora_mesh.agh`, the 402 helper
:mod:`agora_mesh.x402` (extra ``x402``).
"""

from ._methods import METHODS
from .client import Client, Reconnect, ToolCall, connect
from .errors import (
    AgoraError,
    BudgetExceeded,
    ConnectionClosed,
    InternalError,
    InvalidParams,
    InvalidRequest,
    LoopDetected,
    MethodNotFound,
    ParseError,
    PeerUnavailable,
    RateLimited,
    ReplicationFailed,
    SafetyViolation,
    SessionNotFound,
    Timeout,
    TrajectoryRejected,
)
from .namespaces import Channel, ChannelPayment, ChannelReceipt, Provided, Registered, RpcMethod

__version__ = "0.1.0"

__all__ = [
    "METHODS",
    "AgoraError",
    "BudgetExceeded",
    "Channel",
    "ChannelPayment",
    "ChannelReceipt",
    "Client",
    "ConnectionClosed",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "LoopDetected",
    "MethodNotFound",
    "ParseError",
    "PeerUnavailable",
    "Provided",
    "RateLimited",
    "Registered",
    "Reconnect",
    "ReplicationFailed",
    "RpcMethod",
    "SafetyViolation",
    "SessionNotFound",
    "Timeout",
    "ToolCall",
    "TrajectoryRejected",
    "connect",
]
