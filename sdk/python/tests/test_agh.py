"""The AGH agent client across two nodes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nodes import NodeProcess, eventually

from agora_mesh import agh

VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors" / "agh" / "capability-digests.ndjson"


def present(node: NodeProcess, channel: str, peer: str) -> bool | None:
    peers = node.get(f"/agh/v0/peers?channel={channel}")["peers"]
    return True if any(p["peer_id"] == peer for p in peers) else None


def test_capability_digests_match_the_shared_vectors() -> None:
    lines = VECTORS.read_text().splitlines()
    assert lines
    for line in lines:
        v = json.loads(line)
        assert agh.capability_digest(v["document"]) == v["digest"], v["document"]["id"]


def test_two_agents_greet_whois_say_direct_receipt_capability(node_a: NodeProcess, node_b: NodeProcess) -> None:
    channel = "sdk-agh"

    async def body() -> None:
        alice = await agh.Agent.connect(node_a.agh, "alice.sdk", channel, timeout=20)
        bob = await agh.Agent.connect(node_b.agh, "bob.sdk", channel, timeout=20)
        try:
            await alice.greet(["coordination"])
            await bob.greet(card=agh.peer_card("bob.sdk", ["code.review"]))
            await asyncio.to_thread(eventually, "A sees bob", 20, lambda: present(node_a, channel, "bob.sdk"))
            await asyncio.to_thread(eventually, "B sees alice", 20, lambda: present(node_b, channel, "alice.sdk"))

            asked = await alice.whois("code.review")
            answer = await alice.expect(lambda e: e["kind"] == "whois" and e.get("reply_to") == asked)
            assert answer["body"]["peer_card"]["peer_id"] == "bob.sdk"
            assert answer["body"]["peer_card"]["capabilities"] == ["code.review"]

            said = await alice.say("hello builders")
            heard = await bob.expect(lambda e: e["id"] == said)
            assert heard["kind"] == "say" and heard["body"]["text"] == "hello builders" and heard["from"] == "alice.sdk"

            sent, interaction = await alice.direct("bob.sdk", "review PR 7", intent="request", expires_in=120)
            got = await bob.expect(lambda e: e["id"] == sent)
            assert got["kind"] == "direct" and got["to"] == "bob.sdk" and got["interaction_id"] == interaction
            await bob.receipt("alice.sdk", sent, "accepted", interaction_id=interaction)
            receipt: dict[str, Any] = await alice.expect(lambda e: e["kind"] == "receipt" and e["body"]["for_id"] == sent)
            assert receipt["body"]["status"] == "accepted" and receipt["from"] == "bob.sdk"

            doc = {"id": "code.review", "summary": " Review a change ", "outcome": "Comments on the diff",
                   "requirements": ["repo-read", "repo-read", " "]}
            cap = await bob.capability(doc)
            transferred: dict[str, Any] = {}
            async for envelope in alice:  # the iterator form: every incoming envelope, in order
                if envelope["id"] == cap:
                    transferred = envelope
                    break
            assert transferred["body"]["capability"]["digest"] == agh.capability_digest(doc)
            assert transferred["body"]["capability"]["requirements"] == ["repo-read"]

            # An envelope from a peer this connection did not greet as: refused, with the reason.
            forged = alice.envelope("say", {"text": "hi"})
            forged["from"] = "mallory.sdk"
            await alice.send(forged)
            refusal = await alice.refusal(forged["id"])
            assert refusal.reason == "verification_failed"
        finally:
            await alice.close()
            await bob.close()

    asyncio.run(asyncio.wait_for(body(), 60))


def test_bad_agent_input_is_refused_early() -> None:
    with pytest.raises(ValueError, match="peer id"):
        agh.peer_card("Not A Peer")
    with pytest.raises(ValueError, match="non-blank summary"):
        agh.capability_digest({"id": "x", "summary": " ", "outcome": "y"})
