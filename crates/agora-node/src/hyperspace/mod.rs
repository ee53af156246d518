//! The Hyperspace service: one task that owns the Hyperspace primitives' state, answers JSON-RPC
//! calls from the rpc face, applies Hyperspace gossip, and keeps this node's capability card
//! published.
//!
//! | module | owns |
//! |---|---|
//! | this one | the task (state, guard, recursive, tool share it), its inputs, wiring, `start`, routes and call dispatch |
//! | `cards` | the node's own card (gossip heartbeats, DHT record, provider records), cards of others (gossip, DHT records held for the network, persistence) |
//! | `state` | sessions (spec §4.1): who may call what, session tokens, each session's snapshot (with its budget and trace) in redb |
//! | `tool` | the Tool primitive's calls that cross the mesh (spec §4.3): `tool.discover` (local registry, DHT, gossip ask) and `tool.invoke` (local and remote tools, node-to-node requests) |
//! | `gate` | the inline check of every `hyperspace/…` gossip message, in the mesh task |
//! | `guard` | (spec §4.2) `guard.validate` and `guard.checkSafety`, run on a bounded pool of worker threads within a time budget, never on this task |
//! | [`memory`] | the Memory primitive (`memory.*`): a task of its own, its redb table, its worker pool |
//! | [`learning`] | the Learning primitive (`learning.*`): a task of its own, its redb tables, its worker pool |
//! | [`improving`] | the Self-Improving primitive (`improving.*`, `selfImproving.*`): a task of its own, its redb tables, its worker pool, the trajectory and reputation topics, gossipsub application scores |
//! | [`payments`] | the Micropayments primitive (`micropayments.*`): a task of its own, its redb tables, the wallet, channels between nodes on `/agora/payments/1.0.0`, settlement gossip |
//! | `service` | the skeleton the primitive services share: spawning calls within an in-flight bound, `internal`/`invalid`, requests and responses over the mesh, counters |
//!
//! Gossip (spec §2.1, §7.2; `docs/hyperspace-wire.md`): every message on a `hyperspace/…` topic
//! is a v2 signed envelope, verified once by the [`GossipGate`] inside gossipsub's validation
//! hook: invalid → `Reject` (the forwarding peer is penalised), stale or replayed → `Ignore`,
//! valid → `Accept` and forwarded at once, except on the capabilities and discovery topics, which
//! come here to be judged on their content and applied (a card, a delta, a discovery ask).
//!
//! Calls (spec §4.1 state, §4.2 guard, §4.5 recursive) go to the sans-IO primitives of
//! `agora_hyperspace`. Every call that changes a session writes that session's snapshot
//! (session, budget, recursion trace, token) to redb before it is answered, so an acknowledged
//! change survives a restart; snapshots are loaded back at start. Rate-limit windows
//! (`guard.checkRateLimit`) are kept in memory only, each in its caller's namespace: a session
//! token's keys in its session's, the API key's and loopback clients' in the node's.
//!
//! Session tokens (spec §2.3, third tier): `state.createSession` adds `sessionToken` to its
//! result; a client that connects with it may call the state, guard and recursive methods of that
//! session (plus the session-less `guard.validate`, `guard.checkSafety`, `guard.checkRateLimit`);
//! the token stops working when the session ends or is evicted.

mod cards;
mod gate;
mod guard;
pub mod improving;
pub mod learning;
pub mod memory;
pub mod payments;
mod service;
mod state;
mod tool;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_hyperspace::announce::CardPublisher;
use agora_hyperspace::guard::{self as hs_guard, Budget, Caller, Guard};
use agora_hyperspace::jsonrpc::RpcError;
use agora_hyperspace::recursive::{self as hs_recursive, RecursionTrace, Recursive};
use agora_hyperspace::state::{self as hs_state, Session, Sessions};
use agora_hyperspace::tool::{self as hs_tool, LocalTool, ToolRegistry};
use ed25519_dalek::SigningKey;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::call::{Call, Principal};
use crate::faces::rpc::Links;
use crate::mesh;
use crate::routes::{self, CallRoute, Delivery, EventKey, EventRoute};
use crate::store::{Store, StoreError};

