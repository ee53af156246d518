//! The Agent Name Service behind the AGTP face (draft-hood-agtp-discovery-00): the request
//! handler for DISCOVER (§3), DESCRIBE on the name server itself, and the governance-signed
//! lifecycle methods that (de)register agents (§4.2–4.3), with the index kept in memory,
//! persisted in the store and audited.
//!
//! The reference implementation's clients are served as they are (`docs/agtp-ans.md`, "The
//! reference implementation's clients"): a target-less DISCOVER without `Agent-ID` answers the
//! server manifest, `DISCOVER /population` answers the reference coordinator's shape (see
//! [`agora_agtp::discover`]), a DESCRIBE whose `Agent-ID` is a registered agent answers that
//! agent's document, other DISCOVER paths answer 460. A claimed Authority-Scope is checked
//! against the caller's registered document ([`agora_agtp::scope::effective`]), and a refresh
//! applies the lifecycle state the host declares ([`agora_agtp::refresh::host_transition`]).
//!
//! Concurrency: DISCOVER takes a read lock on the index for the search only; ranking, signing
//! and federation run outside it. Lifecycle changes and refresh results are serialised by one
//! async registrar lock: each is made durable in the store (entry and audit record in one
//! transaction) and then applied to the index under a short write lock, before the answer is
//! sent, so the next DISCOVER already sees it.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use agora_agtp::codec::{
    CONTENT_TYPE_AGTP_JSON, CONTENT_TYPE_IDENTITY, CONTENT_TYPE_MANIFEST, Request, Response,
};
use agora_agtp::discover::{self, Params, QUERY_SCOPE, REGISTER_SCOPE, Target};
use agora_agtp::federation::{self, FORWARDED_HEADER};
use agora_agtp::governance::{Command, Verifier};
use agora_agtp::index::{Availability, Entry, Index, Scratch};
use agora_agtp::manifest::{Lifecycle, Manifest, Transition};
use agora_agtp::rank::Weights;
use agora_agtp::refresh::{AfterFailure, RefreshConfig, Schedule};
use agora_agtp::routing;
use agora_agtp::scope::{self, Scope, Scopes, UnregisteredClaims};
use agora_agtp::signature::{AnsSigningKey, AnsVerifyingKey, verify_result_with};
use agora_agtp::{AgtpError, BadRequest, ScopeViolationCode, Status};
use agora_bucket::{Decision, RateConfig, RateLimiter};
use serde_json::{Map, Value, json};

use crate::faces::agtp::client::{self, Transport};
use crate::faces::agtp::listener::Handler;
use crate::store::{Store, StoreError};

/// Methods the name server answers.
pub const METHODS: [&str; 7] = [
    "DISCOVER",
    "DESCRIBE",
    "ACTIVATE",
    "DEACTIVATE",
    "REINSTATE",
    "REVOKE",
    "DEPRECATE",
];

/// A federated name server.
#[derive(Clone, Debug)]
pub struct Peer {
    /// Its name in `federation_path`.
    pub name: String,
    /// `host:port`.
    pub endpoint: String,
    /// How to reach it.
    pub transport: Transport,
    /// Its pinned signing key.
    pub key: AnsVerifyingKey,
}

/// How the name server behaves.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Name in `federation_path` and in its own manifest.
    pub name: String,
    /// Status code for a missing scope.
    pub scope_code: ScopeViolationCode,
    /// `rank_score` weights.
    pub weights: Weights,
    /// Per-Agent-ID DISCOVER limits.
    pub rate: RateConfig,
    /// Refresh intervals.
    pub refresh: RefreshConfig,
    /// Deadline of one refresh DESCRIBE.
    pub refresh_timeout: Duration,
    /// Federation peers.
    pub peers: Vec<Peer>,
    /// How long a DISCOVER waits for the peers.
    pub federation_deadline: Duration,
    /// What an Authority-Scope claimed by a caller with no registered document means.
    pub unregistered_claims: UnregisteredClaims,
    /// `DISCOVER /population` without an Authority-Scope is answered (as the reference
    /// coordinator does by default) instead of refused for want of `discovery:query`.
    pub population_open: bool,
}

/// The header the reference's clients name the caller in when `Agent-ID` names something else
/// (or nothing).
pub const AGENT_IDENTITY_HEADER: &str = "Agent-Identity";

/// Most agents named in an ambiguous-name answer.
const MAX_NAMED: usize = 5;

/// A successful answer: its body and media type.
struct Answer {
    body: Value,
    content_type: &'static str,
}

impl Answer {
    fn agtp(body: Value) -> Self {
        Self {
            body,
            content_type: CONTENT_TYPE_AGTP_JSON,
        }
    }

    /// The draft's envelope around `result`.
    fn enveloped(request: &Request, result: Value) -> Self {
        let mut body = Map::new();
        body.insert("status".into(), json!(200));
        body.insert(
            "task_id".into(),
            json!(request.headers.task_id().unwrap_or_default()),
        );
        body.insert("result".into(), result);
        Self::agtp(Value::Object(body))
    }
}

/// A stored agent: the manifest as registered plus the registry's state.
fn stored_entry(e: &Entry) -> String {
    json!({
        "manifest": e.manifest.raw,
        "state": e.state.as_str(),
        "registered_ms": e.registered_ms,
        "updated_ms": e.updated_ms,
    })
    .to_string()
}

