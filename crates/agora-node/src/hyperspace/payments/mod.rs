//! The Micropayments primitive (`micropayments.*`) on the node: challenges, credentials,
//! receipts, payment channels between nodes, settlement gossip.
//!
//! Spec (`hyperspace-gossiping-agents-protocol.txt`): §6 "Micropayments Primitive" (the five
//! methods of §6.2, the 402 flow of §6.3, the channel of §6.4), §2.1 topic
//! `hyperspace/settlements/{round}`, §8 −32002. The sans-IO parts (EIP-712, credentials and
//! their checks, channels, settlement records) are `agora_hyperspace::payments`; the choices are
//! in `docs/hyperspace-wire.md` "Micropayments" and `docs/node.md` "Micropayments".
//!
//! | module | owns |
//! |---|---|
//! | this one | the task, its inputs and wiring, the channels held; redb tables `hs_pay_challenges`, `hs_pay_nonces`, `hs_pay_receipts`, `hs_pay_channels`, `hs_pay_settlements` |
//! | `calls` | the JSON-RPC methods (§6.2-§6.4) and the charge of a priced tool |
//! | `peer` | node-to-node requests on `/agora/payments/1.0.0` |
//! | `settlement` | the settler, the settlement log, settlement gossip |
//! | [`wallet`] | the node's secp256k1 wallet key (`wallet.key`) |
//!
//! **Money is never lost nor counted twice.** A credential is accepted under one lock: the
//! challenge is unpaid and `(payer, nonce)` unused (both in memory, loaded from redb at start),
//! then the receipt, the nonce and the paid challenge are written in **one** redb transaction,
//! and only then is the answer sent; a crash before the commit leaves nothing, after it
//! everything. A channel is one record per side; the payee's node writes each accepted voucher
//! (nonce and total) before it answers, under the channel's lock, so payments on a channel are
//! serial and a replayed or reordered voucher finds the last nonce. The payer's node keeps the
//! voucher it sent but has no answer for (`pending`) and sends it again, as it was, before it
//! signs the next: if the payee had accepted it (its `duplicate-nonce` refusal with that nonce
//! and total says so) it is counted then, never paid again; if not, it is dropped.
//!
//! Signature checks (secp256k1 recovery, Ed25519) run on the per-call tasks, never on the
//! service task. Bounds: [`Settings`] (open challenges, receipts, channels, settlement
//! log); past them a new challenge, payment or channel is refused with −32003 and nothing held
//! is dropped, except the settlement log, which keeps the newest records.

mod calls;
mod peer;
mod settlement;
pub mod wallet;

use peer::{PayRequest, PayResponse};
pub use settlement::{NoChainSettler, Settled, Settler};

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_hyperspace::jsonrpc::{RpcCode, RpcError};
use agora_hyperspace::payments as methods;
use agora_hyperspace::payments::assets::{EXACT_SCHEME, POINTS_NETWORK, USDC_DECIMALS, UsdcAsset};
use agora_hyperspace::payments::challenge::Challenge;
use agora_hyperspace::payments::channel::{Channel, ChannelError, Currency, Status, Voucher};
use agora_hyperspace::payments::credential::{Credential, Receipt, Refusal, check};
use agora_hyperspace::payments::params::{
    ChallengeParams, OpenParams, PayAmount, PayParams, close_channel_id, verify_credential,
};
use agora_hyperspace::payments::settlement::{self as hs_settlement, Record};
use agora_hyperspace::payments::{Amount, amount_json, decimal, eip712, hex0x};
use ed25519_dalek::{Signer as _, SigningKey};
use libp2p::PeerId;
use libp2p::request_response::ResponseChannel;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::random_hex;
use super::service::{Counters, PeerLink, Unanswered, internal, invalid, spawn_call};
use crate::call::{Call, Principal};
use crate::clock::now_ms;
use crate::config::Config;
use crate::mesh;
use crate::routes::{self, CallRoute, Delivery, EventKey, EventRoute};
use crate::store::{PayTable, Store};

