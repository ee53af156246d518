//! The receive and send pipelines: validation, routing, deduplication, presence, whois answers,
//! the interaction lifecycle and automatic receipts, as one sans-IO state machine.
//!
//! Envelope page, "Validation order" steps 5–7; Peer Discovery page (whois responders); Delivery
//! page (receiver duties); reference behaviour: the Go reference runtime's router (what it does
//! per inbound envelope, and its send path). The router never performs IO: it returns what should be
//! delivered to local peers and what should be sent, and the node carries that out.
//!
//! Per inbound envelope, in order: stateless validation ([`crate::validate`](mod@crate::validate)); routing (a directed
//! envelope must address a local peer of its channel, else `not_target`); deduplication
//! ([`DedupWindow`]); then per kind:
//!
//! | kind | effect |
//! |---|---|
//! | greet | refresh remote presence; not delivered |
//! | whois request | answered by matching local peers (a directed one by the addressed peer even without a match); not delivered |
//! | whois response | refresh remote presence (and cache a rich catalog); delivered to the addressed peer |
//! | say | delivered to every local peer of the channel except the sender |
//! | capability | lifecycle when it has an `interaction_id`; directed → the target, else every local peer but the sender |
//! | direct, receipt, trace | lifecycle, then delivered to the addressed peer |
//!
//! Automatic receipts answer a `direct` addressed to a local peer that is expired (`expired`),
//! malformed (`rejected` + `malformed`), a duplicate (`duplicate`) or sent into a finished
//! interaction (`rejected` + `interaction_closed`). The router never sends `receipt(accepted)`:
//! accepting work is the agent's decision.

use std::borrow::Cow;

use crate::body::Body;
use crate::catalog::{CATALOG_EXT_KEY, Catalog, IdFilter, RichRequest, rich_catalog_json};
use crate::dedup::DedupWindow;
use crate::envelope::{Envelope, Kind, MAX_ENVELOPE_BYTES, OwnedEnvelope, RawEnvelope};
use crate::grammar::{is_channel, is_peer_id};
use crate::json::RawJson;
use crate::lifecycle::{Interactions, Outcome};
use crate::presence::{Peer, Presence, PresenceError};
use crate::reason::{ReasonCode, Rejection};
use crate::receipt::{ReceiptBody, ReceiptStatus};
use crate::validate::{Validated, ValidationPolicy, dedup_deadline, validate_raw};
use crate::whois::WhoisBody;

/// Supplies ids for envelopes the router creates (automatic receipts, whois responses).
pub trait IdSource {
    /// A fresh envelope id.
    fn next_id(&mut self) -> String;
}

/// Ids `<prefix>-<n>` from a counter; deterministic, for tests and tools.
#[derive(Clone, Debug, Default)]
pub struct CounterIds {
    prefix: String,
    next: u64,
}

impl CounterIds {
    /// A counter starting at 1.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            next: 0,
        }
    }
}

impl IdSource for CounterIds {
    fn next_id(&mut self) -> String {
        self.next += 1;
        format!("{}-{}", self.prefix, self.next)
    }
}

/// Ids in the RFC 4122 version-4 UUID form (the spec RECOMMENDS UUIDs), from injected randomness:
/// the caller supplies 16 random bytes per id, so the crate reads no entropy itself.
pub struct UuidIds<F: FnMut(&mut [u8; 16])> {
    fill: F,
}

impl<F: FnMut(&mut [u8; 16])> UuidIds<F> {
    /// Ids from `fill`, which must write 16 uniformly random bytes.
    pub fn new(fill: F) -> Self {
        Self { fill }
    }
}

impl<F: FnMut(&mut [u8; 16])> std::fmt::Debug for UuidIds<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UuidIds")
    }
}

impl<F: FnMut(&mut [u8; 16])> IdSource for UuidIds<F> {
    fn next_id(&mut self) -> String {
        let mut b = [0u8; 16];
        (self.fill)(&mut b);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let hex = hex::encode(b);
        format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    }
}

/// Router settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterConfig {
    /// Stateless validation policy.
    pub policy: ValidationPolicy,
    /// Greet interval in seconds (remote presence lives twice as long).
    pub greet_interval: i64,
    /// Most ids remembered by the deduplication window.
    pub dedup_capacity: usize,
    /// Most interactions tracked.
    pub interaction_capacity: usize,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            policy: ValidationPolicy::default(),
            greet_interval: crate::presence::DEFAULT_GREET_INTERVAL,
            dedup_capacity: crate::dedup::DEFAULT_DEDUP_CAPACITY,
            interaction_capacity: crate::lifecycle::DEFAULT_INTERACTION_CAPACITY,
        }
    }
}