/// Reads a stored agent back.
fn load_entry(json: &str) -> Result<Entry, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let raw = v.get("manifest").cloned().ok_or("no manifest")?;
    let manifest = Manifest::from_value(raw).map_err(|e| e.to_string())?;
    let state = v
        .get("state")
        .and_then(Value::as_str)
        .ok_or("no state")?
        .parse::<Lifecycle>()?;
    let ms = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or_default();
    Ok(Entry {
        manifest,
        state,
        availability: Availability::Available,
        registered_ms: ms("registered_ms"),
        updated_ms: ms("updated_ms"),
    })
}

/// Milliseconds since the Unix epoch.
use crate::clock::now_ms;

mod listing;

/// The Agent Name Service.
pub struct Ans {
    settings: Settings,
    signer: AnsSigningKey,
    index: RwLock<Index>,
    limiter: Mutex<RateLimiter>,
    governance: Mutex<Verifier>,
    schedule: Mutex<Schedule>,
    registrar: tokio::sync::Mutex<()>,
    audit_seq: AtomicU64,
    store: Store,
    refresh_wake: tokio::sync::Notify,
    /// Search working memory, one per concurrent DISCOVER (taken and put back).
    scratch: Mutex<Vec<Scratch>>,
    clock: fn() -> u64,
}

impl std::fmt::Debug for Ans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ans")
            .field("name", &self.settings.name)
            .field("key_id", &self.signer.key_id())
            .finish_non_exhaustive()
    }
}

impl Ans {
    /// The name server over `store`, with the registered agents read back from it (a blocking
    /// read: call it off the async threads or at start-up).
    pub fn open(
        settings: Settings,
        signer: AnsSigningKey,
        governance: Vec<AnsVerifyingKey>,
        store: Store,
    ) -> Result<Self, StoreError> {
        let now = now_ms();
        let mut index = Index::new();
        let mut schedule = Schedule::new(settings.refresh);
        for (id, json) in store.ans_agents()? {
            match load_entry(&json) {
                Ok(entry) => {
                    if entry.state == Lifecycle::Active && entry.manifest.endpoint.is_some() {
                        schedule.track(&id, now);
                    }
                    index.upsert(entry);
                }
                Err(e) => tracing::warn!(agent = %id, error = %e, "ANS: stored agent skipped"),
            }
        }
        let next_seq = store.ans_audit()?.last().map_or(1, |(s, _)| s + 1);
        tracing::info!(
            agents = index.len(),
            searchable = index.searchable(),
            "ANS index rebuilt from the store"
        );
        Ok(Self {
            limiter: Mutex::new(RateLimiter::new(settings.rate)),
            governance: Mutex::new(Verifier::new(governance)),
            schedule: Mutex::new(schedule),
            settings,
            signer,
            index: RwLock::new(index),
            registrar: tokio::sync::Mutex::new(()),
            audit_seq: AtomicU64::new(next_seq),
            store,
            refresh_wake: tokio::sync::Notify::new(),
            scratch: Mutex::new(Vec::new()),
            clock: now_ms,
        })
    }

    /// The name server's name (its `Server-ID`).
    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// The signing key's public half.
    pub fn verifying_key(&self) -> AnsVerifyingKey {
        self.signer.verifying_key()
    }

    /// Registered agents (any state).
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// The Active agents as directory records (the directory's `ans` feed); `node` is this
    /// node's PeerId.
    pub fn directory_feed(&self, node: &str) -> Vec<agora_directory::FeedItem> {
        let now = (self.clock)();
        let key_id = self.signer.key_id().to_owned();
        self.read()
            .iter()
            .filter_map(|e| listing::item(e, node, &key_id, now))
            .collect()
    }