/// Calls in flight at once; past it −32003.
const IN_FLIGHT: usize = 256;
/// Node-to-node requests in flight at once; past it a `Refused` −32003.
const PEER_IN_FLIGHT: usize = 256;

/// How the payments service runs (`[payments]` in `agora.toml`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Accepted USDC chains (default: Base Sepolia and Base).
    pub chains: Vec<UsdcAsset>,
    /// How long a challenge stays payable. Default 5 minutes.
    pub challenge_ttl: Duration,
    /// Most unpaid challenges held. Default 100,000 (expired ones are dropped first).
    pub max_challenges: usize,
    /// Most receipts held. Default 1,000,000; past it payments are refused (−32003).
    pub max_receipts: usize,
    /// Most channels held (both roles). Default 100,000; past it `open` is refused (−32003).
    pub max_channels: usize,
    /// Settlement records kept (newest). Default 10,000.
    pub max_settlements: usize,
    /// How long a request to another node may take. Default 5 s.
    pub peer_timeout: Duration,
    /// The wallet key file (default `<data>/wallet.key`).
    pub wallet_file: std::path::PathBuf,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            chains: agora_hyperspace::payments::assets::default_usdc(),
            challenge_ttl: Duration::from_millis(
                agora_hyperspace::payments::challenge::DEFAULT_TTL_MS,
            ),
            max_challenges: 100_000,
            max_receipts: 1_000_000,
            max_channels: 100_000,
            max_settlements: 10_000,
            peer_timeout: Duration::from_secs(5),
            wallet_file: std::path::PathBuf::from(wallet::WALLET_FILE),
        }
    }
}

/// Inputs of the payments task.
#[derive(Debug)]
pub enum Input {
    /// A `micropayments.*` call.
    Call(Call),
    /// A node-to-node request on `/agora/payments/1.0.0`.
    Peer(routes::Request),
    /// A settlement envelope (verified by the gate) from a settlement topic.
    Settlement(Vec<u8>),
    /// The settlement log (`GET /hyperspace/settlements`).
    Settlements(oneshot::Sender<Value>),
    /// Charge the price of a priced tool (`tool.invoke`, `POST /pay/tools/{id}/invoke`).
    Charge(Charge),
    /// Report the service's state (`/status` `payments`).
    Status(oneshot::Sender<Value>),
}

/// The calls this service answers (`micropayments.*`).
pub fn call_route(tx: &mpsc::Sender<Input>) -> CallRoute {
    CallRoute::new(&["micropayments."], &[&methods::METHODS], tx, Input::Call)
}

/// The mesh events this service owns: the settlement topics (a full queue loses a copy of a
/// record; the payee keeps its own) and requests on `/agora/payments/1.0.0`.
pub fn event_routes(tx: &mpsc::Sender<Input>) -> Vec<EventRoute> {
    vec![
        EventRoute::new(
            EventKey::TopicPrefix(hs_settlement::SETTLEMENTS_PREFIX),
            tx,
            Delivery::DropWhenFull,
            |e| routes::gossip(e).map(|g| Input::Settlement(g.data)),
        ),
        EventRoute::new(
            EventKey::Proto(mesh::Proto::Payments),
            tx,
            Delivery::Wait,
            |e| routes::request(e).map(Input::Peer),
        ),
    ]
}

/// A charge for one use of something priced.
#[derive(Debug)]
pub struct Charge {
    /// What is paid for (`/pay/tools/{toolId}/invoke`).
    pub resource: String,
    /// Its price.
    pub price: agora_hyperspace::payments::Price,
    /// The node that serves it and is paid (this node, or a remote tool's node).
    pub payee: String,
    /// `{credential}`, `{channelId}` or, from another node, `{channelId, nonce}`; `None`
    /// answers −32002 with a challenge.
    pub payment: Option<Value>,
    /// The caller (a session token may spend only its own channels).
    pub principal: Principal,
    /// The node that forwarded the call, for `{channelId, nonce}`.
    pub from: Option<String>,
    /// `{receiptId, …}` (a credential), `{channelId, nonce}` (a channel), or the error.
    pub reply: oneshot::Sender<Result<Value, RpcError>>,
}