pub use cards::HeldRecord;
pub use guard::LongCallSettings;
use state::{MUTATING, authorize, caller_of, session_id_param};
pub use state::{Snapshot, restore_tokens};
pub use tool::discover::PendingDiscover;

/// Gossip topic prefix of Hyperspace.
pub const TOPIC_PREFIX: &str = agora_hyperspace::topic::PREFIX;

/// Unix milliseconds now.
use crate::clock::now_ms;

/// A gossip message whose envelope the mesh's [`GossipGate`] verified and deferred to the service
/// (capabilities, discovery asks); the service judges the content and sends the verdict to the
/// mesh as [`mesh::Command::Validated`].
pub type GossipCheck = routes::Gossip;

pub use gate::GossipGate;

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
    /// A node-to-node request (`/agora/hyperspace/1.0.0`).
    Peer(routes::Request),
    /// Another node asks us to hold a DHT record.
    RecordOffered {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// A neighbour subscribed to a capabilities topic.
    Subscribed(String),
    /// Card records found in the DHT (for `tool.discover`, or to repair a missed delta).
    Learned {
        /// The records' values, unverified.
        records: Vec<Vec<u8>>,
        /// The discovery waiting for them, if any.
        discover: Option<u64>,
    },
    /// A discovery's gossip ask had its time: answer with what is known.
    DiscoverDeadline(u64),
    /// The DHT routing table got its first peer: records put while it had none reach it now.
    DhtPeer,
    /// Report the known cards and the held records (HTTP `GET /hyperspace/cards`).
    Cards(tokio::sync::oneshot::Sender<Value>),
    /// Every tool known, as directory records (the directory's `hyperspace` feed).
    Directory(tokio::sync::oneshot::Sender<Vec<agora_directory::FeedItem>>),
    /// A bridge's whole list of tools (spec §10, [`crate::bridge`]): they become the tools of
    /// `owner`, the owner's others leave the card, and the card is announced when it changed.
    Bridged {
        /// `mcp:<server>` or `a2a:<agent>`.
        owner: String,
        /// The tools, with their fixed ids.
        tools: Vec<hs_tool::BridgedTool>,
        /// What was set and refused, when the bridge wants to know.
        reply: Option<tokio::sync::oneshot::Sender<hs_tool::SetToolsOutcome>>,
    },
}

/// The calls this service answers: every call no other service's prefix claims (state, guard,
/// recursive, tool; an unknown method is answered −32601 here).
pub fn call_route(tx: &mpsc::Sender<Input>) -> CallRoute {
    CallRoute::new(
        &["state.", "guard.", "recursive.", "tool."],
        &[
            &hs_state::METHODS,
            &hs_guard::METHODS,
            &hs_recursive::METHODS,
            &hs_tool::METHODS,
        ],
        tx,
        Input::Call,
    )
}

/// The mesh events this service owns: `hyperspace/…` gossip that waits for a verdict (gossip
/// the gate accepted inline needs nothing here and is dropped; the topics other services own
/// are more specific and go to them), requests on `/agora/hyperspace/1.0.0`, DHT records
/// offered to us, the DHT's first peer, and subscriptions to capabilities topics.
pub fn event_routes(tx: &mpsc::Sender<Input>) -> Vec<EventRoute> {
    use agora_hyperspace::announce::CAPABILITIES_PREFIX;
    vec![
        EventRoute::new(
            EventKey::TopicPrefix(TOPIC_PREFIX),
            tx,
            Delivery::Wait,
            |e| routes::gossip(e).map(Input::Gossip),
        )
        .verdicts_only(),
        EventRoute::new(
            EventKey::Proto(mesh::Proto::Hyperspace),
            tx,
            Delivery::Wait,
            |e| routes::request(e).map(Input::Peer),
        ),
        EventRoute::new(EventKey::RecordOffered, tx, Delivery::Wait, |e| match e {
            mesh::Event::RecordOffered { key, value } => Some(Input::RecordOffered { key, value }),
            _ => None,
        }),
        EventRoute::new(
            EventKey::Subscribed(CAPABILITIES_PREFIX),
            tx,
            Delivery::Wait,
            |e| match e {
                mesh::Event::Subscribed(_, topic) => Some(Input::Subscribed(topic)),
                _ => None,
            },
        ),
        EventRoute::new(EventKey::DhtPeer, tx, Delivery::Wait, |e| {
            matches!(e, mesh::Event::DhtPeer(_)).then_some(Input::DhtPeer)
        }),
    ]
}