    /// Nothing registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.index
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn schedule(&self) -> std::sync::MutexGuard<'_, Schedule> {
        self.schedule
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Loads agents straight into the index, bypassing governance and the store (benchmarks
    /// and tests that need a large index quickly).
    pub fn preload(&self, entries: impl IntoIterator<Item = Entry>) {
        let mut index = self.write();
        for e in entries {
            index.upsert(e);
        }
    }

    /// Answers one request (a caller without any identity is rate-limited as one anonymous
    /// caller; the listener's handler uses [`Ans::answer_from`]).
    pub async fn answer(&self, request: &Request) -> Response {
        self.answer_from(request, None).await
    }

    /// Answers one request from `remote` (the key anonymous callers are rate-limited by).
    pub async fn answer_from(&self, request: &Request, remote: Option<IpAddr>) -> Response {
        let task_id = request.headers.task_id().map(str::to_owned);
        match self.dispatch(request, remote).await {
            Ok(answer) => {
                let mut response = Response::new(Status::OK);
                response.body = answer.body.to_string().into_bytes();
                response.headers.insert("Content-Type", answer.content_type);
                response
            }
            Err(e) => {
                if matches!(
                    e,
                    AgtpError::ScopeViolation { .. } | AgtpError::ScopeClaimInvalid { .. }
                ) {
                    tracing::info!(
                        agent = request.headers.agent_id().unwrap_or("-"),
                        method = %request.method,
                        error = %e,
                        "ANS: scope violation"
                    );
                }
                Response::from_error(&e, task_id.as_deref())
            }
        }
    }

    async fn dispatch(
        &self,
        request: &Request,
        remote: Option<IpAddr>,
    ) -> Result<Answer, AgtpError> {
        match request.method.as_str() {
            "DISCOVER" => self.discover(request, remote).await,
            "DESCRIBE" => self.describe(request),
            m => match Transition::from_method(m) {
                Some(_) => self.lifecycle(request).await.map(Answer::agtp),
                None => Err(AgtpError::MethodViolation(m.to_owned())),
            },
        }
    }

    /// The scopes the caller's registered document declares, if the name server holds one.
    fn declared_scopes(&self, caller: Option<&str>) -> Option<Scopes> {
        let caller = caller?;
        let index = self.read();
        let entry = index.get(caller)?;
        let mut declared = Scopes::new();
        for token in &entry.manifest.authority_scope_categories {
            if let Ok(s) = Scope::parse(token) {
                declared.push(s);
            }
        }
        Some(declared)
    }

    /// The caller's claimed Authority-Scope, checked against its registered document (base
    /// draft -09; see [`scope::effective`]; an unregistered caller's claim as `unregistered`
    /// says); then `scope` must be among them unless `open`.
    fn require_scope(
        &self,
        request: &Request,
        caller: Option<&str>,
        scope: &str,
        open: bool,
        unregistered: UnregisteredClaims,
    ) -> Result<(), AgtpError> {
        let claimed = request.headers.authority_scope()?;
        let declared = self.declared_scopes(caller);
        let effective = scope::effective(claimed, declared.as_ref(), unregistered)?;
        if open || effective.is_some_and(|s| s.grants(scope)) {
            Ok(())
        } else {
            Err(AgtpError::ScopeViolation {
                required: scope.to_owned(),
                code: self.settings.scope_code,
            })
        }
    }

    async fn discover(
        &self,
        request: &Request,
        remote: Option<IpAddr>,
    ) -> Result<Answer, AgtpError> {
        let body = request.json_body()?;
        let target = Target::resolve(request.path(), body.as_ref())?;
        let agent_id = request.headers.agent_id();
        let population = match target {
            Target::Other(_) => return Err(target.violation()),
            // The reference's server-level DISCOVER: no caller, no query, no body.
            Target::Root if agent_id.is_none() && request.query().is_none() && body.is_none() => {
                return Ok(Answer {
                    body: self.manifest(),
                    content_type: CONTENT_TYPE_MANIFEST,
                });
            }
            Target::Root => false,
            Target::Population => true,
        };
        let caller = match agent_id {
            Some(id) => Some(id),
            None if population => request.headers.get(AGENT_IDENTITY_HEADER),
            None => return Err(BadRequest::MissingHeader("Agent-ID").into()),
        };
        let open = population
            && self.settings.population_open
            && !request.headers.contains("Authority-Scope");
        self.require_scope(
            request,
            caller,
            QUERY_SCOPE,
            open,
            self.settings.unregistered_claims,
        )?;
        let now = (self.clock)();
        let anonymous;
        let limit_key = match (caller, remote) {
            (Some(c), _) => c,
            (None, Some(ip)) => {
                anonymous = format!("anonymous@{ip}");
                anonymous.as_str()
            }
            (None, None) => "anonymous",
        };
        let decision = self
            .limiter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .check(limit_key, now);
        if let Decision::Limited {
            retry_after_ms,
            anomaly,
        } = decision
        {
            if anomaly {
                tracing::warn!(agent = %limit_key, "ANS anomaly: high-frequency DISCOVER, rate limit reached");
            }
            return Err(AgtpError::RateLimited { retry_after_ms });
        }
        // The text after `?`: the parameters in the target's query string (the reference
        // clients send them there; `docs/agtp-ans.md`).
        let params = Params::from_parts(request.query(), body.as_ref(), &target)?;
        let weights = &self.settings.weights;
        let mut scratch = self
            .scratch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            .unwrap_or_default();
        let (local, routed, digest) = {
            let index = self.read();
            (
                discover::evaluate_with(&index, &params, weights, &mut scratch),
                routing::route(&index, &params, weights, now),
                index.digest(),
            )
        };
        self.scratch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(scratch);
        let forwarded = request.headers.contains(FORWARDED_HEADER);
        let query_id = discover::query_id(&params, caller.unwrap_or_default(), &digest);
        // Federation carries the caller's Agent-ID: an anonymous query stays local.
        let (total, mut items, path) = match caller {
            Some(caller)
                if !self.settings.peers.is_empty()
                    && federation::should_forward(local.items.len(), &params, forwarded) =>
            {
                let peers = self.ask_peers(request, caller, &params).await;
                let merged = federation::merge(&self.settings.name, local, peers, params.limit);
                let path = if merged.federation_path.len() > 1 {
                    merged.federation_path
                } else {
                    Vec::new()
                };
                (merged.total_matches, merged.items, path)
            }
            _ => (local.total_matches, local.items, Vec::new()),
        };
        let routing_value = routed.map(|r| {
            if let Some(pref) = params.preferred_agent.as_deref() {
                routing::apply(&mut items, &r, pref);
                items.truncate(params.limit);
            }
            r.routing
        });
        if population {
            discover::annotate_for_population(&mut items);
        }
        let mut result = discover::result_object(&query_id, total, items, &path, routing_value);
        if population {
            let mut body = discover::population_body(request.headers.task_id(), &params, result);
            self.signer.sign_result(&mut body);
            return Ok(Answer::agtp(Value::Object(body)));
        }
        self.signer.sign_result(&mut result);
        Ok(Answer::agtp(discover::response_body(
            request.headers.task_id(),
            result,
        )))
    }

    /// Forwards the query to every peer at once and keeps what verified within the deadline.
    async fn ask_peers(
        &self,
        request: &Request,
        agent_id: &str,
        params: &Params,
    ) -> Vec<(String, discover::Outcome)> {
        let mut forward = Request::new("DISCOVER")
            .with_header("Agent-ID", agent_id)
            .with_header(FORWARDED_HEADER, &self.settings.name)
            .with_json_body(&json!({"method": "DISCOVER", "parameters": params.to_value()}));
        for (name, value) in request.headers.iter() {
            if name.eq_ignore_ascii_case("Authority-Scope")
                || name.eq_ignore_ascii_case("Principal-ID")
                || name.eq_ignore_ascii_case("Owner-ID")
                || name.eq_ignore_ascii_case("Task-ID")
            {
                forward.headers.insert(name, value);
            }
        }
        let deadline = self.settings.federation_deadline;
        let asks = self.settings.peers.iter().map(|peer| {
            let forward = &forward;
            async move {
                let answer = tokio::time::timeout(deadline, async {
                    client::request(&peer.endpoint, &peer.transport, forward, deadline).await
                })
                .await;
                let response = match answer {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => {
                        tracing::info!(peer = %peer.name, error = %e, "ANS federation: the peer failed");
                        return None;
                    }
                    Err(_) => {
                        tracing::info!(
                            peer = %peer.name,
                            deadline_ms = deadline.as_secs_f64() * 1e3,
                            "ANS federation: no answer in time"
                        );
                        return None;
                    }
                };
                match self.peer_result(peer, &response, params) {
                    Ok(outcome) => Some((peer.name.clone(), outcome)),
                    Err(e) => {
                        tracing::warn!(peer = %peer.name, "ANS federation: result refused: {e}");
                        None
                    }
                }
            }
        });
        futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    fn peer_result(
        &self,
        peer: &Peer,
        response: &Response,
        params: &Params,
    ) -> Result<discover::Outcome, String> {
        if response.status != Status::OK {
            return Err(format!("status {}", response.status));
        }
        let text = std::str::from_utf8(&response.body).map_err(|e| e.to_string())?;
        let body = agora_agtp::jcs::parse(text).map_err(|e| e.to_string())?;
        let result = body.get("result").ok_or("no result object")?;
        verify_result_with(std::slice::from_ref(&peer.key), result)
            .map_err(|e| format!("signature: {e}"))?;
        federation::peer_outcome(result, params, &self.settings.weights)
    }

    fn describe(&self, request: &Request) -> Result<Answer, AgtpError> {
        let path = request.path();
        let bare = request.headers.accepts(CONTENT_TYPE_IDENTITY);
        if let Some(key) = path.strip_prefix("/agents/") {
            let doc = self.agent_document(key)?;
            return Ok(if bare {
                Answer {
                    body: doc,
                    content_type: CONTENT_TYPE_IDENTITY,
                }
            } else {
                Answer::enveloped(request, doc)
            });
        }
        if path != "/" {
            return Err(AgtpError::EndpointViolation(format!(
                "DESCRIBE {:?} is not served here (paths: / and /agents/{{id or name}})",
                path.chars().take(128).collect::<String>()
            )));
        }
        // The reference's address form: `Agent-ID` names the agent described.
        if let Some(id) = request.headers.agent_id()
            && id != self.settings.name
            && let Some(doc) = self.registered_document(id)
        {
            return Ok(Answer {
                body: doc,
                content_type: CONTENT_TYPE_IDENTITY,
            });
        }
        if request.headers.accepts(CONTENT_TYPE_MANIFEST) {
            return Ok(Answer {
                body: self.manifest(),
                content_type: CONTENT_TYPE_MANIFEST,
            });
        }
        Ok(Answer::enveloped(request, self.manifest()))
    }

    /// A registered agent's document as registered (or last refreshed), with the registry's
    /// state under both names (`lifecycle_state`, draft; `status`, base draft -09).
    fn registered_document(&self, id: &str) -> Option<Value> {
        let index = self.read();
        let entry = index.get(id)?;
        let mut doc = entry.manifest.raw.clone();
        if let Some(o) = doc.as_object_mut() {
            o.insert("lifecycle_state".into(), json!(entry.state.as_str()));
            o.insert("status".into(), json!(entry.state.as_status()));
        }
        Some(doc)
    }

    /// `/agents/{key}`: by canonical id, else by name (`agent_label`, ASCII case-insensitive)
    /// when exactly one registered agent has it.
    fn agent_document(&self, key: &str) -> Result<Value, AgtpError> {
        if let Some(doc) = self.registered_document(key) {
            return Ok(doc);
        }
        let named: Vec<String> = self
            .read()
            .iter()
            .filter(|e| !key.is_empty() && e.manifest.agent_label.eq_ignore_ascii_case(key))
            .map(|e| e.manifest.canonical_id.clone())
            .take(MAX_NAMED + 1)
            .collect();
        match named.as_slice() {
            [id] => self
                .registered_document(id)
                .ok_or_else(|| AgtpError::NotFound(format!("no agent {key:?} is registered"))),
            [] => Err(AgtpError::NotFound(format!(
                "no agent {:?} is registered",
                key.chars().take(128).collect::<String>()
            ))),
            many => Err(AgtpError::Conflict(format!(
                "the name {key:?} is registered for more than one agent ({}{}); address it by canonical id",
                many.iter()
                    .take(MAX_NAMED)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                if many.len() > MAX_NAMED { ", …" } else { "" }
            ))),
        }
    }

    /// The name server's own manifest: what it is, its ranking weights and its public key.
    pub fn manifest(&self) -> Value {
        let w = &self.settings.weights;
        let key = self.signer.verifying_key();
        let (agents, searchable) = {
            let index = self.read();
            (index.len(), index.searchable())
        };
        json!({
            "document_type": "agtp-manifest",
            "canonical_id": self.settings.name,
            "agent_label": "Agora Agent Name Service",
            "job_description": "Agent Name Service: governed, ranked and signed agent discovery (draft-hood-agtp-discovery-00)",
            "lifecycle_state": "Active",
            "supported_methods": METHODS,
            "authority_scope_categories": [QUERY_SCOPE, REGISTER_SCOPE],
            "ans_keys": { key.key_id(): key.to_jwk() },
            "signature_algorithm": agora_agtp::signature::ALGORITHM,
            "ranking": {
                "rank_score": "trust_tier_weight * normalized_trust_tier + behavioral_trust_weight * behavioral_trust_score + capability_match_weight * capability_match_score",
                "normalized_trust_tier": "(3 - trust_tier) / 2",
                "weights": {
                    "trust_tier": w.trust_tier_weight,
                    "behavioral_trust": w.behavioral_trust_weight,
                    "capability_match": w.capability_match_weight,
                },
                "tie_break": "canonical_id ascending",
            },
            "scope_violation_code": self.settings.scope_code.status().0,
            "rate_limit": {"per_second": self.settings.rate.rate, "burst": self.settings.rate.burst},
            "federation_peers": self.settings.peers.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            "registered_agents": agents,
            "searchable_agents": searchable,
        })
    }

    async fn lifecycle(&self, request: &Request) -> Result<Value, AgtpError> {
        // The governance platform is authenticated by its signature, not by a registered
        // document: its claim is taken as asserted whatever `unregistered_claims` says.
        self.require_scope(
            request,
            request.headers.agent_id(),
            REGISTER_SCOPE,
            false,
            UnregisteredClaims::Asserted,
        )?;
        let body = request.json_body()?;
        let now = (self.clock)();
        let command = self
            .governance
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .verify(&request.method, body.as_ref(), now)?;
        let caller = request.headers.agent_id().unwrap_or_default().to_owned();
        let mut result = self.apply(&command, &caller, now).await?;
        result.insert(
            "task_id".into(),
            json!(request.headers.task_id().unwrap_or_default()),
        );
        Ok(Value::Object(result))
    }

    /// Applies a verified lifecycle command: durable first, then visible.
    async fn apply(
        &self,
        cmd: &Command,
        caller: &str,
        now: u64,
    ) -> Result<Map<String, Value>, AgtpError> {
        let _registrar = self.registrar.lock().await;
        let id = cmd.canonical_id.as_str();
        let current = self.read().get(id).cloned();
        let from = current.as_ref().map(|e| e.state);
        let to = cmd.transition.apply(from)?;
        // A same-state call with no new manifest (or the same one) changes nothing.
        let noop = from == Some(to)
            && cmd
                .manifest
                .as_ref()
                .is_none_or(|raw| current.as_ref().is_some_and(|e| &e.manifest.raw == raw));
        let entry = match (&cmd.manifest, current) {
            (Some(raw), current) => {
                let manifest = Manifest::from_value(raw.clone())?;
                if manifest.trust_tier > 3 || manifest.trust_tier == 0 {
                    return Err(AgtpError::Unprocessable(
                        "trust_tier must be 1, 2 or 3".into(),
                    ));
                }
                Entry {
                    manifest,
                    state: to,
                    availability: Availability::Available,
                    registered_ms: current.as_ref().map_or(now, |c| c.registered_ms),
                    updated_ms: now,
                }
            }
            (None, Some(mut e)) => {
                e.state = to;
                e.updated_ms = now;
                e
            }
            (None, None) => {
                return Err(AgtpError::NotFound(format!(
                    "no agent {id:?} is registered"
                )));
            }
        };

        let mut result = Map::new();
        result.insert("status".into(), json!(200));
        let mut r = Map::new();
        r.insert("canonical_id".into(), json!(id));
        r.insert("lifecycle_state".into(), json!(to.as_str()));
        r.insert(
            "previous_state".into(),
            from.map_or(Value::Null, |s| json!(s.as_str())),
        );
        r.insert("noop".into(), json!(noop));
        r.insert("searchable".into(), json!(to == Lifecycle::Active));
        if !noop {
            let seq = self.audit_seq.fetch_add(1, Ordering::SeqCst);
            let audit = json!({
                "seq": seq,
                "at_ms": now,
                "method": cmd.transition.method(),
                "canonical_id": id,
                "from": from.map(Lifecycle::as_str),
                "to": to.as_str(),
                "key_id": cmd.key_id,
                "agent_id": caller,
                "reason": cmd.reason,
                "issued_at": cmd.issued_at_ms,
            });
            self.store
                .put_ans_agent(id, Some(&stored_entry(&entry)), seq, &audit.to_string())
                .await
                .map_err(|e| {
                    AgtpError::ServerError(format!("the registry could not be saved: {e}"))
                })?;
            let has_endpoint = entry.manifest.endpoint.is_some();
            self.write().upsert(entry);
            {
                let mut schedule = self.schedule();
                if to == Lifecycle::Active && has_endpoint {
                    schedule.track(id, now);
                } else {
                    schedule.untrack(id);
                }
            }
            self.refresh_wake.notify_one();
            tracing::info!(
                agent = %id, method = cmd.transition.method(), from = ?from, to = %to,
                key_id = %cmd.key_id, "ANS registry changed"
            );
            r.insert("audit_seq".into(), json!(seq));
        }
        result.insert("result".into(), Value::Object(r));
        Ok(result)
    }

    /// What the dashboard shows of the name service: agents by lifecycle state and trust
    /// tier, the 50 most recently changed, and the last 20 audit records (a blocking read of
    /// those 20 rows).
    pub fn dashboard(&self) -> Value {
        let (by_state, by_tier, recent, total) = {
            let index = self.read();
            let mut by_state: std::collections::BTreeMap<&'static str, u64> =
                std::collections::BTreeMap::new();
            let mut by_tier: std::collections::BTreeMap<u8, u64> =
                std::collections::BTreeMap::new();
            let mut recent: Vec<&Entry> = Vec::new();
            for e in index.iter() {
                *by_state.entry(e.state.as_str()).or_default() += 1;
                *by_tier.entry(e.manifest.trust_tier).or_default() += 1;
                recent.push(e);
            }
            recent.sort_by_key(|e| std::cmp::Reverse(e.updated_ms));
            let recent: Vec<Value> = recent
                .into_iter()
                .take(50)
                .map(|e| {
                    json!({
                        "agent_id": e.manifest.canonical_id,
                        "label": e.manifest.agent_label,
                        "org": e.manifest.org_domain,
                        "state": e.state.as_str(),
                        "trust_tier": e.manifest.trust_tier,
                        "updated_ms": e.updated_ms,
                    })
                })
                .collect();
            (by_state, by_tier, recent, index.len())
        };
        let audit: Vec<Value> = self
            .store
            .ans_audit_tail(20)
            .unwrap_or_default()
            .into_iter()
            .map(|(seq, v)| {
                let record: Value = serde_json::from_str(&v).unwrap_or(Value::Null);
                json!({ "seq": seq, "record": record })
            })
            .collect();
        json!({
            "name": self.settings.name,
            "agents": total,
            "by_state": by_state,
            "by_tier": by_tier.into_iter().map(|(t, n)| (t.to_string(), n)).collect::<std::collections::BTreeMap<_, _>>(),
            "recent": recent,
            "audit": audit,
        })
    }

    /// The audit log, oldest first (a blocking read).
    pub fn audit(&self) -> Result<Vec<Value>, StoreError> {
        Ok(self
            .store
            .ans_audit()?
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_str(&v).ok())
            .collect())
    }

    /// Re-describes the agents whose refresh is due until `shutdown`.
    pub async fn run_refresh(self: Arc<Self>) {
        loop {
            let now = (self.clock)();
            let next = self.schedule().next_due();
            let wait = next.map_or(Duration::from_secs(3600), |due| {
                Duration::from_millis(due.saturating_sub(now))
            });
            if !wait.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(wait.min(Duration::from_secs(3600))) => {}
                    () = self.refresh_wake.notified() => continue,
                }
            }
            let due = self.schedule().due((self.clock)(), 64);
            let jobs = due.iter().map(|id| self.refresh_one(id));
            futures::future::join_all(jobs).await;
        }
    }

    async fn refresh_one(&self, id: &str) {
        let endpoint = self
            .read()
            .get(id)
            .filter(|e| e.state == Lifecycle::Active)
            .and_then(|e| e.manifest.endpoint.clone());
        let Some(endpoint) = endpoint else {
            self.schedule().untrack(id);
            return;
        };
        let outcome = self.describe_agent(id, &endpoint).await;
        let now = (self.clock)();
        let _registrar = self.registrar.lock().await;
        match outcome {
            Ok(Described::Document(doc)) => {
                let Some(mut entry) = self.read().get(id).cloned() else {
                    return;
                };
                let host = agora_agtp::refresh::host_transition(&doc, entry.state);
                let declared = ["status", "lifecycle_state"]
                    .iter()
                    .find_map(|k| doc.get(*k).and_then(Value::as_str))
                    .map(|s| s.chars().take(64).collect::<String>())
                    .unwrap_or_default();
                let merged = merge_document(&entry.manifest.raw, doc, id);
                match Manifest::from_value(merged) {
                    Ok(m) => {
                        entry.manifest = m;
                        entry.updated_ms = now;
                        entry.availability = Availability::Available;
                        match host {
                            None => {
                                if let Err(e) = self
                                    .store
                                    .refresh_ans_agent(id, &stored_entry(&entry))
                                    .await
                                {
                                    tracing::warn!(agent = %id, error = %e, "ANS refresh: not saved");
                                }
                                self.write().upsert(entry);
                                self.schedule().succeeded(id, now);
                            }
                            Some(t) => self.apply_host_state(entry, t, &declared, now).await,
                        }
                    }
                    Err(e) => {
                        self.refresh_failed(id, &format!("unusable DESCRIBE document: {e}"), now)
                            .await;
                    }
                }
            }
            Ok(Described::RateLimited(retry_after_ms)) => {
                self.write().set_availability(
                    id,
                    Availability::RateLimited {
                        until_ms: now.saturating_add(retry_after_ms),
                    },
                );
                self.schedule().succeeded(id, now);
            }
            Err(e) => self.refresh_failed(id, &e, now).await,
        }
    }

    /// The host's DESCRIBE declares its agent out of service: the entry takes that state
    /// (durable with its audit record, then visible), leaves discovery and is no longer
    /// refreshed; only governance makes it Active again. Called with the registrar held.
    async fn apply_host_state(&self, mut entry: Entry, t: Transition, declared: &str, now: u64) {
        let id = entry.manifest.canonical_id.clone();
        let from = entry.state;
        let Ok(to) = t.apply(Some(from)) else {
            return;
        };
        entry.state = to;
        let seq = self.audit_seq.fetch_add(1, Ordering::SeqCst);
        let audit = json!({
            "seq": seq,
            "at_ms": now,
            "method": "REFRESH-STATE",
            "transition": t.method(),
            "canonical_id": id,
            "from": from.as_str(),
            "to": to.as_str(),
            "reason": format!("the host's DESCRIBE declares status {declared:?}"),
        });
        if let Err(e) = self
            .store
            .put_ans_agent(&id, Some(&stored_entry(&entry)), seq, &audit.to_string())
            .await
        {
            tracing::warn!(agent = %id, error = %e, "ANS refresh: state change not saved");
        }
        self.write().upsert(entry);
        self.schedule().untrack(&id);
        tracing::info!(
            agent = %id, from = %from, to = %to, host_status = %declared,
            "ANS registry changed: the host declares the agent out of service"
        );
    }

    async fn refresh_failed(&self, id: &str, why: &str, now: u64) {
        let after = self.schedule().failed(id, now);
        match after {
            AfterFailure::Retry(n) => {
                tracing::info!(agent = %id, failures = n, reason = why, "ANS refresh failed");
                self.write()
                    .set_availability(id, Availability::RefreshFailing(n));
            }
            AfterFailure::Remove => {
                let seq = self.audit_seq.fetch_add(1, Ordering::SeqCst);
                let from = self.read().get(id).map(|e| e.state.as_str());
                let audit = json!({
                    "seq": seq,
                    "at_ms": now,
                    "method": "REFRESH-REMOVE",
                    "canonical_id": id,
                    "from": from,
                    "to": null,
                    "reason": format!("{} consecutive DESCRIBE failures; last: {why}", agora_agtp::refresh::MAX_FAILURES),
                });
                if let Err(e) = self
                    .store
                    .put_ans_agent(id, None, seq, &audit.to_string())
                    .await
                {
                    tracing::warn!(agent = %id, error = %e, "ANS refresh: removal not saved");
                }
                self.write().remove(id);
                tracing::warn!(
                    agent = %id,
                    failures = agora_agtp::refresh::MAX_FAILURES,
                    reason = why,
                    "ANS notification: agent removed from the index after consecutive failed refreshes"
                );
            }
        }
    }

    async fn describe_agent(&self, id: &str, endpoint: &str) -> Result<Described, String> {
        let addr = endpoint_addr(endpoint)?;
        let host = client::split_host_port(&addr).map_err(|e| e.to_string())?.0;
        let transport =
            Transport::for_host(&host, false, false, &crate::faces::agtp::tls::Roots::WebPki)
                .map_err(|e| e.to_string())?;
        let request = Request::new("DESCRIBE")
            .with_header("Agent-ID", id)
            .with_header("Task-ID", format!("ans-refresh-{}", (self.clock)()));
        let timeout = self.settings.refresh_timeout;
        let response = client::request(&addr, &transport, &request, timeout)
            .await
            .map_err(|e| e.to_string())?;
        if response.status == Status::RATE_LIMITED {
            let retry = response
                .json_body()
                .ok()
                .flatten()
                .and_then(|b| b.pointer("/error/retry_after_ms").and_then(Value::as_u64))
                .unwrap_or(60_000);
            return Ok(Described::RateLimited(retry));
        }
        if response.status != Status::OK {
            return Err(format!("DESCRIBE answered {}", response.status));
        }
        let body = response
            .json_body()
            .map_err(|e| e.to_string())?
            .ok_or("DESCRIBE answered without a body")?;
        let doc = match body.get("result") {
            Some(r @ Value::Object(_)) => r.clone(),
            _ => body,
        };
        match doc {
            Value::Object(o) => Ok(Described::Document(o)),
            _ => Err("DESCRIBE answered something other than a JSON object".into()),
        }
    }
}