/// What the payments task needs from the node.
#[derive(Debug)]
pub struct Wiring {
    /// This node's PeerId.
    pub peer_id: String,
    /// The node's Ed25519 key (points payments, settlement envelopes).
    pub key: SigningKey,
    /// Commands to the mesh.
    pub mesh: mpsc::Sender<mesh::Command>,
}

/// Open channels listed by `/status` `payments.openChannels`.
const STATUS_LIST: usize = 20;

/// This node's side of a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Role {
    /// This node's wallet or peer key pays.
    Payer,
    /// This node is paid.
    Payee,
    /// Both (a channel from this node to itself).
    Both,
}

/// A channel as this node keeps it (row of `hs_pay_channels`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Held {
    channel: Channel,
    role: Role,
    /// Payer side: the voucher sent without an answer (it may have been accepted).
    pending: Option<Voucher>,
    /// The session that opened it (a session token may act only on its own channels).
    session: Option<String>,
    /// Payee side: the latest accepted vouchers `(nonce, amount, redeemed)`, newest last, at
    /// most [`RECENT_VOUCHERS`]: a payment named by nonce redeems one use of a priced tool once.
    #[serde(default)]
    recent: VecDeque<(u64, String, bool)>,
}

/// Accepted vouchers remembered per channel for redemption.
const RECENT_VOUCHERS: usize = 1024;

/// A challenge as kept (row of `hs_pay_challenges`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Issued {
    challenge: Challenge,
    paid: Option<String>,
}

struct Shared {
    me: String,
    key: SigningKey,
    wallet: k256::ecdsa::SigningKey,
    wallet_address: String,
    mesh: mpsc::Sender<mesh::Command>,
    store: Store,
    settings: Settings,
    in_flight: Arc<Semaphore>,
    peer_slots: Arc<Semaphore>,
    /// Challenges by id.
    challenges: Mutex<HashMap<String, Issued>>,
    /// Used `payer NUL nonce` keys.
    nonces: Mutex<HashSet<String>>,
    /// Receipts held (ids).
    receipts: Mutex<HashSet<String>>,
    /// Held while a credential is checked against the state and committed.
    commit: tokio::sync::Mutex<()>,
    /// Channels by id, each behind its own lock (payments on a channel are serial).
    channels: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Held>>>>,
    /// The settlement log, oldest first: (sequence, record JSON).
    settlements: Mutex<VecDeque<(u64, Value)>>,
    settlement_seq: AtomicU64,
    /// Settlement topics subscribed (by round).
    rounds: Mutex<Vec<u64>>,
    counters: Counters,
    /// Requests and responses on `/agora/payments/1.0.0`.
    link: PeerLink,
    settler: Box<dyn Settler>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payments").field("me", &self.me).finish()
    }
}

/// The service before it runs (tables loaded, wallet opened).
#[derive(Debug)]
pub struct Prepared {
    shared: Arc<Shared>,
}

impl Prepared {
    /// The wallet's address (`0x`, EIP-55).
    pub fn wallet_address(&self) -> String {
        self.shared.wallet_address.clone()
    }
}

fn load_rows<T: serde::de::DeserializeOwned>(
    store: &Store,
    table: PayTable,
) -> Result<Vec<(String, T)>, String> {
    let rows = store.pay_rows(table).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(rows.len());
    for (k, v) in rows {
        match serde_json::from_str(&v) {
            Ok(t) => out.push((k, t)),
            Err(e) => tracing::warn!(key = k, error = %e, "payments: an unreadable row is skipped"),
        }
    }
    Ok(out)
}

