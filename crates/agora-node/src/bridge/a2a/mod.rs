//! The A2A bridge (Hyperspace spec §10.2 `announceA2AAgent`; A2A 1.0; `docs/bridges.md`
//! "Announce an A2A agent"): announced A2A agents' skills served as tools of this node.
//!
//! One task owns the announced agents. It answers `bridge.announceA2AAgent`,
//! `bridge.listA2AAgents` and `bridge.withdrawA2AAgent` ([`METHODS`]; the API key only, as for
//! the MCP bridge: a session token or a keyless loopback client gets −32602 `data.reason:
//! "api-key-required"`, except that a keyless loopback client may list), announces the `[[bridge.a2a]]` agents at start, and carries out the
//! calls of their skills ([`crate::bridge::BridgeCall`]) as A2A `SendMessage` requests. An
//! announce fetches `<url>/.well-known/agent-card.json` (or takes the card given), checks its
//! shape ([`agora_bridge::a2a::card`]) and its signatures against the keys of `[bridge]
//! a2a_keys` only ([`agora_bridge::a2a::jws`]), sets one mesh tool per skill
//! ([`crate::hyperspace::Input::Bridged`], owner `a2a:<name>`), and gossips the card's original
//! text in a signed v2 envelope on [`CARDS_TOPIC`]. Cards other nodes gossip are kept (in memory,
//! at most [`MAX_REMOTE`], the oldest forgotten first) and listed by `bridge.listA2AAgents`.
//!
//! Bounds: calls and invokes run as tasks of their own, at most [`IN_FLIGHT`] at once (beyond
//! that a call is answered −32006 at once); at most [`MAX_AGENTS`] agents are announced; a card
//! is at most [`agora_bridge::a2a::card::MAX_CARD_BYTES`], an agent's answer at most
//! [`MAX_ANSWER_BYTES`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_agtp::signature::AnsVerifyingKey;
use agora_bridge::a2a::card::{self, CardView, MAX_CARD_BYTES};
use agora_bridge::a2a::jws::{self, Verified};
use agora_bridge::a2a::{AgentSpec, CARDS_TOPIC, VERSION, VERSION_HEADER, task};
use agora_hyperspace::jsonrpc::RpcError;
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::bridge::{A2A_OWNER, BridgeCall};
use crate::call::{Call, Principal};
use crate::clock::now_ms;
use crate::hyperspace::{random_hex, uuid};
use crate::routes::{self, CallRoute, Delivery, EventKey, EventRoute};
use crate::{hyperspace, mesh};

pub use agora_bridge::a2a::{ANNOUNCE, LIST, METHODS, WITHDRAW};

/// Calls and skill invocations in flight at once.
pub const IN_FLIGHT: usize = 64;
/// Agents announced by this node at once.
pub const MAX_AGENTS: usize = 64;
/// Cards of other nodes kept.
pub const MAX_REMOTE: usize = 1024;
/// Largest answer read from an agent.
pub const MAX_ANSWER_BYTES: usize = 4 << 20;
/// How long fetching a card may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Inputs queued to the task.
pub const QUEUE: usize = 256;

/// Inputs of the A2A bridge task.
#[derive(Debug)]
pub enum Input {
    /// A `bridge.*A2A*` call.
    Call(Call),
    /// A card envelope from [`CARDS_TOPIC`] (its signature verified by the gossip gate).
    Gossip(Vec<u8>),
    /// A neighbour subscribed to [`CARDS_TOPIC`]: publish this node's cards again.
    Subscribed,
}

/// The calls this bridge answers: exactly [`METHODS`].
pub fn call_route(tx: &mpsc::Sender<Input>) -> CallRoute {
    CallRoute::new(&METHODS, &[&METHODS], tx, Input::Call)
}

/// The mesh events this bridge owns: card gossip (a full queue drops a copy; the card is
/// published again when a neighbour subscribes) and subscriptions to the cards topic.
pub fn event_routes(tx: &mpsc::Sender<Input>) -> Vec<EventRoute> {
    vec![
        EventRoute::new(
            EventKey::Topic(CARDS_TOPIC),
            tx,
            Delivery::DropWhenFull,
            |e| routes::gossip(e).map(|g| Input::Gossip(g.data)),
        ),
        EventRoute::new(
            EventKey::Subscribed(CARDS_TOPIC),
            tx,
            Delivery::DropWhenFull,
            |e| matches!(e, mesh::Event::Subscribed(..)).then_some(Input::Subscribed),
        ),
    ]
}