enum Described {
    Document(Map<String, Value>),
    RateLimited(u64),
}

/// `agtp://host:port/path`, `host:port` → `host:port` (port 4480 when absent).
fn endpoint_addr(endpoint: &str) -> Result<String, String> {
    let rest = endpoint
        .strip_prefix("agtp://")
        .or_else(|| endpoint.strip_prefix("AGTP://"))
        .unwrap_or(endpoint);
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(format!("endpoint {endpoint:?} has no host"));
    }
    let has_port = match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.contains(':'),
    };
    Ok(if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:4480")
    })
}

/// The refreshed manifest: the registered one with what the agent now declares on top (a field
/// the agent sends under either of its names replaces both). The canonical id and the
/// registry's lifecycle state are never taken from the agent.
fn merge_document(old: &Value, doc: Map<String, Value>, id: &str) -> Value {
    let mut merged = old.as_object().cloned().unwrap_or_default();
    for names in agora_agtp::manifest::FIELD_ALIASES {
        if names.iter().any(|n| doc.contains_key(*n))
            && !names.contains(&"canonical_id")
            && !names.contains(&"lifecycle_state")
        {
            for n in names {
                merged.remove(n);
            }
        }
    }
    for (k, v) in doc {
        if matches!(
            k.as_str(),
            "canonical_id" | "agent_id" | "lifecycle_state" | "status"
        ) {
            continue;
        }
        merged.insert(k, v);
    }
    merged.insert("canonical_id".into(), json!(id));
    merged.remove("agent_id");
    Value::Object(merged)
}

