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
//! | this one | the task: calls, node-to-node requests on `/agora/payments/1.0.0`, settlement gossip; redb tables `hs_pay_challenges`, `hs_pay_nonces`, `hs_pay_receipts`, `hs_pay_channels`, `hs_pay_settlements` |
//! | [`wallet`] | the node's secp256k1 wallet key (`wallet.key`) |
//!
//! **Money is never lost nor counted twice.** A credential is accepted under one lock: the
//! challenge is unpaid and `(payer, nonce)` unused (both in memory, loaded from redb at start),
//! then the receipt, the nonce and the paid challenge are written in **one** redb transaction,
//! and only then is the answer sent; a crash before the commit leaves nothing, after it
//! everything. A channel is one record per side; the payee's node writes each accepted voucher
//! (nonce and total) before it answers, under the channel's lock, so payments on a channel are
//! serial and a replayed or reordered voucher finds the last nonce. The payer's node keeps the
//! voucher it sent but has no answer for (`pending`): if the payee accepted it (the payee's
//! refusal of the next one says so), it is counted then, never paid again.
//!
//! Signature checks (secp256k1 recovery, Ed25519) run on the per-call tasks, never on the
//! service task. Bounds: [`Settings`] (open challenges, receipts, channels, settlement
//! log); past them a new challenge, payment or channel is refused with −32003 and nothing held
//! is dropped, except the settlement log, which keeps the newest records.

pub mod wallet;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_hyperspace::jsonrpc::{RpcCode, RpcError};
use agora_hyperspace::payments as methods;
use agora_hyperspace::payments::assets::{EXACT_SCHEME, UsdcAsset};
use agora_hyperspace::payments::challenge::Challenge;
use agora_hyperspace::payments::channel::{Channel, ChannelError, Currency, Status, Voucher};
use agora_hyperspace::payments::credential::{Credential, Receipt, Refusal, check};
use agora_hyperspace::payments::params::{
    ChallengeParams, OpenParams, PayParams, close_channel_id, verify_credential,
};
use agora_hyperspace::payments::settlement::{self, Record};
use agora_hyperspace::payments::{Amount, amount_json, eip712, hex0x};
use ed25519_dalek::{Signer as _, SigningKey};
use libp2p::PeerId;
use libp2p::request_response::ResponseChannel;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::service::{Counters, PeerLink, Unanswered, internal, invalid, spawn_call};
use super::{now_ms, random_hex};
use crate::call::{Call, Principal};
use crate::config::Config;
use crate::mesh;
use crate::routes::{self, CallRoute, Delivery, EventKey, EventRoute, Sink};
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
    Peer {
        /// The requesting node.
        peer: PeerId,
        /// The request's bytes.
        data: Vec<u8>,
        /// Where the response goes.
        channel: ResponseChannel<Vec<u8>>,
    },
    /// A settlement envelope (verified by the gate) from a settlement topic.
    Settlement(Vec<u8>),
    /// The settlement log (`GET /hyperspace/settlements`).
    Settlements(oneshot::Sender<Value>),
    /// Charge the price of a priced tool (`tool.invoke`, `POST /pay/tools/{id}/invoke`).
    Charge(Charge),
    /// Report the service's state (`/status` `payments`).
    Status(oneshot::Sender<Value>),
}

impl Input {
    fn peer(r: routes::Request) -> Self {
        Self::Peer {
            peer: r.peer,
            data: r.data,
            channel: r.channel,
        }
    }
}

/// The calls this service answers (`micropayments.*`).
pub fn call_route(tx: &mpsc::Sender<Input>) -> CallRoute {
    CallRoute {
        prefixes: &["micropayments."],
        methods: &[&methods::METHODS],
        sink: Sink::new(tx.clone(), Delivery::Wait, |c| Some(Input::Call(c))),
    }
}