/// What the bridge needs from the node.
#[derive(Debug)]
pub struct Wiring {
    /// The node's key (card envelopes are signed with it).
    pub key: SigningKey,
    /// The mesh.
    pub mesh: mpsc::Sender<mesh::Command>,
    /// The Hyperspace service (bridged tools).
    pub hyperspace: mpsc::Sender<hyperspace::Input>,
    /// Calls of the bridged skills.
    pub calls: mpsc::Receiver<BridgeCall>,
    /// `[bridge] a2a_keys`: public JWK files of the keys Agent Cards may be signed with.
    pub keys: Vec<PathBuf>,
    /// `[[bridge.a2a]]`: agents announced at start.
    pub agents: Vec<AgentSpec>,
}

/// Reads the public JWK files of `[bridge] a2a_keys`.
///
/// # Errors
///
/// The file that cannot be read or is not an ES256 public JWK with a `kid`.
pub fn load_keys(paths: &[PathBuf]) -> Result<Vec<AnsVerifyingKey>, String> {
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("bridge.a2a_keys: {}: {e}", p.display()))?;
            let jwk: Value = serde_json::from_str(&text)
                .map_err(|e| format!("bridge.a2a_keys: {}: {e}", p.display()))?;
            AnsVerifyingKey::from_jwk(&jwk)
                .map_err(|e| format!("bridge.a2a_keys: {}: {e}", p.display()))
        })
        .collect()
}

/// Starts the bridge task; returns its queue.
///
/// # Errors
///
/// A key file of `[bridge] a2a_keys` is unusable.
pub async fn start(wiring: Wiring) -> Result<mpsc::Sender<Input>, String> {
    let keys = load_keys(&wiring.keys)?;
    let http = reqwest::Client::builder()
        .connect_timeout(FETCH_TIMEOUT)
        .build()
        .map_err(|e| format!("a2a http client: {e}"))?;
    let shared = Arc::new(Shared {
        key: wiring.key,
        mesh: wiring.mesh,
        hyperspace: wiring.hyperspace,
        keys,
        http,
        agents: Mutex::new(BTreeMap::new()),
        remote: Mutex::new(BTreeMap::new()),
        slots: Arc::new(Semaphore::new(IN_FLIGHT)),
    });
    let _ = shared
        .mesh
        .send(mesh::Command::Subscribe(CARDS_TOPIC.to_owned()))
        .await;
    let (tx, rx) = mpsc::channel(QUEUE);
    for spec in wiring.agents {
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let name = spec.name.clone().unwrap_or_default();
            if let Err(e) = shared.announce(spec).await {
                tracing::warn!(agent = %name, error = %e.message, data = ?e.data, "A2A agent not announced");
            }
        });
    }
    tokio::spawn(run(shared, rx, wiring.calls));
    Ok(tx)
}

/// An agent this node announced.
#[derive(Debug, Clone)]
struct Agent {
    spec: AgentSpec,
    /// The card's URL (for an inline card, its JSON-RPC interface's URL).
    card_url: String,
    /// The card's original text.
    card_text: String,
    view: CardView,
    /// The configured key its signature verified under.
    kid: Option<String>,
    /// tool id → skill id.
    skills: BTreeMap<String, String>,
}

/// A card another node gossiped.
#[derive(Debug, Clone)]
struct Remote {
    url: String,
    card: Value,
    kid: Option<String>,
    received_at: u64,
}

#[derive(Debug)]
struct Shared {
    key: SigningKey,
    mesh: mpsc::Sender<mesh::Command>,
    hyperspace: mpsc::Sender<hyperspace::Input>,
    keys: Vec<AnsVerifyingKey>,
    http: reqwest::Client,
    agents: Mutex<BTreeMap<String, Agent>>,
    /// (peer id, agent name) → card.
    remote: Mutex<BTreeMap<(String, String), Remote>>,
    slots: Arc<Semaphore>,
}