/// The AGTP listener's handler.
#[derive(Debug)]
pub struct AnsHandler(pub Arc<Ans>);

impl Handler for AnsHandler {
    fn handle(
        &self,
        request: Request,
        remote: SocketAddr,
    ) -> impl Future<Output = Response> + Send {
        let ans = Arc::clone(&self.0);
        async move { ans.answer_from(&request, Some(remote.ip())).await }
    }
}

/// Reads the name server's signing key from `<data>/ans-key.json`, or creates it.
pub fn load_or_create_key(data: &std::path::Path) -> Result<AnsSigningKey, String> {
    let path = data.join(KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => signing_key_from_jwk(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = generate_key(None)?;
            crate::keys::write_private(&path, private_jwk(&key).to_string().as_bytes())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(key)
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// File name of the name server's signing key in the data directory.
pub const KEY_FILE: &str = "ans-key.json";

/// A new random ES256 key; its key id is `kid` or derived from the public key.
pub fn generate_key(kid: Option<&str>) -> Result<AnsSigningKey, String> {
    loop {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| format!("no randomness: {e}"))?;
        let Ok(tmp) = AnsSigningKey::from_secret_bytes(&secret, "") else {
            continue;
        };
        let id = match kid {
            Some(k) => k.to_owned(),
            None => derived_key_id(&tmp.verifying_key()),
        };
        return AnsSigningKey::from_secret_bytes(&secret, id).map_err(|e| e.to_string());
    }
}

/// `ans-` and 16 hex digits of SHA-256 over the uncompressed public key.
pub fn derived_key_id(key: &AnsVerifyingKey) -> String {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(key.to_sec1_uncompressed());
    let mut s = String::from("ans-");
    for b in &d[..8] {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The private JWK of a key (`d` included): the key file format.
pub fn private_jwk(key: &AnsSigningKey) -> Value {
    use base64::Engine as _;
    let mut jwk = key.verifying_key().to_jwk();
    if let Some(o) = jwk.as_object_mut() {
        o.insert(
            "d".into(),
            json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.secret_bytes())),
        );
    }
    jwk
}

/// Reads a private JWK.
pub fn signing_key_from_jwk(text: &str) -> Result<AnsSigningKey, String> {
    use base64::Engine as _;
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let d = v
        .get("d")
        .and_then(Value::as_str)
        .ok_or("not a private JWK (no \"d\")")?;
    let kid = v
        .get("kid")
        .and_then(Value::as_str)
        .ok_or("the JWK has no \"kid\"")?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(d)
        .map_err(|e| format!("\"d\" is not base64url: {e}"))?;
    let secret: [u8; 32] = bytes
        .try_into()
        .map_err(|_| "\"d\" is not 32 bytes".to_owned())?;
    let key = AnsSigningKey::from_secret_bytes(&secret, kid).map_err(|e| e.to_string())?;
    let public = AnsVerifyingKey::from_jwk(&v).map_err(|e| e.to_string())?;
    if public.to_sec1_uncompressed() != key.verifying_key().to_sec1_uncompressed() {
        return Err("\"x\"/\"y\" do not belong to \"d\"".into());
    }
    Ok(key)
}

/// Reads a public JWK file (a private one is accepted too; only its public half is kept).
pub fn verifying_key_from_file(path: &std::path::Path) -> Result<AnsVerifyingKey, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    AnsVerifyingKey::from_jwk(&v).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_become_socket_addresses() {
        assert_eq!(
            endpoint_addr("agtp://127.0.0.1:9000/agents/x").unwrap(),
            "127.0.0.1:9000"
        );
        assert_eq!(endpoint_addr("127.0.0.1").unwrap(), "127.0.0.1:4480");
        assert_eq!(endpoint_addr("agtp://[::1]/a").unwrap(), "[::1]:4480");
        assert_eq!(endpoint_addr("[::1]:5").unwrap(), "[::1]:5");
        assert!(endpoint_addr("agtp:///x").is_err());
    }

    #[test]
    fn refreshed_documents_keep_the_id_and_the_registry_state() {
        let old = json!({"canonical_id": "a", "lifecycle_state": "Active", "job_description": "old", "supported_methods": ["QUERY"]});
        let doc = json!({"agent_id": "evil", "status": "retired", "description": "new"});
        let merged = merge_document(&old, doc.as_object().cloned().unwrap(), "a");
        assert_eq!(merged["canonical_id"], "a");
        assert_eq!(merged["lifecycle_state"], "Active");
        assert!(merged.get("job_description").is_none());
        assert_eq!(merged["description"], "new");
        assert_eq!(merged["supported_methods"], json!(["QUERY"]));
        assert!(merged.get("agent_id").is_none());
    }

    #[test]
    fn key_files_round_trip() {
        let key = generate_key(None).unwrap();
        assert!(key.key_id().starts_with("ans-"));
        let back = signing_key_from_jwk(&private_jwk(&key).to_string()).unwrap();
        assert_eq!(back.secret_bytes(), key.secret_bytes());
        assert_eq!(back.key_id(), key.key_id());
        assert!(signing_key_from_jwk(&key.verifying_key().to_jwk().to_string()).is_err());
    }
}