/// Opens the wallet and loads the tables (blocking reads: call it off the runtime's workers).
pub fn prepare(
    data_dir: &std::path::Path,
    store: Store,
    settings: Settings,
    wiring: Wiring,
) -> Result<Prepared, String> {
    let wallet_path = if settings.wallet_file.is_absolute() {
        settings.wallet_file.clone()
    } else {
        data_dir.join(&settings.wallet_file)
    };
    let wallet = wallet::load_or_create(&wallet_path).map_err(|e| e.to_string())?;
    let wallet_address = eip712::address_of(&wallet).to_checksum(None);
    let challenges: HashMap<String, Issued> = load_rows(&store, PayTable::Challenges)?
        .into_iter()
        .collect();
    let nonces: HashSet<String> = store
        .pay_rows(PayTable::Nonces)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let receipts: HashSet<String> = store
        .pay_rows(PayTable::Receipts)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let channels: HashMap<String, Arc<tokio::sync::Mutex<Held>>> =
        load_rows::<Held>(&store, PayTable::Channels)?
            .into_iter()
            .map(|(k, h)| (k, Arc::new(tokio::sync::Mutex::new(h))))
            .collect();
    let mut settlements: VecDeque<(u64, Value)> = VecDeque::new();
    for (k, v) in load_rows::<Value>(&store, PayTable::Settlements)? {
        if let Ok(seq) = k.parse::<u64>() {
            settlements.push_back((seq, v));
        }
    }
    let next_seq = settlements.back().map_or(1, |(s, _)| s + 1);
    Ok(Prepared {
        shared: Arc::new(Shared {
            me: wiring.peer_id,
            key: wiring.key,
            wallet,
            wallet_address,
            link: PeerLink {
                mesh: wiring.mesh.clone(),
                proto: mesh::Proto::Payments,
            },
            mesh: wiring.mesh,
            store,
            settings,
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
            peer_slots: Arc::new(Semaphore::new(PEER_IN_FLIGHT)),
            challenges: Mutex::new(challenges),
            nonces: Mutex::new(nonces),
            receipts: Mutex::new(receipts),
            commit: tokio::sync::Mutex::new(()),
            channels: Mutex::new(channels),
            settlements: Mutex::new(settlements),
            settlement_seq: AtomicU64::new(next_seq),
            rounds: Mutex::new(Vec::new()),
            counters: Counters::default(),
            settler: Box::new(NoChainSettler),
        }),
    })
}

impl Settings {
    /// The settings `config` asks for (`[payments]`).
    pub fn from_config(config: &Config) -> Self {
        let d = Self::default();
        let p = &config.payments;
        Self {
            wallet_file: p
                .wallet_key_file
                .clone()
                .unwrap_or_else(|| d.wallet_file.clone()),
            challenge_ttl: p
                .challenge_ttl_secs
                .map_or(d.challenge_ttl, Duration::from_secs),
            ..d
        }
    }
}

/// The running payments service, as the node holds it.
#[derive(Debug)]
pub struct Started {
    /// Its input.
    pub tx: mpsc::Sender<Input>,
    /// The wallet's address (the node's card publishes it).
    pub wallet_address: String,
}

/// Starts the payments service: its settings from `config`, [`prepare`] on a blocking thread
/// (the wallet, the channels), then [`run`] on a task of its own.
pub async fn start(config: &Config, store: Store, wiring: Wiring) -> Result<Started, String> {
    let settings = Settings::from_config(config);
    let data = config.data.clone();
    let payments = tokio::task::spawn_blocking(move || prepare(&data, store, settings, wiring))
        .await
        .map_err(|e| e.to_string())??;
    let wallet_address = payments.wallet_address();
    tracing::info!(wallet = wallet_address, "payments wallet");
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(run(payments, rx));
    Ok(Started { tx, wallet_address })
}