async fn run(
    shared: Arc<Shared>,
    mut inputs: mpsc::Receiver<Input>,
    mut calls: mpsc::Receiver<BridgeCall>,
) {
    loop {
        tokio::select! {
            input = inputs.recv() => match input {
                Some(Input::Call(call)) => spawn_call(&shared, call),
                Some(Input::Gossip(data)) => shared.received(&data),
                Some(Input::Subscribed) => shared.publish_all().await,
                None => break,
            },
            Some(call) = calls.recv() => {
                let Ok(slot) = Arc::clone(&shared.slots).try_acquire_owned() else {
                    let _ = call.reply.send(Err(busy()));
                    continue;
                };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    let outcome = shared.invoke(&call).await;
                    let _ = call.reply.send(outcome);
                    drop(slot);
                });
            }
        }
    }
}

fn busy() -> RpcError {
    RpcError::peer_unavailable().with_data(json!({"reason": "the A2A bridge is busy"}))
}

fn invalid(reason: impl Into<String>) -> RpcError {
    RpcError::invalid_params().with_data(json!({ "reason": reason.into() }))
}

fn spawn_call(shared: &Arc<Shared>, call: Call) {
    let Call {
        principal,
        request,
        reply,
        ..
    } = call;
    // Listing shows only what gossip spreads anyway: a keyless loopback client may list.
    let allowed =
        principal == Principal::ApiKey || (request.method == LIST && principal == Principal::Local);
    if !allowed {
        let _ = reply.send(Err(RpcError::invalid_params()
            .with_message(format!("{} needs the node's API key", request.method))
            .with_data(json!({ "reason": "api-key-required" }))));
        return;
    }
    let Ok(slot) = Arc::clone(&shared.slots).try_acquire_owned() else {
        let _ = reply.send(Err(busy()));
        return;
    };
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let params = request.params.unwrap_or(Value::Null);
        let outcome = match request.method.as_str() {
            ANNOUNCE => match serde_json::from_value::<AgentSpec>(params.clone()) {
                Ok(spec) => shared.announce(spec).await,
                Err(e) => Err(agora_hyperspace::params::with_every_problem_of(
                    &crate::bridge::describe::DOCS,
                    ANNOUNCE,
                    &params,
                    invalid(e.to_string()),
                )),
            },
            LIST => Ok(shared.list()),
            WITHDRAW => match params.get("name").and_then(Value::as_str) {
                Some(name) => shared.withdraw(name).await,
                None => Err(invalid("give the agent's name")),
            },
            _ => Err(RpcError::method_not_found()),
        };
        let _ = reply.send(outcome);
        drop(slot);
    });
}

