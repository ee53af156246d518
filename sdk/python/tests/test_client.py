"""The JSON-RPC client against real nodes: every namespace, errors, concurrency, providers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import pytest
from nodes import NodeProcess, eventually

import agora_mesh
from agora_mesh import (
    AgoraError,
    BudgetExceeded,
    InternalError,
    InvalidParams,
    MethodNotFound,
    SessionNotFound,
)
from agora_mesh.namespaces import amount_param, params_of


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 40))


def test_the_namespaces_cover_the_method_table() -> None:
    async def body() -> None:
        client = agora_mesh.Client("ws://127.0.0.1:1")
        seen = set()
        for space in ("state", "guard", "tool", "memory", "recursive", "learning", "improving", "bridge", "node", "directory"):
            ns = getattr(client, space)
            for method in agora_mesh.METHODS:
                prefix, _, leaf = method.rpartition(".")
                if prefix == space:
                    seen.add(method)
                    assert callable(getattr(ns, agora_mesh._methods.snake(leaf)))
        seen |= {m for m in agora_mesh.METHODS if m.startswith("micropayments.")}
        assert callable(client.micropayments.channel.open) and callable(client.micropayments.verify)
        assert seen == set(agora_mesh.METHODS)

    run(body)


def test_a_namespace_out_of_step_with_the_table_fails_at_import() -> None:
    from agora_mesh.namespaces import Namespace, RpcMethod

    with pytest.raises(TypeError, match="out of step"):
        class Missing(Namespace):  # lacks record_episode
            space = "state"
            create_session: RpcMethod
            get_session: RpcMethod
            set_state: RpcMethod
            get_state: RpcMethod
            end_session: RpcMethod

    with pytest.raises(TypeError, match="out of step"):
        class Extra(Namespace):
            space = "node"
            info: RpcMethod
            reboot: RpcMethod


def test_the_node_serves_every_method_of_the_table(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as client:
            missing = []
            for method in agora_mesh.METHODS:
                try:
                    await client.call(method, {})
                except MethodNotFound:
                    missing.append(method)
                except AgoraError:
                    pass  # served: {} is not a valid call of most methods
            assert missing == []

    run(body)


def test_the_table_names_every_method_of_the_openrpc_document(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as client:
            try:
                doc = await client.call("rpc.discover")
            except MethodNotFound:
                pytest.skip("this node does not serve rpc.discover (OpenRPC) yet")
            served = {m["name"] for m in doc["methods"]}
            # The spec's other names of improving.* and the discovery method itself are not SDK calls.
            served = {m for m in served if not m.startswith(("selfImproving.", "rpc."))}
            assert served == set(agora_mesh.METHODS)

    run(body)


def test_params_are_converted_at_the_top_level_only() -> None:
    assert params_of(None, {"session_id": "s", "estimated_cost": 1}) == {"sessionId": "s", "estimatedCost": 1}
    assert params_of({"sessionId": "s", "x_y": {"a_b": 1}}, {"min_reputation": 0.8}) == {
        "sessionId": "s",
        "x_y": {"a_b": 1},
        "minReputation": 0.8,
    }
    assert params_of(None, {}) is None
    with pytest.raises(TypeError):
        params_of(["a"], {})  # type: ignore[arg-type]
    assert amount_param(Decimal("0.003"), "amount") == "0.003"
    assert amount_param(Decimal("1E-6"), "amount") == "0.000001"
    assert amount_param(5.0, "budget") == 5.0
    for bad in (True, float("nan"), Decimal("Infinity"), "  ", None):
        with pytest.raises((TypeError, ValueError)):
            amount_param(bad, "amount")


def test_bad_arguments_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="ws://"):
        agora_mesh.connect("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="not both"):
        agora_mesh.connect("ws://127.0.0.1:1", api_key="k" * 20, token="t")

    async def body() -> None:
        with pytest.raises(agora_mesh.ConnectionClosed, match="cannot connect"):
            await agora_mesh.connect("ws://127.0.0.1:1", timeout=5)

    run(body)


def test_state_guard_recursive_and_errors(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as client:
            s = await client.state.create_session(agent_name="sdk-test", metadata={"budget": 1.0})
            sid = s["sessionId"]
            assert sid and s["sessionToken"]
            assert (await client.state.set_state(session_id=sid, key="k", value={"v": 1}))["updated"] is True
            assert (await client.state.get_state({"sessionId": sid, "key": "k"}))["value"] == {"v": 1}
            info = await client.state.get_session(session_id=sid)
            assert info["agentName"] == "sdk-test"
            assert "episodeId" in await client.state.record_episode(session_id=sid, outcome="success", reward=1.0)
            assert (await client.guard.validate(data={"a": 1}, schema={"type": "object"}))["valid"] is True
            assert (await client.guard.check_safety(content="hello world"))["safe"] is True
            assert (await client.guard.check_rate_limit(key="k", limit=5, window=1000))["allowed"] is True
            assert (await client.guard.get_budget_status(session_id=sid))["limit"] == 1.0
            assert (await client.recursive.track(session_id=sid, step="search", depth=1))["tracked"] is True
            assert (await client.recursive.set_max_depth(session_id=sid, max_depth=5))["updated"] is True
            trace = await client.recursive.get_trace(session_id=sid)
            assert trace["maxDepth"] == 5 and len(trace["steps"]) == 1
            r = await client.recursive.analyze(session_id=sid, current_step="search", call_stack=["plan", "search"])
            assert r["isLooping"] is False

            with pytest.raises(BudgetExceeded) as budget:
                await client.guard.consume_budget(session_id=sid, amount=5.0)
            assert budget.value.code == -32002
            assert budget.value.data == {"remaining": 1.0, "requested": 5.0, "limit": 1.0}
            with pytest.raises(SessionNotFound) as missing:
                await client.state.get_session(session_id="sess_missing")
            assert missing.value.code == -32001 and isinstance(missing.value, AgoraError)
            with pytest.raises(InvalidParams) as bad:
                await client.guard.check_rate_limit(key="k", limit=0, window=1000)
            assert bad.value.code == -32602
            with pytest.raises(MethodNotFound):
                await client.call("nosuch.method", {})

            # A session token opens that session's calls only.
            async with agora_mesh.connect(node_a.rpc, token=s["sessionToken"]) as scoped:
                assert (await scoped.state.get_state(session_id=sid, key="k"))["value"] == {"v": 1}
            assert (await client.state.end_session(session_id=sid))["ended"] is True

    run(body)


def test_rate_limited_carries_retry_after() -> None:
    e = agora_mesh.errors.from_wire({"code": -32003, "message": "Rate Limited", "data": {"retryAfterMs": 250}})
    assert isinstance(e, agora_mesh.RateLimited) and e.retry_after == 0.25
    e2 = agora_mesh.errors.from_wire({"code": -32602, "message": "Invalid params", "data": {"field": "toolId"}})
    assert isinstance(e2, InvalidParams) and e2.field == "toolId"
    for code, cls in [(-32700, agora_mesh.ParseError), (-32600, agora_mesh.InvalidRequest), (-32004, agora_mesh.SafetyViolation),
                      (-32005, agora_mesh.LoopDetected), (-32006, agora_mesh.PeerUnavailable),
                      (-32007, agora_mesh.ReplicationFailed), (-32008, agora_mesh.TrajectoryRejected)]:
        assert type(agora_mesh.errors.from_wire({"code": code, "message": "m"})) is cls
    assert type(agora_mesh.errors.from_wire({"code": -32050, "message": "m"})) is AgoraError


def test_many_calls_in_flight_on_one_connection(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as client:
            keys = [f"c{i}" for i in range(150)]
            results = await asyncio.gather(*(client.guard.check_rate_limit(key=k, limit=3, window=60000) for k in keys))
            assert all(r["allowed"] and r["remaining"] == 2 for r in results)
            # Answers are matched to their calls: a mix of failures and results.
            mixed = await asyncio.gather(
                client.state.get_session(session_id="sess_nope"),
                client.guard.check_safety(content="fine"),
                return_exceptions=True,
            )
            assert isinstance(mixed[0], SessionNotFound)
            assert isinstance(mixed[1], dict) and mixed[1]["safe"] is True
        # More calls than the client lets fly at once: the rest wait for room.
        async with agora_mesh.connect(node_a.rpc, max_in_flight=4) as narrow:
            results = await asyncio.gather(*(narrow.guard.check_rate_limit(key=f"n{i}", limit=3, window=60000) for i in range(40)))
            assert len(results) == 40 and narrow._free == 4

    run(body)


def test_timeout_of_a_call(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as client:
            gate = asyncio.Event()

            async def slow(params: Any) -> Any:
                await gate.wait()
                return params

            tool = await client.tool.register(slow, name="slow-tool", description="waits", capabilities=["sdk-slow"])
            # A call with a long timeout in flight, then one with a short timeout: the second
            # expires on time, the first is answered once the tool returns.
            long = asyncio.ensure_future(client.call("tool.invoke", {"toolId": tool["toolId"], "params": {"n": 1}}, timeout=20))
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(agora_mesh.Timeout):
                await client.call("tool.invoke", {"toolId": tool["toolId"], "params": {}}, timeout=0.3)
            assert 0.25 <= loop.time() - started < 5
            gate.set()
            assert (await long)["result"] == {"n": 1}
            # The client is still usable.
            assert (await client.guard.check_safety(content="ok"))["safe"] is True

    run(body)


def test_a_call_waiting_for_room_gives_up_on_time_and_others_go_on(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as provider, agora_mesh.connect(node_a.rpc, max_in_flight=1) as client:
            gate = asyncio.Event()

            async def hold(params: Any) -> Any:
                await gate.wait()
                return "done"

            tool = await provider.tool.register(hold, name="hold", description="holds", capabilities=["sdk-hold"])
            held = asyncio.ensure_future(client.tool.invoke(tool_id=tool["toolId"], params={}))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while provider._tool_calls == 0:  # the held call has the only slot
                assert loop.time() < deadline, "the provider is asked"
                await asyncio.sleep(0.01)
            with pytest.raises(agora_mesh.Timeout, match="no room"):
                await client.guard.check_safety(content="x", _timeout=0.2)
            queued = asyncio.ensure_future(client.guard.check_safety(content="y"))
            gate.set()
            assert (await held)["result"] == "done"
            assert (await asyncio.wait_for(queued, 10))["safe"] is True
            with pytest.raises(ValueError):
                await client.call("guard.checkSafety", {"content": "z"}, timeout=0)

    run(body)


def test_providers_answer_invocations(node_a: NodeProcess, node_b: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_b.rpc) as provider, agora_mesh.connect(node_a.rpc) as caller:
            threads: list[str] = []

            calls: list[agora_mesh.ToolCall] = []

            def upper(params: Any, call: agora_mesh.ToolCall) -> Any:  # sync: runs in a thread
                threads.append(threading.current_thread().name)
                calls.append(call)
                return {"text": str(params["text"]).upper()}

            async def fail(params: Any) -> Any:
                raise ValueError("no luck today")

            async def refuse(params: Any) -> Any:
                raise InvalidParams(None, "Invalid params: q is required", {"field": "q"})

            up = await provider.tool.register(upper, name="upper", description="Upper-cases text", capabilities=["sdk-upper"],
                                              input_schema={"type": "object", "properties": {"text": {"type": "string"}}})

            @provider.tool.provider(name="refuser", description="Refuses", capabilities=["sdk-refuse"])
            async def refuser(params: Any) -> Any:
                return await refuse(params)

            ref = await refuser
            bad = await provider.tool.register(fail, name="failer", description="Always fails", capabilities=["sdk-fail"])
            assert set(provider.provided_tools) == {up["toolId"], ref["toolId"], bad["toolId"]}
            listed = await provider.tool.list_registered()
            assert up["toolId"] in {t["id"] for t in listed["tools"]}

            # Discovered from the other node, then invoked there.
            async def discover() -> dict[str, Any]:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 20
                while True:
                    r = await caller.tool.discover(query="", capabilities=["sdk-upper"])
                    hits = [t for t in r["tools"] if t["id"] == up["toolId"]]
                    if hits:
                        return dict(hits[0])
                    assert loop.time() < deadline, "the tool is discovered from node A"
                    await asyncio.sleep(0.1)

            record = await discover()
            assert record["peerId"] == node_b.peer_id and record["name"] == "upper"
            session = await caller.state.create_session(agent_name="caller")
            r = await caller.tool.invoke(tool_id=up["toolId"], params={"text": "hi"}, session_id=session["sessionId"])
            assert r["result"] == {"text": "HI"} and r["peerId"] == node_b.peer_id
            assert calls[0].tool_id == up["toolId"] and calls[0].session_id == session["sessionId"]
            assert calls[0].request_id.startswith("srv-")
            assert threads and threads[0] != threading.main_thread().name
            with pytest.raises(InternalError, match="no luck today"):
                await provider.tool.invoke(tool_id=bad["toolId"], params={})
            with pytest.raises(InvalidParams) as e:
                await provider.tool.invoke(tool_id=ref["toolId"], params={})
            assert e.value.field == "q"
            # The provider is still serving after its tools failed.
            r = await provider.tool.invoke(tool_id=up["toolId"], params={"text": "again"})
            assert r["result"] == {"text": "AGAIN"}
            analytics = await provider.tool.get_analytics(tool_id=up["toolId"])
            assert analytics["invocations"] >= 1

    run(body)


def test_memory_learning_and_improving(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as client:
            s = await client.state.create_session(agent_name="mem")
            sid = s["sessionId"]
            stored = await client.memory.store(content="Exponential backoff with jitter for rate limits", session_id=sid)
            mid = stored["id"]
            assert (await client.memory.get(id=mid))["content"].startswith("Exponential")
            found = await client.memory.search(query="backoff jitter", session_id=sid)
            assert found["memories"][0]["id"] == mid
            assert (await client.memory.list(session_id=sid))["total"] == 1
            assert (await client.memory.archive(id=mid))["archived"] is True
            assert (await client.memory.delete(id=mid))["deleted"] is True

            pb = "sdk-playbook"
            added = await client.learning.add_bullet(playbook_id=pb, section="str", content="Search before you summarise")
            assert added["bulletId"].startswith("str-")
            assert (await client.learning.feedback(playbook_id=pb, bullet_id=added["bulletId"], helpful=True))["helpfulCount"] >= 1
            assert (await client.learning.get_playbook(playbook_id=pb))["bullets"][0]["id"] == added["bulletId"]
            assert (await client.learning.get_stats(playbook_id=pb))["totalBullets"] == 1
            execution = {"input": "q", "output": "a", "steps": [{"action": "search", "tool": "web", "duration": 10}],
                         "outcome": "success", "reward": 0.9}
            assert "playbookVersion" in await client.learning.reflect(playbook_id=pb, execution=execution, mode="eval-only")
            assert "remaining" in await client.learning.curate(playbook_id=pb)

            run_ = {"taskType": "sdk-task", "input": {"q": 1}, "output": {"a": 1},
                    "steps": [{"action": "search", "tool": "t", "duration": 5}], "reward": 0.9}
            rec = await client.improving.record_trajectory(run_)
            assert rec["trajectoryId"].startswith("traj-")
            ex = await client.improving.get_exemplars(task_type="sdk-task", limit=3)
            assert ex["exemplars"][0]["trajectoryId"] == rec["trajectoryId"]
            assert (await client.improving.get_library_stats(task_type="sdk-task"))["total"] >= 1
            assert "difficulty" in await client.improving.assess_difficulty(task_type="sdk-task", input={"q": 1})
            assert "librarySize" in await client.improving.curate(task_type="sdk-task")
            assert "augmented" in await client.improving.augment(trajectory_id=rec["trajectoryId"], mode="NONE")

    run(body)


def test_bridge_listings(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as client:
            assert "agents" in await client.bridge.list_a2a_agents()
            # Registering or listing MCP servers needs the API key; a keyless client is told so.
            with pytest.raises(InvalidParams) as e:
                await client.bridge.list_mcp_servers()
            assert e.value.data["reason"] == "api-key-required"
            for call in (client.bridge.register_mcp_server(url="stdio://x", command="true"),
                         client.bridge.unregister_mcp_server(server_id="x"),
                         client.bridge.announce_a2a_agent(url="http://127.0.0.1:9"),
                         client.bridge.withdraw_a2a_agent(name="x")):
                with pytest.raises(InvalidParams):
                    await call

    run(body)


def test_node_info(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as client:
            info = await client.node.info()
            assert info["peerId"] == node_a.peer_id
            assert info["faces"]["rpc"] == node_a.rpc
            assert info["walletAddress"].startswith("0x")

    run(body)


def test_payment_channel_in_the_spec_amounts(node_a: NodeProcess, node_b: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as client:
            ch = await client.micropayments.channel.open(payee=node_b.peer_id, budget=5.0, currency="USDC")
            assert isinstance(ch, agora_mesh.Channel) and ch.channel_id.startswith("0x")
            await ch.pay(0.003, "42 tokens")
            paid = await ch.pay(Decimal("0.003"), "42 tokens")
            assert paid["nonce"] == 2
            closed = await ch.close()
            assert closed["totalSpent"] == 0.006 and closed["refund"] == 4.994, closed
            assert closed["totalSpentAtomic"] == "6000"

    run(body)
