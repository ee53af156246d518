"""Answers a 402 payment challenge with an EIP-3009 credential signed by a local key.

Needs the ``x402`` extra (``pip install 'agora-mesh[x402]'``, eth-account)::

    challenge = await client.micropayments.challenge(price_usdc=0.01)
    credential = x402.pay(challenge, private_key)
    receipt = await client.micropayments.verify(credential=credential)

Over HTTP the challenge arrives base64-encoded in ``X-Payment-Required`` (also accepted here);
send the credential back as ``X-Payment: x402.header(credential)``.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Mapping
from typing import Any

try:
    from eth_account import Account
    from eth_account.messages import encode_typed_data
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("agora_mesh.x402 needs eth-account: pip install 'agora-mesh[x402]'") from e

_TYPES = {
    "EIP712Domain": [
        {"name": "name", "type": "string"},
        {"name": "version", "type": "string"},
        {"name": "chainId", "type": "uint256"},
        {"name": "verifyingContract", "type": "address"},
    ],
    "TransferWithAuthorization": [
        {"name": "from", "type": "address"},
        {"name": "to", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "validAfter", "type": "uint256"},
        {"name": "validBefore", "type": "uint256"},
        {"name": "nonce", "type": "bytes32"},
    ],
}


def read_challenge(challenge: Mapping[str, Any] | str | bytes) -> dict[str, Any]:
    """A PayChallenge as a dict: given as one, or as the base64 (or JSON) text of a 402's
    ``X-Payment-Required`` header."""
    if isinstance(challenge, Mapping):
        return dict(challenge)
    text = challenge.decode() if isinstance(challenge, bytes) else challenge
    text = text.strip()
    try:
        decoded = json.loads(text) if text.startswith("{") else json.loads(base64.b64decode(text, validate=True))
    except ValueError as e:
        raise ValueError(f"not a payment challenge (JSON or base64 of JSON): {e}") from None
    if not isinstance(decoded, dict):
        raise ValueError("a payment challenge is a JSON object")
    return decoded


def choose(challenge: Mapping[str, Any], network: str | None = None) -> dict[str, Any]:
    """The ``exact`` (EIP-3009) option of ``challenge`` to pay: the first one, or the one on
    ``network`` (CAIP-2, ``eip155:84532``)."""
    accepts = challenge.get("accepts")
    if not isinstance(accepts, list):
        raise ValueError("the challenge has no 'accepts' list")
    for option in accepts:
        if isinstance(option, dict) and option.get("scheme") == "exact":
            if network is None or option.get("network") == network:
                return option
    wanted = f" on {network}" if network else ""
    raise ValueError(f"the challenge offers no 'exact' option{wanted}")


def _chain_id(option: Mapping[str, Any]) -> int:
    chain = option.get("chainId")
    if isinstance(chain, int) and not isinstance(chain, bool):
        return chain
    network = option.get("network")
    if isinstance(network, str) and network.startswith("eip155:") and network[7:].isdigit():
        return int(network[7:])
    raise ValueError("the option names no EVM chain (chainId or an eip155 network)")


def pay(
    challenge: Mapping[str, Any] | str | bytes,
    private_key: str | bytes,
    *,
    network: str | None = None,
    valid_for: int = 300,
    now: int | None = None,
) -> dict[str, Any]:
    """The x402 v2 ``PaymentPayload`` that pays ``challenge`` from the account of
    ``private_key`` (hex or 32 bytes): an EIP-3009 ``TransferWithAuthorization`` of the option's
    amount to its ``payTo``, valid from a minute ago for ``valid_for`` seconds, with a fresh
    random nonce, signed under the option's USDC domain."""
    if valid_for <= 0:
        raise ValueError("valid_for must be positive")
    c = read_challenge(challenge)
    option = choose(c, network)
    extra = option.get("extra") if isinstance(option.get("extra"), dict) else {}
    assert isinstance(extra, dict)
    value = option.get("amount", option.get("maxAmountRequired"))
    if value is None or not str(value).isdigit():
        raise ValueError(f"the option's amount is not a whole number of atomic units: {value!r}")
    for field in ("payTo", "asset"):
        if not isinstance(option.get(field), str):
            raise ValueError(f"the option has no {field}")
    if not isinstance(extra.get("name"), str) or not isinstance(extra.get("version"), str):
        raise ValueError("the option's extra lacks the token's EIP-712 name and version")
    account = Account.from_key(private_key)
    t = int(time.time()) if now is None else now
    nonce = "0x" + os.urandom(32).hex()
    authorization = {
        "from": account.address,
        "to": option["payTo"],
        "value": str(value),
        "validAfter": str(t - 60),
        "validBefore": str(t + valid_for),
        "nonce": nonce,
    }
    typed = {
        "types": _TYPES,
        "primaryType": "TransferWithAuthorization",
        "domain": {
            "name": extra["name"],
            "version": extra["version"],
            "chainId": _chain_id(option),
            "verifyingContract": option["asset"],
        },
        "message": {
            "from": account.address,
            "to": option["payTo"],
            "value": int(value),
            "validAfter": t - 60,
            "validBefore": t + valid_for,
            "nonce": bytes.fromhex(nonce[2:]),
        },
    }
    signed = account.sign_message(encode_typed_data(full_message=typed))
    signature = signed.signature.hex()
    if not signature.startswith("0x"):
        signature = "0x" + signature
    credential: dict[str, Any] = {
        "x402Version": 2,
        "accepted": option,
        "payload": {"signature": signature, "authorization": authorization},
    }
    if isinstance(c.get("challengeId"), str):
        credential["challengeId"] = c["challengeId"]
    return credential


def header(credential: Mapping[str, Any]) -> str:
    """The credential as the ``X-Payment`` header's value (base64 of its JSON)."""
    return base64.b64encode(json.dumps(credential, separators=(",", ":")).encode()).decode()