/// How long a provider has to answer `tool.invoke`.
pub const INVOKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The owner name of tools registered over connection `conn`.
fn owner_of(conn: u64) -> String {
    format!("rpc-conn-{conn}")
}

struct Service {
    sessions: Sessions,
    guard: Guard,
    recursive: Recursive,
    tools: ToolRegistry,
    links: Links,
    peer_id: String,
    inputs: mpsc::Sender<Input>,
    store: Store,
    tokens: Arc<Mutex<HashMap<String, String>>>,
    /// The node's key, which signs its announcements.
    key: SigningKey,
    mesh: mpsc::Sender<mesh::Command>,
    publisher: CardPublisher,
    /// Capability tags this node is a DHT provider of.
    provided: BTreeSet<String>,
    /// When the node's card record was last put into the DHT.
    record_put_ms: u64,
    /// How long an unchanged card record stays before it is re-put: `RECORD_REFRESH_MS`
    /// stretched by a fraction fixed for this node ([`crate::mesh::topics::spread`]), so that nodes
    /// started together do not all re-put at once.
    record_refresh_ms: u64,
    /// When every record (ours and those held) was last re-put because a neighbour arrived.
    republished_ms: Option<u64>,
    /// Card records held for the DHT, by peer.
    held: HashMap<String, HeldRecord>,
    /// Discoveries waiting for the DHT or for gossip answers.
    discovering: HashMap<u64, PendingDiscover>,
    next_discover: u64,
    /// When each peer was last asked for its card after a missed delta, or answered an ask.
    throttle: HashMap<String, u64>,
    /// Workers for `guard.validate` and `guard.checkSafety`.
    long_calls: guard::LongCalls,
    /// The payments service (priced tools are charged there).
    payments: mpsc::Sender<payments::Input>,
    /// The bridges, which serve the tools they own.
    bridges: crate::bridge::Bridges,
}

/// Everything [`run`] takes from the node: the [`Wiring`], the service's own channels, the
/// JSON-RPC face's connections and the long-call pool's settings.
#[derive(Debug)]
pub struct Parts {
    /// This node's PeerId (the `peerId` of its tools).
    pub peer_id: String,
    /// The node's Ed25519 key (signs the node's capability announcements).
    pub key: SigningKey,
    /// Open JSON-RPC connections (tool providers).
    pub links: Links,
    /// Commands to the mesh.
    pub mesh: mpsc::Sender<mesh::Command>,
    /// The service's own input, for results of work it hands to other tasks.
    pub inputs_tx: mpsc::Sender<Input>,
    /// The service's input.
    pub inputs: mpsc::Receiver<Input>,
    /// Where and how long `guard.validate` / `guard.checkSafety` run.
    pub long_calls: LongCallSettings,
    /// The payments service.
    pub payments: mpsc::Sender<payments::Input>,
    /// The wallet address the node's card publishes.
    pub wallet_address: Option<String>,
    /// The bridges, which serve the tools they own.
    pub bridges: crate::bridge::Bridges,
}

/// What the service loads from the store at start.
#[derive(Debug, Default)]
pub struct Restored {
    /// Session snapshots.
    pub snapshots: Vec<Snapshot>,
    /// Tools registered before the restart (they come back orphaned).
    pub tools: Vec<LocalTool>,
    /// Card records held for the DHT, by peer.
    pub records: Vec<(String, String)>,
}

