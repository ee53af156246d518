"""Spec §6.4, the streaming channel, in Python: open a channel to another node's agent with a
budget of 5.0 USDC, pay 0.003 twice, close it.

    python channel.py ws://127.0.0.1:3100 ws://127.0.0.1:3101   (payer's node, payee's node)
"""

from __future__ import annotations

import asyncio

from _shared import check, node_urls, show

import agora_mesh


async def main() -> None:
    url_a, url_b = node_urls(2)
    async with agora_mesh.connect(url_a) as hyperspace, agora_mesh.connect(url_b) as payee_node:
        agent_peer_id = (await payee_node.node.info())["peerId"]

        # Open channel with budget
        channel = await hyperspace.micropayments.channel.open(payee=agent_peer_id, budget=5.0, currency="USDC")
        show("channel.open", channel.state)

        # Pay per token generated
        first = await channel.pay(0.003, "42 tokens")  # nonce: 1
        second = await channel.pay(0.003, "42 tokens")  # nonce: 2
        show("channel.pay ×2", [first, second])
        check(first["nonce"] == 1 and second["nonce"] == 2, "nonces 1 and 2")

        # Close — settle total, refund remainder
        receipt = await channel.close()
        show("channel.close", receipt)
        check(receipt["totalSpent"] == 0.006 and receipt["refund"] == 4.994, "{ totalSpent: 0.006, refund: 4.994 }")
    print("channel: ok")


if __name__ == "__main__":
    asyncio.run(main())