/// Where a generated or sent envelope goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route<R> {
    /// To a local peer.
    Local(String),
    /// To every subscriber of the channel (the mesh broadcast topic).
    Broadcast,
    /// To the node a remote peer was learned from.
    Remote(R),
}

/// An envelope the router created, and where it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply<R> {
    /// The envelope.
    pub envelope: OwnedEnvelope,
    /// Its route.
    pub route: Route<R>,
}

/// How an accepted envelope was handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handling {
    /// Delivered to the listed local peers (possibly none).
    Delivered,
    /// Used for presence only (greet).
    Presence,
    /// Answered by the router (whois request).
    Answered,
    /// Accepted but dropped by the lifecycle (third party, unknown interaction, after the end).
    Ignored(crate::lifecycle::Ignored),
}

/// Summary of an accepted envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// Envelope id.
    pub id: String,
    /// Envelope kind.
    pub kind: Kind,
    /// Channel.
    pub channel: String,
    /// Target peer, for directed envelopes.
    pub to: Option<String>,
    /// Interaction the envelope belongs to.
    pub interaction_id: Option<String>,
    /// What was done with it.
    pub handling: Handling,
    /// Lifecycle outcome.
    pub lifecycle: Outcome,
    /// The interaction as it was before this envelope (`None`: it did not exist), for
    /// [`Router::undo`].
    pub prior: Option<crate::lifecycle::Interaction>,
}

/// Everything the node must do after the router processed one envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effects<R> {
    /// The verdict.
    pub result: Result<Accepted, Rejection>,
    /// Local peers that receive the envelope itself (its original bytes).
    pub deliver: Vec<String>,
    /// Envelopes the router generated (automatic receipts, whois responses).
    pub replies: Vec<Reply<R>>,
    /// For [`Router::send`]: where the envelope itself must be published, if anywhere.
    pub publish: Option<Route<R>>,
    /// For [`Router::send`]: when set, publish this re-encoded envelope instead of the bytes the
    /// agent sent (a greet from a peer with a local catalog carries the brief projection).
    pub rewritten: Option<OwnedEnvelope>,
    /// Generated responses that were refused before emission (e.g. over the size limit).
    pub refused: Vec<Rejection>,
}

impl<R> Effects<R> {
    /// Nothing to do but refuse, with `rejection`.
    pub fn rejected(rejection: Rejection) -> Self {
        Self {
            result: Err(rejection),
            deliver: Vec::new(),
            replies: Vec::new(),
            publish: None,
            rewritten: None,
            refused: Vec::new(),
        }
    }
}

/// The router: presence, deduplication and interactions of one receiver.
#[derive(Debug)]
pub struct Router<O, R> {
    /// Presence table (local and remote peers).
    pub presence: Presence<O, R>,
    /// Interactions.
    pub interactions: Interactions,
    dedup: DedupWindow,
    policy: ValidationPolicy,
}

impl<O: Clone + PartialEq, R: Clone> Router<O, R> {
    /// A router with `config`.
    pub fn new(config: RouterConfig) -> Self {
        Self {
            presence: Presence::new(config.greet_interval),
            interactions: Interactions::with_capacity(config.interaction_capacity),
            dedup: DedupWindow::with_capacity(config.dedup_capacity),
            policy: config.policy,
        }
    }

    /// The validation policy.
    pub fn policy(&self) -> &ValidationPolicy {
        &self.policy
    }

    /// The deduplication window.
    pub fn dedup(&self) -> &DedupWindow {
        &self.dedup
    }

    /// Undoes what accepting an envelope did, when the node cannot keep it (its interaction
    /// could not be written): the interaction goes back to how it was (or away, if the envelope
    /// opened it) and the envelope's id is forgotten, so that the same envelope is taken when
    /// it is sent again. Presence and catalogs are not touched: only lifecycle envelopes are
    /// undone.
    pub fn undo(&mut self, accepted: &Accepted) {
        if let Some(iid) = accepted.interaction_id.as_deref()
            && matches!(
                accepted.lifecycle,
                Outcome::Opened | Outcome::Changed { .. }
            )
        {
            self.interactions
                .put_back(&accepted.channel, iid, accepted.prior.clone());
        }
        self.dedup.forget(&accepted.id);
    }

