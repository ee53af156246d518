"""Spec §11 Example 3, the budget guard: a session with a budget of 1.00 that has consumed 0.88
checks an estimated cost of 5.00 (not allowed), then tries to consume it anyway (−32002).

    python example3_budget_guard.py ws://127.0.0.1:3100
"""

from __future__ import annotations

import asyncio

from _shared import check, node_urls, show

import agora_mesh


async def main() -> None:
    (url,) = node_urls(1)
    async with agora_mesh.connect(url) as client:
        # The session's budget limit is set at its start (metadata.budget).
        session = await client.state.create_session(agent_name="research-agent", metadata={"budget": 1.00})
        sid = session["sessionId"]
        await client.guard.consume_budget(session_id=sid, amount=0.88, description="earlier inference")

        checked = await client.guard.check_budget(session_id=sid, estimated_cost=5.00)
        show("guard.checkBudget", checked)
        check(
            checked
            == {
                "allowed": False,
                "remaining": 0.12,
                "consumed": 0.88,
                "limit": 1.00,
                "reason": "Estimated cost ($5.00) exceeds remaining budget ($0.12)",
            },
            "checkBudget answers the spec's result",
        )
        try:
            await client.guard.consume_budget(session_id=sid, amount=5.00, description="large-model-inference")
        except agora_mesh.BudgetExceeded as e:
            show("guard.consumeBudget → error", {"code": e.code, "message": e.message, "data": e.data})
            check(e.code == -32002 and e.message == "Budget exceeded", "−32002 Budget exceeded")
            check(e.data == {"remaining": 0.12, "requested": 5.00, "limit": 1.00}, "data remaining/requested/limit")
        else:
            check(False, "consumeBudget over the budget raises BudgetExceeded")
        await client.state.end_session(session_id=sid)
    print("example 3: ok")


if __name__ == "__main__":
    asyncio.run(main())
