"""Spec §11 Example 1, the agent session lifecycle, across two nodes: a provider on node B
registers `web-search`; the client on node A creates a session, discovers the tool, invokes it,
records the trajectory and ends the session.

    python example1_session_lifecycle.py ws://127.0.0.1:3100 ws://127.0.0.1:3101
"""

from __future__ import annotations

import asyncio
from typing import Any

from _shared import check, node_urls, show

import agora_mesh


async def web_search(params: Any) -> Any:
    """Full-text web search (a stand-in that answers from a fixed list)."""
    query = str(params.get("query", ""))
    return {"results": [{"title": f"About {query}", "url": "...", "snippet": "..."}]}


async def main() -> None:
    url_a, url_b = node_urls(2)
    async with agora_mesh.connect(url_b) as provider, agora_mesh.connect(url_a) as client:
        schema = {
            "input": {"type": "object", "properties": {"query": {"type": "string"}}},
            "output": {"type": "object", "properties": {"results": {"type": "array"}}},
        }
        registered = await provider.tool.register(
            web_search, name="web-search", description="Full-text web search", schema=schema, capabilities=["search"]
        )
        tool_id = registered["toolId"]

        # 1. Create session
        session = await client.state.create_session(agent_name="research-agent", agent_type="autonomous", model="gemma-3-12b")
        show("1. state.createSession", session)
        check(str(session.get("sessionId", "")) != "" and "createdAt" in session, "createSession answers sessionId and createdAt")

        # Before the spec's exchange: the tool earns a track record. A new tool has the prior
        # reputation 0.5; six successful calls from A make it (6 + 2) / (6 + 4) = 0.8 there.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while not any(t["id"] == tool_id for t in (await client.tool.discover(query="web search"))["tools"]):
            check(loop.time() < deadline, "node A learns node B's tool")
            await asyncio.sleep(0.1)
        for _ in range(6):
            await client.tool.invoke(tool_id=tool_id, params={"query": "warm-up"})

        # 2. Discover the tool, as the spec writes it (from node A; it lives on node B)
        found = await client.tool.discover(query="web search", min_reputation=0.8)
        tools = [t for t in found["tools"] if t["id"] == tool_id]
        show("2. tool.discover", found)
        check(len(tools) == 1, "tool.discover on A finds the web-search tool of B")
        check(tools[0]["reputation"] >= 0.8, "its reputation is at least minReputation")
        tool = tools[0]
        for field in ("id", "name", "peerId", "description", "capabilities", "reputation", "avgLatency", "schema"):
            check(field in tool, f"the tool record has {field}")
        check(tool["name"] == "web-search" and tool["capabilities"] == ["search"], "name and capabilities as registered")

        # 3. Invoke it with the session
        invoked = await client.tool.invoke(
            tool_id=tool_id, params={"query": "solid-state battery breakthroughs 2026"}, session_id=session["sessionId"]
        )
        show("3. tool.invoke", invoked)
        check(isinstance(invoked.get("duration"), int), "the invocation's duration in ms")
        check(invoked.get("peerId") == tool["peerId"], "answered by the provider's node (B)")
        check(invoked["result"]["results"][0]["title"].startswith("About solid-state"), "the provider's result")

        # 4. Record the trajectory and end the session
        recorded = await client.improving.record_trajectory(
            task_type="web-research",
            input={"query": "solid-state battery breakthroughs 2026"},
            output={"summary": "...", "confidence": 0.91},
            steps=[
                {"action": "discover", "tool": "tool.discover", "duration": 45},
                {"action": "search", "tool": "web-search", "duration": invoked["duration"]},
                {"action": "synthesize", "tool": "summarizer", "duration": 720},
            ],
            reward=0.91,
        )
        show("4. improving.recordTrajectory", recorded)
        check(str(recorded.get("trajectoryId", "")).startswith("traj-"), "a trajectory id")
        check(recorded.get("state") == "SUCCESS" and isinstance(recorded.get("gossipedTo"), int), "state SUCCESS, gossipedTo")
        ended = await client.state.end_session(session_id=session["sessionId"])
        show("   state.endSession", ended)
        check(ended.get("ended") is True and isinstance(ended.get("duration"), int), "ended with its duration")
    print("example 1: ok")


if __name__ == "__main__":
    asyncio.run(main())