    /// Processes an envelope that arrived from the network (`origin` = where from) at `now`.
    pub fn receive(
        &mut self,
        bytes: &[u8],
        origin: R,
        now: i64,
        ids: &mut impl IdSource,
    ) -> Effects<R> {
        let raw = match RawEnvelope::parse_deferring_body(bytes) {
            Ok(raw) => raw,
            Err(e) => return Effects::rejected(e),
        };
        let receipt_target = AutoReceiptTarget::from_raw(&raw);
        let v = match validate_raw(raw, now, &self.policy) {
            Ok(v) => v,
            Err(e) => {
                let mut fx = Effects::rejected(e);
                if let Some(t) = receipt_target
                    && self.presence.local(&t.channel, &t.to).is_some()
                {
                    let status = match fx.result.as_ref().map_err(Rejection::reason) {
                        Err(ReasonCode::Expired) => Some(ReceiptStatus::Expired),
                        Err(ReasonCode::Malformed) => Some(ReceiptStatus::Rejected),
                        _ => None,
                    };
                    if let (Some(status), Err(e)) = (status, &fx.result) {
                        let reason = e.reason();
                        fx.replies.push(t.receipt(status, reason, origin, now, ids));
                    }
                }
                return fx;
            }
        };
        let env = &v.envelope;
        // Routing: a directed envelope must address a local peer of its channel.
        if let Some(to) = env.to.as_deref()
            && self.presence.local(&env.channel, to).is_none()
        {
            return Effects::rejected(Rejection::NotTarget(
                format!(
                    "field `to`: {to:?} is not a local peer of channel {:?}",
                    env.channel
                )
                .into(),
            ));
        }
        // Deduplication (before any kind handling: duplicates never touch state).
        let deadline = dedup_deadline(env.ts, env.expires_at, self.policy.replay_age);
        if let Err(e) = self.dedup.insert(&env.id, deadline, now) {
            let mut fx = Effects::rejected(e);
            if env.kind == Kind::Direct && matches!(fx.result, Err(Rejection::Duplicate(_))) {
                let t = AutoReceiptTarget::from_envelope(env);
                fx.replies.push(t.receipt(
                    ReceiptStatus::Duplicate,
                    ReasonCode::Duplicate,
                    origin,
                    now,
                    ids,
                ));
            }
            return fx;
        }
        self.handle(&v, Some(origin), None, now, ids)
    }

    /// Processes an envelope sent by a local agent (`owner`) at `now`: validates it, checks that
    /// its sender is a peer this owner holds (a `greet` registers it), that a directed target is
    /// present and that the lifecycle allows it, then says where to publish it.
    ///
    /// A `direct` that is refused also gets the automatic receipt its target would have sent
    /// (`expired`, `duplicate`, or `rejected` with the reason), delivered back to the sender, so
    /// that an agent handles refusals by the node and by remote receivers the same way.
    pub fn send(
        &mut self,
        bytes: &[u8],
        owner: &O,
        now: i64,
        ids: &mut impl IdSource,
    ) -> Effects<R> {
        let target = RawEnvelope::parse_deferring_body(bytes)
            .ok()
            .as_ref()
            .and_then(AutoReceiptTarget::from_raw);
        let mut fx = self.send_checked(bytes, owner, now, ids);
        if let (Err(e), Some(t)) = (&fx.result, target)
            && self
                .presence
                .local(&t.channel, &t.from)
                .is_some_and(|p| p.owner == *owner)
        {
            let (status, reason) = match e.reason() {
                ReasonCode::Expired => (ReceiptStatus::Expired, ReasonCode::Expired),
                ReasonCode::Duplicate => (ReceiptStatus::Duplicate, ReasonCode::Duplicate),
                other => (ReceiptStatus::Rejected, other),
            };
            let back = Route::Local(t.from.clone());
            fx.replies
                .push(t.receipt_via(status, reason, back, now, ids));
        }
        fx
    }

