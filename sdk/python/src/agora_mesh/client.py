"""The JSON-RPC client of an Agora node's rpc face: one WebSocket, many calls in flight."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import math
import random
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed as WsConnectionClosed
from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI
from websockets.frames import Frame, Opcode
from websockets.protocol import Event

from .errors import (
    AgoraError,
    ConnectionClosed,
    InternalError,
    InvalidParams,
    MethodNotFound,
    RateLimited,
    Timeout,
    from_wire,
)
from .namespaces import Bridge, Directory, Guard, Improving, Learning, Memory, Micropayments, Node, Recursive, State, Tool

#: The largest frame accepted from the node (its own replies are far smaller).
MAX_FRAME_BYTES: Final = 8 * 1024 * 1024

#: A tool provider: ``fn(params)`` or ``fn(params, call)`` (a :class:`ToolCall`), async or not.
ToolFunction = Callable[..., Any]


@dataclass(frozen=True)
class ToolCall:
    """What a provider function taking a second argument learns of the invocation."""

    tool_id: str
    session_id: str | None
    request_id: str


@dataclass(frozen=True)
class Reconnect:
    """How the client reconnects when its WebSocket drops.

    The n-th attempt waits ``min(max_delay, initial_delay × 2ⁿ)``, less a random part of up to
    ``jitter`` of it; after ``max_attempts`` failed attempts the client gives up and every call
    raises :class:`ConnectionClosed`. ``Reconnect(enabled=False)`` (or ``reconnect=False`` to
    :func:`connect`) never reconnects.
    """

    enabled: bool = True
    initial_delay: float = 0.05
    max_delay: float = 5.0
    max_attempts: int = 30
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.initial_delay <= 0 or self.max_delay < self.initial_delay:
            raise ValueError("Reconnect: need 0 < initial_delay <= max_delay")
        if self.max_attempts < 1:
            raise ValueError("Reconnect: max_attempts must be at least 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("Reconnect: jitter must be within 0..1")

    def delay(self, attempt: int) -> float:
        """The wait before attempt ``attempt`` (0-based)."""
        base = min(self.max_delay, self.initial_delay * (2.0 ** min(attempt, 30)))
        return base * (1.0 - self.jitter * random.random())


class _Connection(ClientConnection):
    """A WebSocket whose whole text frames go straight to :attr:`deliver`, as they are parsed,
    instead of through ``recv()``: one task switch fewer per answer on the hot path. Fragmented
    and binary messages, and frames that arrive before ``deliver`` is set, take the usual way."""

    deliver: Callable[[str], None] | None = None

    def process_event(self, event: Event) -> None:
        deliver = self.deliver
        if deliver is not None and isinstance(event, Frame) and event.opcode is Opcode.TEXT and event.fin:
            try:
                text = str(event.data, "utf-8")
            except UnicodeDecodeError:
                pass  # the usual way refuses it (close 1007)
            else:
                deliver(text)
                return
        super().process_event(event)


@dataclass
class _Tool:
    fn: ToolFunction
    is_async: bool
    wants_call: bool
    params: dict[str, Any]
    tool_id: str


_DUMPS = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class Client:
    """A connection to a node's JSON-RPC face. Make one with :func:`connect`.

    ``client.call(method, params)`` calls any method; the namespaces (``client.state``,
    ``client.tool``, …) call the spec's methods by their snake_case names.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        reconnect: Reconnect | bool = True,
        max_in_flight: int = 256,
        max_tool_calls: int = 16,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            raise ValueError(f"the node's rpc face is a ws:// or wss:// URL, not {url!r}")
        if api_key is not None and token is not None:
            raise ValueError("give api_key or a session token, not both")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if max_in_flight < 1 or max_tool_calls < 1:
            raise ValueError("max_in_flight and max_tool_calls must be at least 1")
        self.url = url
        self.timeout = timeout
        credential = api_key if api_key is not None else token
        self._headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        if isinstance(reconnect, bool):
            reconnect = Reconnect(enabled=reconnect)
        self.reconnect_policy = reconnect
        self._ws: ClientConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ids = itertools.count(1)
        # Calls in flight: id → (future, deadline, method, timeout). One timer, at the earliest
        # deadline, expires them (a timer per call costs more than the rest of the call).
        self._pending: dict[int, tuple[asyncio.Future[Any], float, str, float]] = {}
        self._sweep_at = math.inf
        self._sweeper: asyncio.TimerHandle | None = None
        self._free = max_in_flight
        self._room_waiters: deque[asyncio.Future[None]] = deque()
        self._heads: dict[str, str] = {}
        self._max_tool_calls = max_tool_calls
        self._tool_calls = 0
        self._tools: dict[str, _Tool] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._connected = asyncio.Event()
        self._closing = False
        self._failure: AgoraError | None = None
        #: How many times the connection was re-established (and its tools registered again).
        self.reconnects = 0
        self.state = State(self)
        self.guard = Guard(self)
        self.tool = Tool(self)
        self.memory = Memory(self)
        self.recursive = Recursive(self)
        self.learning = Learning(self)
        self.improving = Improving(self)
        self.micropayments = Micropayments(self)
        self.bridge = Bridge(self)
        self.node = Node(self)
        self.directory = Directory(self)

    # -- connection ---------------------------------------------------------------------------

    async def _open(self) -> ClientConnection:
        try:
            ws = await asyncio.wait_for(
                ws_connect(
                    self.url,
                    additional_headers=self._headers,
                    max_size=MAX_FRAME_BYTES,
                    compression=None,
                    open_timeout=None,
                    create_connection=_Connection,
                ),
                self.timeout,
            )
        except asyncio.TimeoutError:
            raise Timeout(None, f"{self.url} did not open a WebSocket within {self.timeout} s") from None
        except InvalidStatus as e:
            status = e.response.status_code
            body = e.response.body.decode("utf-8", "replace") if e.response.body else ""
            raise ConnectionClosed(None, f"{self.url} refused the WebSocket (HTTP {status}): {body}".strip()) from None
        except (OSError, InvalidHandshake, InvalidURI) as e:
            raise ConnectionClosed(None, f"cannot connect to {self.url}: {e}") from None
        if isinstance(ws, _Connection):
            ws.deliver = lambda text: self._receive(ws, text)
        self._ws = ws
        self._loop = asyncio.get_running_loop()
        task = self._loop.create_task(self._read(ws))
        self._keep(task)
        self._connected.set()
        return ws

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _read(self, ws: ClientConnection) -> None:
        # Whole text frames arrive by _receive; this reads what is left and notices the close.
        try:
            async for message in ws:
                if isinstance(message, str):
                    self._receive(ws, message)
        except WsConnectionClosed:
            pass
        finally:
            self._dropped(ws)

    def _receive(self, ws: ClientConnection, text: str) -> None:
        try:
            frame = json.loads(text)
        except ValueError:
            return
        try:
            if isinstance(frame, list):
                for f in frame:
                    self._dispatch(ws, f)
            else:
                self._dispatch(ws, frame)
        except Exception:  # noqa: BLE001 — a frame we cannot use must not break the socket
            return

    def _dispatch(self, ws: ClientConnection, frame: Any) -> None:
        if not isinstance(frame, dict):
            return
        if "method" in frame:
            if "id" in frame:
                self._serve(ws, frame)
            return
        entry = self._pending.pop(frame.get("id"), None)  # type: ignore[arg-type]
        if entry is None:
            return
        fut = entry[0]
        if fut.done():
            return
        error = frame.get("error")
        if error is not None:
            fut.set_exception(from_wire(error))
        else:
            fut.set_result(frame.get("result"))

    def _dropped(self, ws: ClientConnection) -> None:
        if self._ws is not ws:
            return
        self._ws = None
        self._connected.clear()
        closed = ConnectionClosed(None, f"the connection to {self.url} closed")
        pending, self._pending = self._pending, {}
        for fut, *_ in pending.values():
            if not fut.done():
                fut.set_exception(closed)
        if self._closing or not self.reconnect_policy.enabled:
            self._failure = closed
            self._connected.set()  # wakes waiting callers, who then see the failure
            return
        self._keep(asyncio.get_running_loop().create_task(self._reconnect()))

    async def _reconnect(self) -> None:
        policy = self.reconnect_policy
        last: AgoraError | None = None
        for attempt in range(policy.max_attempts):
            # Backoff between attempts (not a synchronisation wait).
            await asyncio.sleep(policy.delay(attempt))
            if self._closing:
                break
            try:
                await self._open()
            except AgoraError as e:
                last = e
                continue
            await self._reregister()
            self.reconnects += 1
            return
        self._failure = ConnectionClosed(
            None,
            f"gave up reconnecting to {self.url} after {policy.max_attempts} attempts"
            + (f": {last.message}" if last else ""),
        )
        self._connected.set()

    async def _reregister(self) -> None:
        # The tools stay answerable under their old ids meanwhile: an identical registration
        # gets its old id back from the node.
        for tool in list(self._tools.values()):
            try:
                result = await self.call("tool.register", tool.params)
            except AgoraError:
                # Dropped again (the next reconnection registers it), or refused now.
                continue
            new_id = str(result["toolId"])
            if new_id != tool.tool_id:
                self._tools.pop(tool.tool_id, None)
                tool.tool_id = new_id
                self._tools[new_id] = tool

    async def close(self) -> None:
        """Closes the connection; calls in flight fail with :class:`ConnectionClosed`."""
        self._closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper, self._sweep_at = None, math.inf
        ws = self._ws
        if ws is not None:
            await ws.close()
            self._dropped(ws)
        for task in list(self._background):
            if task is not asyncio.current_task():
                task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        self._failure = self._failure or ConnectionClosed(None, "the client was closed")
        self._connected.set()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """Whether the WebSocket is open now."""
        return self._ws is not None

    # -- calls --------------------------------------------------------------------------------

    async def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Calls ``method`` with ``params`` (an object, an array or ``None``) and returns the
        result; a JSON-RPC error is raised as its :class:`AgoraError` subclass, no answer within
        ``timeout`` (default: the client's) as :class:`Timeout`."""
        head = self._heads.get(method)
        if head is None:
            if not isinstance(method, str) or not method:
                raise ValueError("method must be a non-empty string")
            head = self._heads[method] = ',"method":' + _DUMPS(method)
            if len(self._heads) > 4096:
                self._heads.clear()
        if params is None:
            tail = "}"
        elif isinstance(params, (dict, list)):
            try:
                tail = ',"params":' + _DUMPS(params) + "}"
            except (TypeError, ValueError) as e:
                raise TypeError(f"{method}: params are not JSON: {e}") from None
        else:
            raise TypeError(f"params must be a dict, a list or None, not {type(params).__name__}")
        if timeout is None:
            limit = self.timeout
        elif timeout > 0:
            limit = timeout
        else:
            raise ValueError("timeout must be positive")
        loop = self._loop or asyncio.get_running_loop()
        deadline = loop.time() + limit
        ws = self._ws
        if ws is None:
            ws = await self._wait_connected(deadline, method)
        if self._free <= 0:
            await self._wait_room(deadline, method)
        self._free -= 1
        call_id = next(self._ids)
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending[call_id] = (fut, deadline, method, limit)
        if deadline < self._sweep_at:
            self._arm(loop, deadline)
        try:
            await ws.send('{"jsonrpc":"2.0","id":' + str(call_id) + head + tail)
            return await fut
        except WsConnectionClosed:
            raise ConnectionClosed(None, f"the connection to {self.url} closed") from None
        finally:
            self._pending.pop(call_id, None)
            self._free += 1
            while self._room_waiters:
                waiter = self._room_waiters.popleft()
                if not waiter.done():  # skip those that gave up
                    waiter.set_result(None)
                    break

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._sweep_at = when
        self._sweeper = loop.call_at(when, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fails the calls whose deadline has passed with :class:`Timeout`; re-arms for the next."""
        self._sweeper, self._sweep_at = None, math.inf
        now, earliest = loop.time(), math.inf
        for fut, deadline, method, limit in list(self._pending.values()):
            if fut.done():
                continue
            if deadline <= now:
                fut.set_exception(Timeout(None, f"{method}: no answer within {limit} s"))
            elif deadline < earliest:
                earliest = deadline
        if earliest < math.inf:
            self._arm(loop, earliest)

    async def _wait_room(self, deadline: float, method: str) -> None:
        loop = asyncio.get_running_loop()
        while self._free <= 0:
            waiter: asyncio.Future[None] = loop.create_future()
            self._room_waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                raise Timeout(None, f"{method}: no room among the calls in flight in time") from None

    async def _wait_connected(self, deadline: float, method: str) -> ClientConnection:
        loop = asyncio.get_running_loop()
        while True:
            if self._failure is not None:
                raise self._failure
            ws = self._ws
            if ws is not None:
                return ws
            left = deadline - loop.time()
            if left <= 0:
                raise Timeout(None, f"{method}: not connected to {self.url} in time")
            try:
                await asyncio.wait_for(self._connected.wait(), left)
            except asyncio.TimeoutError:
                raise Timeout(None, f"{method}: not connected to {self.url} in time") from None

    # -- tool providers ---------------------------------------------------------------------

    async def register_tool(self, fn: ToolFunction, params: dict[str, Any]) -> str:
        """Registers a tool whose invocations ``fn`` answers on this connection (and again on
        every reconnection); returns its tool id."""
        if not callable(fn):
            raise TypeError("a tool provider must be a function")
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)
        )
        try:
            positional = [
                p
                for p in inspect.signature(fn).parameters.values()
                if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):
            positional = []
        result = await self.call("tool.register", params)
        tool_id = str(result["toolId"])
        self._tools[tool_id] = _Tool(fn, is_async, len(positional) >= 2, dict(params), tool_id)
        return tool_id

    @property
    def provided_tools(self) -> dict[str, str]:
        """The tools this connection answers for: tool id → name."""
        return {tid: str(t.params.get("name", "")) for tid, t in self._tools.items()}

    def _serve(self, ws: ClientConnection, frame: dict[str, Any]) -> None:
        request_id = frame["id"]
        if frame.get("method") != "tool.invoke":
            error: AgoraError | None = MethodNotFound(None, f"this client serves only tool.invoke, not {frame.get('method')!r}")
        elif self._tool_calls >= self._max_tool_calls:
            error = RateLimited(None, f"the provider already runs {self._max_tool_calls} calls", {"retryAfterMs": 100})
        else:
            error = None
        if error is not None:
            self._keep(asyncio.get_running_loop().create_task(self._reply(ws, request_id, None, error)))
            return
        self._tool_calls += 1
        self._keep(asyncio.get_running_loop().create_task(self._invoke(ws, request_id, frame.get("params"))))

    async def _invoke(self, ws: ClientConnection, request_id: Any, params: Any) -> None:
        try:
            tool_id = params.get("toolId") if isinstance(params, dict) else None
            tool = self._tools.get(tool_id) if isinstance(tool_id, str) else None
            if tool is None or not isinstance(params, dict):
                await self._reply(ws, request_id, None, InvalidParams(None, "no such tool on this connection", {"field": "toolId"}))
                return
            args: tuple[Any, ...] = (params.get("params"),)
            if tool.wants_call:
                session = params.get("sessionId")
                args += (ToolCall(tool.tool_id, session if isinstance(session, str) else None, str(request_id)),)
            try:
                if tool.is_async:
                    result = await tool.fn(*args)
                else:
                    result = await asyncio.to_thread(tool.fn, *args)
                    if inspect.isawaitable(result):
                        result = await result
            except AgoraError as e:
                await self._reply(ws, request_id, None, e)
                return
            except Exception as e:  # the tool's failure becomes its error reply
                await self._reply(ws, request_id, None, InternalError(None, str(e) or type(e).__name__, {"exception": type(e).__name__}))
                return
            await self._reply(ws, request_id, result, None)
        finally:
            self._tool_calls -= 1

    async def _reply(self, ws: ClientConnection, request_id: Any, result: Any, error: AgoraError | None) -> None:
        if error is None:
            try:
                text = _DUMPS({"jsonrpc": "2.0", "id": request_id, "result": result})
            except (TypeError, ValueError) as e:
                error = InternalError(None, f"the tool's result is not JSON: {e}")
        if error is not None:
            text = _DUMPS({"jsonrpc": "2.0", "id": request_id, "error": error.to_wire()})
        try:
            await ws.send(text)
        except WsConnectionClosed:
            pass


class _Connecting:
    """What :func:`connect` returns: await it, or use it with ``async with``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def _start(self) -> Client:
        await self._client._open()
        return self._client

    def __await__(self) -> Generator[Any, None, Client]:
        return self._start().__await__()

    async def __aenter__(self) -> Client:
        return await self._start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._client.close()


def connect(
    url: str,
    api_key: str | None = None,
    timeout: float = 30.0,
    *,
    token: str | None = None,
    reconnect: Reconnect | bool = True,
    max_in_flight: int = 256,
    max_tool_calls: int = 16,
) -> _Connecting:
    """Connects to a node's JSON-RPC face: ``client = await connect("ws://127.0.0.1:3100")``,
    or ``async with connect(url) as client:``.

    ``api_key`` (the node's API key) or ``token`` (a session token from
    ``state.createSession``) is sent as ``Authorization: Bearer``; on loopback a node without
    a key needs neither. ``timeout`` is the default of every call and of opening the socket.
    """
    return _Connecting(
        Client(
            url,
            api_key=api_key,
            token=token,
            timeout=timeout,
            reconnect=reconnect,
            max_in_flight=max_in_flight,
            max_tool_calls=max_tool_calls,
        )
    )

