"""The spec's primitives as namespaces of :class:`~agora_mesh.client.Client`, built from the
method table in :mod:`agora_mesh._methods`."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine, Generator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, cast

from ._methods import by_namespace, camel

if TYPE_CHECKING:
    from .client import Client

Amount = float | int | str | Decimal

_TABLE = by_namespace()


class Registered(TypedDict):
    """``tool.register``'s result."""

    toolId: str


class ChannelPayment(TypedDict, total=False):
    """``micropayments.channel.pay``'s result (amounts in the currency's units; the atomic
    units as digit strings under ``…Atomic``)."""

    nonce: int
    remaining: float
    remainingAtomic: str


class ChannelReceipt(TypedDict, total=False):
    """``micropayments.channel.close``'s result: ``{totalSpent: 0.006, refund: 4.994, …}``."""

    channelId: str
    totalSpent: float
    refund: float
    totalSpentAtomic: str
    refundAtomic: str


def params_of(params: Mapping[str, Any] | None, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """One dict with the spec's own names, and keyword arguments in snake_case (top-level keys
    converted to camelCase) over it."""
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict of the spec's parameters, not {type(params).__name__}")
    if params is None and not kwargs:
        return None
    out = dict(params) if params is not None else {}
    for key, value in kwargs.items():
        out[camel(key)] = value
    return out


class RpcMethod:
    """One JSON-RPC method: ``await client.state.get_session(session_id="sess-…")`` or
    ``await client.state.get_session({"sessionId": "sess-…"})``. ``_timeout`` (seconds)
    overrides the client's timeout for this call."""

    __slots__ = ("_client", "method")

    def __init__(self, client: Client, method: str) -> None:
        self._client = client
        self.method = method

    def __call__(
        self, params: Mapping[str, Any] | None = None, /, *, _timeout: float | None = None, **kwargs: Any
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        # The client's coroutine itself (no frame of our own): this is the hot path. The node
        # answers every method of the table with an object.
        if kwargs or type(params) is not dict:
            params = params_of(params, kwargs)
        return self._client.call(self.method, params, timeout=_timeout)

    def __repr__(self) -> str:
        return f"<RpcMethod {self.method}>"


class Namespace:
    """The methods of one primitive. Each annotated ``RpcMethod`` attribute is filled from the
    method table; a class that declares other names than the table's fails at import."""

    space: ClassVar[str]

    def __init__(self, client: Client) -> None:
        self._client = client
        for leaf, method in _TABLE[self.space].items():
            if not callable(getattr(type(self), leaf, None)):
                setattr(self, leaf, RpcMethod(client, method))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = {n for n, t in cls.__annotations__.items() if t in ("RpcMethod", RpcMethod)}
        custom = {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}
        want = set(_TABLE[cls.space])
        if declared | (custom & want) != want or not declared <= want:
            raise TypeError(f"{cls.__name__} is out of step with the method table: {sorted(want ^ declared)}")


class State(Namespace):
    space = "state"
    create_session: RpcMethod
    get_session: RpcMethod
    set_state: RpcMethod
    get_state: RpcMethod
    end_session: RpcMethod
    record_episode: RpcMethod


class Guard(Namespace):
    space = "guard"
    validate: RpcMethod
    check_safety: RpcMethod
    check_budget: RpcMethod
    consume_budget: RpcMethod
    check_rate_limit: RpcMethod
    get_budget_status: RpcMethod


class Memory(Namespace):
    space = "memory"
    store: RpcMethod
    search: RpcMethod
    get: RpcMethod
    list: RpcMethod
    delete: RpcMethod
    archive: RpcMethod
    reembed: RpcMethod


class Recursive(Namespace):
    space = "recursive"
    analyze: RpcMethod
    track: RpcMethod
    get_trace: RpcMethod
    set_max_depth: RpcMethod


class Learning(Namespace):
    space = "learning"
    get_playbook: RpcMethod
    reflect: RpcMethod
    curate: RpcMethod
    add_bullet: RpcMethod
    feedback: RpcMethod
    get_stats: RpcMethod


class Improving(Namespace):
    space = "improving"
    record_trajectory: RpcMethod
    get_exemplars: RpcMethod
    curate: RpcMethod
    augment: RpcMethod
    assess_difficulty: RpcMethod
    get_library_stats: RpcMethod


class Bridge(Namespace):
    space = "bridge"
    register_mcp_server: RpcMethod
    list_mcp_servers: RpcMethod
    unregister_mcp_server: RpcMethod
    announce_a2a_agent: RpcMethod
    withdraw_a2a_agent: RpcMethod
    list_a2a_agents: RpcMethod


class Node(Namespace):
    space = "node"
    info: RpcMethod


class Directory(Namespace):
    """One search over every agent and tool the node knows, from every face (AGH, the ANS,
    Hyperspace, bridged MCP and A2A): ``await client.directory.search(query="…", filters={…})``."""

    space = "directory"
    search: RpcMethod


class Tool(Namespace):
    space = "tool"
    discover: RpcMethod
    invoke: RpcMethod
    get_analytics: RpcMethod
    list_registered: RpcMethod

    async def register(
        self,
        fn: Callable[..., Any] | Mapping[str, Any] | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        schema: Mapping[str, Any] | None = None,
        input_schema: Mapping[str, Any] | None = None,
        capabilities: list[str] | None = None,
        **kwargs: Any,
    ) -> Registered:
        """``tool.register``. Given a function (async or not; a sync one runs in a thread), this
        connection answers the node's ``tool.invoke`` requests for the tool with it: the function
        gets the invocation's ``params`` (and, if it takes a second argument, a
        :class:`~agora_mesh.client.ToolCall` with the tool id and the caller's session id) and
        returns the result; an :class:`AgoraError` it raises
        is sent as that error, any other exception as −32603 with its message. Given a dict (or
        only keywords), it is the plain call. ``input_schema`` is another name of ``schema``."""
        if schema is not None and input_schema is not None:
            raise ValueError("give schema or input_schema, not both")
        named: dict[str, Any] = {
            "name": name,
            "description": description,
            "schema": schema if schema is not None else input_schema,
            "capabilities": capabilities,
        }
        kwargs.update({k: v for k, v in named.items() if v is not None})
        if fn is None or isinstance(fn, Mapping):
            params = params_of(fn, kwargs) or {}
            return cast(Registered, await self._client.call("tool.register", params))
        if not callable(fn):
            raise TypeError("tool.register takes a function, a dict of params, or keywords")
        params = params_of(None, kwargs) or {}
        params.setdefault("name", getattr(fn, "__name__", None))
        if not params.get("description") and fn.__doc__:
            params["description"] = fn.__doc__.strip().splitlines()[0]
        params.setdefault("schema", {"type": "object"})
        for field in ("name", "description", "capabilities"):
            if not params.get(field):
                raise ValueError(f"tool.register needs {field}")
        tool_id = await self._client.register_tool(fn, params)
        return {"toolId": tool_id}

    def provider(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        schema: Mapping[str, Any] | None = None,
        capabilities: list[str] | None = None,
        **kwargs: Any,
    ) -> Callable[[Callable[..., Any]], Provided]:
        """A decorator, inside a running event loop: ``@client.tool.provider(capabilities=[…])``
        over a function starts its registration; ``await fn`` gives ``{"toolId": …}``."""

        def wrap(fn: Callable[..., Any]) -> Provided:
            call = self.register(fn, name=name, description=description, schema=schema, capabilities=capabilities, **kwargs)
            return Provided(fn, asyncio.get_running_loop().create_task(call))

        return wrap


class Provided:
    """A function registered by :meth:`Tool.provider`: call it as before; ``await`` it for the
    registration's result."""

    def __init__(self, fn: Callable[..., Any], registration: asyncio.Task[Registered]) -> None:
        self.fn = fn
        self.registration = registration

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __await__(self) -> Generator[Any, None, Registered]:
        return self.registration.__await__()


class Channel:
    """A payment channel opened by ``client.micropayments.channel.open(...)``."""

    def __init__(self, client: Client, state: dict[str, Any]) -> None:
        self._client = client
        self.state = state
        self.channel_id: str = str(state["channelId"])

    async def pay(self, amount: Amount, memo: str | None = None) -> ChannelPayment:
        """Pays ``amount`` (in the currency's units: ``0.003`` USDC) on the channel."""
        params: dict[str, Any] = {"channelId": self.channel_id, "amount": amount_param(amount, "amount")}
        if memo is not None:
            params["memo"] = memo
        return cast(ChannelPayment, await self._client.call("micropayments.channel.pay", params))

    async def close(self) -> ChannelReceipt:
        """Closes the channel: ``{totalSpent, refund, channelId, …}``."""
        result = cast(ChannelReceipt, await self._client.call("micropayments.channel.close", {"channelId": self.channel_id}))
        self.state = {**self.state, "state": "closed"}
        return result

    def __repr__(self) -> str:
        return f"<Channel {self.channel_id}>"


def amount_param(value: Any, field: str) -> Any:
    """An amount as sent: a number as a JSON number, a :class:`Decimal` as its exact decimal
    string, a string as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise TypeError(f"{field} must be a number, a decimal string or a Decimal, not {type(value).__name__}")
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{field} must be finite, not {value}")
        return format(value, "f")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{field} must be finite, not {value}")
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{field} must not be blank")
    return value


_AMOUNTS = ("budget", "amount", "priceUsdc", "pricePoints")


def _amounts(params: dict[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    for key in _AMOUNTS:
        if key in params:
            params[key] = amount_param(params[key], key)
    return params


class ChannelMethods(Namespace):
    space = "micropayments.channel"
    pay: RpcMethod
    close: RpcMethod

    async def open(
        self, params: Mapping[str, Any] | None = None, /, *, _timeout: float | None = None, **kwargs: Any
    ) -> Channel:
        """``micropayments.channel.open``: ``open(payee=peer_id, budget=5.0, currency="USDC")``
        returns a :class:`Channel`."""
        sent = _amounts(params_of(params, kwargs))
        state = await self._client.call("micropayments.channel.open", sent, timeout=_timeout)
        if not isinstance(state, dict) or "channelId" not in state:
            raise TypeError(f"micropayments.channel.open answered without a channelId: {state!r}")
        return Channel(self._client, state)


class Micropayments(Namespace):
    space = "micropayments"

    def __init__(self, client: Client) -> None:
        super().__init__(client)
        self.channel = ChannelMethods(client)

    async def challenge(
        self, params: Mapping[str, Any] | None = None, /, *, _timeout: float | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """``micropayments.challenge``: ``challenge(price_usdc=0.01)`` → a PayChallenge."""
        return dict(await self._client.call("micropayments.challenge", _amounts(params_of(params, kwargs)), timeout=_timeout))

    async def verify(
        self, params: Mapping[str, Any] | None = None, /, *, _timeout: float | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """``micropayments.verify``: ``verify(credential=…)``."""
        return dict(await self._client.call("micropayments.verify", params_of(params, kwargs), timeout=_timeout))
