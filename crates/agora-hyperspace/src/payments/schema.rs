//! What the five `micropayments.*` methods take, return and may fail with (spec §6, §8), for the
//! node's OpenRPC document ([`crate::openrpc`]). Their params are read by hand
//! ([`super::params`]), so their schemas are written here: amounts as the spec gives them
//! (decimal numbers, `5.0` USDC), with the atomic units beside them as digit strings.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use super::{CHALLENGE, CHANNEL_CLOSE, CHANNEL_OPEN, CHANNEL_PAY, VERIFY};
use crate::jsonrpc::RpcCode;
use crate::openrpc::MethodDoc;

/// A decimal amount: a JSON number or a string of decimal digits with an optional fraction.
fn decimal(description: &str) -> Value {
    json!({
        "description": description,
        "anyOf": [
            {"type": "number", "minimum": 0},
            {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"}
        ]
    })
}

/// An amount in atomic units: an integer or a string of decimal digits.
fn atomic(description: &str) -> Value {
    json!({
        "description": description,
        "anyOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": "^[0-9]{1,30}$"}
        ]
    })
}

/// The `price` of a priced tool: points and/or USDC in atomic units (integers or digit strings).
pub fn price(_: &mut SchemaGenerator) -> Schema {
    let amount = |d: &str| {
        json!({
            "description": d,
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": "^[0-9]{1,30}$"}
            ]
        })
    };
    json_schema!({
        "description": "A price per invocation: at least one positive amount.",
        "type": ["object", "null"],
        "additionalProperties": false,
        "properties": {
            "points": amount("In points."),
            "usdc": amount("In USDC atomic units (6 decimals: 3000 is 0.003 USDC).")
        }
    })
}

fn challenge_params(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "pricePoints": decimal("The price in points (this or a USDC price is required)."),
            "priceUsdc": decimal("The price in USDC, decimal (`0.003`)."),
            "priceUsdcAtomic": atomic("The price in USDC atomic units, instead of `priceUsdc`."),
            "payeeAddress": {"type": "string", "description": "The 0x address paid (default: the node's wallet)."},
            "resource": {"type": "string", "description": "What is paid for (a URL or a tool id)."}
        }
    })
}

fn challenge_result(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "PayChallenge: an x402 v2 PaymentRequired with the Hyperspace fields.",
        "required": ["challengeId", "payTo", "nonce", "expiresAt"],
        "properties": {
            "x402Version": {"type": "integer"},
            "accepts": {"type": "array", "items": {"type": "object"}},
            "challengeId": {"type": "string"},
            "pricePoints": {},
            "priceUsdc": {},
            "payTo": {"type": "object", "properties": {"address": {"type": "string"}, "peerId": {"type": "string"}}},
            "nonce": {"type": "string"},
            "expiresAt": {"type": "string"}
        }
    })
}

fn verify_params(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "required": ["credential"],
        "properties": {
            "credential": {
                "description": "An x402 v1 or v2 PaymentPayload, as JSON or base64.",
                "type": ["object", "string"]
            }
        }
    })
}

fn verify_result(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "required": ["accepted", "receiptId", "amount", "payer", "network"],
        "properties": {
            "accepted": {"const": true},
            "receiptId": {"type": "string"},
            "amount": {},
            "payer": {"type": "string"},
            "network": {"type": "string"},
            "receipt": {"type": "object"}
        }
    })
}

fn open_params(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "required": ["payee", "budget", "currency"],
        "properties": {
            "payee": {"type": "string", "description": "The payee's PeerId: this node or another."},
            "budget": decimal("The most the channel may pay, decimal (`5.0` USDC)."),
            "budgetAtomic": atomic("The budget in atomic units, instead of `budget`."),
            "currency": {"type": "string", "enum": ["USDC", "points"]},
            "chainId": {"type": "integer", "description": "USDC: the chain (default: the first accepted)."},
            "network": {"type": "string", "description": "USDC: the CAIP-2 network, instead of `chainId`."}
        }
    })
}

