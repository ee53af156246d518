"""Errors: one base class, :class:`AgoraError`, and a subclass per code of the spec's §8."""

from __future__ import annotations

from typing import Any, ClassVar


class AgoraError(Exception):
    """A JSON-RPC error answered by a node, or a failure of the connection to it.

    ``code`` is the JSON-RPC code (the spec's §8 table), ``message`` the node's text and ``data``
    whatever the node attached (``None`` when nothing).
    """

    code: int
    message: str
    data: Any
    default_code: ClassVar[int] = -32603

    def __init__(self, code: int | None = None, message: str = "", data: Any = None) -> None:
        self.code = self.default_code if code is None else code
        self.message = message
        self.data = data
        super().__init__(f"{self.code}: {message}" if message else str(self.code))

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member for this error."""
        error: dict[str, Any] = {"code": self.code, "message": self.message or type(self).__name__}
        if self.data is not None:
            error["data"] = self.data
        return error


class ParseError(AgoraError):
    default_code = -32700


class InvalidRequest(AgoraError):
    default_code = -32600


class MethodNotFound(AgoraError):
    default_code = -32601


class InvalidParams(AgoraError):
    """−32602. ``field`` is the parameter the node names in ``data.field``, when it does."""

    default_code = -32602

    @property
    def field(self) -> str | None:
        if isinstance(self.data, dict) and isinstance(self.data.get("field"), str):
            return str(self.data["field"])
        return None


class InternalError(AgoraError):
    default_code = -32603


class SessionNotFound(AgoraError):
    default_code = -32001


class BudgetExceeded(AgoraError):
    default_code = -32002


class RateLimited(AgoraError):
    """−32003. ``retry_after`` is in seconds, from ``data.retryAfterMs`` (``None`` without it)."""

    default_code = -32003

    @property
    def retry_after(self) -> float | None:
        if isinstance(self.data, dict):
            ms = self.data.get("retryAfterMs")
            if isinstance(ms, (int, float)) and not isinstance(ms, bool):
                return ms / 1000.0
        return None


class SafetyViolation(AgoraError):
    default_code = -32004


class LoopDetected(AgoraError):
    default_code = -32005


class PeerUnavailable(AgoraError):
    default_code = -32006


class ReplicationFailed(AgoraError):
    default_code = -32007


class TrajectoryRejected(AgoraError):
    default_code = -32008


class ConnectionClosed(AgoraError):
    """The WebSocket closed (or could not be opened) before the answer came."""

    default_code = -32099


class Timeout(AgoraError):
    """No answer within the call's timeout."""

    default_code = -32098


_BY_CODE: dict[int, type[AgoraError]] = {
    cls.default_code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        SessionNotFound,
        BudgetExceeded,
        RateLimited,
        SafetyViolation,
        LoopDetected,
        PeerUnavailable,
        ReplicationFailed,
        TrajectoryRejected,
    )
}


def from_wire(error: Any) -> AgoraError:
    """The exception for a JSON-RPC ``error`` member (a plain :class:`AgoraError` for a code
    without a class of its own)."""
    if not isinstance(error, dict):
        return InvalidRequest(None, f"the node sent an unreadable error: {error!r}")
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        return InvalidRequest(None, f"the node sent an error without an integer code: {error!r}")
    message = error.get("message")
    cls = _BY_CODE.get(code, AgoraError)
    return cls(code, message if isinstance(message, str) else "", error.get("data"))
