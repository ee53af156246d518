"""An AGH Network v0 agent on a node's agh face (``ws://…/agh/v0``).

::

    async with await agh.Agent.connect(node_agh_url, "reviewer.one", "builders") as agent:
        await agent.greet(capabilities=["code.review"])
        await agent.say("hello")
        async for envelope in agent:          # envelopes addressed to it or broadcast
            ...

One text frame is one envelope. v0 envelopes carry ``proof: null`` (the spec's receivers must
not require proof processing), so nothing is signed here. Envelopes the node refuses come back
as ``{"error": {ok: false, id, reason, detail}}`` frames: they are in :attr:`Agent.refusals`
and :meth:`Agent.refusal` waits for the one of an envelope id.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed as WsConnectionClosed
from websockets.exceptions import InvalidHandshake, InvalidStatus

from .errors import ConnectionClosed, Timeout

PROTOCOL: Final = "agh-network/v0"
KINDS: Final = ("greet", "whois", "say", "direct", "capability", "receipt", "trace")
RECEIPT_STATUSES: Final = ("accepted", "rejected", "duplicate", "expired", "unsupported", "canceled")
_PEER_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
_CHANNEL = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: Frames waiting to be read, and refusals kept (older ones are dropped beyond).
QUEUE: Final = 1024


def _check(pattern: re.Pattern[str], value: str, what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"{what} {value!r} does not match {pattern.pattern}")
    return value


def peer_card(
    peer_id: str,
    capabilities: Sequence[str] = (),
    *,
    profiles: Sequence[str] = (PROTOCOL,),
    artifacts: Sequence[str] = ("capability",),
    trust_modes: Sequence[str] = ("unverified",),
    **extra: Any,
) -> dict[str, Any]:
    """A Peer Card (Peer Discovery page) for a greet."""
    card: dict[str, Any] = {
        "peer_id": _check(_PEER_ID, peer_id, "peer id"),
        "profiles_supported": list(profiles),
        "capabilities": list(capabilities),
        "artifacts_supported": list(artifacts),
        "trust_modes_supported": list(trust_modes),
    }
    card.update(extra)
    return card


_GO_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _go_string(s: str) -> str:
    out = ['"']
    for c in s:
        if c in _GO_ESCAPES:
            out.append(_GO_ESCAPES[c])
        elif c < " " or c in "<>&\u2028\u2029":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


_DOC_LISTS = ("context_needed", "artifacts_expected", "execution_outline", "constraints", "examples", "requirements")


def normalise_capability(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A capability document normalised as receivers do: strings trimmed, blank list entries
    dropped, ``requirements`` unique; ``id``, ``summary`` and ``outcome`` required."""
    out: dict[str, Any] = {}
    for field in ("id", "summary", "outcome"):
        value = doc.get(field)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"a capability document needs a non-blank {field}")
        out[field] = value.strip()
    version = doc.get("version")
    if isinstance(version, str) and version.strip():
        out["version"] = version.strip()
    for field in _DOC_LISTS:
        items = doc.get(field) or []
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"capability field {field} must be a list of strings")
        kept = [i.strip() for i in items if i.strip()]
        if field == "requirements":
            kept = list(dict.fromkeys(kept))
        if kept:
            out[field] = kept
    return out