/// Runs the payments task until `inputs` closes.
pub async fn run(prepared: Prepared, mut inputs: mpsc::Receiver<Input>) {
    let shared = prepared.shared;
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let input = tokio::select! {
            input = inputs.recv() => match input {
                Some(input) => input,
                None => break,
            },
            _ = tick.tick() => {
                shared.follow_rounds().await;
                continue;
            }
        };
        match input {
            Input::Call(call) => {
                let s = Arc::clone(&shared);
                spawn_call(
                    &shared.in_flight,
                    "micropayments",
                    call,
                    async move |who, method, params| s.call(&who, &method, &params).await,
                );
            }
            Input::Peer(routes::Request {
                peer,
                data,
                channel,
            }) => {
                let s = Arc::clone(&shared);
                let permit = Arc::clone(&shared.peer_slots).try_acquire_owned();
                tokio::spawn(async move {
                    let response = match permit {
                        Ok(_permit) => s.peer_request(&peer, &data).await,
                        Err(_) => PayResponse::Refused {
                            code: RpcCode::RATE_LIMITED.0,
                            message: "Rate Limited: too many payment requests in flight".into(),
                            data: Value::Null,
                            last_nonce: None,
                            spent: None,
                        },
                    };
                    s.respond(channel, &response).await;
                });
            }
            Input::Settlement(data) => shared.settlement_received(&data).await,
            Input::Settlements(reply) => {
                let _ = reply.send(shared.settlement_log());
            }
            Input::Charge(charge) => {
                let s = Arc::clone(&shared);
                tokio::spawn(async move {
                    let outcome = s.charge(&charge).await;
                    let _ = charge.reply.send(outcome);
                });
            }
            Input::Status(reply) => {
                let _ = reply.send(shared.status());
            }
        }
    }
}

fn busy(what: &str) -> RpcError {
    RpcError::from_code(RpcCode::RATE_LIMITED).with_message(format!("Rate Limited: {what}"))
}

/// A refused credential: −32602 with `data {reason, message}`.
fn refused(r: &Refusal) -> RpcError {
    RpcError::invalid_params()
        .with_message(format!("payment refused: {r}"))
        .with_data(json!({ "reason": r.reason(), "message": r.to_string() }))
}

/// A refused channel payment: −32002 (budget) with `{remaining, requested, limit}` as spec
/// Example 3 (decimals of the channel's currency, which has `decimals`, with their `…Atomic`
/// twins), else −32602; `data.reason` always.
fn channel_error(e: &ChannelError, decimals: u32) -> RpcError {
    match e {
        ChannelError::BudgetExceeded {
            remaining,
            requested,
            limit,
        } => {
            let mut d = Map::new();
            d.insert("reason".into(), json!(e.reason()));
            decimal::put(&mut d, "remaining", *remaining, decimals);
            decimal::put(&mut d, "requested", *requested, decimals);
            decimal::put(&mut d, "limit", *limit, decimals);
            RpcError::from_code(RpcCode::BUDGET_EXCEEDED)
                .with_message(e.to_string())
                .with_data(Value::Object(d))
        }
        _ => RpcError::invalid_params()
            .with_message(e.to_string())
            .with_data(json!({ "reason": e.reason() })),
    }
}

fn peer_unavailable(peer: &str, why: &str) -> RpcError {
    RpcError::from_code(RpcCode::PEER_UNAVAILABLE)
        .with_message(format!("Peer Unavailable: {peer}: {why}"))
        .with_data(json!({ "peer": peer, "reason": why }))
}

fn session_of(principal: &Principal) -> Option<String> {
    match principal {
        Principal::Session(s) => Some(s.clone()),
        Principal::Local | Principal::ApiKey => None,
    }
}

impl Shared {
    fn count(&self, what: &'static str) {
        self.counters.count(what);
    }

