"""Reconnection: a node killed and restarted on the same data and ports."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from nodes import NodeProcess

import agora_mesh


async def until(what: str, timeout: float, probe: Any) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not probe():
        assert loop.time() < deadline, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.02)


def test_reconnects_and_registers_its_tools_again(tmp_path: Path, agora_binary: str) -> None:
    node = NodeProcess(tmp_path / "r")
    try:
        async def body() -> None:
            nonlocal node
            policy = agora_mesh.Reconnect(initial_delay=0.05, max_delay=0.5, max_attempts=100)
            async with agora_mesh.connect(node.rpc, reconnect=policy, timeout=20) as client:
                gate = asyncio.Event()

                async def echo(params: Any) -> Any:
                    if params.get("wait"):
                        await gate.wait()
                    return {"echo": params}

                tool_id = (await client.tool.register(echo, name="echo", description="Echoes", capabilities=["sdk-echo"]))["toolId"]
                in_flight = asyncio.ensure_future(client.tool.invoke(tool_id=tool_id, params={"wait": True}))
                await until("the provider is asked", 10, lambda: client._tool_calls == 1)
                node.kill()
                with pytest.raises(agora_mesh.ConnectionClosed):
                    await in_flight
                gate.set()
                node = node.restart()
                await until("the client reconnects and registers its tool", 20, lambda: client.reconnects >= 1)
                # Same tool id: the node adopted the stored tool on the identical registration.
                assert list(client.provided_tools) == [tool_id]
                r = await client.tool.invoke(tool_id=tool_id, params={"n": 1})
                assert r["result"] == {"echo": {"n": 1}}
                listed = await client.tool.list_registered()
                assert tool_id in {t["id"] for t in listed["tools"]}

        asyncio.run(asyncio.wait_for(body(), 50))
    finally:
        node.kill()


def test_without_reconnection_calls_fail_once_closed(tmp_path: Path, agora_binary: str) -> None:
    node = NodeProcess(tmp_path / "n")
    try:
        async def body() -> None:
            client = await agora_mesh.connect(node.rpc, reconnect=False)
            assert (await client.guard.check_safety(content="ok"))["safe"] is True
            node.kill()
            await until("the client sees the close", 10, lambda: not client.connected)
            with pytest.raises(agora_mesh.ConnectionClosed):
                await client.guard.check_safety(content="ok")
            await client.close()

        asyncio.run(asyncio.wait_for(body(), 30))
    finally:
        node.kill()


def test_reconnect_policy_is_bounded_and_checked() -> None:
    p = agora_mesh.Reconnect(initial_delay=0.1, max_delay=1.0, jitter=0.5)
    delays = [p.delay(n) for n in range(40)]
    assert all(0.05 <= d <= 1.0 for d in delays) and max(delays[10:]) <= 1.0
    for bad in ({"initial_delay": 0}, {"max_delay": 0.01}, {"max_attempts": 0}, {"jitter": 2}):
        with pytest.raises(ValueError):
            agora_mesh.Reconnect(**bad)


def test_the_api_key_is_sent_and_a_missing_one_refused(tmp_path: Path, agora_binary: str) -> None:
    key = "an-api-key-for-the-sdk-tests"
    node = NodeProcess(tmp_path / "k", env={"AGORA_API_KEY": key})
    try:
        async def body() -> None:
            with pytest.raises(agora_mesh.ConnectionClosed, match="HTTP 401"):
                await agora_mesh.connect(node.rpc)
            async with agora_mesh.connect(node.rpc, api_key=key) as client:
                # The API key grants the methods a keyless client may not call.
                assert "servers" in await client.bridge.list_mcp_servers()

        asyncio.run(asyncio.wait_for(body(), 30))
    finally:
        node.kill()