    fn send_checked(
        &mut self,
        bytes: &[u8],
        owner: &O,
        now: i64,
        ids: &mut impl IdSource,
    ) -> Effects<R> {
        let v = match crate::validate::validate(bytes, now, &self.policy) {
            Ok(v) => v,
            Err(e) => return Effects::rejected(e),
        };
        let env = &v.envelope;
        if let Body::Greet(g) = &v.body {
            let card = g.peer_card.clone().into_owned();
            if let Err(PresenceError::Taken { .. }) =
                self.presence
                    .register_local(&env.channel, card, owner.clone())
            {
                return Effects::rejected(Rejection::VerificationFailed(
                    format!(
                        "field `from`: {:?} is held by another connection in channel {:?}",
                        env.from, env.channel
                    )
                    .into(),
                ));
            }
        }
        match self.presence.local(&env.channel, &env.from) {
            Some(p) if p.owner == *owner => {}
            _ => {
                return Effects::rejected(Rejection::VerificationFailed(
                    format!(
                        "field `from`: this connection has not greeted as {:?} in channel {:?}",
                        env.from, env.channel
                    )
                    .into(),
                ));
            }
        }
        let publish = match env.to.as_deref() {
            None => Route::Broadcast,
            Some(to) => match self.presence.lookup(&env.channel, to, now) {
                Some(Peer::Local(_)) => Route::Local(to.to_owned()),
                Some(Peer::Remote(r)) => Route::Remote(r.origin.clone()),
                None => {
                    return Effects::rejected(Rejection::NotFound(
                        format!(
                            "field `to`: {to:?} is not present in channel {:?}",
                            env.channel
                        )
                        .into(),
                    ));
                }
            },
        };
        if let Err(e) = self.interactions.check(env, &v.body) {
            return Effects::rejected(e);
        }
        let deadline = dedup_deadline(env.ts, env.expires_at, self.policy.replay_age);
        if let Err(e) = self.dedup.insert(&env.id, deadline, now) {
            return Effects::rejected(e);
        }
        let mut fx = match &publish {
            // Local to local: the local target receives it exactly as if it had arrived.
            Route::Local(_) => self.handle(&v, None, None, now, ids),
            // Leaving this node: local peers of the channel see broadcasts; the lifecycle is
            // applied now (the reference applies it after publishing).
            _ => self.handle(&v, None, Some(()), now, ids),
        };
        if fx.result.is_ok() && !matches!(publish, Route::Local(_)) {
            fx.publish = Some(publish);
            if let Body::Greet(_) = &v.body {
                fx.rewritten = self.projected_greet(env);
            }
        }
        fx
    }

    /// The greet to publish for a local peer with a catalog: the same envelope with the brief
    /// projection applied to its card (Capability Discovery, "Brief discovery"). `None` when the
    /// peer has no catalog (the agent's own bytes go out unchanged) or the result would be too big.
    fn projected_greet(&self, env: &Envelope<'_>) -> Option<OwnedEnvelope> {
        let peer = self.presence.local(&env.channel, &env.from)?;
        peer.catalog.as_ref()?;
        let greet = crate::greet::GreetBody::from_json(env.body.get()).ok()?;
        let body = crate::greet::GreetBody {
            peer_card: peer.projected_card(),
            summary: greet.summary,
        }
        .to_json();
        let mut out = env.clone().into_owned();
        out.body = raw_owned(body);
        (out.encoded_len() <= MAX_ENVELOPE_BYTES).then_some(out)
    }

    /// Fresh greets for every local peer in every channel (new id, `ts` = `now`, card with the
    /// brief projection), to be broadcast every greet interval and after a catalog changes so that
    /// remote presence never lapses while the peer is connected (Peer Discovery, "a peer SHOULD
    /// re-announce before its presence expires"). Each is recorded in the deduplication window.
    pub fn announcements(&mut self, now: i64, ids: &mut impl IdSource) -> Vec<Reply<R>> {
        let mut out = Vec::new();
        for channel in self.presence.channels() {
            for peer in self.presence.local_peers(channel) {
                let body = crate::greet::GreetBody {
                    peer_card: peer.projected_card(),
                    summary: None,
                }
                .to_json();
                let envelope = Envelope::generated(
                    Kind::Greet,
                    ids.next_id(),
                    channel,
                    &peer.card.peer_id,
                    now,
                    raw_owned(body),
                );
                if envelope.encoded_len() <= MAX_ENVELOPE_BYTES {
                    out.push(Reply {
                        envelope,
                        route: Route::Broadcast,
                    });
                }
            }
        }
        let replay_age = self.policy.replay_age;
        for reply in &out {
            let deadline = dedup_deadline(now, None, replay_age);
            // A fresh id cannot collide unless the id source repeats; then the greet is dropped
            // by receivers anyway.
            let _ = self.dedup.insert(&reply.envelope.id, deadline, now);
        }
        out
    }