/// How long a tool without a provider is remembered (its id and analytics wait for the
/// provider to register it again).
const ORPHAN_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// A random UUID (version 4): A2A message, task and artifact ids.
pub(crate) fn uuid() -> String {
    let h = random_hex(16);
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// `bytes` random bytes as lowercase hex (nonces, ids).
pub(crate) fn random_hex(bytes: usize) -> String {
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

impl Restored {
    /// Reads what the service keeps in the store (unreadable rows are logged and skipped).
    pub async fn load(store: &Store) -> Result<Self, StoreError> {
        Ok(Self {
            snapshots: store
                .read_json(Store::hs_sessions, "Hyperspace session")
                .await?,
            tools: store.read_json(Store::hs_tools, "Hyperspace tool").await?,
            records: store.read(Store::hs_records).await?,
        })
    }
}

/// The running Hyperspace service, as the node holds it.
#[derive(Debug)]
pub struct Started {
    /// Its input.
    pub tx: mpsc::Sender<Input>,
    /// Session tokens (the JSON-RPC face checks them).
    pub tokens: Arc<Mutex<HashMap<String, String>>>,
    /// Open JSON-RPC connections (tool providers), shared with the JSON-RPC face.
    pub links: Links,
    /// Where the JSON-RPC face reports closed connections (their tools go with them).
    pub closed: mpsc::Sender<u64>,
    /// The service's task.
    pub task: tokio::task::JoinHandle<()>,
}

/// What the Hyperspace service needs from the node.
#[derive(Debug)]
pub struct Wiring {
    /// This node's PeerId.
    pub peer_id: String,
    /// The node's key.
    pub key: SigningKey,
    /// Commands to the mesh.
    pub mesh: mpsc::Sender<mesh::Command>,
    /// The payments service's input.
    pub payments: mpsc::Sender<payments::Input>,
    /// The wallet address the node's card publishes.
    pub wallet_address: String,
    /// Where and how long `guard.validate` / `guard.checkSafety` run (`[rpc] guard_workers`, `guard_budget_ms`).
    pub long_calls: LongCallSettings,
    /// The bridges, which serve the tools they own.
    pub bridges: crate::bridge::Bridges,
}

/// Starts the Hyperspace service: restores its sessions, tools and held records from the store
/// (session tokens before anything serves), then [`run`] on a task of its own.
pub async fn start(store: Store, node: Wiring) -> Result<Started, StoreError> {
    let tokens = Arc::new(Mutex::new(HashMap::new()));
    let (tx, rx) = mpsc::channel(4096);
    let restored = Restored::load(&store).await?;
    restore_tokens(&tokens, &restored.snapshots);
    let links = Links::default();
    let task = tokio::spawn(run(
        store,
        Arc::clone(&tokens),
        restored,
        Parts {
            peer_id: node.peer_id,
            key: node.key,
            links: links.clone(),
            mesh: node.mesh,
            inputs_tx: tx.clone(),
            inputs: rx,
            long_calls: node.long_calls,
            payments: node.payments,
            wallet_address: Some(node.wallet_address),
            bridges: node.bridges,
        },
    ));
    let (closed, mut closed_rx) = mpsc::channel::<u64>(256);
    let inputs = tx.clone();
    tokio::spawn(async move {
        while let Some(conn) = closed_rx.recv().await {
            if inputs.send(Input::Closed(conn)).await.is_err() {
                break;
            }
        }
    });
    Ok(Started {
        tx,
        tokens,
        links,
        closed,
        task,
    })
}

/// Runs the service until `inputs` closes.
pub async fn run(
    store: Store,
    tokens: Arc<Mutex<HashMap<String, String>>>,
    restored: Restored,
    parts: Parts,
) {
    let Parts {
        peer_id,
        key,
        links,
        mesh,
        inputs_tx,
        mut inputs,
        long_calls,
        payments,
        wallet_address,
        bridges,
    } = parts;
    let mut svc = Service {
        sessions: Sessions::new(),
        guard: Guard::new(),
        recursive: Recursive::new(),
        tools: ToolRegistry::new(peer_id.clone()),
        links,
        record_refresh_ms: cards::refresh_ms(&peer_id),
        peer_id,
        inputs: inputs_tx,
        store,
        tokens,
        key,
        mesh,
        publisher: CardPublisher::new(),
        provided: BTreeSet::new(),
        record_put_ms: 0,
        republished_ms: None,
        held: HashMap::new(),
        discovering: HashMap::new(),
        next_discover: 1,
        throttle: HashMap::new(),
        long_calls: guard::LongCalls::new(long_calls),
        payments,
        bridges,
    };
    svc.tools.set_local_wallet(wallet_address);
    svc.restore(restored.snapshots);
    let now = now_ms();
    for tool in restored.tools {
        svc.tools.restore_tool(tool, now);
    }
    svc.start_announcing(restored.records).await;
    let mut beat = tokio::time::interval(Duration::from_secs(1));
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let input = tokio::select! {
            input = inputs.recv() => match input {
                Some(input) => input,
                None => break,
            },
            _ = beat.tick() => {
                svc.tick().await;
                continue;
            }
        };
        svc.handle(input).await;
    }
}

impl Service {
    async fn handle(&mut self, input: Input) {
        match input {
            Input::Closed(conn) => {
                if self.tools.orphan_owner(&owner_of(conn), now_ms()) > 0 {
                    self.tools_changed().await;
                }
            }
            Input::Invoked {
                tool_id,
                duration_ms,
                success,
            } => {
                // The tool may have left with its provider meanwhile.
                let _ = self.tools.record_invocation(&tool_id, duration_ms, success);
            }
            Input::Call(call) if call.request.method == hs_tool::INVOKE => self.invoke(call),
            Input::Call(call) if hs_guard::LONG_METHODS.contains(&call.request.method.as_str()) => {
                self.long_call(call);
            }
            Input::Call(call) if call.request.method == hs_tool::DISCOVER => {
                self.discover(call).await;
            }
            Input::Call(call) => {
                let registers = call.request.method == hs_tool::REGISTER;
                let outcome = self
                    .call(
                        &call.principal,
                        call.conn,
                        &call.request.method,
                        call.request.params.as_ref(),
                    )
                    .await;
                let _ = call.reply.send(outcome);
                if registers {
                    self.tools_changed().await;
                }
            }
            Input::Gossip(check) => self.gossip(check).await,
            Input::Peer(routes::Request {
                peer,
                data,
                channel,
            }) => self.peer_request(peer, &data, channel).await,
            Input::RecordOffered { key, value } => self.record_offered(&key, value).await,
            Input::Subscribed(topic) => self.subscribed(&topic).await,
            Input::Learned { records, discover } => self.learned(&records, discover).await,
            Input::DiscoverDeadline(id) => self.discover_deadline(id),
            Input::DhtPeer => self.dht_peer().await,
            Input::Directory(reply) => {
                let _ = reply.send(tool::listing::feed(&self.tools, now_ms()));
            }
            Input::Cards(reply) => {
                let mut report = self.cards_report(now_ms());
                report["sessions"] = self.sessions.len().into();
                let _ = reply.send(report);
            }
            Input::Bridged {
                owner,
                tools,
                reply,
            } => {
                let outcome = self.tools.set_owner_tools(&owner, tools, now_ms());
                for (id, reason) in &outcome.refused {
                    tracing::warn!(%owner, tool = %id, %reason, "bridged tool refused");
                }
                if outcome.changed {
                    self.tools_changed().await;
                }
                if let Some(reply) = reply {
                    let _ = reply.send(outcome);
                }
            }
        }
    }

    /// Once a second: heartbeats, record refresh, and forgetting what expired.
    async fn tick(&mut self) {
        let now = now_ms();
        self.announce(now).await;
        self.tools.cards_mut().prune(now);
        if self.tools.forget_orphans(now, ORPHAN_TTL_MS) > 0 {
            self.persist_tools().await;
        }
        self.throttle
            .retain(|_, at| now.saturating_sub(*at) < 60_000);
    }

    /// The local tools changed: store them and announce the new card at once.
    async fn tools_changed(&mut self) {
        self.persist_tools().await;
        self.announce(now_ms()).await;
    }

    /// Writes the local tools that changed since the last call.
    async fn persist_tools(&mut self) {
        for id in self.tools.take_dirty() {
            let outcome = match self.tools.local_tool(&id) {
                Some(tool) => match serde_json::to_string(tool) {
                    Ok(json) => self.store.put_hs_tool(&id, &json).await,
                    Err(_) => continue,
                },
                None => self.store.delete_hs_tool(&id).await,
            };
            if let Err(e) = outcome {
                tracing::warn!(tool = %id, error = %e, "cannot store a Hyperspace tool");
            }
        }
    }

    async fn call(
        &mut self,
        principal: &Principal,
        conn: u64,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Value, RpcError> {
        authorize(principal, method, params)?;
        if hs_guard::LONG_METHODS.contains(&method) {
            // `handle` gives these to the workers; this task never runs them.
            return Err(RpcError::internal_error().with_message(format!("{method} runs apart")));
        }
        let prior = MUTATING
            .contains(&method)
            .then(|| session_id_param(params).map(|id| self.prior(id)))
            .flatten();
        let null = Value::Null;
        let params_v = params.unwrap_or(&null);
        let now = now_ms();
        let mut ids = || format!("sess_{}", random_hex(8));
        let outcome = self
            .sessions
            .call(method, params_v, now, &mut ids)
            .or_else(|| {
                self.guard
                    .call_as(caller_of(principal), method, params_v, now, &self.sessions)
            })
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
            hs_state::CREATE_SESSION => result
                .get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => session_id_param(params).map(str::to_owned),
        };
        if method == hs_state::CREATE_SESSION
            && let (Some(id), Some(obj)) = (&session_id, result.as_object_mut())
        {
            let token = format!("hst_{}", random_hex(24));
            if let Ok(mut t) = self.tokens.lock() {
                t.insert(token.clone(), id.clone());
            }
            obj.insert("sessionToken".into(), Value::String(token));
        }
        if method == hs_state::END_SESSION
            && let Some(id) = &session_id
        {
            self.forget_tokens(id);
        }
        if let Some(id) = session_id
            && MUTATING.contains(&method)
            && let Err(e) = self.persist(&id).await
        {
            // Not written, not done: the session is as it was (gone, for a new one).
            self.roll_back(&id, prior.unwrap_or_default());
            return Err(e);
        }
        Ok(result)
    }

    /// A long Guard call: authorized here, run by a worker ([`guard`]); this task never compiles
    /// a schema or scans text itself.
    fn long_call(&self, call: Call) {
        let Call {
            principal,
            request,
            reply,
            ..
        } = call;
        if let Err(e) = authorize(&principal, &request.method, request.params.as_ref()) {
            let _ = reply.send(Err(e));
            return;
        }
        let limits = self.guard.limits();
        let method = request.method;
        let params = request.params.unwrap_or(Value::Null);
        let name = method.clone();
        self.long_calls.spawn(
            &name,
            move || {
                hs_guard::call_stateless(&method, &params, &limits)
                    .unwrap_or_else(|| Err(RpcError::method_not_found()))
            },
            reply,
        );
    }
}

/// Leaves the `n` smallest of `items`, sorted (a status listing's first entries): a selection
/// in linear time, then a sort of those `n` only.
pub(crate) fn first_sorted<T: Ord>(items: &mut Vec<T>, n: usize) {
    if items.len() > n {
        items.select_nth_unstable(n);
        items.truncate(n);
    }
    items.sort_unstable();
}

#[cfg(test)]
mod first_sorted_tests {
    #[test]
    fn keeps_the_smallest_in_order() {
        let mut v = vec![9, 3, 7, 1, 8, 2];
        super::first_sorted(&mut v, 3);
        assert_eq!(v, [1, 2, 3]);
        let mut w = vec![5, 4];
        super::first_sorted(&mut w, 3);
        assert_eq!(w, [4, 5]);
    }
}
