//! The Hyperspace service: one task that owns the Hyperspace primitives' state, answers JSON-RPC
//! calls from the rpc face, and verifies Hyperspace gossip.
//!
//! Gossip (spec §2.1, §7.2; `docs/hyperspace-wire.md`): every message on a `hyperspace/…` topic
//! is a v2 signed envelope, verified once, here, while gossipsub holds it for validation: invalid
//! → `Reject` (the forwarding peer is penalised), stale or replayed → `Ignore`, valid → `Accept`
//! (then forwarded).
//!
//! Calls (spec §4.1 state, §4.2 guard, §4.5 recursive) go to the sans-IO primitives of
//! `agora_hyperspace`. Every call that changes a session writes that session's snapshot
//! (session, budget, recursion trace, token) to redb before it is answered, so an acknowledged
//! change survives a restart; snapshots are loaded back at start. Rate-limit windows
//! (`guard.checkRateLimit`) are kept in memory only.
//!
//! Session tokens (spec §2.3, third tier): `state.createSession` adds `sessionToken` to its
//! result; a client that connects with it may call the state, guard and recursive methods of that
//! session (plus the session-less `guard.validate`, `guard.checkSafety`, `guard.checkRateLimit`);
//! the token stops working when the session ends or is evicted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use agora_hyperspace::ReplayWindow;
use agora_hyperspace::guard::{Budget, Guard};
use agora_hyperspace::jsonrpc::RpcError;
use agora_hyperspace::recursive::{RecursionTrace, Recursive};
use agora_hyperspace::state::{Session, Sessions};
use agora_hyperspace::tool::{InvokeParams, InvokeResult, InvokeTarget, ToolRegistry};
use libp2p::gossipsub::MessageAcceptance;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::rpc::{Call, Links, Principal};
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
    /// A JSON-RPC connection closed: its tools go with it.
    Closed(u64),
    /// A tool invocation finished (for the tool's analytics).
    Invoked {
        /// Tool id.
        tool_id: String,
        /// Duration in milliseconds.
        duration_ms: u64,
        /// Did the provider answer with a result?
        success: bool,
    },
}

/// How long a provider has to answer `tool.invoke`.
pub const INVOKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The owner name of tools registered over connection `conn`.
fn owner_of(conn: u64) -> String {
    format!("rpc-conn-{conn}")
}

/// What is stored per session: the session and the guard and recursion state tied to it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// The session.
    pub session: Session,
    /// Its budget, once it has one.
    pub budget: Option<Budget>,
    /// Its recursion trace, once it has one.
    pub trace: Option<RecursionTrace>,
    /// Its session token, while the session is live.
    pub token: Option<String>,
}

struct Service {
    window: ReplayWindow,
    sessions: Sessions,
    guard: Guard,
    recursive: Recursive,
    tools: ToolRegistry,
    links: Links,
    peer_id: String,
    inputs: mpsc::Sender<Input>,
    store: Store,
    tokens: Arc<Mutex<HashMap<String, String>>>,
}