    /// Kind handling shared by receive and send. `origin` is `None` for locally sent envelopes;
    /// `outbound` is set when the envelope leaves this node (so a directed one has no local
    /// addressee).
    fn handle(
        &mut self,
        v: &Validated<'_>,
        origin: Option<R>,
        outbound: Option<()>,
        now: i64,
        ids: &mut impl IdSource,
    ) -> Effects<R> {
        let env = &v.envelope;
        let mut fx = Effects {
            result: Err(Rejection::Internal("unhandled".into())),
            deliver: Vec::new(),
            replies: Vec::new(),
            publish: None,
            rewritten: None,
            refused: Vec::new(),
        };
        let addressee = || {
            if outbound.is_some() {
                Vec::new()
            } else {
                env.to.iter().map(|t| t.to_string()).collect()
            }
        };
        let everyone_else = |presence: &Presence<O, R>| -> Vec<String> {
            presence
                .local_peers(&env.channel)
                .map(|p| p.card.peer_id.to_string())
                .filter(|id| *id != env.from)
                .collect()
        };
        let mut lifecycle = Outcome::NotApplicable;
        let mut prior = None;
        let handling = match &v.body {
            Body::Greet(g) => {
                if let Some(origin) = origin {
                    self.presence.refresh_remote(
                        &env.channel,
                        g.peer_card.clone().into_owned(),
                        origin,
                        now,
                    );
                }
                Handling::Presence
            }
            Body::Whois(WhoisBody::Request { query }) => {
                self.answer_whois(env, query, origin.as_ref(), now, ids, &mut fx);
                Handling::Answered
            }
            Body::Whois(WhoisBody::Response { peer_card }) => {
                if let Some(origin) = origin {
                    self.presence.refresh_remote(
                        &env.channel,
                        peer_card.clone().into_owned(),
                        origin,
                        now,
                    );
                    if let Some(catalog) = env
                        .ext_value(CATALOG_EXT_KEY)
                        .and_then(|raw| Catalog::from_json(raw.get()).ok())
                    {
                        self.presence
                            .set_remote_catalog(&env.channel, &peer_card.peer_id, catalog);
                    }
                }
                fx.deliver = addressee();
                Handling::Delivered
            }
            Body::Say(_) => {
                fx.deliver = everyone_else(&self.presence);
                Handling::Delivered
            }
            Body::Capability(_) | Body::Direct(_) | Body::Receipt(_) | Body::Trace(_) => {
                prior = env
                    .interaction_id
                    .as_deref()
                    .and_then(|iid| self.interactions.get(&env.channel, iid).cloned());
                match self.interactions.apply(env, &v.body, now) {
                    Ok(outcome) => lifecycle = outcome,
                    Err(e) => {
                        if env.kind == Kind::Direct
                            && matches!(e, Rejection::InteractionClosed(_))
                            && let Some(origin) = origin
                        {
                            let t = AutoReceiptTarget::from_envelope(env);
                            fx.replies.push(t.receipt(
                                ReceiptStatus::Rejected,
                                ReasonCode::InteractionClosed,
                                origin,
                                now,
                                ids,
                            ));
                        }
                        fx.result = Err(e);
                        return fx;
                    }
                }
                if let Outcome::Ignored(why) = lifecycle {
                    Handling::Ignored(why)
                } else {
                    fx.deliver = if env.kind == Kind::Capability && env.to.is_none() {
                        everyone_else(&self.presence)
                    } else {
                        addressee()
                    };
                    Handling::Delivered
                }
            }
        };
        fx.result = Ok(Accepted {
            id: env.id.to_string(),
            kind: env.kind,
            channel: env.channel.to_string(),
            to: env.to.as_deref().map(str::to_owned),
            interaction_id: env.interaction_id.as_deref().map(str::to_owned),
            handling,
            lifecycle,
            prior,
        });
        fx
    }