/// Reads at most `limit` bytes of a response body.
async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > limit {
            return Err(format!("the answer is larger than {limit} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl Shared {
    /// Fetches (or takes) and checks a card, sets its skills as tools and gossips it.
    async fn announce(&self, spec: AgentSpec) -> Result<Value, RpcError> {
        spec.check().map_err(invalid)?;
        let card_text = match (&spec.agent_card, spec.card_url()) {
            (Some(card), _) => card.to_string(),
            (None, Some(url)) => self.fetch_card(&url).await?,
            (None, None) => return Err(invalid("give url or agentCard")),
        };
        if card_text.len() > MAX_CARD_BYTES {
            return Err(invalid(card::CardError::TooLarge.to_string()));
        }
        let card_value: Value = serde_json::from_str(&card_text)
            .map_err(|e| invalid(format!("the agent card is not JSON: {e}")))?;
        let view = card::check_card(&card_value).map_err(|e| invalid(e.to_string()))?;
        let kid = match jws::verify_card(&card_value, &self.keys) {
            Ok(Verified::Unsigned) => None,
            Ok(Verified::Signed { kid }) => Some(kid),
            Err(e) => {
                return Err(invalid(format!("refused: {e}")).with_message("agent card refused"));
            }
        };
        let name = spec
            .name
            .clone()
            .unwrap_or_else(|| agora_bridge::a2a::name_from_card(&view.name));
        let card_url = spec.card_url().unwrap_or_else(|| view.jsonrpc_url.clone());
        {
            let agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
            if agents.len() >= MAX_AGENTS && !agents.contains_key(&name) {
                return Err(invalid(format!(
                    "this node announces {MAX_AGENTS} agents already"
                )));
            }
        }
        let tools = card::skill_tools(
            &name,
            &card_url,
            &view,
            &spec.tags,
            spec.price.as_ref(),
            kid.is_some(),
        );
        let skills: BTreeMap<String, String> = tools
            .iter()
            .map(|t| (t.id.clone(), t.source.name.clone()))
            .collect();
        let listed: Vec<Value> = tools
            .iter()
            .map(|t| json!({"toolId": t.id, "skillId": t.source.name, "name": t.params.name}))
            .collect();
        let outcome = self.set_tools(&name, tools).await?;
        let agent = Agent {
            spec,
            card_url: card_url.clone(),
            card_text,
            view,
            kid: kid.clone(),
            skills,
        };
        self.publish(&name, Some(&agent)).await;
        self.agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), agent);
        tracing::info!(agent = %name, url = %card_url, verified = kid.is_some(), "A2A agent announced");
        let refused: Vec<Value> = outcome
            .refused
            .iter()
            .map(|(id, reason)| json!({"toolId": id, "reason": reason}))
            .collect();
        let mut result = json!({
            "name": name,
            "owner": format!("{A2A_OWNER}{name}"),
            "url": card_url,
            "verified": kid.is_some(),
            "tools": listed,
        });
        if let Some(kid) = kid {
            result["kid"] = kid.into();
        }
        if !refused.is_empty() {
            result["refused"] = refused.into();
        }
        Ok(result)
    }

    async fn fetch_card(&self, url: &str) -> Result<String, RpcError> {
        let unreachable = |e: String| {
            RpcError::peer_unavailable()
                .with_data(json!({"reason": format!("cannot fetch the agent card {url}: {e}")}))
        };
        let response = self
            .http
            .get(url)
            .header("accept", "application/json")
            .timeout(FETCH_TIMEOUT)
            .send()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        if !response.status().is_success() {
            return Err(unreachable(format!("HTTP {}", response.status())));
        }
        let body = read_limited(response, MAX_CARD_BYTES)
            .await
            .map_err(unreachable)?;
        String::from_utf8(body).map_err(|_| invalid("the agent card is not UTF-8"))
    }

    async fn set_tools(
        &self,
        name: &str,
        tools: Vec<agora_hyperspace::tool::BridgedTool>,
    ) -> Result<agora_hyperspace::tool::SetToolsOutcome, RpcError> {
        let (reply, answer) = oneshot::channel();
        let input = hyperspace::Input::Bridged {
            owner: format!("{A2A_OWNER}{name}"),
            tools,
            reply: Some(reply),
        };
        let gone = || RpcError::internal_error().with_message("the node is shutting down");
        self.hyperspace.send(input).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())
    }

    async fn withdraw(&self, name: &str) -> Result<Value, RpcError> {
        let removed = self
            .agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        if removed.is_none() {
            return Err(RpcError::invalid_params()
                .with_message(format!("no A2A agent {name:?} is announced here"))
                .with_data(json!({ "field": "name", "reason": "not-found" })));
        }
        self.set_tools(name, Vec::new()).await?;
        self.publish(name, None).await;
        Ok(json!({ "name": name, "withdrawn": true }))
    }

    fn list(&self) -> Value {
        let agents: Vec<Value> = self
            .agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, a)| {
                let tools: Vec<Value> = a
                    .skills
                    .iter()
                    .map(|(id, skill)| json!({"toolId": id, "skillId": skill}))
                    .collect();
                json!({
                    "name": name,
                    "url": a.card_url,
                    "agentName": a.view.name,
                    "version": a.view.version,
                    "endpoint": a.view.jsonrpc_url,
                    "verified": a.kid.is_some(),
                    "tags": a.spec.tags,
                    "tools": tools,
                })
            })
            .collect();
        let remote: Vec<Value> = self
            .remote
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((peer, name), r)| {
                json!({
                    "peerId": peer,
                    "name": name,
                    "url": r.url,
                    "verified": r.kid.is_some(),
                    "receivedAt": r.received_at,
                    "card": r.card,
                })
            })
            .collect();
        json!({ "agents": agents, "remote": remote })
    }

    /// Sends one call of a skill as `SendMessage` and maps the answer.
    async fn invoke(&self, call: &BridgeCall) -> Result<Value, RpcError> {
        let gone = || {
            RpcError::peer_unavailable().with_data(
                json!({"toolId": call.tool_id, "reason": "the A2A agent is no longer announced"}),
            )
        };
        let name = call.owner.strip_prefix(A2A_OWNER).ok_or_else(gone)?;
        let (endpoint, tenant, skill) = {
            let agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
            let agent = agents.get(name).ok_or_else(gone)?;
            let skill = agent.skills.get(&call.tool_id).ok_or_else(gone)?;
            (
                agent.view.jsonrpc_url.clone(),
                agent.view.tenant.clone(),
                skill.clone(),
            )
        };
        let body = task::send_message(&call.params, &skill, &uuid(), tenant.as_deref())?;
        let unreachable = |e: String| {
            RpcError::peer_unavailable()
                .with_data(json!({"toolId": call.tool_id, "reason": format!("the A2A agent: {e}")}))
        };
        let response = self
            .http
            .post(&endpoint)
            .header(VERSION_HEADER, VERSION)
            .header("accept", "application/json")
            .json(&body)
            .timeout(call.timeout)
            .send()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let status = response.status();
        let bytes = read_limited(response, MAX_ANSWER_BYTES)
            .await
            .map_err(unreachable)?;
        let answer: Value = serde_json::from_slice(&bytes)
            .map_err(|_| unreachable(format!("HTTP {status}, the answer is not JSON")))?;
        task::tool_result(&answer)
    }

    /// Publishes one agent's card (or its withdrawal) on [`CARDS_TOPIC`].
    async fn publish(&self, name: &str, agent: Option<&Agent>) {
        let d = match agent {
            Some(a) => json!({"name": name, "url": a.card_url, "card": a.card_text}),
            None => json!({"name": name, "withdrawn": true}),
        };
        let signed = agora_hyperspace::envelope::sign(
            &self.key,
            CARDS_TOPIC,
            now_ms(),
            &random_hex(16),
            &d.to_string(),
        );
        match signed {
            Ok(env) => {
                let _ = self
                    .mesh
                    .send(mesh::Command::Publish {
                        topic: CARDS_TOPIC.to_owned(),
                        data: env.into_bytes(),
                    })
                    .await;
            }
            Err(e) => tracing::warn!(error = %e, "cannot sign an A2A card envelope"),
        }
    }

    async fn publish_all(&self) {
        let agents: Vec<(String, Agent)> = self
            .agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(n, a)| (n.clone(), a.clone()))
            .collect();
        for (name, agent) in agents {
            self.publish(&name, Some(&agent)).await;
        }
    }

    /// Keeps (or forgets, when withdrawn) a card another node gossiped. The gate verified the
    /// envelope; the card's shape is checked here, and its signature against this node's keys:
    /// verified under one of them, or kept unverified when unsigned or signed with a key this
    /// node does not hold; a signature that fails under a key this node holds drops the card.
    fn received(&self, data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(env) = agora_hyperspace::envelope::Envelope::parse(text) else {
            return;
        };
        let Ok(d) = serde_json::from_str::<Value>(env.d_json) else {
            return;
        };
        let Some(name) = d.get("name").and_then(Value::as_str) else {
            return;
        };
        let key = (env.from.to_owned(), name.to_owned());
        let mut remote = self.remote.lock().unwrap_or_else(|p| p.into_inner());
        if d.get("withdrawn") == Some(&Value::Bool(true)) {
            remote.remove(&key);
            return;
        }
        let (Some(url), Some(card_text)) = (
            d.get("url").and_then(Value::as_str),
            d.get("card").and_then(Value::as_str),
        ) else {
            return;
        };
        let Ok(card) = serde_json::from_str::<Value>(card_text) else {
            return;
        };
        if card::check_card(&card).is_err() {
            return;
        }
        let kid = match jws::verify_card(&card, &self.keys) {
            Ok(Verified::Signed { kid }) => Some(kid),
            // Signed with a key this node does not hold: kept, unverified here.
            Ok(Verified::Unsigned) | Err(jws::JwsError::UnknownKey(_)) => None,
            Err(e) => {
                tracing::debug!(from = %env.from, agent = name, error = %e, "gossiped A2A card refused");
                return;
            }
        };
        if remote.len() >= MAX_REMOTE && !remote.contains_key(&key) {
            let oldest = remote
                .iter()
                .min_by_key(|(_, r)| r.received_at)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                remote.remove(&oldest);
            }
        }
        remote.insert(
            key,
            Remote {
                url: url.to_owned(),
                card,
                kid,
                received_at: now_ms(),
            },
        );
    }
}