/// The mesh events this service owns: the settlement topics (a full queue loses a copy of a
/// record; the payee keeps its own) and requests on `/agora/payments/1.0.0`.
pub fn event_routes(tx: &mpsc::Sender<Input>) -> Vec<EventRoute> {
    vec![
        EventRoute::new(
            EventKey::TopicPrefix(settlement::SETTLEMENTS_PREFIX),
            tx,
            Delivery::DropWhenFull,
            |e| routes::gossip(e).map(|g| Input::Settlement(g.data)),
        ),
        EventRoute::new(
            EventKey::Proto(mesh::Proto::Payments),
            tx,
            Delivery::Wait,
            |e| routes::request(e).map(Input::peer),
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

/// A request between nodes (JSON, tag `op`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
enum PayRequest {
    /// Open `channel` (the payer's record) at the payee.
    Open { channel: Channel },
    /// A voucher for a channel the requester pays.
    Pay { voucher: Voucher },
    /// Close a channel.
    Close {
        #[serde(rename = "channelId")]
        channel_id: String,
    },
}

/// An answer between nodes.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
enum PayResponse {
    Opened,
    #[serde(rename_all = "camelCase")]
    Paid {
        nonce: u64,
        #[serde(with = "agora_hyperspace::payments::amount_serde")]
        spent: Amount,
    },
    #[serde(rename_all = "camelCase")]
    Closed {
        #[serde(with = "agora_hyperspace::payments::amount_serde")]
        total_spent: Amount,
        #[serde(with = "agora_hyperspace::payments::amount_serde")]
        refund: Amount,
    },
    /// Refused: the JSON-RPC code, message and data the payer's node passes on, plus the
    /// channel's last nonce and total when it is known (so that the payer can resume).
    #[serde(rename_all = "camelCase")]
    Refused {
        code: i32,
        message: String,
        data: Value,
        last_nonce: Option<u64>,
        #[serde(default, with = "agora_hyperspace::payments::amount_serde::option")]
        spent: Option<Amount>,
    },
}

impl PayResponse {
    /// The error a caller gets for an answer that is not the one expected: a refusal passes on
    /// its code, message and data; anything else is an internal error.
    fn into_error(self) -> RpcError {
        match self {
            Self::Refused {
                code,
                message,
                data,
                ..
            } => RpcError::from_code(RpcCode(code))
                .with_message(message)
                .with_data(data),
            other => internal(format!("unexpected answer {other:?}")),
        }
    }
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
            Input::Peer {
                peer,
                data,
                channel,
            } => {
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
/// Example 3, else −32602; `data.reason` always.
fn channel_error(e: &ChannelError) -> RpcError {
    match e {
        ChannelError::BudgetExceeded {
            remaining,
            requested,
            limit,
        } => RpcError::from_code(RpcCode::BUDGET_EXCEEDED)
            .with_message(e.to_string())
            .with_data(json!({
                "reason": e.reason(),
                "remaining": amount_json(*remaining),
                "requested": amount_json(*requested),
                "limit": amount_json(*limit),
            })),
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

    async fn call(
        self: &Arc<Self>,
        principal: &Principal,
        method: &str,
        params: &Value,
    ) -> Result<Value, RpcError> {
        match method {
            methods::CHALLENGE => {
                let p = ChallengeParams::parse(params).map_err(|e| invalid(e.0))?;
                let resource = p
                    .resource
                    .clone()
                    .unwrap_or_else(|| methods::CHALLENGE.to_owned());
                let c = self
                    .issue(&resource, p.price_points, p.price_usdc, p.payee_address)
                    .await?;
                Ok(c.to_wire())
            }
            methods::VERIFY => {
                let raw = verify_credential(params).map_err(|e| invalid(e.0))?;
                let cred = Credential::decode(raw).map_err(|r| refused(&r))?;
                let receipt = self.accept(&cred, None).await.map_err(|r| match r {
                    Accept::Refused(r) => refused(&r),
                    Accept::Error(e) => e,
                })?;
                Ok(json!({
                    "accepted": true,
                    "receiptId": receipt.receipt_id,
                    "amount": receipt.amount.parse::<Amount>().map_or(Value::Null, amount_json),
                    "payer": receipt.payer,
                    "network": receipt.network,
                    "receipt": receipt,
                }))
            }
            methods::CHANNEL_OPEN => {
                let default_chain = self.settings.chains.first().map(|c| c.chain_id);
                let p = OpenParams::parse(params, default_chain).map_err(|e| invalid(e.0))?;
                self.open(p, session_of(principal)).await
            }
            methods::CHANNEL_PAY if params.get("voucher").is_some_and(Value::is_object) => {
                let voucher: Voucher = serde_json::from_value(params["voucher"].clone())
                    .map_err(|e| invalid(format!("voucher: {e}")))?;
                self.pay_with_voucher(voucher).await
            }
            methods::CHANNEL_PAY => {
                let p = PayParams::parse(params).map_err(|e| invalid(e.0))?;
                self.pay(principal, p).await
            }
            methods::CHANNEL_CLOSE => {
                let id = close_channel_id(params).map_err(|e| invalid(e.0))?;
                self.close(principal, &id).await
            }
            _ => Err(RpcError::method_not_found()
                .with_data(Value::String(format!("unknown method {method:?}")))),
        }
    }

    /// Issues a challenge for `resource` (USDC to `pay_to`, else the wallet) and keeps it.
    async fn issue(
        &self,
        resource: &str,
        price_points: Option<Amount>,
        price_usdc: Option<Amount>,
        pay_to: Option<alloy_primitives::Address>,
    ) -> Result<Challenge, RpcError> {
        let mut random = [0u8; 48];
        getrandom::fill(&mut random).map_err(|_| internal("no system randomness"))?;
        let now = now_ms();
        let pay_to = pay_to.or_else(|| eip712::parse_address(&self.wallet_address));
        let c = Challenge::new(
            random,
            resource,
            price_points,
            price_usdc,
            pay_to,
            &self.me,
            &self.settings.chains,
            now,
            u64::try_from(self.settings.challenge_ttl.as_millis()).unwrap_or(u64::MAX),
        );
        let mut dropped = Vec::new();
        {
            let mut held = self
                .challenges
                .lock()
                .map_err(|_| internal("challenge table poisoned"))?;
            if held.len() >= self.settings.max_challenges {
                // Expired unpaid challenges go first; paid ones stay (they answer replays).
                held.retain(|id, i| {
                    let keep = i.paid.is_some() || i.challenge.expires_at > now;
                    if !keep {
                        dropped.push(id.clone());
                    }
                    keep
                });
                if held.len() >= self.settings.max_challenges {
                    return Err(busy("too many open payment challenges"));
                }
            }
            held.insert(
                c.challenge_id.clone(),
                Issued {
                    challenge: c.clone(),
                    paid: None,
                },
            );
        }
        let mut rows: Vec<(PayTable, String, Option<String>)> = dropped
            .into_iter()
            .map(|id| (PayTable::Challenges, id, None))
            .collect();
        let row = serde_json::to_string(&Issued {
            challenge: c.clone(),
            paid: None,
        })
        .map_err(internal)?;
        rows.push((PayTable::Challenges, c.challenge_id.clone(), Some(row)));
        self.store.put_payments(rows).await.map_err(internal)?;
        self.count("challenges");
        Ok(c)
    }

    /// Accepts `cred` for its challenge (or, when it names none, `fallback`: a challenge made
    /// for the request it pays, as the 402 flow does for x402 clients): checks, then commits
    /// the receipt, the nonce and the paid challenge together. Publishes the settlement record.
    async fn accept(
        self: &Arc<Self>,
        cred: &Credential,
        fallback: Option<Challenge>,
    ) -> Result<Receipt, Accept> {
        let challenge = match &cred.challenge_id {
            Some(id) => {
                let held = self
                    .challenges
                    .lock()
                    .ok()
                    .and_then(|c| c.get(id).cloned())
                    .ok_or(Accept::Refused(Refusal::UnknownChallenge))?;
                if held.paid.is_some() {
                    return Err(Accept::Refused(Refusal::ChallengeUsed));
                }
                held.challenge
            }
            None => fallback.ok_or(Accept::Refused(Refusal::UnknownChallenge))?,
        };
        let now = now_ms();
        let verified = {
            let (cred, challenge) = (cred.clone(), challenge.clone());
            tokio::task::spawn_blocking(move || check(&cred, &challenge, now, Self::peer_key))
                .await
                .map_err(|e| Accept::Error(internal(e)))?
                .map_err(Accept::Refused)?
        };
        let nonce_key = format!("{}\0{}", verified.payer, hex0x(&cred.nonce()));
        let receipt = Receipt::new(cred, &verified, &challenge, now);
        let _commit = self.commit.lock().await;
        if self.nonces.lock().is_ok_and(|n| n.contains(&nonce_key)) {
            self.count("replays_refused");
            return Err(Accept::Refused(Refusal::Replayed));
        }
        let paid = self
            .challenges
            .lock()
            .ok()
            .and_then(|c| c.get(&challenge.challenge_id).map(|i| i.paid.is_some()));
        if paid == Some(true) {
            return Err(Accept::Refused(Refusal::ChallengeUsed));
        }
        if self
            .receipts
            .lock()
            .map_or(true, |r| r.len() >= self.settings.max_receipts)
        {
            return Err(Accept::Error(busy("the receipt store is full")));
        }
        let issued = Issued {
            challenge: challenge.clone(),
            paid: Some(receipt.receipt_id.clone()),
        };
        let rows = vec![
            (
                PayTable::Receipts,
                receipt.receipt_id.clone(),
                Some(serde_json::to_string(&receipt).map_err(|e| Accept::Error(internal(e)))?),
            ),
            (
                PayTable::Nonces,
                nonce_key.clone(),
                Some(
                    json!({ "receiptId": receipt.receipt_id, "validBefore": match &cred.payer {
                        agora_hyperspace::payments::credential::Payer::Evm(a) => a.valid_before,
                        agora_hyperspace::payments::credential::Payer::Points(p) => p.valid_before,
                    } })
                    .to_string(),
                ),
            ),
            (
                PayTable::Challenges,
                challenge.challenge_id.clone(),
                Some(serde_json::to_string(&issued).map_err(|e| Accept::Error(internal(e)))?),
            ),
        ];
        self.store
            .put_payments(rows)
            .await
            .map_err(|e| Accept::Error(internal(e)))?;
        if let Ok(mut n) = self.nonces.lock() {
            n.insert(nonce_key);
        }
        if let Ok(mut r) = self.receipts.lock() {
            r.insert(receipt.receipt_id.clone());
        }
        if let Ok(mut c) = self.challenges.lock() {
            c.insert(challenge.challenge_id.clone(), issued);
        }
        drop(_commit);
        self.count("payments_accepted");
        let domain = (verified.scheme == EXACT_SCHEME)
            .then(|| {
                challenge
                    .usdc_assets()
                    .into_iter()
                    .find(|a| a.network() == verified.network)
                    .map(|a| (a.chain_id, a.contract.to_checksum(None), a.name, a.version))
            })
            .flatten();
        let record = Record::Payment {
            receipt_id: receipt.receipt_id.clone(),
            at: now,
            amount: receipt.amount.clone(),
            domain,
            credential: receipt.credential.clone(),
        };
        let s = Arc::clone(self);
        tokio::spawn(async move { s.settle(&record).await });
        Ok(receipt)
    }

    /// Hands `record` to the settler, keeps it in the log and publishes it on its round's
    /// topic.
    async fn settle(&self, record: &Record) {
        match self.settler.submit(record) {
            Settled::Recorded => {}
            Settled::Submitted { transaction } => {
                tracing::info!(transaction, id = record.id(), "payment settled");
            }
            Settled::Failed { reason } => {
                tracing::warn!(
                    reason,
                    id = record.id(),
                    "a settlement failed; it stays recorded"
                );
            }
        }
        self.log_settlement(record, &self.me).await;
        let Ok(d) = serde_json::to_string(record) else {
            return;
        };
        let topic = settlement::topic(settlement::round_of(record.at()));
        match agora_hyperspace::envelope::sign(&self.key, &topic, now_ms(), &random_hex(16), &d) {
            Ok(env) => {
                let _ = self
                    .mesh
                    .send(mesh::Command::Publish {
                        topic,
                        data: env.into_bytes(),
                    })
                    .await;
                self.count("settlements_published");
            }
            Err(e) => tracing::warn!(error = %e, "cannot sign a settlement record"),
        }
    }

    /// Appends `record` (published by `by`) to the bounded log, durably; a record already in
    /// the log is not added again.
    async fn log_settlement(&self, record: &Record, by: &str) {
        let id = record.id();
        let entry = json!({ "id": id, "publishedBy": by, "round": settlement::round_of(record.at()), "record": record });
        let (seq, evicted) = {
            let Ok(mut log) = self.settlements.lock() else {
                return;
            };
            if log.iter().any(|(_, v)| v["id"] == id) {
                return;
            }
            let seq = self.settlement_seq.fetch_add(1, Ordering::AcqRel);
            log.push_back((seq, entry.clone()));
            let mut evicted = Vec::new();
            while log.len() > self.settings.max_settlements {
                if let Some((s, _)) = log.pop_front() {
                    evicted.push(s);
                }
            }
            (seq, evicted)
        };
        let mut rows: Vec<(PayTable, String, Option<String>)> = evicted
            .into_iter()
            .map(|s| (PayTable::Settlements, format!("{s:020}"), None))
            .collect();
        rows.push((
            PayTable::Settlements,
            format!("{seq:020}"),
            Some(entry.to_string()),
        ));
        if let Err(e) = self.store.put_payments(rows).await {
            tracing::warn!(error = %e, "cannot write the settlement log");
        }
    }

    fn settlement_log(&self) -> Value {
        let log: Vec<Value> = self
            .settlements
            .lock()
            .map(|l| l.iter().rev().map(|(_, v)| v.clone()).collect())
            .unwrap_or_default();
        json!({ "settlements": log, "settler": self.settler.name() })
    }

    /// A settlement envelope from gossip: kept when the payer's signature holds.
    async fn settlement_received(&self, data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(env) = agora_hyperspace::envelope::Envelope::parse(text) else {
            return;
        };
        if env.from == self.me {
            return;
        }
        let Ok(record) = serde_json::from_str::<Record>(env.d_json) else {
            self.count("settlements_malformed");
            return;
        };
        match record.check(Self::peer_key) {
            Ok(()) => {
                self.log_settlement(&record, env.from).await;
                self.count("settlements_received");
            }
            Err(e) => {
                tracing::debug!(error = %e, from = env.from, "a settlement record was refused");
                self.count("settlements_refused");
            }
        }
    }

    /// Subscribes to the current and next settlement rounds, and leaves older ones.
    async fn follow_rounds(&self) {
        let now = settlement::round_of(now_ms());
        let want = [now, now + 1];
        let (join, leave) = {
            let Ok(mut r) = self.rounds.lock() else {
                return;
            };
            let join: Vec<u64> = want.iter().copied().filter(|w| !r.contains(w)).collect();
            let leave: Vec<u64> = r.iter().copied().filter(|x| *x + 1 < now).collect();
            r.retain(|x| *x + 1 >= now);
            r.extend(&join);
            (join, leave)
        };
        for round in join {
            let _ = self
                .mesh
                .send(mesh::Command::Subscribe(settlement::topic(round)))
                .await;
        }
        for round in leave {
            let _ = self
                .mesh
                .send(mesh::Command::Unsubscribe(settlement::topic(round)))
                .await;
        }
    }

    // ----- charges (priced tools) -----

    /// −32002 "Payment Required" with a fresh challenge for `c` in `data.challenge`, and the
    /// reason of a refused payment when there was one.
    async fn payment_required(&self, c: &Charge, why: Option<RpcError>) -> RpcError {
        let challenge = match self
            .issue(&c.resource, c.price.points, c.price.usdc, None)
            .await
        {
            Ok(ch) => ch.to_wire(),
            Err(e) => return e,
        };
        let (reason, message) = why.map_or_else(
            || {
                (
                    "payment-required".to_owned(),
                    format!("Payment Required: {} has a price", c.resource),
                )
            },
            |e| {
                let reason = e
                    .data
                    .as_ref()
                    .and_then(|d| d.get("reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("refused")
                    .to_owned();
                (reason, e.message)
            },
        );
        RpcError::from_code(RpcCode::BUDGET_EXCEEDED)
            .with_message(message)
            .with_data(json!({ "reason": reason, "challenge": challenge }))
    }

    /// Takes payment for one use of `c.resource`: a credential (for a challenge of this
    /// resource, or matched against its price), a payment on a channel to `c.payee` that this
    /// node pays, or a voucher already accepted on a channel this node is paid on.
    async fn charge(self: &Arc<Self>, c: &Charge) -> Result<Value, RpcError> {
        let Some(payment) = &c.payment else {
            return Err(self.payment_required(c, None).await);
        };
        if let Some(raw) = payment.get("credential") {
            let cred = match Credential::decode(raw) {
                Ok(cred) => cred,
                Err(r) => return Err(self.payment_required(c, Some(refused(&r))).await),
            };
            if let Some(id) = &cred.challenge_id {
                let resource = self
                    .challenges
                    .lock()
                    .ok()
                    .and_then(|m| m.get(id).map(|i| i.challenge.resource.clone()));
                if resource.as_deref().is_some_and(|r| r != c.resource) {
                    return Err(self
                        .payment_required(c, Some(refused(&Refusal::ChallengeMismatch)))
                        .await);
                }
            }
            let mut random = [0u8; 48];
            getrandom::fill(&mut random).map_err(|_| internal("no system randomness"))?;
            let fallback = Challenge::new(
                random,
                &c.resource,
                c.price.points,
                c.price.usdc,
                eip712::parse_address(&self.wallet_address),
                &self.me,
                &self.settings.chains,
                now_ms(),
                u64::try_from(self.settings.challenge_ttl.as_millis()).unwrap_or(u64::MAX),
            );
            return match self.accept(&cred, Some(fallback)).await {
                Ok(receipt) => Ok(json!({
                    "receiptId": receipt.receipt_id,
                    "amount": receipt.amount,
                    "payer": receipt.payer,
                    "paymentResponse": receipt.payment_response(),
                })),
                Err(Accept::Refused(r)) => Err(self.payment_required(c, Some(refused(&r))).await),
                Err(Accept::Error(e)) => Err(e),
            };
        }
        let channel_id = payment
            .get("channelId")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("payment is {credential} or {channelId}"))?;
        let cell = self
            .channel(channel_id)
            .ok_or_else(|| invalid(format!("no channel {channel_id}")))?;
        if let Some(nonce) = payment.get("nonce").and_then(Value::as_u64) {
            // Between nodes: the caller's node paid this node on the channel; redeem it once.
            let mut held = cell.lock().await;
            let payer_ok = c.from.as_deref() == Some(held.channel.payer_peer.as_str());
            if held.role != Role::Payee || !payer_ok {
                return Err(invalid(
                    "this node is not paid on that channel by the caller's node",
                ));
            }
            let price = Self::price_in(&c.price, &held.channel.currency)?;
            let mut next = held.clone();
            let slot = next
                .recent
                .iter_mut()
                .find(|(n, _, _)| *n == nonce)
                .ok_or_else(|| invalid(format!("no accepted voucher {nonce} on the channel")))?;
            let paid: Amount = slot.1.parse().unwrap_or(0);
            if slot.2 || paid < price {
                return Err(invalid(format!(
                    "voucher {nonce} was already redeemed or pays less than {price}"
                )));
            }
            slot.2 = true;
            self.persist(&next).await?;
            *held = next;
            return Ok(
                json!({ "channelId": channel_id, "nonce": nonce, "amount": amount_json(paid) }),
            );
        }
        let (price, payee_ok) = {
            let held = cell.lock().await;
            (
                Self::price_in(&c.price, &held.channel.currency)?,
                held.channel.payee == c.payee && held.role != Role::Payee,
            )
        };
        if !payee_ok {
            return Err(invalid(format!(
                "channel {channel_id} does not pay {} from this node",
                c.payee
            )));
        }
        let paid = self
            .pay(
                &c.principal,
                PayParams {
                    channel_id: channel_id.to_owned(),
                    amount: price,
                    memo: c
                        .resource
                        .chars()
                        .take(agora_hyperspace::payments::params::MAX_MEMO)
                        .collect(),
                },
            )
            .await?;
        Ok(json!({ "channelId": channel_id, "nonce": paid["nonce"], "amount": amount_json(price) }))
    }

    /// The price in a channel's currency.
    fn price_in(
        price: &agora_hyperspace::payments::Price,
        currency: &Currency,
    ) -> Result<Amount, RpcError> {
        match currency {
            Currency::Usdc { .. } => price.usdc,
            Currency::Points => price.points,
        }
        .filter(|p| *p > 0)
        .ok_or_else(|| invalid(format!("the price has no {} amount", currency.label())))
    }

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

    async fn open(
        self: &Arc<Self>,
        p: OpenParams,
        session: Option<String>,
    ) -> Result<Value, RpcError> {
        if !self.accepts(&p.currency) {
            return Err(invalid("this node does not accept that chain"));
        }
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).map_err(|_| internal("no system randomness"))?;
        let channel = Channel::open(
            &self.payer_of(&p.currency),
            &self.me,
            &p.payee,
            p.currency,
            p.budget,
            salt,
            now_ms(),
        );
        let role = if p.payee == self.me {
            Role::Both
        } else {
            match self
                .request(
                    &p.payee,
                    &PayRequest::Open {
                        channel: channel.clone(),
                    },
                )
                .await?
            {
                PayResponse::Opened => Role::Payer,
                other => return Err(other.into_error()),
            }
        };
        let held = Held {
            channel,
            role,
            pending: None,
            session,
            recent: VecDeque::new(),
        };
        self.persist(&held).await?;
        let wire = held.channel.to_wire();
        self.insert_channel(held)?;
        self.count("channels_opened");
        Ok(wire)
    }

    fn may_act(principal: &Principal, held: &Held) -> bool {
        match principal {
            Principal::Session(s) => held.session.as_deref() == Some(s.as_str()),
            Principal::Local | Principal::ApiKey => true,
        }
    }

    /// Signs the voucher `(nonce, cumulative)` of `channel` with this node's key for its
    /// currency.
    fn sign_voucher(
        &self,
        channel: &Channel,
        nonce: u64,
        cumulative: Amount,
        amount: Amount,
        memo: &str,
    ) -> Result<Voucher, RpcError> {
        let bytes = channel
            .signed_bytes(nonce, cumulative)
            .ok_or_else(|| internal("bad channel id"))?;
        let signature = match channel.currency {
            Currency::Usdc { .. } => {
                let digest = alloy_primitives::B256::from_slice(&bytes);
                hex0x(&eip712::sign(&self.wallet, &digest).map_err(internal)?)
            }
            Currency::Points => hex0x(&self.key.sign(&bytes).to_bytes()),
        };
        Ok(Voucher {
            channel_id: channel.channel_id.clone(),
            nonce,
            cumulative,
            amount,
            memo: memo.to_owned(),
            signature,
        })
    }

    async fn pay(self: &Arc<Self>, principal: &Principal, p: PayParams) -> Result<Value, RpcError> {
        let cell = self
            .channel(&p.channel_id)
            .ok_or_else(|| invalid(format!("no channel {}", p.channel_id)))?;
        let mut held = cell.lock().await;
        if !Self::may_act(principal, &held) || held.role == Role::Payee {
            return Err(invalid(format!(
                "this node does not pay channel {}",
                p.channel_id
            )));
        }
        for _attempt in 0..2 {
            let (nonce, cumulative) = held.channel.next(p.amount).map_err(|e| channel_error(&e))?;
            let voucher = self.sign_voucher(&held.channel, nonce, cumulative, p.amount, &p.memo)?;
            if held.role == Role::Both {
                held.channel
                    .check_signature(&voucher, Self::peer_key)
                    .map_err(|e| channel_error(&e))?;
                let mut next = held.clone();
                next.channel
                    .accept(&voucher)
                    .map_err(|e| channel_error(&e))?;
                self.persist(&next).await?;
                *held = next;
                self.count("vouchers_paid");
                return Ok(
                    json!({ "nonce": nonce, "remaining": amount_json(held.channel.remaining()) }),
                );
            }
            // Remember what is sent before sending: a crash or a lost answer leaves it pending.
            let mut sent = held.clone();
            sent.pending = Some(voucher.clone());
            self.persist(&sent).await?;
            *held = sent;
            let payee = held.channel.payee.clone();
            match self
                .request(
                    &payee,
                    &PayRequest::Pay {
                        voucher: voucher.clone(),
                    },
                )
                .await
            {
                Ok(PayResponse::Paid { nonce: n, spent }) if n == nonce && spent == cumulative => {
                    let mut next = held.clone();
                    next.channel
                        .accept(&voucher)
                        .map_err(|e| channel_error(&e))?;
                    next.pending = None;
                    self.persist(&next).await?;
                    *held = next;
                    self.count("vouchers_paid");
                    return Ok(
                        json!({ "nonce": nonce, "remaining": amount_json(held.channel.remaining()) }),
                    );
                }
                Ok(PayResponse::Refused {
                    last_nonce,
                    spent,
                    code,
                    message,
                    data,
                }) => {
                    // The payee already has this nonce, with the total of this very voucher:
                    // an earlier send of it landed. Count it, then pay again with the next.
                    if let (Some(last), Some(spent)) = (last_nonce, spent)
                        && last == nonce
                        && spent == cumulative
                        && data["reason"] == "duplicate-nonce"
                    {
                        let mut next = held.clone();
                        next.channel
                            .accept(&voucher)
                            .map_err(|e| channel_error(&e))?;
                        next.pending = None;
                        self.persist(&next).await?;
                        *held = next;
                        self.count("vouchers_resynced");
                        continue;
                    }
                    let mut next = held.clone();
                    next.pending = None;
                    self.persist(&next).await?;
                    *held = next;
                    return Err(RpcError::from_code(RpcCode(code))
                        .with_message(message)
                        .with_data(data));
                }
                Ok(other) => return Err(other.into_error()),
                Err(e) => return Err(e),
            }
        }
        Err(internal("the payee and this node disagree on the channel"))
    }

    /// The payee's side of a voucher: the payer's signature, then the channel's checks, then
    /// the new state written, all under the channel's lock (held by the caller).
    async fn take_voucher(&self, held: &mut Held, voucher: &Voucher) -> Result<(), RpcError> {
        // The channel's state first (closed, nonce, budget: no signature needed to refuse),
        // then the signature of a voucher that would be accepted.
        let mut next = held.clone();
        let checked = next
            .channel
            .accept(voucher)
            .and_then(|()| held.channel.check_signature(voucher, Self::peer_key));
        if let Err(e) = checked {
            self.count("vouchers_refused");
            return Err(channel_error(&e));
        }
        next.recent
            .push_back((voucher.nonce, voucher.amount.to_string(), false));
        while next.recent.len() > RECENT_VOUCHERS {
            next.recent.pop_front();
        }
        self.persist(&next).await?;
        *held = next;
        self.count("vouchers_accepted");
        Ok(())
    }

    /// `channel.pay` with a voucher the payer signed itself (an agent holding its own key, or
    /// its node), given to the payee's node.
    async fn pay_with_voucher(&self, voucher: Voucher) -> Result<Value, RpcError> {
        let cell = self
            .channel(&voucher.channel_id)
            .ok_or_else(|| invalid(format!("no channel {}", voucher.channel_id)))?;
        let mut held = cell.lock().await;
        if held.role == Role::Payer {
            return Err(invalid(format!(
                "this node is not paid on channel {}",
                voucher.channel_id
            )));
        }
        self.take_voucher(&mut held, &voucher)
            .await
            .map_err(|mut e| {
                if let Some(Value::Object(d)) = e.data.as_mut() {
                    d.insert("lastNonce".into(), json!(held.channel.nonce));
                    d.insert("spent".into(), amount_json(held.channel.spent));
                }
                e
            })?;
        Ok(
            json!({ "nonce": held.channel.nonce, "remaining": amount_json(held.channel.remaining()) }),
        )
    }

    async fn close(self: &Arc<Self>, principal: &Principal, id: &str) -> Result<Value, RpcError> {
        let cell = self
            .channel(id)
            .ok_or_else(|| invalid(format!("no channel {id}")))?;
        let mut held = cell.lock().await;
        if !Self::may_act(principal, &held) {
            return Err(invalid(format!("no channel {id}")));
        }
        let (total, refund) = match held.role {
            Role::Payer => match self
                .request(
                    &held.channel.payee.clone(),
                    &PayRequest::Close {
                        channel_id: id.to_owned(),
                    },
                )
                .await?
            {
                PayResponse::Closed {
                    total_spent,
                    refund,
                } => {
                    let mut next = held.clone();
                    next.channel.spent = total_spent.max(next.channel.spent);
                    next.channel.close(now_ms());
                    next.pending = None;
                    self.persist(&next).await?;
                    *held = next;
                    (total_spent, refund)
                }
                other => return Err(other.into_error()),
            },
            Role::Payee | Role::Both => {
                let r = self.close_as_payee(&mut held).await?;
                if held.role == Role::Payee {
                    // Best effort: tell the payer's node (it learns it at its next payment
                    // otherwise, from the refusal).
                    let (payer, cid) = (held.channel.payer_peer.clone(), id.to_owned());
                    let s = Arc::clone(self);
                    tokio::spawn(async move {
                        let _ = s
                            .request(&payer, &PayRequest::Close { channel_id: cid })
                            .await;
                    });
                }
                r
            }
        };
        self.count("channels_closed");
        Ok(
            json!({ "totalSpent": amount_json(total), "refund": amount_json(refund), "channelId": id }),
        )
    }

    /// Closes a channel this node is paid on, durably, and publishes its settlement record.
    async fn close_as_payee(
        self: &Arc<Self>,
        held: &mut Held,
    ) -> Result<(Amount, Amount), RpcError> {
        let was_open = held.channel.status == Status::Open;
        let mut next = held.clone();
        let (total, refund) = next.channel.close(now_ms());
        if was_open {
            self.persist(&next).await?;
        }
        *held = next;
        if was_open {
            let voucher = held.channel.last_signature.as_ref().map(|sig| Voucher {
                channel_id: held.channel.channel_id.clone(),
                nonce: held.channel.nonce,
                cumulative: held.channel.spent,
                amount: 0,
                memo: String::new(),
                signature: sig.clone(),
            });
            let record = Record::ChannelClose {
                channel: held.channel.clone(),
                voucher,
                at: held.channel.closed_at.unwrap_or_else(now_ms),
            };
            let s = Arc::clone(self);
            tokio::spawn(async move { s.settle(&record).await });
        }
        Ok((total, refund))
    }

    // ----- node to node -----

    async fn request(&self, peer: &str, request: &PayRequest) -> Result<PayResponse, RpcError> {
        let target: PeerId = peer
            .parse()
            .map_err(|_| invalid(format!("{peer:?} is not a PeerId")))?;
        let data = serde_json::to_vec(request).map_err(internal)?;
        match self
            .link
            .request(target, data, self.settings.peer_timeout)
            .await
        {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| peer_unavailable(peer, &format!("bad answer: {e}"))),
            Err(e @ Unanswered::ShuttingDown) => Err(internal(e)),
            Err(Unanswered::Failed(why)) => Err(peer_unavailable(peer, &why)),
        }
    }

    async fn respond(&self, channel: ResponseChannel<Vec<u8>>, response: &PayResponse) {
        let Ok(data) = serde_json::to_vec(response) else {
            return;
        };
        self.link.respond(channel, data).await;
    }

    async fn peer_request(self: &Arc<Self>, peer: &PeerId, data: &[u8]) -> PayResponse {
        let refuse = |e: RpcError, held: Option<&Held>| PayResponse::Refused {
            code: e.code.0,
            message: e.message,
            data: e.data.unwrap_or(Value::Null),
            last_nonce: held.map(|h| h.channel.nonce),
            spent: held.map(|h| h.channel.spent),
        };
        let request: PayRequest = match serde_json::from_slice(data) {
            Ok(r) => r,
            Err(e) => return refuse(invalid(format!("bad payment request: {e}")), None),
        };
        let from = peer.to_string();
        match request {
            PayRequest::Open { channel } => {
                if channel.payee != self.me || channel.payer_peer != from {
                    return refuse(
                        invalid("the channel names another payee or payer node"),
                        None,
                    );
                }
                if channel.status != Status::Open || channel.spent != 0 || channel.nonce != 0 {
                    return refuse(invalid("a new channel is open with nothing spent"), None);
                }
                if !self.accepts(&channel.currency) {
                    return refuse(invalid("this node does not accept that chain"), None);
                }
                let payer_ok = match channel.currency {
                    Currency::Usdc { .. } => eip712::parse_address(&channel.payer).is_some(),
                    Currency::Points => channel.payer == from,
                };
                if !payer_ok || channel.id_bytes().is_none() {
                    return refuse(invalid("the channel's payer or id is malformed"), None);
                }
                let held = Held {
                    channel,
                    role: Role::Payee,
                    pending: None,
                    session: None,
                    recent: VecDeque::new(),
                };
                if let Err(e) = self.insert_channel(held.clone()) {
                    return refuse(e, None);
                }
                match self.persist(&held).await {
                    Ok(()) => PayResponse::Opened,
                    Err(e) => {
                        if let Ok(mut m) = self.channels.lock() {
                            m.remove(&held.channel.channel_id);
                        }
                        refuse(e, None)
                    }
                }
            }
            PayRequest::Pay { voucher } => {
                let Some(cell) = self.channel(&voucher.channel_id) else {
                    return refuse(invalid(format!("no channel {}", voucher.channel_id)), None);
                };
                let mut held = cell.lock().await;
                if held.role != Role::Payee || held.channel.payer_peer != from {
                    return refuse(
                        invalid("this node is not paid on that channel by you"),
                        None,
                    );
                }
                match self.take_voucher(&mut held, &voucher).await {
                    Ok(()) => PayResponse::Paid {
                        nonce: held.channel.nonce,
                        spent: held.channel.spent,
                    },
                    Err(e) => refuse(e, Some(&held)),
                }
            }
            PayRequest::Close { channel_id } => {
                let Some(cell) = self.channel(&channel_id) else {
                    return refuse(invalid(format!("no channel {channel_id}")), None);
                };
                let mut held = cell.lock().await;
                let party = held.channel.payer_peer == from || held.channel.payee == from;
                if !party {
                    return refuse(invalid("not a party of that channel"), None);
                }
                match held.role {
                    Role::Payee => match self.close_as_payee(&mut held).await {
                        Ok((total_spent, refund)) => PayResponse::Closed {
                            total_spent,
                            refund,
                        },
                        Err(e) => refuse(e, Some(&held)),
                    },
                    // The payee closed it: the payer's node records the close.
                    Role::Payer | Role::Both => {
                        let mut next = held.clone();
                        let (total_spent, refund) = next.channel.close(now_ms());
                        if let Err(e) = self.persist(&next).await {
                            return refuse(e, Some(&held));
                        }
                        *held = next;
                        PayResponse::Closed {
                            total_spent,
                            refund,
                        }
                    }
                }
            }
        }
    }
}

/// What a settler did with a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Recorded only (no chain).
    Recorded,
    /// Submitted to a chain as `transaction`.
    Submitted {
        /// The transaction hash.
        transaction: String,
    },
    /// The submission failed.
    Failed {
        /// Why.
        reason: String,
    },
}

/// Moves what accepted payments and closed channels owe onto a chain: an EIP-3009
/// `transferWithAuthorization` with the credential's signature, or a channel's last voucher
/// to an escrow contract. Called once per record by the payee's node, off the call that
/// accepted it.
pub trait Settler: Send + Sync + std::fmt::Debug {
    /// The settler's name (`/hyperspace/settlements` `settler`).
    fn name(&self) -> &'static str;
    /// Settles `record`.
    fn submit(&self, record: &Record) -> Settled;
}

/// The settler of a node without a chain: it records, and submits nothing. A USDC receipt then
/// means "a valid, unreplayed authorization for this amount", not "the money moved".
#[derive(Debug, Default, Clone, Copy)]
pub struct NoChainSettler;

impl Settler for NoChainSettler {
    fn name(&self) -> &'static str {
        "none"
    }

    fn submit(&self, _record: &Record) -> Settled {
        Settled::Recorded
    }
}

/// Why [`Shared::accept`] did not accept.
#[derive(Debug)]
enum Accept {
    Refused(Refusal),
    Error(RpcError),
}