fn channel_state(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "PayChannelState.",
        "required": ["channelId", "payee", "currency", "budget", "spent", "remaining", "nonce", "state"],
        "properties": {
            "channelId": {"type": "string"},
            "payer": {"type": "string"},
            "payerPeerId": {"type": "string"},
            "payee": {"type": "string"},
            "currency": {"type": "string"},
            "chainId": {"type": ["integer", "null"]},
            "budget": {"type": "number"},
            "spent": {"type": "number"},
            "remaining": {"type": "number"},
            "budgetAtomic": atomic("`budget` in atomic units."),
            "spentAtomic": atomic("`spent` in atomic units."),
            "remainingAtomic": atomic("`remaining` in atomic units."),
            "nonce": {"type": "integer"},
            "state": {"type": "string"},
            "openedAt": {"type": "string"},
            "closedAt": {"type": ["string", "null"]}
        }
    })
}

fn pay_params(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "required": ["channelId"],
        "properties": {
            "channelId": {"type": "string"},
            "amount": decimal("The payment, decimal (`0.003` USDC); required unless `voucher` is given."),
            "amountAtomic": atomic("The payment in atomic units, instead of `amount`."),
            "memo": {"type": "string", "maxLength": 256},
            "voucher": {"type": "object", "description": "On the payee's node: a voucher signed by the payer."}
        }
    })
}

fn pay_result(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "required": ["nonce", "remaining"],
        "properties": {
            "nonce": {"type": "integer"},
            "remaining": {"type": "number"},
            "remainingAtomic": atomic("`remaining` in atomic units."),
            "voucher": {"type": "object"}
        }
    })
}

fn close_params(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "required": ["channelId"],
        "properties": {"channelId": {"type": "string"}}
    })
}

fn close_result(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "required": ["channelId", "totalSpent", "refund"],
        "properties": {
            "channelId": {"type": "string"},
            "totalSpent": {"type": "number"},
            "refund": {"type": "number"},
            "totalSpentAtomic": atomic("`totalSpent` in atomic units."),
            "refundAtomic": atomic("`refund` in atomic units.")
        }
    })
}

const CHANNEL_EXAMPLE: &str = "chan-5b0e7f3a9c2d4e61";

/// What each `micropayments.*` method takes, returns and may fail with.
pub const DOCS: [MethodDoc; 5] = [
    MethodDoc {
        name: CHALLENGE,
        summary: "A payment challenge (x402 v2 PaymentRequired) for a price.",
        params: challenge_params,
        result: challenge_result,
        errors: &[],
        example: || json!({"priceUsdc": 0.003, "pricePoints": 5, "resource": "tool-web-9f1c"}),
    },
    MethodDoc {
        name: VERIFY,
        summary: "Checks a payment credential and records its receipt.",
        params: verify_params,
        result: verify_result,
        errors: &[RpcCode::RATE_LIMITED],
        example: || {
            json!({"credential": {
                "x402Version": 2,
                "accepted": {
                    "scheme": "points",
                    "network": "hyperspace:points",
                    "extra": {"challengeId": "ch-7d1f0c2b9e4a5f36"}
                },
                "payload": {
                    "signature": "00".repeat(64),
                    "authorization": {
                        "from": "12D3KooWGzBkT5s3CX1z2Q4tRbGxXJpCVQzsAqJfUxzAkmB9h7xq",
                        "to": "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN",
                        "value": "5",
                        "validAfter": "0",
                        "validBefore": "4102444800",
                        "nonce": format!("0x{}", "11".repeat(32))
                    }
                }
            }})
        },
    },
    MethodDoc {
        name: CHANNEL_OPEN,
        summary: "Opens a payment channel to a payee with a budget.",
        params: open_params,
        result: channel_state,
        errors: &[RpcCode::PEER_UNAVAILABLE, RpcCode::RATE_LIMITED],
        example: || json!({"payee": "12D3KooWGzBkT5s3CX1z2Q4tRbGxXJpCVQzsAqJfUxzAkmB9h7xq", "budget": 5.0, "currency": "USDC"}),
    },
    MethodDoc {
        name: CHANNEL_PAY,
        summary: "Pays through a channel (a voucher with the next nonce); −32002 beyond its budget.",
        params: pay_params,
        result: pay_result,
        errors: &[RpcCode::BUDGET_EXCEEDED, RpcCode::PEER_UNAVAILABLE],
        example: || json!({"channelId": CHANNEL_EXAMPLE, "amount": 0.003, "memo": "42 tokens"}),
    },
    MethodDoc {
        name: CHANNEL_CLOSE,
        summary: "Closes a channel: what was spent and what is refunded.",
        params: close_params,
        result: close_result,
        errors: &[RpcCode::PEER_UNAVAILABLE],
        example: || json!({"channelId": CHANNEL_EXAMPLE}),
    },
];