    /// Builds whois responses from matching local peers.
    fn answer_whois(
        &self,
        request: &Envelope<'_>,
        query: &str,
        origin: Option<&R>,
        now: i64,
        ids: &mut impl IdSource,
        fx: &mut Effects<R>,
    ) {
        let rich = RichRequest::from_envelope(request);
        let responders: Vec<_> = match request.to.as_deref() {
            // A directed request addressed to its own sender is ignored.
            Some(to) if to == request.from => Vec::new(),
            Some(to) => self
                .presence
                .local(&request.channel, to)
                .into_iter()
                .collect(),
            None => self
                .presence
                .local_peers(&request.channel)
                .filter(|p| {
                    p.card.peer_id != request.from && p.projected_card().matches_query(query)
                })
                .collect(),
        };
        for peer in responders {
            let catalog = match &rich {
                Some(r) => peer.catalog.as_ref().map(|c| c.narrowed(&r.filter)),
                None => peer.catalog.clone(),
            };
            let mut card = peer.card.clone();
            card.project_brief(catalog.as_ref());
            let body = WhoisBody::Response { peer_card: card }.to_json();
            let ext = rich.as_ref().map(|_| {
                format!(
                    "{{\"{CATALOG_EXT_KEY}\":{}}}",
                    rich_catalog_json(catalog.as_ref(), &IdFilter::All)
                )
            });
            let mut response = Envelope::generated(
                Kind::Whois,
                ids.next_id(),
                &request.channel,
                &peer.card.peer_id,
                now,
                raw_owned(body),
            );
            response.to = Some(Cow::Owned(request.from.to_string()));
            response.reply_to = Some(Cow::Owned(request.id.to_string()));
            response.ext = ext.map(raw_owned);
            let size = response.encoded_len();
            if size > MAX_ENVELOPE_BYTES {
                fx.refused.push(Rejection::Internal(
                    format!(
                        "whois response from {:?} would be {size} bytes, over the {MAX_ENVELOPE_BYTES}-byte limit",
                        peer.card.peer_id
                    )
                    .into(),
                ));
                continue;
            }
            let route = match origin {
                Some(o) => Route::Remote(o.clone()),
                None => Route::Local(request.from.to_string()),
            };
            fx.replies.push(Reply {
                envelope: response,
                route,
            });
        }
    }
}

fn raw_owned(json: String) -> RawJson<'static> {
    // Every caller passes JSON produced by this crate's writers.
    RawJson::from_string(json).unwrap_or_else(|_| RawJson::owned(Box::default()))
}

/// Who an automatic receipt goes to, read from a (possibly invalid) `direct`.
struct AutoReceiptTarget {
    id: String,
    channel: String,
    from: String,
    to: String,
    interaction_id: String,
}

impl AutoReceiptTarget {
    /// From the partial decode of an envelope that failed validation: only for a `direct` with an
    /// id, a valid channel and sender, a valid target and an `interaction_id`.
    fn from_raw(raw: &RawEnvelope<'_>) -> Option<Self> {
        let trimmed = |v: &Option<Cow<'_, str>>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        if trimmed(&raw.kind).as_deref() != Some("direct") {
            return None;
        }
        let t = Self {
            id: trimmed(&raw.id)?,
            channel: trimmed(&raw.channel).filter(|c| is_channel(c))?,
            from: trimmed(&raw.from).filter(|p| is_peer_id(p))?,
            to: trimmed(&raw.to).filter(|p| is_peer_id(p))?,
            interaction_id: trimmed(&raw.interaction_id)?,
        };
        Some(t)
    }

    fn from_envelope(env: &Envelope<'_>) -> Self {
        Self {
            id: env.id.to_string(),
            channel: env.channel.to_string(),
            from: env.from.to_string(),
            to: env.to.as_deref().unwrap_or_default().to_owned(),
            interaction_id: env.interaction_id.as_deref().unwrap_or_default().to_owned(),
        }
    }

    /// The receipt: from the local target, to the original sender, same interaction,
    /// `reply_to` = `for_id` = the original id, reason code always set, detail null.
    fn receipt<R>(
        self,
        status: ReceiptStatus,
        reason: ReasonCode,
        origin: R,
        now: i64,
        ids: &mut impl IdSource,
    ) -> Reply<R> {
        self.receipt_via(status, reason, Route::Remote(origin), now, ids)
    }

    /// The receipt, sent along `route`.
    fn receipt_via<R>(
        self,
        status: ReceiptStatus,
        reason: ReasonCode,
        route: Route<R>,
        now: i64,
        ids: &mut impl IdSource,
    ) -> Reply<R> {
        let body = ReceiptBody {
            for_id: Cow::Borrowed(&self.id),
            status,
            reason_code: Some(reason),
            detail: None,
        }
        .to_json();
        Reply {
            envelope: {
                let mut env = Envelope::generated(
                    Kind::Receipt,
                    ids.next_id(),
                    &self.channel,
                    &self.to,
                    now,
                    raw_owned(body),
                );
                env.to = Some(Cow::Owned(self.from));
                env.interaction_id = Some(Cow::Owned(self.interaction_id));
                env.reply_to = Some(Cow::Owned(self.id));
                env
            },
            route,
        }
    }
}
