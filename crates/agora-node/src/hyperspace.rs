//! The Hyperspace service: one task that owns the Hyperspace primitives' state, answers JSON-RPC
//! calls from the rpc face, and verifies Hyperspace gossip.
//!
//! Gossip (spec §2.1, §7.2; `docs/hyperspace-wire.md`): every message on a `hyperspace/…` topic
//! is a v2 signed envelope, verified once, here, while gossipsub holds it for validation: invalid
//! → `Reject` (the forwarding peer is penalised), stale or replayed → `Ignore`, valid → `Accept`
//! (then forwarded).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use agora_hyperspace::ReplayWindow;
use agora_hyperspace::jsonrpc::RpcError;
use libp2p::gossipsub::MessageAcceptance;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::rpc::{Call, Principal};
use crate::store::Store;

/// Gossip topic prefix of Hyperspace.
pub const TOPIC_PREFIX: &str = agora_hyperspace::topic::PREFIX;

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A gossip message to verify.
#[derive(Debug)]
pub struct GossipCheck {
    /// Topic string.
    pub topic: String,
    /// Payload (the envelope's bytes).
    pub data: Vec<u8>,
    /// Verdict for gossipsub.
    pub reply: oneshot::Sender<MessageAcceptance>,
}

/// Inputs of the Hyperspace service.
#[derive(Debug)]
pub enum Input {
    /// A JSON-RPC call.
    Call(Call),
    /// A gossip message to verify.
    Gossip(GossipCheck),
}

struct Service {
    window: ReplayWindow,
    #[allow(dead_code)]
    store: Store,
    #[allow(dead_code)]
    tokens: Arc<Mutex<HashMap<String, String>>>,
}

/// Runs the service until `inputs` closes.
pub async fn run(
    store: Store,
    tokens: Arc<Mutex<HashMap<String, String>>>,
    mut inputs: mpsc::Receiver<Input>,
) {
    let mut svc = Service {
        window: ReplayWindow::default(),
        store,
        tokens,
    };
    while let Some(input) = inputs.recv().await {
        match input {
            Input::Call(call) => {
                let outcome = svc.call(
                    &call.principal,
                    &call.request.method,
                    call.request.params.as_ref(),
                );
                let _ = call.reply.send(outcome);
            }
            Input::Gossip(check) => {
                let verdict = svc.verify_gossip(&check.topic, &check.data);
                let _ = check.reply.send(verdict);
            }
        }
    }
}

impl Service {
    fn verify_gossip(&mut self, topic: &str, data: &[u8]) -> MessageAcceptance {
        let Ok(text) = std::str::from_utf8(data) else {
            return MessageAcceptance::Reject;
        };
        match agora_hyperspace::verify(text, topic, now_ms(), &mut self.window) {
            Ok(_) => MessageAcceptance::Accept,
            Err(e) if e.is_benign() => MessageAcceptance::Ignore,
            Err(e) => {
                tracing::debug!(%topic, reason = e.reason(), "rejected Hyperspace gossip");
                MessageAcceptance::Reject
            }
        }
    }

    fn call(
        &mut self,
        _principal: &Principal,
        method: &str,
        _params: Option<&Value>,
    ) -> Result<Value, RpcError> {
        Err(RpcError::method_not_found()
            .with_data(Value::String(format!("unknown method {method:?}"))))
    }
}
