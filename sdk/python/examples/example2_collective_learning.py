"""Spec §11 Example 2, collective learning: a trajectory recorded on node A is gossiped, and
`improving.getExemplars` on node B returns it with A's PeerId.

The nodes must learn from the task type: start them with
`AGORA_IMPROVING_TASK_TYPES=web-research` (and A with `AGORA_IMPROVING_SHARE=true`, or pass
`share: true` as here).

    python example2_collective_learning.py ws://127.0.0.1:3100 ws://127.0.0.1:3101
"""

from __future__ import annotations

import asyncio
import uuid

from _shared import check, node_urls, show

import agora_mesh

STEPS = [
    {"action": "discover", "tool": "tool.discover", "duration": 45},
    {"action": "search", "tool": "web-search", "duration": 195},
    {"action": "synthesize", "tool": "summarizer", "duration": 720},
]


async def main() -> None:
    url_a, url_b = node_urls(2)
    async with agora_mesh.connect(url_a) as agent_a, agora_mesh.connect(url_b) as agent_b:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        # Agent A records a rewarded run; it is gossiped once A has a mesh peer on the topic.
        while True:
            run = str(uuid.uuid4())
            recorded = await agent_a.improving.record_trajectory(
                task_type="web-research",
                input={"query": "solid-state battery breakthroughs 2026", "run": run},
                output={"summary": "...", "confidence": 0.91},
                steps=STEPS,
                reward=0.91,
                share=True,
            )
            if recorded["gossipedTo"] >= 1 or loop.time() > deadline:
                break
            await asyncio.sleep(0.2)
        show("A: improving.recordTrajectory", recorded)
        check(recorded["gossipedTo"] >= 1, "the trajectory was gossiped to a peer")
        trajectory_id = recorded["trajectoryId"]
        own = await agent_a.improving.get_exemplars(task_type="web-research", limit=20, min_reward=0.8)
        mine = [e for e in own["exemplars"] if e["trajectoryId"] == trajectory_id]
        check(len(mine) == 1, "A holds its own trajectory")
        peer_a = mine[0]["peerId"]

        # 1. Agent B gets exemplars, including A's trajectory received via gossip.
        while True:
            got = await agent_b.improving.get_exemplars(task_type="web-research", limit=3, min_reward=0.8)
            theirs = [e for e in got["exemplars"] if e["trajectoryId"] == trajectory_id]
            if theirs or loop.time() > deadline:
                break
            # Exemplars are ranked (and the library may hold earlier runs): look further down too.
            got_all = await agent_b.improving.get_exemplars(task_type="web-research", limit=20, min_reward=0.8)
            theirs = [e for e in got_all["exemplars"] if e["trajectoryId"] == trajectory_id]
            if theirs:
                break
            await asyncio.sleep(0.1)
        show("B: improving.getExemplars", got)
        check(len(theirs) == 1, "B's exemplars include A's trajectory")
        e = theirs[0]
        check(e["peerId"] == peer_a, "attributed to A's PeerId")
        check(e["reward"] == 0.91 and e["steps"] == STEPS, "with A's reward and steps")
        for field in ("utilityScore", "usageCount", "input"):
            check(field in e, f"the exemplar has {field}")
        check("librarySize" in got and "avgReward" in got, "librarySize and avgReward")
    print("example 2: ok")


if __name__ == "__main__":
    asyncio.run(main())
