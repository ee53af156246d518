"""The 402 helper: a credential from a local key, verified by a real node."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from nodes import NodeProcess

import agora_mesh

x402 = pytest.importorskip("agora_mesh.x402")
from eth_account import Account  # noqa: E402

KEY = "0x" + "4f" * 32


def test_a_signed_credential_is_accepted_once(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as client:
            challenge = await client.micropayments.challenge(price_usdc=0.01)
            option = x402.choose(challenge)
            assert option["amount"] == "10000" and option["network"] == "eip155:84532"
            credential = x402.pay(challenge, KEY)
            assert credential["payload"]["authorization"]["from"] == Account.from_key(KEY).address
            r = await client.micropayments.verify(credential=credential)
            assert r["accepted"] is True and r["payer"] == Account.from_key(KEY).address
            assert r["receipt"]["challengeId"] == challenge["challengeId"]
            # The same challenge paid again: refused with the node's reason.
            with pytest.raises(agora_mesh.InvalidParams) as again:
                await client.micropayments.verify(credential=x402.pay(challenge, KEY))
            assert again.value.data["reason"] == "challenge-used"

    asyncio.run(asyncio.wait_for(body(), 30))


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=20) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def test_a_402_over_http_is_paid_from_its_header(node_a: NodeProcess) -> None:
    async def body() -> None:
        async with agora_mesh.connect(node_a.rpc) as provider:
            async def summarise(params: Any) -> Any:
                return {"summary": str(params["text"])[:5]}

            # tool.register's price is in atomic units (10000 = 0.01 USDC).
            tool = await provider.tool.register(summarise, name="summarise", description="A priced tool",
                                                capabilities=["sdk-priced"], price={"usdc": 10000})
            url = f"{node_a.http}/pay/tools/{tool['toolId']}/invoke"
            status, headers, _ = await asyncio.to_thread(post, url, b'{"text": "hello world"}', {})
            assert status == 402
            credential = x402.pay(headers["X-Payment-Required"], KEY)
            status, headers, answer = await asyncio.to_thread(
                post, url, b'{"text": "hello world"}', {"X-Payment": x402.header(credential)}
            )
            assert status == 200, answer
            assert answer["result"] == {"summary": "hello"}
            assert headers["X-Payment-Response"]

    asyncio.run(asyncio.wait_for(body(), 30))


def test_the_header_form_is_read_and_bad_challenges_refused() -> None:
    challenge = {
        "challengeId": "pc-1",
        "accepts": [
            {"scheme": "points", "network": "hyperspace:points", "payTo": "12D3KooW"},
            {"scheme": "exact", "network": "eip155:84532", "chainId": 84532, "amount": "5",
             "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
             "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "extra": {"name": "USDC", "version": "2"}},
        ],
    }
    cred = x402.pay(x402.header(challenge), KEY, now=1_800_000_000, valid_for=100)
    auth = cred["payload"]["authorization"]
    assert auth["value"] == "5" and auth["validAfter"] == "1799999940" and auth["validBefore"] == "1800000100"
    assert cred["challengeId"] == "pc-1" and cred["accepted"]["scheme"] == "exact"
    assert len(cred["payload"]["signature"]) == 132
    with pytest.raises(ValueError, match="no 'exact' option on eip155:8453"):
        x402.pay(challenge, KEY, network="eip155:8453")
    with pytest.raises(ValueError, match="not a payment challenge"):
        x402.read_challenge("%%%")
