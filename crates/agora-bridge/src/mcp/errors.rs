//! MCP errors as Hyperspace errors (Hyperspace spec §8; `../shared/notes/bridges.md` §7.4).
//! The two code spaces collide (−32002 is "Budget Exceeded" in Hyperspace and "resource not
//! found" in legacy MCP; −32006 is "Peer Unavailable" here and implementation-defined there), so
//! an MCP code is never forwarded: it is translated, and the MCP code and message travel in
//! `data.mcp` for the caller's diagnosis.
//!
//! | MCP error | Hyperspace |
//! |---|---|
//! | −32602 invalid params, unknown tool; −32002 resource not found (≤ 2025-11-25) | −32602 Invalid params |
//! | anything else the server answers (−32600, −32601, −32603, −32020..−32022, implementation-defined codes) | −32603 Internal error |
//! | no answer: the server is gone, the transport closed, the call timed out | −32006 Peer Unavailable ([`unavailable`]) |
//!
//! A tool that ran and failed is not an error: it is a result with `isError: true`
//! ([`super::result`]).

use agora_hyperspace::jsonrpc::RpcError;
use serde_json::json;

/// MCP's "invalid params" (an unknown tool, arguments the tool refuses).
pub const MCP_INVALID_PARAMS: i64 = -32602;
/// Legacy MCP's "resource not found" (retired in 2026-07-28 for −32602).
pub const MCP_RESOURCE_NOT_FOUND: i64 = -32002;

/// The Hyperspace error for an MCP JSON-RPC error `code`/`message` answered by server `server`.
#[must_use]
pub fn translate(server: &str, code: i64, message: &str) -> RpcError {
    let data = json!({"mcp": {"server": server, "code": code, "message": message}});
    let base = match code {
        MCP_INVALID_PARAMS | MCP_RESOURCE_NOT_FOUND => RpcError::invalid_params(),
        _ => RpcError::internal_error(),
    };
    base.with_message(format!("MCP server {server}: {message}"))
        .with_data(data)
}

/// −32006 "Peer Unavailable": server `server` did not answer (`reason`).
#[must_use]
pub fn unavailable(server: &str, reason: &str) -> RpcError {
    RpcError::peer_unavailable()
        .with_message(format!("MCP server {server} is unavailable: {reason}"))
        .with_data(json!({"mcp": {"server": server, "reason": reason}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_translated_never_forwarded() {
        assert_eq!(translate("s", -32602, "unknown tool").code.0, -32602);
        assert_eq!(translate("s", -32002, "no such resource").code.0, -32602);
        for code in [-32001, -32003, -32006, -32020, -32601, -32603, 1] {
            let e = translate("s", code, "m");
            assert_eq!(e.code.0, -32603, "{code}");
            assert_eq!(e.data.as_ref().unwrap()["mcp"]["code"], code);
        }
        assert_eq!(unavailable("s", "gone").code.0, -32006);
    }
}