/// What the Hyperspace service needs from the node.
#[derive(Debug)]
pub struct HsWiring {
    /// This node's PeerId (the `peerId` of its tools).
    pub peer_id: String,
    /// Open JSON-RPC connections (tool providers).
    pub links: Links,
    /// The service's own input, for results of work it hands to other tasks.
    pub inputs_tx: mpsc::Sender<Input>,
    /// The service's input.
    pub inputs: mpsc::Receiver<Input>,
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    if getrandom::fill(&mut b).is_err() {
        // No system randomness: derive from the clock (ids stay unique on this node).
        let t = now_ms().to_le_bytes();
        for (i, x) in b.iter_mut().enumerate() {
            *x = t[i % 8] ^ (i as u8);
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Methods that change a session's stored snapshot (everything else only reads it).
const MUTATING: [&str; 7] = [
    "state.createSession",
    "state.setState",
    "state.endSession",
    "state.recordEpisode",
    "guard.consumeBudget",
    "recursive.track",
    "recursive.setMaxDepth",
];

/// Session-less methods a session token may call.
const SESSIONLESS: [&str; 3] = [
    "guard.validate",
    "guard.checkSafety",
    "guard.checkRateLimit",
];

fn session_id_param(params: Option<&Value>) -> Option<&str> {
    match params? {
        Value::Object(m) => m.get("sessionId")?.as_str(),
        Value::Array(a) => a.first()?.as_str(),
        _ => None,
    }
}

/// Runs the service until `inputs` closes.
pub async fn run(
    store: Store,
    tokens: Arc<Mutex<HashMap<String, String>>>,
    snapshots: Vec<Snapshot>,
    wiring: HsWiring,
) {
    let HsWiring {
        peer_id,
        links,
        inputs_tx,
        mut inputs,
    } = wiring;
    let mut svc = Service {
        window: ReplayWindow::default(),
        sessions: Sessions::new(),
        guard: Guard::new(),
        recursive: Recursive::new(),
        tools: ToolRegistry::new(peer_id.clone()),
        links,
        peer_id,
        inputs: inputs_tx,
        store,
        tokens,
    };
    svc.restore(snapshots);
    while let Some(input) = inputs.recv().await {
        match input {
            Input::Closed(conn) => {
                svc.tools.remove_owner(&owner_of(conn));
            }
            Input::Invoked {
                tool_id,
                duration_ms,
                success,
            } => {
                // The tool may have left with its provider meanwhile.
                let _ = svc.tools.record_invocation(&tool_id, duration_ms, success);
            }
            Input::Call(call) if call.request.method == "tool.invoke" => svc.invoke(call),
            Input::Call(call) => {
                let outcome = svc
                    .call(
                        &call.principal,
                        call.conn,
                        &call.request.method,
                        call.request.params.as_ref(),
                    )
                    .await;
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

    fn restore(&mut self, snapshots: Vec<Snapshot>) {
        let Ok(mut tokens) = self.tokens.lock() else {
            return;
        };
        for snap in snapshots {
            let id = snap.session.session_id.clone();
            if let Some(b) = snap.budget {
                self.guard.insert_budget(id.clone(), b);
            }
            if let Some(t) = snap.trace {
                self.recursive.insert_trace(id.clone(), t);
            }
            if let Some(tok) = snap.token {
                tokens.insert(tok, id.clone());
            }
            self.sessions.insert(snap.session);
        }
    }

    /// `tool.invoke`: resolves where the tool lives and asks its provider, off the service task
    /// (the provider may take a while); the caller gets `{result, duration, peerId}`.
    fn invoke(&mut self, call: Call) {
        if matches!(call.principal, Principal::Session(_)) {
            let _ =
                call.reply.send(Err(RpcError::invalid_request()
                    .with_message("session token does not grant this call")));
            return;
        }
        let params: InvokeParams =
            match serde_json::from_value(call.request.params.clone().unwrap_or(Value::Null)) {
                Ok(p) => p,
                Err(e) => {
                    let _ = call
                        .reply
                        .send(Err(RpcError::invalid_params().with_message(e.to_string())));
                    return;
                }
            };
        let plan = match self.tools.plan_invoke(&params, now_ms()) {
            Ok(p) => p,
            Err(e) => {
                let _ = call.reply.send(Err(e));
                return;
            }
        };
        let InvokeTarget::Local { owner } = plan.target else {
            // Remote tools are reached node to node by request-response: not wired yet.
            let _ = call.reply.send(Err(RpcError::peer_unavailable()
                .with_message("tools of other nodes cannot be invoked yet")
                .with_data(serde_json::json!({ "toolId": params.tool_id }))));
            return;
        };
        let Some(conn) = owner
            .strip_prefix("rpc-conn-")
            .and_then(|c| c.parse::<u64>().ok())
        else {
            let _ = call.reply.send(Err(RpcError::peer_unavailable()));
            return;
        };
        let links = self.links.clone();
        let done = self.inputs.clone();
        let peer_id = self.peer_id.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let forwarded = serde_json::json!({
                "toolId": params.tool_id,
                "params": params.params,
                "sessionId": params.session_id,
            });
            let outcome = links
                .request(conn, "tool.invoke", forwarded, INVOKE_TIMEOUT)
                .await;
            let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let _ = done
                .send(Input::Invoked {
                    tool_id: params.tool_id.clone(),
                    duration_ms,
                    success: outcome.is_ok(),
                })
                .await;
            let reply = outcome.and_then(|result| {
                serde_json::to_value(InvokeResult {
                    result,
                    duration: duration_ms,
                    peer_id,
                })
                .map_err(|e| RpcError::internal_error().with_message(e.to_string()))
            });
            let _ = call.reply.send(reply);
        });
    }

    async fn call(
        &mut self,
        principal: &Principal,
        conn: u64,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Value, RpcError> {
        if let Principal::Session(own) = principal {
            let allowed = SESSIONLESS.contains(&method)
                || (["state.", "guard.", "recursive."]
                    .iter()
                    .any(|p| method.starts_with(p))
                    && method != "state.createSession"
                    && session_id_param(params) == Some(own.as_str()));
            if !allowed {
                return Err(RpcError::invalid_request()
                    .with_message("session token does not grant this call")
                    .with_data(serde_json::json!({ "sessionId": own, "method": method })));
            }
        }
        let null = Value::Null;
        let params_v = params.unwrap_or(&null);
        let now = now_ms();
        let mut ids = || format!("sess_{}", random_hex(8));
        let outcome = self
            .sessions
            .call(method, params_v, now, &mut ids)
            .or_else(|| self.guard.call(method, params_v, now, &self.sessions))
            .or_else(|| self.recursive.call(method, params_v, now, &self.sessions))
            .or_else(|| {
                let mut tool_ids = || format!("tool_{}", random_hex(8));
                self.tools
                    .call(method, params_v, now, &owner_of(conn), &mut tool_ids)
            });
        for gone in self.sessions.take_evicted() {
            self.guard.forget_session(&gone);
            self.recursive.forget_session(&gone);
            self.forget_tokens(&gone);
            if let Err(e) = self.store.delete_hs_session(&gone).await {
                tracing::warn!(error = %e, "cannot delete an evicted session");
            }
        }
        let mut result = match outcome {
            None => {
                return Err(RpcError::method_not_found()
                    .with_data(Value::String(format!("unknown method {method:?}"))));
            }
            Some(r) => r?,
        };
        let session_id = match method {
            "state.createSession" => result
                .get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => session_id_param(params).map(str::to_owned),
        };
        if method == "state.createSession"
            && let (Some(id), Some(obj)) = (&session_id, result.as_object_mut())
        {
            let token = format!("hst_{}", random_hex(24));
            if let Ok(mut t) = self.tokens.lock() {
                t.insert(token.clone(), id.clone());
            }
            obj.insert("sessionToken".into(), Value::String(token));
        }
        if method == "state.endSession"
            && let Some(id) = &session_id
        {
            self.forget_tokens(id);
        }
        if let Some(id) = session_id
            && MUTATING.contains(&method)
        {
            self.persist(&id).await?;
        }
        Ok(result)
    }

    fn forget_tokens(&self, session_id: &str) {
        if let Ok(mut t) = self.tokens.lock() {
            t.retain(|_, s| s != session_id);
        }
    }

    /// Writes the session's snapshot; the reply waits until it is durable.
    async fn persist(&mut self, session_id: &str) -> Result<(), RpcError> {
        let Some(session) = self.sessions.session(session_id) else {
            return Ok(());
        };
        let token = self.tokens.lock().ok().and_then(|t| {
            t.iter()
                .find(|(_, s)| s.as_str() == session_id)
                .map(|(tok, _)| tok.clone())
        });
        let snapshot = Snapshot {
            session: session.clone(),
            budget: self.guard.budget(session_id).cloned(),
            trace: self.recursive.trace(session_id).cloned(),
            token,
        };
        let json = serde_json::to_string(&snapshot)
            .map_err(|e| RpcError::internal_error().with_message(e.to_string()))?;
        self.store
            .put_hs_session(session_id, &json)
            .await
            .map_err(|e| RpcError::internal_error().with_message(format!("storage: {e}")))
    }
}