    fn peer_key(p: &str) -> Option<[u8; 32]> {
        agora_hyperspace::peer_id::public_key_of(p)
    }

    fn status(&self) -> Value {
        // The count, and the open channels among the first by id for operators (one being
        // changed now is left out of the list).
        let (channels, open): (usize, Vec<Value>) =
            self.channels.lock().map_or((0, Vec::new()), |c| {
                let mut ids: Vec<&String> = c
                    .iter()
                    .filter(|(_, h)| h.try_lock().is_ok_and(|h| h.channel.status == Status::Open))
                    .map(|(id, _)| id)
                    .collect();
                crate::hyperspace::first_sorted(&mut ids, STATUS_LIST);
                let open = ids
                    .into_iter()
                    .filter_map(|id| {
                        let held = c.get(id)?.try_lock().ok()?;
                        let ch = &held.channel;
                        (ch.status == Status::Open).then(|| {
                            json!({
                                "channelId": ch.channel_id,
                                "role": held.role,
                                "payer": ch.payer,
                                "payee": ch.payee,
                                "currency": ch.currency.label(),
                                "budget": amount_json(ch.budget),
                                "spent": amount_json(ch.spent),
                                "nonce": ch.nonce,
                                "openedAt": ch.opened_at,
                            })
                        })
                    })
                    .take(STATUS_LIST)
                    .collect();
                (c.len(), open)
            });
        let open_challenges = self
            .challenges
            .lock()
            .map_or(0, |c| c.values().filter(|i| i.paid.is_none()).count());
        json!({
            "walletAddress": self.wallet_address,
            "chains": self.settings.chains.iter().map(|c| json!({
                "network": c.network(), "asset": c.contract.to_checksum(None), "name": c.name, "version": c.version,
            })).collect::<Vec<_>>(),
            "openChallenges": open_challenges,
            "receipts": self.receipts.lock().map_or(0, |r| r.len()),
            "channels": channels,
            "openChannels": open,
            "settlements": self.settlements.lock().map_or(0, |s| s.len()),
            "counters": self.counters.json(),
        })
    }

    // ----- charges (priced tools) -----

    // ----- channels -----

    fn channel(&self, id: &str) -> Option<Arc<tokio::sync::Mutex<Held>>> {
        self.channels.lock().ok()?.get(id).cloned()
    }

    async fn persist(&self, held: &Held) -> Result<(), RpcError> {
        let row = serde_json::to_string(held).map_err(internal)?;
        self.store
            .put_payments(vec![(
                PayTable::Channels,
                held.channel.channel_id.clone(),
                Some(row),
            )])
            .await
            .map_err(internal)
    }

    fn insert_channel(&self, held: Held) -> Result<(), RpcError> {
        let mut map = self
            .channels
            .lock()
            .map_err(|_| internal("channel table poisoned"))?;
        if map.len() >= self.settings.max_channels {
            return Err(busy("too many payment channels"));
        }
        if map.contains_key(&held.channel.channel_id) {
            return Err(invalid("a channel with this id exists"));
        }
        map.insert(
            held.channel.channel_id.clone(),
            Arc::new(tokio::sync::Mutex::new(held)),
        );
        Ok(())
    }

    /// The payer identity of this node in `currency`: its wallet address or its PeerId.
    fn payer_of(&self, currency: &Currency) -> String {
        match currency {
            Currency::Usdc { .. } => self.wallet_address.clone(),
            Currency::Points => self.me.clone(),
        }
    }

    fn accepts(&self, currency: &Currency) -> bool {
        match currency {
            Currency::Usdc { chain_id } => {
                self.settings.chains.iter().any(|c| c.chain_id == *chain_id)
            }
            Currency::Points => true,
        }
    }

    // ----- node to node -----
}

/// Why [`Shared::accept`] did not accept.
#[derive(Debug)]
enum Accept {
    Refused(Refusal),
    Error(RpcError),
}
