//! `jsonrpc_frame`: arbitrary UTF-8 as a JSON-RPC 2.0 frame and as a node-to-node Hyperspace
//! request or response.
//!
//! Properties checked: nothing panics; `handle_frame` answers every non-notification with JSON
//! that parses; a node-to-node request or response that parses serialises and parses back equal.
#![no_main]

use agora_hyperspace::announce::{PeerRequest, PeerResponse};
use agora_hyperspace::jsonrpc::{self, RpcError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = jsonrpc::parse_frame(text);
    if let Some(reply) = jsonrpc::handle_frame(text, |req| {
        if req.method == "echo" {
            Ok(req.params.clone().unwrap_or(serde_json::Value::Null))
        } else {
            Err(RpcError::method_not_found())
        }
    }) {
        assert!(
            serde_json::from_str::<serde_json::Value>(&reply).is_ok(),
            "reply is not JSON: {reply}"
        );
    }
    if let Ok(req) = serde_json::from_str::<PeerRequest>(text) {
        let again: PeerRequest =
            serde_json::from_str(&serde_json::to_string(&req).unwrap()).unwrap();
        assert_eq!(again, req);
    }
    if let Ok(resp) = serde_json::from_str::<PeerResponse>(text) {
        let again: PeerResponse =
            serde_json::from_str(&serde_json::to_string(&resp).unwrap()).unwrap();
        assert_eq!(again, resp);
    }
});