def capability_digest(doc: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of a capability document's canonical form (the AGH reference runtime's:
    fixed key order, sorted ``requirements``, strings escaped as Go's ``encoding/json``)."""
    d = normalise_capability(doc)
    parts = [f'"{k}":{_go_string(d[k])}' for k in ("id", "summary", "outcome", "version") if k in d]
    for field in _DOC_LISTS:
        if field in d:
            items = sorted(d[field]) if field == "requirements" else d[field]
            parts.append(f'"{field}":[' + ",".join(_go_string(i) for i in items) + "]")
    canonical = "{" + ",".join(parts) + "}"
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Refusal:
    """An envelope the node refused: its ``id`` (when readable), the AGH ``reason`` code and
    the node's ``detail``."""

    id: str | None
    reason: str
    detail: str


class Agent:
    """An agent connected to a node's agh face as ``peer_id`` in ``channel``."""

    def __init__(self, ws: ClientConnection, peer_id: str, channel: str, timeout: float) -> None:
        self.peer_id = peer_id
        self.channel = channel
        self.timeout = timeout
        self._ws = ws
        self._incoming: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(QUEUE)
        self.refusals: deque[Refusal] = deque(maxlen=QUEUE)
        self._refused = asyncio.Condition()
        #: Frames dropped because nobody read them (beyond :data:`QUEUE`).
        self.dropped = 0
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(
        cls, url: str, peer_id: str, channel: str, *, api_key: str | None = None, timeout: float = 30.0
    ) -> Agent:
        """Opens a WebSocket to the agh face at ``url``; ``api_key`` when the node has one."""
        _check(_PEER_ID, peer_id, "peer id")
        _check(_CHANNEL, channel, "channel")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            ws = await asyncio.wait_for(
                ws_connect(url, additional_headers=headers, compression=None, max_size=2 * 1024 * 1024, open_timeout=None),
                timeout,
            )
        except asyncio.TimeoutError:
            raise Timeout(None, f"{url} did not open a WebSocket within {timeout} s") from None
        except InvalidStatus as e:
            raise ConnectionClosed(None, f"{url} refused the WebSocket (HTTP {e.response.status_code})") from None
        except (OSError, InvalidHandshake) as e:
            raise ConnectionClosed(None, f"cannot connect to {url}: {e}") from None
        return cls(ws, peer_id, channel, timeout)

    async def _read(self) -> None:
        try:
            async for message in self._ws:
                if isinstance(message, bytes):
                    continue
                try:
                    frame = json.loads(message)
                except ValueError:
                    continue
                if not isinstance(frame, dict):
                    continue
                error = frame.get("error")
                if isinstance(error, dict) and "protocol" not in frame:
                    async with self._refused:
                        self.refusals.append(
                            Refusal(error.get("id"), str(error.get("reason", "")), str(error.get("detail", "")))
                        )
                        self._refused.notify_all()
                    continue
                if self._incoming.full():
                    self._incoming.get_nowait()
                    self.dropped += 1
                self._incoming.put_nowait(frame)
        except WsConnectionClosed:
            pass
        finally:
            if self._incoming.full():
                self._incoming.get_nowait()
            self._incoming.put_nowait(None)

    # -- sending --------------------------------------------------------------------------

    def envelope(
        self,
        kind: str,
        body: Mapping[str, Any],
        *,
        to: str | None = None,
        interaction_id: str | None = None,
        reply_to: str | None = None,
        expires_in: int | None = None,
        ext: Mapping[str, Any] | None = None,
        **headers: Any,
    ) -> dict[str, Any]:
        """An envelope from this agent (fresh UUID id, ``ts`` now, ``proof: null``)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        if to is not None:
            _check(_PEER_ID, to, "to")
        now = int(time.time())
        env: dict[str, Any] = {
            "protocol": PROTOCOL,
            "id": str(uuid.uuid4()),
            "kind": kind,
            "channel": self.channel,
            "from": self.peer_id,
            "to": to,
        }
        if interaction_id is not None:
            env["interaction_id"] = interaction_id
        if reply_to is not None:
            env["reply_to"] = reply_to
        env.update(headers)
        env["ts"] = now
        if expires_in is not None:
            env["expires_at"] = now + expires_in
        env["body"] = dict(body)
        env["proof"] = None
        if ext:
            env["ext"] = dict(ext)
        return env

    async def send(self, envelope: Mapping[str, Any]) -> str:
        """Sends an envelope as one text frame; returns its id."""
        try:
            await self._ws.send(json.dumps(envelope, separators=(",", ":"), ensure_ascii=False))
        except WsConnectionClosed:
            raise ConnectionClosed(None, "the agh connection closed") from None
        return str(envelope["id"])

    async def greet(self, capabilities: Sequence[str] = (), *, card: Mapping[str, Any] | None = None) -> str:
        """Greets the channel with a Peer Card (``card``, or one built from ``capabilities``)."""
        return await self.send(self.envelope("greet", {"peer_card": dict(card) if card else peer_card(self.peer_id, capabilities)}))

    async def say(self, text: str, *, intent: str | None = None, artifacts: list[Any] | None = None) -> str:
        """Broadcasts ``text`` in the channel."""
        return await self.send(self.envelope("say", _message(text, intent, artifacts)))

    async def whois(self, query: str = "", *, to: str | None = None, include_catalog: bool = False) -> str:
        """Asks who offers ``query`` (a capability); the answers are ``whois`` envelopes whose
        ``reply_to`` is the returned id."""
        ext = {"agh.include": ["capability_catalog"]} if include_catalog else None
        return await self.send(self.envelope("whois", {"type": "request", "query": query}, to=to, ext=ext))

    async def direct(
        self,
        to: str,
        text: str,
        *,
        interaction_id: str | None = None,
        intent: str | None = None,
        artifacts: list[Any] | None = None,
        expires_in: int | None = None,
    ) -> tuple[str, str]:
        """Sends ``text`` to one peer in a (new, unless given) interaction; returns
        ``(envelope id, interaction id)``."""
        iid = interaction_id or f"int-{uuid.uuid4()}"
        env = self.envelope("direct", _message(text, intent, artifacts), to=to, interaction_id=iid, expires_in=expires_in)
        return await self.send(env), iid

    async def capability(
        self, doc: Mapping[str, Any], *, to: str | None = None, interaction_id: str | None = None
    ) -> str:
        """Transfers a capability document (normalised and given its digest here)."""
        d = normalise_capability(doc)
        d["digest"] = capability_digest(d)
        return await self.send(self.envelope("capability", {"capability": d}, to=to, interaction_id=interaction_id))

    async def receipt(
        self,
        to: str,
        for_id: str,
        status: str,
        *,
        interaction_id: str,
        reason_code: str | None = None,
        detail: str | None = None,
    ) -> str:
        """Answers envelope ``for_id`` with a receipt (``accepted``, ``rejected``, …)."""
        if status not in RECEIPT_STATUSES:
            raise ValueError(f"status must be one of {', '.join(RECEIPT_STATUSES)}")
        body: dict[str, Any] = {"for_id": for_id, "status": status}
        if reason_code is not None:
            body["reason_code"] = reason_code
        if detail is not None:
            body["detail"] = detail
        return await self.send(self.envelope("receipt", body, to=to, interaction_id=interaction_id, reply_to=for_id))

    # -- receiving ------------------------------------------------------------------------

    def __aiter__(self) -> Agent:
        return self

    async def __anext__(self) -> dict[str, Any]:
        frame = await self._incoming.get()
        if frame is None:
            self._incoming.put_nowait(None)  # every later read ends too
            raise StopAsyncIteration
        return frame

    async def expect(self, match: Callable[[dict[str, Any]], bool], timeout: float | None = None) -> dict[str, Any]:
        """The next incoming envelope for which ``match(envelope)`` is true (others are passed
        over), within ``timeout``."""

        async def first() -> dict[str, Any]:
            async for env in self:
                if match(env):
                    return env
            raise ConnectionClosed(None, "the agh connection closed")

        try:
            return await asyncio.wait_for(first(), self.timeout if timeout is None else timeout)
        except asyncio.TimeoutError:
            raise Timeout(None, "no matching envelope in time") from None

    async def refusal(self, envelope_id: str, timeout: float | None = None) -> Refusal:
        """Waits for the node's refusal of envelope ``envelope_id``."""
        def found() -> Refusal | None:
            return next((r for r in self.refusals if r.id == envelope_id), None)

        async with self._refused:
            try:
                await asyncio.wait_for(self._refused.wait_for(lambda: found() is not None), self.timeout if timeout is None else timeout)
            except asyncio.TimeoutError:
                raise Timeout(None, f"the node did not refuse {envelope_id} in time") from None
        r = found()
        assert r is not None
        return r

    async def close(self) -> None:
        await self._ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def _message(text: str, intent: str | None, artifacts: list[Any] | None) -> dict[str, Any]:
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must not be blank")
    body: dict[str, Any] = {"text": text}
    if intent is not None:
        body["intent"] = intent
    if artifacts is not None:
        body["artifacts"] = artifacts
    return body
