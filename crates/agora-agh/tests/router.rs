//! Integration tests of the router, the interaction lifecycle, presence and the catalog
//! projections, through the public API only.
//!
//! References: the Go reference runtime's behaviour (what the router does per inbound envelope,
//! the interaction lifecycle, presence and whois matching, discovery surfaces); the Peer
//! Discovery and Capability Discovery pages.
//!
//! The scene used by most tests: one node (`Router<u32, &str>`) hosting two local peers,
//! `reviewer.sess-xyz` (owner 1) and `tester.sess-777` (owner 2), that has heard greets from two
//! remote peers, `coder.sess-abc` (via `node-b`) and `outsider.sess-999` (via `node-c`). The clock
//! is fixed at [`NOW`] and generated ids come from `CounterIds::new("gen")`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agora_agh::catalog::Catalog;
use agora_agh::lifecycle::{Ignored, Outcome};
use agora_agh::presence::Peer;
use agora_agh::router::{Accepted, CounterIds, Effects, Handling, Reply, Route};
use agora_agh::{
    CapabilityDoc, InteractionState, Interactions, Kind, OwnedEnvelope, ReasonCode, Router,
    RouterConfig, ValidationPolicy, validate,
};
use serde_json::{Value, json};

use wire::{
    Env, capability, card, direct, greet, receipt, say, trace, whois_request, whois_response,
};

const NOW: i64 = 1_775_822_400;
const CH: &str = "builders";
/// Local peer held by owner 1.
const REVIEWER: &str = "reviewer.sess-xyz";
/// Local peer held by owner 2.
const TESTER: &str = "tester.sess-777";
/// Remote peer heard through `node-b`.
const CODER: &str = "coder.sess-abc";
/// Remote peer heard through `node-c`.
const OUTSIDER: &str = "outsider.sess-999";
/// Nobody.
const GHOST: &str = "ghost.sess-000";
const NODE_B: &str = "node-b";
const NODE_C: &str = "node-c";
const IID: &str = "int_patch_42";

const OPEN_STATES: [InteractionState; 3] = [
    InteractionState::Submitted,
    InteractionState::Working,
    InteractionState::NeedsInput,
];
const TERMINAL_STATES: [InteractionState; 3] = [
    InteractionState::Completed,
    InteractionState::Failed,
    InteractionState::Canceled,
];

/// Builders of envelopes as JSON text (`serde_json::json!`, then `to_vec`).
mod wire {
    use serde_json::{Value, json};

    use super::{CH, NOW};

    /// An envelope under construction, as a JSON value.
    #[derive(Clone, Debug)]
    pub(crate) struct Env(pub(crate) Value);

    impl Env {
        /// A broadcast envelope on [`CH`] at [`NOW`] with `proof: null`.
        pub(crate) fn new(kind: &str, id: &str, from: &str, body: Value) -> Self {
            Self(json!({
                "protocol": "agh-network/v0",
                "id": id,
                "kind": kind,
                "channel": CH,
                "from": from,
                "to": null,
                "ts": NOW,
                "proof": null,
            }))
            .set("body", body)
        }

        /// Sets (or replaces) a top-level field.
        pub(crate) fn set(mut self, key: &str, value: Value) -> Self {
            self.0[key] = value;
            self
        }

        pub(crate) fn to(self, to: &str) -> Self {
            self.set("to", json!(to))
        }

        pub(crate) fn interaction(self, iid: &str) -> Self {
            self.set("interaction_id", json!(iid))
        }

        pub(crate) fn reply_to(self, id: &str) -> Self {
            self.set("reply_to", json!(id))
        }

        pub(crate) fn ts(self, ts: i64) -> Self {
            self.set("ts", json!(ts))
        }

        pub(crate) fn expires_at(self, at: i64) -> Self {
            self.set("expires_at", json!(at))
        }

        pub(crate) fn ext(self, ext: Value) -> Self {
            self.set("ext", ext)
        }

        pub(crate) fn id(&self) -> &str {
            self.0["id"].as_str().expect("every envelope has an id")
        }

        pub(crate) fn bytes(&self) -> Vec<u8> {
            serde_json::to_vec(&self.0).expect("a JSON value serialises")
        }
    }

    /// A minimal Peer Card (the four required arrays present).
    pub(crate) fn card(peer_id: &str) -> Value {
        json!({
            "peer_id": peer_id,
            "profiles_supported": ["agh-network/v0"],
            "capabilities": [],
            "artifacts_supported": ["capability"],
            "trust_modes_supported": [],
        })
    }

    pub(crate) fn greet(id: &str, card: Value) -> Env {
        let from = card["peer_id"]
            .as_str()
            .expect("card has a peer_id")
            .to_owned();
        let mut body = json!({});
        body["peer_card"] = card;
        Env::new("greet", id, &from, body)
    }

    pub(crate) fn whois_request(id: &str, from: &str, query: Option<&str>) -> Env {
        let body = match query {
            Some(q) => json!({ "type": "request", "query": q }),
            None => json!({ "type": "request" }),
        };
        Env::new("whois", id, from, body)
    }

    pub(crate) fn whois_response(id: &str, card: Value, to: &str, reply_to: &str) -> Env {
        let from = card["peer_id"]
            .as_str()
            .expect("card has a peer_id")
            .to_owned();
        let mut body = json!({ "type": "response" });
        body["peer_card"] = card;
        Env::new("whois", id, &from, body).to(to).reply_to(reply_to)
    }

    pub(crate) fn say(id: &str, from: &str, text: &str) -> Env {
        Env::new("say", id, from, json!({ "text": text }))
    }

    pub(crate) fn direct(id: &str, from: &str, to: &str, iid: &str, text: &str) -> Env {
        Env::new("direct", id, from, json!({ "text": text }))
            .to(to)
            .interaction(iid)
    }

    /// A capability transfer of the reference capability document (with its real digest).
    pub(crate) fn capability(id: &str, from: &str) -> Env {
        Env::new(
            "capability",
            id,
            from,
            json!({ "capability": {
                "id": "collect-failing-tests",
                "summary": "Collect the exact failing package path and test output.",
                "outcome": "A normalized incident bundle for a debugging follow-up.",
                "digest": "sha256:c62db095b019517649f92b1da0550998e961094999893803b7bcfad37851de53",
            }}),
        )
    }

    pub(crate) fn receipt(
        id: &str,
        from: &str,
        to: &str,
        iid: &str,
        status: &str,
        reason: Option<&str>,
    ) -> Env {
        Env::new(
            "receipt",
            id,
            from,
            json!({ "for_id": "msg-some-earlier", "status": status, "reason_code": reason }),
        )
        .to(to)
        .interaction(iid)
    }

    pub(crate) fn trace(id: &str, from: &str, to: &str, iid: &str, state: &str) -> Env {
        Env::new("trace", id, from, json!({ "state": state }))
            .to(to)
            .interaction(iid)
    }
}

/// One node: a router, its id source and a counter for test envelope ids.
struct Node {
    router: Router<u32, &'static str>,
    ids: CounterIds,
    seq: u32,
}

impl Node {
    fn new() -> Self {
        Self::with_config(RouterConfig::default())
    }

    fn with_config(config: RouterConfig) -> Self {
        Self {
            router: Router::new(config),
            ids: CounterIds::new("gen"),
            seq: 0,
        }
    }

    /// A fresh envelope id for a test message.
    fn fresh(&mut self, prefix: &str) -> String {
        self.seq += 1;
        format!("msg-{prefix}-{}", self.seq)
    }

    fn receive(&mut self, env: &Env) -> Effects<&'static str> {
        self.receive_at(env, NODE_B, NOW)
    }

    fn receive_at(&mut self, env: &Env, origin: &'static str, now: i64) -> Effects<&'static str> {
        self.router
            .receive(&env.bytes(), origin, now, &mut self.ids)
    }

    fn send(&mut self, env: &Env, owner: u32) -> Effects<&'static str> {
        self.send_at(env, owner, NOW)
    }

    fn send_at(&mut self, env: &Env, owner: u32, now: i64) -> Effects<&'static str> {
        self.router.send(&env.bytes(), &owner, now, &mut self.ids)
    }

    /// A local agent connection (`owner`) greets with `card`.
    fn join(&mut self, card: Value, owner: u32) {
        let id = self.fresh("greet");
        let fx = self.send(&greet(&id, card), owner);
        accepted(&fx);
        assert_eq!(fx.publish, Some(Route::Broadcast));
    }

    /// A greet with `card` arrives from the network through `origin`.
    fn hear(&mut self, card: Value, origin: &'static str) {
        let id = self.fresh("greet");
        let fx = self.receive_at(&greet(&id, card), origin, NOW);
        assert_eq!(accepted(&fx).handling, Handling::Presence);
    }

    fn state(&self, iid: &str) -> Option<InteractionState> {
        self.router.interactions.get(CH, iid).map(|i| i.state)
    }

    // Events of the outbound interaction (reviewer → coder, see `outbound_in`).

    /// The target (remote coder) reports `state`; arrives from the network.
    fn target_trace(&mut self, state: &str) -> Effects<&'static str> {
        let id = self.fresh("trace");
        self.receive(&trace(&id, CODER, REVIEWER, IID, state))
    }

    /// The target (remote coder) sends a receipt; arrives from the network.
    fn target_receipt(&mut self, status: &str, reason: Option<&str>) -> Effects<&'static str> {
        let id = self.fresh("receipt");
        self.receive(&receipt(&id, CODER, REVIEWER, IID, status, reason))
    }

    /// The initiator (local reviewer) sends a receipt.
    fn initiator_receipt(&mut self, status: &str, reason: Option<&str>) -> Effects<&'static str> {
        let id = self.fresh("receipt");
        self.send(&receipt(&id, REVIEWER, CODER, IID, status, reason), 1)
    }

    /// The initiator (local reviewer) sends follow-up input.
    fn initiator_direct(&mut self) -> Effects<&'static str> {
        let id = self.fresh("direct");
        self.send(&direct(&id, REVIEWER, CODER, IID, "more input"), 1)
    }
}

fn reviewer_card() -> Value {
    let mut c = card(REVIEWER);
    c["display_name"] = json!("Review Bot");
    c["capabilities"] = json!(["code.review"]);
    c["trust_modes_supported"] = json!(["unverified"]);
    c
}

fn tester_card() -> Value {
    let mut c = card(TESTER);
    c["display_name"] = json!("Test Runner");
    c
}

/// The standard scene: two local peers and two remote peers, all present.
fn scene() -> Node {
    let mut n = Node::new();
    n.join(reviewer_card(), 1);
    n.join(tester_card(), 2);
    n.hear(card(CODER), NODE_B);
    n.hear(card(OUTSIDER), NODE_C);
    n
}

/// The scene plus an interaction opened by the local reviewer with the remote coder (by a `direct`
/// sent through `Router::send`), driven to `state` by a trace from the coder.
fn outbound_in(state: InteractionState) -> Node {
    let mut n = scene();
    let id = n.fresh("open");
    let fx = n.send(&direct(&id, REVIEWER, CODER, IID, "please review"), 1);
    assert_eq!(accepted(&fx).lifecycle, Outcome::Opened);
    if state != InteractionState::Submitted {
        let fx = n.target_trace(state.as_str());
        accepted(&fx);
    }
    assert_eq!(n.state(IID), Some(state));
    n
}

/// The scene plus an interaction opened by the remote coder with the local reviewer (by a
/// `direct` received from the network); returns the opening envelope.
fn inbound_opened() -> (Node, Env) {
    let mut n = scene();
    let id = n.fresh("open");
    let open = direct(&id, CODER, REVIEWER, IID, "please review");
    let fx = n.receive(&open);
    assert_eq!(accepted(&fx).lifecycle, Outcome::Opened);
    (n, open)
}

#[track_caller]
fn accepted<R: std::fmt::Debug>(fx: &Effects<R>) -> &Accepted {
    match &fx.result {
        Ok(a) => a,
        Err(e) => panic!("expected acceptance, got {e}"),
    }
}

#[track_caller]
fn rejected<R>(fx: &Effects<R>) -> ReasonCode {
    match &fx.result {
        Ok(a) => panic!("expected a rejection, got {a:?}"),
        Err(e) => e.reason(),
    }
}

fn json_of(env: &OwnedEnvelope) -> Value {
    serde_json::from_str(&env.to_json()).expect("the router emits JSON")
}

#[track_caller]
fn assert_validates(env: &OwnedEnvelope) {
    let text = env.to_json();
    if let Err(e) = validate(text.as_bytes(), NOW, &ValidationPolicy::default()) {
        panic!("generated envelope does not validate: {e}\n{text}");
    }
}

/// The Peer IDs that answered, in reply order.
fn responders(fx: &Effects<&'static str>) -> Vec<String> {
    fx.replies
        .iter()
        .map(|r| r.envelope.from.to_string())
        .collect()
}

/// The single reply of `fx`.
#[track_caller]
fn only_reply<'f>(fx: &'f Effects<&'static str>) -> &'f Reply<&'static str> {
    assert_eq!(fx.replies.len(), 1, "replies: {:?}", fx.replies);
    &fx.replies[0]
}

/// Asserts an automatic receipt answering `original` (a `direct` from coder to reviewer).
#[track_caller]
fn assert_auto_receipt(fx: &Effects<&'static str>, original: &Env, status: &str, reason: &str) {
    let reply = only_reply(fx);
    assert_eq!(reply.route, Route::Remote(NODE_B));
    let env = &reply.envelope;
    assert_eq!(env.kind, Kind::Receipt);
    assert_eq!(env.id, "gen-1");
    assert_eq!(env.channel, CH);
    assert_eq!(env.from, REVIEWER);
    assert_eq!(env.to.as_deref(), Some(CODER));
    assert_eq!(env.interaction_id.as_deref(), Some(IID));
    assert_eq!(env.reply_to.as_deref(), Some(original.id()));
    assert_eq!(env.ts, NOW);
    assert!(env.proof.is_none());
    let v = json_of(env);
    assert_eq!(
        v["body"],
        json!({ "for_id": original.id(), "status": status, "reason_code": reason, "detail": null })
    );
    assert_eq!(v["proof"], Value::Null);
    assert_validates(env);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle: opening
// ---------------------------------------------------------------------------------------------

#[test]
fn directed_direct_with_interaction_id_opens_submitted_with_initiator_and_target() {
    // Inbound: the remote coder opens with the local reviewer.
    let (n, open) = inbound_opened();
    let i = n.router.interactions.get(CH, IID).expect("opened");
    assert_eq!(i.initiator, CODER);
    assert_eq!(i.target, REVIEWER);
    assert_eq!(i.state, InteractionState::Submitted);
    assert_eq!((i.opened_at, i.updated_at), (NOW, NOW));
    assert_eq!(n.router.interactions.len(), 1);

    // Delivered to the addressed local peer only, and no automatic receipt(accepted).
    let mut n2 = scene();
    let fx = n2.receive(&open);
    let a = accepted(&fx);
    assert_eq!(a.kind, Kind::Direct);
    assert_eq!(a.handling, Handling::Delivered);
    assert_eq!(fx.deliver, vec![REVIEWER.to_owned()]);
    assert!(
        fx.replies.is_empty(),
        "the router never sends receipt(accepted)"
    );
    assert_eq!(fx.publish, None);

    // Outbound: the local reviewer opens with the remote coder.
    let n = outbound_in(InteractionState::Submitted);
    let i = n.router.interactions.get(CH, IID).expect("opened");
    assert_eq!((i.initiator.as_str(), i.target.as_str()), (REVIEWER, CODER));
}

#[test]
fn directed_capability_with_interaction_id_opens_interaction() {
    let mut n = scene();
    let env = capability("msg-cap-1", CODER).to(REVIEWER).interaction(IID);
    let fx = n.receive(&env);
    let a = accepted(&fx);
    assert_eq!(a.kind, Kind::Capability);
    assert_eq!(a.lifecycle, Outcome::Opened);
    assert_eq!(fx.deliver, vec![REVIEWER.to_owned()]);
    let i = n.router.interactions.get(CH, IID).expect("opened");
    assert_eq!((i.initiator.as_str(), i.target.as_str()), (CODER, REVIEWER));
    assert_eq!(i.state, InteractionState::Submitted);

    // Also on the send path (local → remote).
    let mut n = scene();
    let env = capability("msg-cap-2", REVIEWER).to(CODER).interaction(IID);
    let fx = n.send(&env, 1);
    assert_eq!(accepted(&fx).lifecycle, Outcome::Opened);
    assert_eq!(fx.publish, Some(Route::Remote(NODE_B)));
    assert_eq!(n.state(IID), Some(InteractionState::Submitted));
}

#[test]
fn broadcast_capability_with_interaction_id_cannot_open() {
    let mut n = scene();
    let env = capability("msg-cap-b", CODER).interaction(IID);
    let fx = n.receive(&env);
    assert_eq!(rejected(&fx), ReasonCode::Malformed);
    assert!(fx.deliver.is_empty());
    assert!(fx.replies.is_empty());
    assert!(n.router.interactions.is_empty());

    // On send it is refused and not published.
    let env = capability("msg-cap-c", REVIEWER).interaction(IID);
    let fx = n.send(&env, 1);
    assert_eq!(rejected(&fx), ReasonCode::Malformed);
    assert_eq!(fx.publish, None);
    assert!(n.router.interactions.is_empty());
}

#[test]
fn capability_without_interaction_id_is_outside_the_lifecycle() {
    let mut n = scene();
    // Broadcast: every local peer but the sender.
    let fx = n.receive(&capability("msg-cap-1", CODER));
    let a = accepted(&fx);
    assert_eq!(a.lifecycle, Outcome::NotApplicable);
    assert_eq!(fx.deliver, vec![REVIEWER.to_owned(), TESTER.to_owned()]);
    // Directed: the target only.
    let fx = n.receive(&capability("msg-cap-2", CODER).to(TESTER));
    assert_eq!(accepted(&fx).lifecycle, Outcome::NotApplicable);
    assert_eq!(fx.deliver, vec![TESTER.to_owned()]);
    // Sent by a local peer as a broadcast: published, and the other local peer sees it.
    let fx = n.send(&capability("msg-cap-3", REVIEWER), 1);
    accepted(&fx);
    assert_eq!(fx.publish, Some(Route::Broadcast));
    assert_eq!(fx.deliver, vec![TESTER.to_owned()]);
    assert!(n.router.interactions.is_empty());
}

#[test]
fn interactions_are_keyed_by_channel_and_id_and_check_does_not_mutate() {
    let policy = ValidationPolicy::default();
    let mut table = Interactions::default();
    let open = direct("msg-o1", CODER, REVIEWER, IID, "go").bytes();
    let v = validate(&open, NOW, &policy).expect("valid");
    assert_eq!(
        table.check(&v.envelope, &v.body).expect("ok"),
        Outcome::Opened
    );
    assert!(table.is_empty(), "check is a dry run");
    assert_eq!(
        table.apply(&v.envelope, &v.body, NOW).expect("ok"),
        Outcome::Opened
    );

    // The same interaction id in another channel is another interaction.
    let other = direct("msg-o2", CODER, REVIEWER, IID, "go")
        .set("channel", json!("ops"))
        .bytes();
    let v = validate(&other, NOW, &policy).expect("valid");
    assert_eq!(
        table.apply(&v.envelope, &v.body, NOW).expect("ok"),
        Outcome::Opened
    );
    assert_eq!(table.len(), 2);

    let done = trace("msg-t1", REVIEWER, CODER, IID, "completed").bytes();
    let v = validate(&done, NOW + 5, &policy).expect("valid");
    let expect = Outcome::Changed {
        from: InteractionState::Submitted,
        to: InteractionState::Completed,
    };
    assert_eq!(table.check(&v.envelope, &v.body).expect("ok"), expect);
    assert_eq!(
        table.get(CH, IID).map(|i| i.state),
        Some(InteractionState::Submitted)
    );
    assert_eq!(
        table.apply(&v.envelope, &v.body, NOW + 5).expect("ok"),
        expect
    );
    let i = table.get(CH, IID).expect("tracked");
    assert_eq!(
        (i.state, i.opened_at, i.updated_at),
        (InteractionState::Completed, NOW, NOW + 5)
    );
    assert_eq!(
        table.get("ops", IID).map(|i| i.state),
        Some(InteractionState::Submitted)
    );
}

// ---------------------------------------------------------------------------------------------
// Lifecycle: transitions from the open states (the table in `lifecycle`'s docs)
// ---------------------------------------------------------------------------------------------

fn expected(from: InteractionState, to: InteractionState) -> Outcome {
    if from == to {
        Outcome::Unchanged(from)
    } else {
        Outcome::Changed { from, to }
    }
}

#[test]
fn trace_working_moves_every_open_state_to_working() {
    for from in OPEN_STATES {
        let mut n = outbound_in(from);
        let fx = n.target_trace("working");
        let a = accepted(&fx);
        assert_eq!(
            a.lifecycle,
            expected(from, InteractionState::Working),
            "from {from}"
        );
        assert_eq!(fx.deliver, vec![REVIEWER.to_owned()]);
        assert_eq!(n.state(IID), Some(InteractionState::Working));
    }
}

#[test]
fn trace_needs_input_moves_every_open_state_to_needs_input() {
    for from in OPEN_STATES {
        let mut n = outbound_in(from);
        let fx = n.target_trace("needs_input");
        assert_eq!(
            accepted(&fx).lifecycle,
            expected(from, InteractionState::NeedsInput),
            "from {from}"
        );
        assert_eq!(fx.deliver, vec![REVIEWER.to_owned()]);
        assert_eq!(n.state(IID), Some(InteractionState::NeedsInput));
    }
}

#[test]
fn trace_completed_failed_canceled_finish_every_open_state() {
    for from in OPEN_STATES {
        for to in TERMINAL_STATES {
            let mut n = outbound_in(from);
            let fx = n.target_trace(to.as_str());
            assert_eq!(
                accepted(&fx).lifecycle,
                Outcome::Changed { from, to },
                "{from} -> {to}"
            );
            assert_eq!(fx.deliver, vec![REVIEWER.to_owned()]);
            assert_eq!(n.state(IID), Some(to));
        }
    }
}

#[test]
fn trace_submitted_is_an_invalid_transition_reported_internal() {
    for from in OPEN_STATES {
        // From the network.
        let mut n = outbound_in(from);
        let fx = n.target_trace("submitted");
        assert_eq!(rejected(&fx), ReasonCode::Internal, "from {from}");
        assert!(fx.deliver.is_empty());
        assert!(fx.replies.is_empty());
        assert_eq!(n.state(IID), Some(from));

        // From a local participant: refused before publishing.
        let id = n.fresh("trace");
        let fx = n.send(&trace(&id, REVIEWER, CODER, IID, "submitted"), 1);
        assert_eq!(rejected(&fx), ReasonCode::Internal, "from {from}");
        assert_eq!(fx.publish, None);
        assert_eq!(n.state(IID), Some(from));
    }
}

#[test]
fn receipt_rejected_fails_every_open_state() {
    for from in OPEN_STATES {
        let mut n = outbound_in(from);
        let fx = n.target_receipt("rejected", Some("busy"));
        assert_eq!(
            accepted(&fx).lifecycle,
            Outcome::Changed {
                from,
                to: InteractionState::Failed
            },
            "from {from}"
        );
        assert_eq!(fx.deliver, vec![REVIEWER.to_owned()]);
        assert_eq!(n.state(IID), Some(InteractionState::Failed));
    }
}

#[test]
fn receipt_canceled_cancels_every_open_state() {
    for from in OPEN_STATES {
        // The initiator cancels (send path).
        let mut n = outbound_in(from);
        let fx = n.initiator_receipt("canceled", None);
        assert_eq!(
            accepted(&fx).lifecycle,
            Outcome::Changed {
                from,
                to: InteractionState::Canceled
            },
            "from {from}"
        );
        assert_eq!(fx.publish, Some(Route::Remote(NODE_B)));
        assert!(fx.deliver.is_empty(), "addressed to a remote peer");
        assert_eq!(n.state(IID), Some(InteractionState::Canceled));

        // A canceled receipt from the other participant, with its optional reason code.
        let mut n = outbound_in(from);
        let fx = n.target_receipt("canceled", Some("internal"));
        assert_eq!(
            accepted(&fx).lifecycle,
            Outcome::Changed {
                from,
                to: InteractionState::Canceled
            }
        );
        assert_eq!(n.state(IID), Some(InteractionState::Canceled));
    }
}

#[test]
fn receipts_accepted_duplicate_expired_unsupported_leave_every_open_state_unchanged() {
    let receipts = [
        ("accepted", None),
        ("duplicate", Some("duplicate")),
        ("expired", Some("expired")),
        ("unsupported", Some("unsupported_kind")),
    ];
    for from in OPEN_STATES {
        for (status, reason) in receipts {
            let mut n = outbound_in(from);
            let fx = n.target_receipt(status, reason);
            assert_eq!(
                accepted(&fx).lifecycle,
                Outcome::Unchanged(from),
                "{status} from {from}"
            );
            assert_eq!(fx.deliver, vec![REVIEWER.to_owned()]);
            assert_eq!(n.state(IID), Some(from));
        }
    }
}

#[test]
fn follow_up_work_leaves_submitted_and_working_unchanged() {
    for from in [InteractionState::Submitted, InteractionState::Working] {
        let mut n = outbound_in(from);
        let fx = n.initiator_direct();
        assert_eq!(accepted(&fx).lifecycle, Outcome::Unchanged(from));
        assert_eq!(fx.publish, Some(Route::Remote(NODE_B)));
        assert_eq!(n.state(IID), Some(from));

        // A capability follow-up from the target, received from the network.
        let id = n.fresh("cap");
        let fx = n.receive(&capability(&id, CODER).to(REVIEWER).interaction(IID));
        assert_eq!(accepted(&fx).lifecycle, Outcome::Unchanged(from));
        assert_eq!(fx.deliver, vec![REVIEWER.to_owned()]);
        assert_eq!(n.state(IID), Some(from));
    }
}

#[test]
fn needs_input_then_follow_up_direct_resumes_working() {
    // Outbound interaction: the initiator answers through `send`.
    let mut n = outbound_in(InteractionState::NeedsInput);
    let fx = n.initiator_direct();
    assert_eq!(
        accepted(&fx).lifecycle,
        Outcome::Changed {
            from: InteractionState::NeedsInput,
            to: InteractionState::Working
        }
    );
    assert_eq!(fx.publish, Some(Route::Remote(NODE_B)));
    assert_eq!(n.state(IID), Some(InteractionState::Working));

    // Inbound interaction: the local target asks for input, the remote initiator answers.
    let (mut n, _) = inbound_opened();
    let fx = n.send(&trace("msg-ni", REVIEWER, CODER, IID, "needs_input"), 1);
    assert_eq!(fx.publish, Some(Route::Remote(NODE_B)));
    assert_eq!(n.state(IID), Some(InteractionState::NeedsInput));
    let fx = n.receive(&direct("msg-answer", CODER, REVIEWER, IID, "here you go"));
    assert_eq!(
        accepted(&fx).lifecycle,
        Outcome::Changed {
            from: InteractionState::NeedsInput,
            to: InteractionState::Working
        }
    );
    assert_eq!(fx.deliver, vec![REVIEWER.to_owned()]);
    assert_eq!(n.state(IID), Some(InteractionState::Working));

    // A capability follow-up resumes too.
    let mut n = outbound_in(InteractionState::NeedsInput);
    let fx = n.send(
        &capability("msg-cap-f", REVIEWER).to(CODER).interaction(IID),
        1,
    );
    assert_eq!(
        accepted(&fx).lifecycle,
        Outcome::Changed {
            from: InteractionState::NeedsInput,
            to: InteractionState::Working
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Lifecycle: terminal states, outsiders, unknown interactions
// ---------------------------------------------------------------------------------------------

#[test]
fn first_terminal_state_wins_cancellation_race() {
    // The initiator cancels while the target's completion is in flight.
    let mut n = outbound_in(InteractionState::Working);
    accepted(&n.initiator_receipt("canceled", None));
    let fx = n.target_trace("completed");
    let a = accepted(&fx);
    assert_eq!(a.lifecycle, Outcome::Ignored(Ignored::AfterTerminal));
    assert_eq!(a.handling, Handling::Ignored(Ignored::AfterTerminal));
    assert!(fx.deliver.is_empty());
    assert_eq!(n.state(IID), Some(InteractionState::Canceled));

    // The other order: completion first, the cancellation is then ignored.
    let mut n = outbound_in(InteractionState::Working);
    accepted(&n.target_trace("completed"));
    let fx = n.initiator_receipt("canceled", None);
    assert_eq!(
        accepted(&fx).lifecycle,
        Outcome::Ignored(Ignored::AfterTerminal)
    );
    assert_eq!(n.state(IID), Some(InteractionState::Completed));

    // Two terminal traces: the first one stays.
    let mut n = outbound_in(InteractionState::Submitted);
    accepted(&n.target_trace("failed"));
    accepted(&n.target_trace("completed"));
    assert_eq!(n.state(IID), Some(InteractionState::Failed));
}

#[test]
fn trace_and_receipt_after_terminal_are_ignored() {
    let receipts = [
        ("accepted", None),
        ("rejected", Some("busy")),
        ("duplicate", Some("duplicate")),
        ("expired", Some("expired")),
        ("unsupported", Some("unsupported_kind")),
        ("canceled", None),
    ];
    for terminal in TERMINAL_STATES {
        let mut n = outbound_in(terminal);
        for state in InteractionState::ALL {
            let fx = n.target_trace(state.as_str());
            let a = accepted(&fx);
            assert_eq!(
                a.lifecycle,
                Outcome::Ignored(Ignored::AfterTerminal),
                "trace {state} after {terminal}"
            );
            assert!(fx.deliver.is_empty());
        }
        for (status, reason) in receipts {
            let fx = n.target_receipt(status, reason);
            assert_eq!(
                accepted(&fx).lifecycle,
                Outcome::Ignored(Ignored::AfterTerminal),
                "receipt {status} after {terminal}"
            );
            assert!(fx.deliver.is_empty());
            assert!(fx.replies.is_empty());
        }
        assert_eq!(n.state(IID), Some(terminal));
    }
}

#[test]
fn direct_or_capability_after_terminal_is_interaction_closed() {
    for terminal in TERMINAL_STATES {
        let mut n = outbound_in(terminal);
        // From the network (the target writes back to the initiator).
        let id = n.fresh("direct");
        let fx = n.receive(&direct(&id, CODER, REVIEWER, IID, "one more thing"));
        assert_eq!(rejected(&fx), ReasonCode::InteractionClosed, "{terminal}");
        assert!(fx.deliver.is_empty());
        let id = n.fresh("cap");
        let fx = n.receive(&capability(&id, CODER).to(REVIEWER).interaction(IID));
        assert_eq!(rejected(&fx), ReasonCode::InteractionClosed, "{terminal}");
        assert!(fx.deliver.is_empty());
        assert!(
            fx.replies.is_empty(),
            "no automatic receipt for a capability"
        );
        // From the local initiator.
        let fx = n.initiator_direct();
        assert_eq!(rejected(&fx), ReasonCode::InteractionClosed, "{terminal}");
        assert_eq!(fx.publish, None);
        assert_eq!(n.state(IID), Some(terminal));
    }
}

#[test]
fn third_party_lifecycle_messages_are_ignored() {
    let mut n = outbound_in(InteractionState::Working);
    let events = [
        trace("msg-x1", OUTSIDER, REVIEWER, IID, "completed"),
        trace("msg-x2", OUTSIDER, REVIEWER, IID, "needs_input"),
        receipt("msg-x3", OUTSIDER, REVIEWER, IID, "rejected", Some("busy")),
        receipt("msg-x4", OUTSIDER, REVIEWER, IID, "canceled", None),
        direct("msg-x5", OUTSIDER, REVIEWER, IID, "let me in"),
        capability("msg-x6", OUTSIDER).to(REVIEWER).interaction(IID),
    ];
    for env in &events {
        let fx = n.receive_at(env, NODE_C, NOW);
        let a = accepted(&fx);
        assert_eq!(
            a.lifecycle,
            Outcome::Ignored(Ignored::NotParticipant),
            "{}",
            env.id()
        );
        assert_eq!(a.handling, Handling::Ignored(Ignored::NotParticipant));
        assert!(fx.deliver.is_empty());
        assert!(fx.replies.is_empty());
    }
    // A local third party too.
    let fx = n.send(&trace("msg-x7", TESTER, CODER, IID, "failed"), 2);
    assert_eq!(
        accepted(&fx).lifecycle,
        Outcome::Ignored(Ignored::NotParticipant)
    );
    assert_eq!(n.state(IID), Some(InteractionState::Working));
    let i = n.router.interactions.get(CH, IID).expect("tracked");
    assert_eq!((i.initiator.as_str(), i.target.as_str()), (REVIEWER, CODER));
}

#[test]
fn follow_up_not_addressed_to_counterparty_is_ignored() {
    // The remote coder opened with the reviewer and is asked for input...
    let (mut n, _) = inbound_opened();
    accepted(&n.send(&trace("msg-ni", REVIEWER, CODER, IID, "needs_input"), 1));
    // ...but addresses its follow-up to another local peer.
    let fx = n.receive(&direct("msg-f1", CODER, TESTER, IID, "answer"));
    let a = accepted(&fx);
    assert_eq!(a.lifecycle, Outcome::Ignored(Ignored::WrongCounterparty));
    assert_eq!(a.handling, Handling::Ignored(Ignored::WrongCounterparty));
    assert!(fx.deliver.is_empty());
    let fx = n.receive(&capability("msg-f2", CODER).to(TESTER).interaction(IID));
    assert_eq!(
        accepted(&fx).lifecycle,
        Outcome::Ignored(Ignored::WrongCounterparty)
    );
    assert!(fx.deliver.is_empty());
    assert_eq!(n.state(IID), Some(InteractionState::NeedsInput));
}

#[test]
fn stray_follow_up_after_the_end_is_ignored_not_answered_by_a_third_party() {
    let (mut n, _) = inbound_opened();
    accepted(&n.send(&trace("msg-done", REVIEWER, CODER, IID, "completed"), 1));
    // The initiator sends more work, but to a local peer that is not in the interaction: that
    // peer must not answer for it (no automatic interaction_closed receipt).
    let fx = n.receive(&direct("msg-stray", CODER, TESTER, IID, "one more thing"));
    assert_eq!(
        accepted(&fx).lifecycle,
        Outcome::Ignored(Ignored::WrongCounterparty)
    );
    assert!(fx.replies.is_empty());
    assert!(fx.deliver.is_empty());
    assert_eq!(n.state(IID), Some(InteractionState::Completed));
}

#[test]
fn receipt_or_trace_for_unknown_interaction_is_ignored() {
    let mut n = scene();
    let events = [
        trace("msg-u1", CODER, REVIEWER, "int_unknown", "working"),
        trace("msg-u2", CODER, REVIEWER, "int_unknown", "completed"),
        receipt("msg-u3", CODER, REVIEWER, "int_unknown", "accepted", None),
        receipt("msg-u4", CODER, REVIEWER, "int_unknown", "canceled", None),
    ];
    for env in &events {
        let fx = n.receive(env);
        let a = accepted(&fx);
        assert_eq!(a.lifecycle, Outcome::Ignored(Ignored::UnknownInteraction));
        assert_eq!(a.handling, Handling::Ignored(Ignored::UnknownInteraction));
        assert!(fx.deliver.is_empty());
    }
    assert!(
        n.router.interactions.is_empty(),
        "receipts and traces never open"
    );
}

// ---------------------------------------------------------------------------------------------
// Automatic receipts
// ---------------------------------------------------------------------------------------------

#[test]
fn expired_direct_to_local_peer_gets_expired_receipt() {
    // expires_at reached.
    let mut n = scene();
    let env = direct("msg-exp-1", CODER, REVIEWER, IID, "late").expires_at(NOW);
    let fx = n.receive(&env);
    assert_eq!(rejected(&fx), ReasonCode::Expired);
    assert!(fx.deliver.is_empty());
    assert_auto_receipt(&fx, &env, "expired", "expired");
    assert!(n.router.interactions.is_empty());

    // ts outside the replay window (no expires_at).
    let mut n = scene();
    let env = direct("msg-exp-2", CODER, REVIEWER, IID, "late").ts(NOW - 301);
    let fx = n.receive(&env);
    assert_eq!(rejected(&fx), ReasonCode::Expired);
    assert_auto_receipt(&fx, &env, "expired", "expired");
}

#[test]
fn malformed_direct_to_local_peer_gets_rejected_malformed_receipt() {
    let mut n = scene();
    let env = direct("msg-bad-1", CODER, REVIEWER, IID, "   ");
    let fx = n.receive(&env);
    assert_eq!(rejected(&fx), ReasonCode::Malformed);
    assert!(fx.deliver.is_empty());
    assert_auto_receipt(&fx, &env, "rejected", "malformed");
    assert!(n.router.interactions.is_empty());

    // Identifiers are read trimmed from the partial decode.
    let mut n = scene();
    let env = direct("msg-bad-2", CODER, REVIEWER, IID, "ok")
        .set("body", json!({ "text": "ok", "artifacts": "not-an-array" }))
        .set("to", json!(format!("  {REVIEWER} ")));
    let fx = n.receive(&env);
    assert_eq!(rejected(&fx), ReasonCode::Malformed);
    assert_auto_receipt(&fx, &env, "rejected", "malformed");
}

#[test]
fn duplicate_direct_gets_duplicate_receipt() {
    let (mut n, open) = inbound_opened();
    let fx = n.receive(&open);
    assert_eq!(rejected(&fx), ReasonCode::Duplicate);
    assert!(fx.deliver.is_empty());
    assert_auto_receipt(&fx, &open, "duplicate", "duplicate");
}

#[test]
fn direct_into_completed_interaction_gets_interaction_closed_receipt() {
    let (mut n, _) = inbound_opened();
    accepted(&n.send(&trace("msg-done", REVIEWER, CODER, IID, "completed"), 1));
    assert_eq!(n.state(IID), Some(InteractionState::Completed));
    let env = direct("msg-late", CODER, REVIEWER, IID, "and another thing");
    let fx = n.receive(&env);
    assert_eq!(rejected(&fx), ReasonCode::InteractionClosed);
    assert!(fx.deliver.is_empty());
    assert_auto_receipt(&fx, &env, "rejected", "interaction_closed");
    assert_eq!(n.state(IID), Some(InteractionState::Completed));
}

#[test]
fn no_automatic_receipt_for_direct_to_non_local_peer() {
    let mut n = scene();
    let cases = [
        // Valid, but addressed to a remote peer or to nobody.
        (
            direct("msg-n1", CODER, OUTSIDER, IID, "hi"),
            ReasonCode::NotTarget,
        ),
        (
            direct("msg-n2", CODER, GHOST, IID, "hi"),
            ReasonCode::NotTarget,
        ),
        // Expired or malformed, addressed to a non-local peer.
        (
            direct("msg-n3", CODER, GHOST, IID, "hi").expires_at(NOW - 1),
            ReasonCode::Expired,
        ),
        (
            direct("msg-n4", CODER, OUTSIDER, IID, " "),
            ReasonCode::Malformed,
        ),
    ];
    for (env, reason) in &cases {
        let fx = n.receive(env);
        assert_eq!(rejected(&fx), *reason, "{}", env.id());
        assert!(fx.replies.is_empty(), "{}", env.id());
        assert!(fx.deliver.is_empty());
    }
    // The local peer of another channel does not count either.
    let env = direct("msg-n5", CODER, REVIEWER, IID, " ").set("channel", json!("ops"));
    let fx = n.receive(&env);
    assert_eq!(rejected(&fx), ReasonCode::Malformed);
    assert!(fx.replies.is_empty());
}

#[test]
fn no_automatic_receipt_for_non_direct_kinds() {
    let (mut n, _) = inbound_opened();
    // Expired / malformed non-direct envelopes addressed to a local peer.
    let cases = [
        (
            trace("msg-k1", CODER, REVIEWER, IID, "working").expires_at(NOW),
            ReasonCode::Expired,
        ),
        (
            trace("msg-k2", CODER, REVIEWER, IID, "dancing"),
            ReasonCode::Malformed,
        ),
        (
            say("msg-k3", CODER, " ").to(REVIEWER),
            ReasonCode::Malformed,
        ),
        (
            say("msg-k4", CODER, "old").to(REVIEWER).ts(NOW - 1000),
            ReasonCode::Expired,
        ),
        (
            receipt("msg-k5", CODER, REVIEWER, IID, "rejected", None),
            ReasonCode::Malformed,
        ),
        (
            capability("msg-k6", CODER)
                .to(REVIEWER)
                .interaction(IID)
                .expires_at(NOW - 5),
            ReasonCode::Expired,
        ),
    ];
    for (env, reason) in &cases {
        let fx = n.receive(env);
        assert_eq!(rejected(&fx), *reason, "{}", env.id());
        assert!(fx.replies.is_empty(), "{}", env.id());
    }
    // Duplicates of non-direct kinds.
    let t = trace("msg-k7", CODER, REVIEWER, IID, "working");
    accepted(&n.receive(&t));
    let fx = n.receive(&t);
    assert_eq!(rejected(&fx), ReasonCode::Duplicate);
    assert!(fx.replies.is_empty());
    let s = say("msg-k8", CODER, "hello");
    accepted(&n.receive(&s));
    let fx = n.receive(&s);
    assert_eq!(rejected(&fx), ReasonCode::Duplicate);
    assert!(fx.replies.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Routing and deduplication
// ---------------------------------------------------------------------------------------------

#[test]
fn duplicate_is_rejected_before_lifecycle_state_is_touched() {
    // A replayed needs_input trace after the initiator answered would move the interaction back
    // to needs_input if it were reprocessed.
    let mut n = outbound_in(InteractionState::Working);
    let ask = trace("msg-ask", CODER, REVIEWER, IID, "needs_input");
    accepted(&n.receive(&ask));
    accepted(&n.initiator_direct());
    assert_eq!(n.state(IID), Some(InteractionState::Working));
    let fx = n.receive(&ask);
    assert_eq!(rejected(&fx), ReasonCode::Duplicate);
    assert!(fx.deliver.is_empty());
    assert_eq!(n.state(IID), Some(InteractionState::Working));

    // A replayed opening direct into a needs_input interaction would resume it.
    let (mut n, open) = inbound_opened();
    accepted(&n.send(&trace("msg-ni", REVIEWER, CODER, IID, "needs_input"), 1));
    let fx = n.receive(&open);
    assert_eq!(rejected(&fx), ReasonCode::Duplicate);
    assert_eq!(n.state(IID), Some(InteractionState::NeedsInput));
    let updated = n
        .router
        .interactions
        .get(CH, IID)
        .expect("tracked")
        .updated_at;
    assert_eq!(updated, NOW);

    // A duplicate id is a duplicate whatever its content or kind.
    let fx = n.receive(&say(open.id(), OUTSIDER, "different content"));
    assert_eq!(rejected(&fx), ReasonCode::Duplicate);
    assert!(fx.deliver.is_empty());
}

#[test]
fn directed_envelope_to_non_local_peer_is_not_target() {
    let mut n = scene();
    let cases = [
        say("msg-r1", CODER, "hi").to(OUTSIDER),
        say("msg-r2", CODER, "hi").to(GHOST),
        direct("msg-r3", CODER, OUTSIDER, IID, "hi"),
        whois_request("msg-r4", CODER, None).to(OUTSIDER),
        trace("msg-r5", CODER, GHOST, IID, "working"),
        receipt("msg-r6", CODER, CODER, IID, "accepted", None),
        capability("msg-r7", CODER).to(GHOST),
        // A local peer of another channel.
        say("msg-r8", CODER, "hi")
            .to(REVIEWER)
            .set("channel", json!("ops")),
    ];
    for env in &cases {
        let fx = n.receive(env);
        assert_eq!(rejected(&fx), ReasonCode::NotTarget, "{}", env.id());
        assert!(fx.deliver.is_empty());
        assert!(fx.replies.is_empty());
        assert_eq!(fx.publish, None);
    }
    assert!(n.router.interactions.is_empty());

    // Routing comes before deduplication: a refused envelope does not burn its id.
    let fx = n.receive(&say("msg-r1", CODER, "hi").to(REVIEWER));
    accepted(&fx);
    assert_eq!(fx.deliver, vec![REVIEWER.to_owned(), TESTER.to_owned()]);
}

#[test]
fn say_from_network_is_delivered_to_every_local_peer_but_the_sender() {
    let mut n = scene();
    let fx = n.receive(&say("msg-s1", CODER, "hello all"));
    let a = accepted(&fx);
    assert_eq!(a.handling, Handling::Delivered);
    assert_eq!(a.lifecycle, Outcome::NotApplicable);
    assert_eq!(fx.deliver, vec![REVIEWER.to_owned(), TESTER.to_owned()]);
    // Even with a `to`, a say reaches every local peer but the sender.
    let fx = n.receive(&say("msg-s2", REVIEWER, "echo").to(TESTER));
    assert_eq!(fx.deliver, vec![TESTER.to_owned()]);
    // A channel without local peers.
    let fx = n.receive(&say("msg-s3", CODER, "anyone?").set("channel", json!("empty")));
    assert!(accepted(&fx).handling == Handling::Delivered && fx.deliver.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Presence
// ---------------------------------------------------------------------------------------------

#[test]
fn greet_from_network_refreshes_remote_presence_with_receiver_interval() {
    let mut n = Node::with_config(RouterConfig {
        greet_interval: 10,
        ..RouterConfig::default()
    });
    assert_eq!(n.router.presence.greet_interval(), 10);
    let fx = n.receive_at(&greet("msg-g1", card(CODER)), NODE_B, NOW);
    let a = accepted(&fx);
    assert_eq!(a.handling, Handling::Presence);
    assert!(fx.deliver.is_empty(), "greets are not delivered");
    assert!(fx.replies.is_empty());
    match n.router.presence.lookup(CH, CODER, NOW) {
        Some(Peer::Remote(r)) => {
            assert_eq!(r.origin, NODE_B);
            assert_eq!(r.last_seen, NOW);
            assert_eq!(r.expires_at, NOW + 20);
            assert_eq!(r.card.peer_id, CODER);
        }
        other => panic!("expected a remote peer, got {other:?}"),
    }

    // A later greet (possibly through another node) refreshes the entry.
    let later = greet("msg-g2", card(CODER)).ts(NOW + 15);
    accepted(&n.receive_at(&later, NODE_C, NOW + 15));
    match n.router.presence.lookup(CH, CODER, NOW + 15) {
        Some(Peer::Remote(r)) => {
            assert_eq!(r.origin, NODE_C);
            assert_eq!((r.last_seen, r.expires_at), (NOW + 15, NOW + 35));
        }
        other => panic!("expected a remote peer, got {other:?}"),
    }
    assert!(n.router.presence.lookup(CH, CODER, NOW + 34).is_some());
    assert!(n.router.presence.lookup(CH, CODER, NOW + 35).is_none());
}

#[test]
fn remote_presence_expires_at_last_seen_plus_two_intervals() {
    let mut n = scene(); // default interval: 30 s
    assert_eq!(n.router.presence.greet_interval(), 30);
    let present = |n: &Node, at: i64| n.router.presence.lookup(CH, CODER, at).is_some();
    assert!(present(&n, NOW + 59));
    assert!(!present(&n, NOW + 60), "expired when now >= last_seen + 60");
    assert_eq!(n.router.presence.remote_peers(CH, NOW + 59).count(), 2);
    assert_eq!(n.router.presence.remote_peers(CH, NOW + 60).count(), 0);
    // Local peers never expire.
    assert!(matches!(
        n.router.presence.lookup(CH, REVIEWER, NOW + 10_000),
        Some(Peer::Local(_))
    ));
    // An expired peer cannot be addressed any more.
    let fx = n.send_at(
        &say("msg-late", REVIEWER, "hi").to(CODER).ts(NOW + 60),
        1,
        NOW + 60,
    );
    assert_eq!(rejected(&fx), ReasonCode::NotFound);
    // Until it greets again.
    let g = greet("msg-back", card(CODER)).ts(NOW + 61);
    accepted(&n.receive_at(&g, NODE_B, NOW + 61));
    assert!(present(&n, NOW + 61));
    let swept = n.router.presence.sweep(NOW + 61);
    assert_eq!(swept, vec![(CH.to_owned(), OUTSIDER.to_owned())]);
}

#[test]
fn echo_of_local_peer_greet_is_ignored() {
    let mut n = scene();
    // Our own greet echoed back by the mesh: same id, so a duplicate.
    let mut n2 = Node::new();
    let g = greet("msg-own-greet", reviewer_card());
    accepted(&n2.send(&g, 1));
    assert_eq!(rejected(&n2.receive(&g)), ReasonCode::Duplicate);

    // A greet from the network for a locally held Peer ID never shadows the local peer.
    let mut impostor = card(REVIEWER);
    impostor["capabilities"] = json!(["evil.plan"]);
    let fx = n.receive(&greet("msg-echo", impostor));
    assert_eq!(accepted(&fx).handling, Handling::Presence);
    match n.router.presence.lookup(CH, REVIEWER, NOW) {
        Some(Peer::Local(p)) => {
            assert_eq!(p.owner, 1);
            assert_eq!(p.card.capabilities, vec!["code.review"]);
        }
        other => panic!("expected the local peer, got {other:?}"),
    }
    assert!(
        n.router
            .presence
            .remote_peers(CH, NOW)
            .all(|p| p.card.peer_id != REVIEWER)
    );
    // A whois response for a local Peer ID is ignored for presence as well.
    let mut impostor = card(TESTER);
    impostor["capabilities"] = json!(["evil.plan"]);
    let fx = n.receive(&whois_response("msg-echo-2", impostor, REVIEWER, "msg-q"));
    accepted(&fx);
    assert!(matches!(
        n.router.presence.lookup(CH, TESTER, NOW),
        Some(Peer::Local(p)) if p.card.capabilities.is_empty()
    ));
}

#[test]
fn local_registration_takes_precedence_over_remote_entry() {
    let mut n = scene();
    assert!(matches!(
        n.router.presence.lookup(CH, CODER, NOW),
        Some(Peer::Remote(_))
    ));
    // The coder session moves to this node.
    n.join(card(CODER), 3);
    assert!(matches!(
        n.router.presence.lookup(CH, CODER, NOW),
        Some(Peer::Local(p)) if p.owner == 3
    ));
    assert!(
        n.router
            .presence
            .remote_peers(CH, NOW)
            .all(|p| p.card.peer_id != CODER)
    );
    // Directed traffic to it is now local.
    let fx = n.send(&say("msg-l1", REVIEWER, "hi").to(CODER), 1);
    assert_eq!(fx.publish, None);
    assert_eq!(fx.deliver, vec![CODER.to_owned(), TESTER.to_owned()]);
}

#[test]
fn whois_response_refreshes_remote_presence_and_is_delivered() {
    let mut n = scene();
    let newbie = "newbie.sess-1";
    let mut c = card(newbie);
    c["capabilities"] = json!(["collect-failing-tests"]);
    let resp = whois_response("msg-wr", c, REVIEWER, "msg-q1").ext(json!({
        "agh.capability_catalog": { "capabilities": [{
            "id": "collect-failing-tests",
            "summary": "Collect the exact failing package path and test output.",
            "outcome": "A normalized incident bundle for a debugging follow-up.",
            "digest": "sha256:c62db095b019517649f92b1da0550998e961094999893803b7bcfad37851de53",
        }]}
    }));
    let fx = n.receive_at(&resp, NODE_C, NOW + 5);
    let a = accepted(&fx);
    assert_eq!(a.handling, Handling::Delivered);
    assert_eq!(fx.deliver, vec![REVIEWER.to_owned()], "addressed peer only");
    match n.router.presence.lookup(CH, newbie, NOW + 5) {
        Some(Peer::Remote(r)) => {
            assert_eq!(r.origin, NODE_C);
            assert_eq!((r.last_seen, r.expires_at), (NOW + 5, NOW + 65));
            let cat = r
                .catalog
                .as_ref()
                .expect("catalog cached: ids match the card");
            assert_eq!(cat.ids().collect::<Vec<_>>(), ["collect-failing-tests"]);
        }
        other => panic!("expected a remote peer, got {other:?}"),
    }
    // A rich catalog whose ids differ from the card's capabilities is not cached.
    let mut c = card("mismatch.sess-2");
    c["capabilities"] = json!(["something-else"]);
    let resp = whois_response("msg-wr3", c, REVIEWER, "msg-q3").ext(json!({
        "agh.capability_catalog": { "capabilities": [{
            "id": "collect-failing-tests",
            "summary": "Collect the exact failing package path and test output.",
            "outcome": "A normalized incident bundle for a debugging follow-up.",
            "digest": COLLECT_DIGEST,
        }]}
    }));
    accepted(&n.receive(&resp));
    match n.router.presence.lookup(CH, "mismatch.sess-2", NOW) {
        Some(Peer::Remote(r)) => assert!(r.catalog.is_none()),
        other => panic!("expected a remote peer, got {other:?}"),
    }

    // A response also refreshes an already known peer.
    let fx = n.receive_at(
        &whois_response("msg-wr2", card(CODER), TESTER, "msg-q2").ts(NOW + 50),
        NODE_B,
        NOW + 50,
    );
    assert_eq!(fx.deliver, vec![TESTER.to_owned()]);
    match n.router.presence.lookup(CH, CODER, NOW + 50) {
        Some(Peer::Remote(r)) => assert_eq!(r.expires_at, NOW + 110),
        other => panic!("expected a remote peer, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// whois responders
// ---------------------------------------------------------------------------------------------

#[test]
fn broadcast_whois_answered_by_every_matching_local_peer_except_sender() {
    // From a remote requester: both local peers answer an empty query.
    let mut n = scene();
    let fx = n.receive(&whois_request("msg-w1", CODER, None));
    assert_eq!(accepted(&fx).handling, Handling::Answered);
    assert!(fx.deliver.is_empty(), "requests are not delivered");
    assert_eq!(responders(&fx), [REVIEWER, TESTER]);
    assert!(fx.replies.iter().all(|r| r.route == Route::Remote(NODE_B)));

    // From a local requester (send path): the sender does not answer itself, the answers stay
    // local, and the request is still published.
    let fx = n.send(&whois_request("msg-w2", REVIEWER, Some("")), 1);
    assert_eq!(fx.publish, Some(Route::Broadcast));
    assert_eq!(responders(&fx), [TESTER]);
    assert_eq!(fx.replies[0].route, Route::Local(REVIEWER.to_owned()));
    assert_eq!(fx.replies[0].envelope.to.as_deref(), Some(REVIEWER));

    // Sender exclusion also when the request comes back from the network under a local id.
    let fx = n.receive(&whois_request("msg-w3", TESTER, Some("capability")));
    assert_eq!(responders(&fx), [REVIEWER]);
}

#[test]
fn whois_matching_is_exact_and_case_sensitive() {
    let mut n = scene();
    let cases: [(&str, &[&str]); 16] = [
        ("", &[REVIEWER, TESTER]),
        ("   ", &[REVIEWER, TESTER]),
        (REVIEWER, &[REVIEWER]),
        (TESTER, &[TESTER]),
        ("Review Bot", &[REVIEWER]),
        ("code.review", &[REVIEWER]),
        ("  code.review ", &[REVIEWER]),
        ("agh-network/v0", &[REVIEWER, TESTER]),
        ("capability", &[REVIEWER, TESTER]),
        ("unverified", &[REVIEWER]),
        // No case folding, substrings or prefixes.
        ("review bot", &[]),
        ("CODE.REVIEW", &[]),
        ("code", &[]),
        ("sess-xyz", &[]),
        ("Review", &[]),
        ("agh-network", &[]),
    ];
    for (query, expect) in cases {
        let id = n.fresh("whois");
        let fx = n.receive(&whois_request(&id, CODER, Some(query)));
        assert_eq!(accepted(&fx).handling, Handling::Answered);
        assert_eq!(responders(&fx), expect, "query {query:?}");
    }
}

#[test]
fn whois_matches_capability_ids_from_local_catalog_but_not_summaries() {
    let mut n = scene();
    let applied = n
        .router
        .presence
        .set_local_catalog(TESTER, &2, Some(&catalog()));
    assert_eq!(applied, [CH]);
    for (query, expect) in [
        ("build-site", &[TESTER][..]),
        ("collect-failing-tests", &[TESTER][..]),
        ("Build the landing page.", &[][..]),
        ("build", &[][..]),
    ] {
        let id = n.fresh("whois");
        let fx = n.receive(&whois_request(&id, CODER, Some(query)));
        assert_eq!(responders(&fx), expect, "query {query:?}");
    }
}

#[test]
fn directed_whois_answered_by_addressed_peer_even_without_match() {
    let mut n = scene();
    let fx = n.receive(&whois_request("msg-d1", CODER, Some("nothing-matches-this")).to(TESTER));
    assert_eq!(accepted(&fx).handling, Handling::Answered);
    assert_eq!(responders(&fx), [TESTER]);
    // A matching query still gets only the addressed peer.
    let fx = n.receive(&whois_request("msg-d2", CODER, Some("capability")).to(REVIEWER));
    assert_eq!(responders(&fx), [REVIEWER]);
    // Send path: a local peer asks another local peer directly.
    let fx = n.send(
        &whois_request("msg-d3", REVIEWER, Some("zzz")).to(TESTER),
        1,
    );
    assert_eq!(responders(&fx), [TESTER]);
    assert_eq!(fx.replies[0].route, Route::Local(REVIEWER.to_owned()));
    assert_eq!(fx.publish, None, "local to local");
    // Send path: a directed request to a remote peer is published, nobody answers here.
    let fx = n.send(&whois_request("msg-d4", REVIEWER, None).to(CODER), 1);
    assert_eq!(fx.publish, Some(Route::Remote(NODE_B)));
    assert!(fx.replies.is_empty());
}

#[test]
fn directed_whois_addressed_to_its_own_sender_is_ignored() {
    let mut n = scene();
    let fx = n.send(&whois_request("msg-self-1", REVIEWER, None).to(REVIEWER), 1);
    assert_eq!(accepted(&fx).handling, Handling::Answered);
    assert!(fx.replies.is_empty());
    assert!(fx.refused.is_empty());
    let fx = n.receive(&whois_request("msg-self-2", TESTER, Some(TESTER)).to(TESTER));
    assert_eq!(accepted(&fx).handling, Handling::Answered);
    assert!(fx.replies.is_empty());
}

#[test]
fn whois_responses_are_well_formed_and_validate() {
    let mut n = scene();
    let req = whois_request("msg-req", CODER, None);
    let fx = n.receive(&req);
    assert_eq!(fx.replies.len(), 2);
    for (i, reply) in fx.replies.iter().enumerate() {
        let env = &reply.envelope;
        assert_eq!(env.kind, Kind::Whois);
        assert_eq!(env.id, format!("gen-{}", i + 1));
        assert_eq!(env.channel, CH);
        assert_eq!(env.to.as_deref(), Some(CODER));
        assert_eq!(env.reply_to.as_deref(), Some("msg-req"));
        assert_eq!(env.ts, NOW);
        assert!(env.interaction_id.is_none());
        assert!(env.proof.is_none());
        assert!(env.ext.is_none(), "no rich discovery requested");
        let v = json_of(env);
        assert_eq!(v["body"]["type"], "response");
        assert_eq!(v["body"]["peer_card"]["peer_id"], json!(env.from));
        assert_eq!(v["proof"], Value::Null);
        assert_validates(env);
    }
    let reviewer = json_of(&fx.replies[0].envelope);
    assert_eq!(reviewer["body"]["peer_card"], reviewer_card());
}

// ---------------------------------------------------------------------------------------------
// Capability discovery: brief and rich projections
// ---------------------------------------------------------------------------------------------

const BUILD_SITE_DIGEST: &str =
    "sha256:38096a54f5072f05ff954f94315a9dba6c373f3589bf04053684204b6cd86b03";
const COLLECT_DIGEST: &str =
    "sha256:c62db095b019517649f92b1da0550998e961094999893803b7bcfad37851de53";

/// Tester's catalog: `build-site`, `review-copy`, `collect-failing-tests` (the AGH spec's example
/// capabilities).
fn catalog() -> Catalog {
    let text = json!([
        {
            "id": "build-site",
            "summary": "Build the landing page.",
            "outcome": "A finished landing page.",
            "version": "1.0.0",
            "context_needed": ["repo", "brand brief"],
            "execution_outline": ["Inspect", "Build"],
            "constraints": ["No mocks"],
        },
        {
            "id": "review-copy",
            "summary": "Review conversion copy.",
            "outcome": "Annotated copy with suggested edits.",
        },
        {
            "id": "collect-failing-tests",
            "summary": "Collect the exact failing package path and test output.",
            "outcome": "A normalized incident bundle for a debugging follow-up.",
        },
    ])
    .to_string();
    Catalog::from_json(&text).expect("a valid catalog")
}

fn review_copy_digest() -> String {
    CapabilityDoc {
        id: "review-copy".into(),
        summary: "Review conversion copy.".into(),
        outcome: "Annotated copy with suggested edits.".into(),
        ..CapabilityDoc::default()
    }
    .compute_digest()
}

fn full_rich_entries() -> Value {
    json!([
        {
            "id": "build-site",
            "summary": "Build the landing page.",
            "outcome": "A finished landing page.",
            "version": "1.0.0",
            "digest": BUILD_SITE_DIGEST,
            "context_needed": ["repo", "brand brief"],
            "execution_outline": ["Inspect", "Build"],
            "constraints": ["No mocks"],
        },
        {
            "id": "review-copy",
            "summary": "Review conversion copy.",
            "outcome": "Annotated copy with suggested edits.",
            "digest": review_copy_digest(),
        },
        {
            "id": "collect-failing-tests",
            "summary": "Collect the exact failing package path and test output.",
            "outcome": "A normalized incident bundle for a debugging follow-up.",
            "digest": COLLECT_DIGEST,
        },
    ])
}

/// The scene with the catalog on the tester.
fn catalog_scene() -> Node {
    let mut n = scene();
    n.router
        .presence
        .set_local_catalog(TESTER, &2, Some(&catalog()));
    n
}

/// Sends a whois request directed at `to` with `ext` from the coder; returns the response JSON.
#[track_caller]
fn ask(n: &mut Node, to: &str, ext: Option<Value>) -> Value {
    let id = n.fresh("whois");
    let mut req = whois_request(&id, CODER, None).to(to);
    if let Some(ext) = ext {
        req = req.ext(ext);
    }
    let fx = n.receive(&req);
    assert_eq!(accepted(&fx).handling, Handling::Answered);
    assert!(fx.refused.is_empty(), "refused: {:?}", fx.refused);
    let reply = only_reply(&fx);
    assert_validates(&reply.envelope);
    json_of(&reply.envelope)
}

fn rich_ids(response: &Value) -> Vec<String> {
    response["ext"]["agh.capability_catalog"]["capabilities"]
        .as_array()
        .expect("a rich catalog array")
        .iter()
        .map(|e| e["id"].as_str().expect("entry id").to_owned())
        .collect()
}

#[test]
fn rich_whois_adds_envelope_level_catalog_in_catalog_order() {
    let mut n = catalog_scene();
    let resp = ask(
        &mut n,
        TESTER,
        Some(json!({ "agh.include": ["capability_catalog"] })),
    );
    assert_eq!(
        resp["ext"],
        json!({ "agh.capability_catalog": { "capabilities": full_rich_entries() } })
    );
    let card = &resp["body"]["peer_card"];
    assert!(
        card["ext"].get("agh.capability_catalog").is_none(),
        "never inside peer_card.ext"
    );
    // The brief projection rides along.
    assert_eq!(
        card["capabilities"],
        json!(["build-site", "review-copy", "collect-failing-tests"])
    );
    assert_eq!(
        card["ext"]["agh.capabilities_brief"],
        json!([
            { "id": "build-site", "summary": "Build the landing page." },
            { "id": "review-copy", "summary": "Review conversion copy." },
            {
                "id": "collect-failing-tests",
                "summary": "Collect the exact failing package path and test output.",
            },
        ])
    );
    // Unknown values inside agh.include are ignored.
    let resp = ask(
        &mut n,
        TESTER,
        Some(json!({ "agh.include": ["acme.future", "capability_catalog"] })),
    );
    assert_eq!(
        rich_ids(&resp),
        ["build-site", "review-copy", "collect-failing-tests"]
    );
    // Broadcast rich requests work the same way (one response per local peer).
    let fx = n.receive(
        &whois_request("msg-rb", CODER, None).ext(json!({ "agh.include": ["capability_catalog"] })),
    );
    assert_eq!(responders(&fx), [REVIEWER, TESTER]);
    let tester = json_of(&fx.replies[1].envelope);
    assert_eq!(
        tester["ext"]["agh.capability_catalog"]["capabilities"],
        full_rich_entries()
    );
}

#[test]
fn rich_catalog_digests_match_capability_transfer() {
    let mut n = catalog_scene();
    let resp = ask(
        &mut n,
        TESTER,
        Some(json!({ "agh.include": ["capability_catalog"] })),
    );
    // The rich entry and a transfer of the same record agree on id, summary, outcome, digest.
    let entry = &resp["ext"]["agh.capability_catalog"]["capabilities"][2];
    let fx = n.send(&capability("msg-xfer", TESTER), 2);
    accepted(&fx);
    let sent = capability("msg-xfer", TESTER).0;
    for key in ["id", "summary", "outcome", "digest"] {
        assert_eq!(entry[key], sent["body"]["capability"][key], "{key}");
    }
}

#[test]
fn whois_without_include_has_no_catalog_key() {
    let mut n = catalog_scene();
    let resp = ask(&mut n, TESTER, None);
    assert!(resp.get("ext").is_none(), "{resp}");
    // Other ext keys on the request do not trigger it either.
    let resp = ask(
        &mut n,
        TESTER,
        Some(json!({ "agh.capability_ids": ["build-site"], "acme.x": 1 })),
    );
    assert!(resp.get("ext").is_none(), "{resp}");
    // The brief projection is still there, unfiltered.
    assert_eq!(
        resp["body"]["peer_card"]["capabilities"],
        json!(["build-site", "review-copy", "collect-failing-tests"])
    );
}

#[test]
fn bare_string_agh_include_is_ignored() {
    let mut n = catalog_scene();
    for include in [
        json!("capability_catalog"),
        json!({ "capability_catalog": true }),
        json!(null),
        json!([1, 2]),
    ] {
        let resp = ask(&mut n, TESTER, Some(json!({ "agh.include": include })));
        assert!(resp.get("ext").is_none(), "agh.include = {include}: {resp}");
    }
}

#[test]
fn capability_ids_filter_keeps_catalog_order() {
    let mut n = catalog_scene();
    let resp = ask(
        &mut n,
        TESTER,
        Some(json!({
            "agh.include": ["capability_catalog"],
            "agh.capability_ids": ["collect-failing-tests", " build-site ", "nope"],
        })),
    );
    assert_eq!(rich_ids(&resp), ["build-site", "collect-failing-tests"]);
    let entries = resp["ext"]["agh.capability_catalog"]["capabilities"].clone();
    let full = full_rich_entries();
    assert_eq!(entries, json!([full[0], full[2]]));
    // The card is narrowed to the same set, brief aligned.
    let card = &resp["body"]["peer_card"];
    assert_eq!(
        card["capabilities"],
        json!(["build-site", "collect-failing-tests"])
    );
    let brief_ids: Vec<&str> = card["ext"]["agh.capabilities_brief"]
        .as_array()
        .expect("brief")
        .iter()
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    assert_eq!(brief_ids, ["build-site", "collect-failing-tests"]);
}

#[test]
fn unknown_empty_or_non_array_capability_ids_yield_empty_catalog() {
    let mut n = catalog_scene();
    for ids in [
        json!(["nope", "also-nope"]),
        json!([]),
        json!(["   ", ""]),
        json!("build-site"),
        json!({ "build-site": true }),
        json!([1, 2]),
        json!(7),
        json!(null),
    ] {
        let resp = ask(
            &mut n,
            TESTER,
            Some(json!({ "agh.include": ["capability_catalog"], "agh.capability_ids": ids })),
        );
        assert_eq!(
            resp["ext"],
            json!({ "agh.capability_catalog": { "capabilities": [] } }),
            "agh.capability_ids = {ids}"
        );
    }
}

#[test]
fn rich_request_to_peer_without_catalog_yields_empty_list() {
    let mut n = catalog_scene();
    let resp = ask(
        &mut n,
        REVIEWER,
        Some(json!({ "agh.include": ["capability_catalog"] })),
    );
    assert_eq!(
        resp["ext"],
        json!({ "agh.capability_catalog": { "capabilities": [] } })
    );
    assert!(resp["body"]["peer_card"].get("ext").is_none());
    // The same with a filter.
    let resp = ask(
        &mut n,
        REVIEWER,
        Some(json!({ "agh.include": ["capability_catalog"], "agh.capability_ids": ["x"] })),
    );
    assert_eq!(rich_ids(&resp), Vec::<String>::new());
}

#[test]
fn brief_projection_present_with_catalog_absent_without() {
    let mut n = catalog_scene();
    // With a catalog: ids in catalog order and aligned {id, summary} pairs.
    let resp = ask(&mut n, TESTER, None);
    let card = &resp["body"]["peer_card"];
    let caps = card["capabilities"].as_array().expect("capabilities");
    let brief = card["ext"]["agh.capabilities_brief"]
        .as_array()
        .expect("brief present");
    assert_eq!(caps.len(), 3);
    assert_eq!(brief.len(), caps.len());
    for (cap, entry) in caps.iter().zip(brief) {
        assert_eq!(&entry["id"], cap);
        let keys: Vec<&String> = entry.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["id", "summary"], "brief entries carry no outcome");
    }
    assert_eq!(brief[1]["summary"], "Review conversion copy.");

    // Without a catalog: the brief key is absent.
    let resp = ask(&mut n, REVIEWER, None);
    let card = &resp["body"]["peer_card"];
    assert!(card.get("ext").is_none(), "{card}");

    // Removing the catalog removes the brief, other card ext keys stay.
    let mut c = tester_card();
    c["ext"] = json!({ "acme.x": { "k": [1] } });
    n.join(c, 2);
    assert_eq!(n.router.presence.set_local_catalog(TESTER, &2, None), [CH]);
    let resp = ask(&mut n, TESTER, None);
    assert_eq!(
        resp["body"]["peer_card"]["ext"],
        json!({ "acme.x": { "k": [1] } })
    );
    assert_eq!(resp["body"]["peer_card"]["capabilities"], json!([]));
}

#[test]
fn local_peer_projected_card_carries_brief() {
    let n = catalog_scene();
    let tester = n.router.presence.local(CH, TESTER).expect("local");
    let projected = tester.projected_card();
    assert_eq!(
        projected.capabilities,
        vec!["build-site", "review-copy", "collect-failing-tests"]
    );
    let ext: Value =
        serde_json::from_str(projected.ext.as_deref().expect("ext").get()).expect("json");
    assert_eq!(ext["agh.capabilities_brief"][0]["id"], "build-site");
    assert!(tester.card.ext.is_none(), "the stored card is not modified");
    let reviewer = n.router.presence.local(CH, REVIEWER).expect("local");
    assert!(reviewer.projected_card().ext.is_none());
}

#[test]
fn oversized_rich_response_is_refused() {
    let mut n = scene();
    // Twelve documents with 100 kB outcomes: the brief stays small, the rich catalog does not.
    let docs = (0..12)
        .map(|i| CapabilityDoc {
            id: format!("bulk-{i:02}"),
            summary: format!("Bulk capability {i}."),
            outcome: "x".repeat(100_000),
            ..CapabilityDoc::default()
        })
        .collect();
    let big = Catalog::new(docs).expect("valid");
    n.router.presence.set_local_catalog(TESTER, &2, Some(&big));

    let rich = json!({ "agh.include": ["capability_catalog"] });
    let fx = n.receive(&whois_request("msg-big-1", CODER, None).ext(rich.clone()));
    assert_eq!(accepted(&fx).handling, Handling::Answered);
    assert_eq!(
        responders(&fx),
        [REVIEWER],
        "the oversized response is not emitted"
    );
    assert_eq!(fx.refused.len(), 1);
    assert!(fx.refused[0].detail().contains(TESTER), "{}", fx.refused[0]);
    assert!(
        fx.refused[0].detail().contains("1048576"),
        "{}",
        fx.refused[0]
    );

    // Directed: nothing emitted at all.
    let fx = n.receive(&whois_request("msg-big-2", CODER, None).to(TESTER).ext(rich));
    assert!(fx.replies.is_empty());
    assert_eq!(fx.refused.len(), 1);

    // Narrowed to fewer documents, the response fits again.
    let fx = n.receive(
        &whois_request("msg-big-3", CODER, None)
            .to(TESTER)
            .ext(json!({
                "agh.include": ["capability_catalog"],
                "agh.capability_ids": ["bulk-00", "bulk-01"],
            })),
    );
    assert!(fx.refused.is_empty());
    let reply = only_reply(&fx);
    assert!(reply.envelope.encoded_len() <= agora_agh::MAX_ENVELOPE_BYTES);
    assert_validates(&reply.envelope);

    // Without rich discovery the brief-only response is small.
    let fx = n.receive(&whois_request("msg-big-4", CODER, None).to(TESTER));
    assert!(fx.refused.is_empty());
    assert!(only_reply(&fx).envelope.encoded_len() < 10_000);
}

// ---------------------------------------------------------------------------------------------
// Send path
// ---------------------------------------------------------------------------------------------

#[test]
fn connection_must_greet_before_sending() {
    let mut n = scene();
    // A connection that never greeted.
    let fx = n.send(&say("msg-p1", "newcomer.sess-1", "hi"), 9);
    assert_eq!(rejected(&fx), ReasonCode::VerificationFailed);
    assert_eq!(fx.publish, None);
    assert!(fx.deliver.is_empty());
    // A connection speaking for a peer another connection holds.
    let fx = n.send(&say("msg-p2", REVIEWER, "hi"), 2);
    assert_eq!(rejected(&fx), ReasonCode::VerificationFailed);
    let fx = n.send(&direct("msg-p3", REVIEWER, CODER, IID, "hi"), 2);
    assert_eq!(rejected(&fx), ReasonCode::VerificationFailed);
    assert!(n.router.interactions.is_empty());
    // Greeting in one channel does not allow sending in another.
    let fx = n.send(
        &say("msg-p4", REVIEWER, "hi").set("channel", json!("ops")),
        1,
    );
    assert_eq!(rejected(&fx), ReasonCode::VerificationFailed);
    // After greeting, the same message goes out.
    n.join(card("newcomer.sess-1"), 9);
    let fx = n.send(&say("msg-p1", "newcomer.sess-1", "hi"), 9);
    accepted(&fx);
    assert_eq!(fx.publish, Some(Route::Broadcast));
}

#[test]
fn another_owner_greeting_same_peer_id_is_refused() {
    let mut n = scene();
    let fx = n.send(&greet("msg-steal", card(REVIEWER)), 2);
    assert_eq!(rejected(&fx), ReasonCode::VerificationFailed);
    assert_eq!(fx.publish, None);
    match n.router.presence.local(CH, REVIEWER) {
        Some(p) => {
            assert_eq!(p.owner, 1);
            assert_eq!(p.card.display_name.as_deref(), Some("Review Bot"));
        }
        None => panic!("the reviewer is still local"),
    }
    // The holder may re-greet with a new card.
    let mut c = reviewer_card();
    c["display_name"] = json!("Review Bot 2");
    n.join(c, 1);
    assert_eq!(
        n.router
            .presence
            .local(CH, REVIEWER)
            .and_then(|p| p.card.display_name.as_deref()),
        Some("Review Bot 2")
    );
}

#[test]
fn directed_send_to_absent_peer_is_not_found() {
    let mut n = scene();
    for env in [
        say("msg-a1", REVIEWER, "hi").to(GHOST),
        direct("msg-a2", REVIEWER, GHOST, IID, "hi"),
        whois_request("msg-a3", REVIEWER, None).to(GHOST),
        capability("msg-a4", REVIEWER).to(GHOST),
    ] {
        let fx = n.send(&env, 1);
        assert_eq!(rejected(&fx), ReasonCode::NotFound, "{}", env.id());
        assert_eq!(fx.publish, None);
        assert!(fx.deliver.is_empty());
    }
    // Present in another channel only.
    let g = greet("msg-ops-greet", card(REVIEWER)).set("channel", json!("ops"));
    accepted(&n.send(&g, 1));
    let fx = n.send(
        &say("msg-a5", REVIEWER, "hi")
            .to(TESTER)
            .set("channel", json!("ops")),
        1,
    );
    assert_eq!(rejected(&fx), ReasonCode::NotFound);
    // The ids of refused sends were not consumed.
    let fx = n.send(&say("msg-a1", REVIEWER, "hi").to(TESTER), 1);
    accepted(&fx);
    assert_eq!(fx.deliver, vec![TESTER.to_owned()]);
    assert!(n.router.interactions.is_empty());
}

#[test]
fn send_into_finished_interaction_is_interaction_closed() {
    for terminal in TERMINAL_STATES {
        let mut n = outbound_in(terminal);
        let fx = n.initiator_direct();
        assert_eq!(rejected(&fx), ReasonCode::InteractionClosed, "{terminal}");
        assert_eq!(fx.publish, None);
        let fx = n.send(
            &capability("msg-c-late", REVIEWER)
                .to(CODER)
                .interaction(IID),
            1,
        );
        assert_eq!(rejected(&fx), ReasonCode::InteractionClosed);
        assert_eq!(fx.publish, None);
        assert_eq!(n.state(IID), Some(terminal));
    }
    // Local to local as well: the target finished, the initiator may not send more work.
    let mut n = scene();
    accepted(&n.send(&direct("msg-ll1", REVIEWER, TESTER, IID, "go"), 1));
    accepted(&n.send(&trace("msg-ll2", TESTER, REVIEWER, IID, "failed"), 2));
    let fx = n.send(&direct("msg-ll3", REVIEWER, TESTER, IID, "again"), 1);
    assert_eq!(rejected(&fx), ReasonCode::InteractionClosed);
    assert!(fx.deliver.is_empty());
}

#[test]
fn broadcast_say_publishes_and_delivers_to_other_local_peers() {
    let mut n = scene();
    let fx = n.send(&say("msg-b1", REVIEWER, "hello builders"), 1);
    let a = accepted(&fx);
    assert_eq!(a.kind, Kind::Say);
    assert_eq!(a.handling, Handling::Delivered);
    assert_eq!(fx.publish, Some(Route::Broadcast));
    assert_eq!(fx.deliver, vec![TESTER.to_owned()]);
    assert!(fx.replies.is_empty());
    // Our own broadcast echoed back by the mesh is a duplicate.
    let fx = n.receive(&say("msg-b1", REVIEWER, "hello builders"));
    assert_eq!(rejected(&fx), ReasonCode::Duplicate);
    // Resending the same id is refused too.
    let fx = n.send(&say("msg-b1", REVIEWER, "hello builders"), 1);
    assert_eq!(rejected(&fx), ReasonCode::Duplicate);
    assert_eq!(fx.publish, None);
}

#[test]
fn local_to_local_direct_delivers_locally_without_publishing() {
    let mut n = scene();
    let fx = n.send(&direct("msg-ll", REVIEWER, TESTER, IID, "please test"), 1);
    let a = accepted(&fx);
    assert_eq!(a.lifecycle, Outcome::Opened);
    assert_eq!(a.handling, Handling::Delivered);
    assert_eq!(fx.publish, None);
    assert_eq!(fx.deliver, vec![TESTER.to_owned()]);
    let i = n.router.interactions.get(CH, IID).expect("opened");
    assert_eq!(
        (i.initiator.as_str(), i.target.as_str()),
        (REVIEWER, TESTER)
    );
    // The tester reports back locally too.
    let fx = n.send(&trace("msg-ll-t", TESTER, REVIEWER, IID, "working"), 2);
    assert_eq!(fx.publish, None);
    assert_eq!(fx.deliver, vec![REVIEWER.to_owned()]);
    assert_eq!(n.state(IID), Some(InteractionState::Working));
}

#[test]
fn directed_send_to_remote_peer_publishes_to_its_origin() {
    let mut n = scene();
    let fx = n.send(&direct("msg-rm1", REVIEWER, OUTSIDER, IID, "hi"), 1);
    accepted(&fx);
    assert_eq!(fx.publish, Some(Route::Remote(NODE_C)));
    assert!(fx.deliver.is_empty(), "nobody local is addressed");
    let fx = n.send(&say("msg-rm2", REVIEWER, "hi").to(CODER), 1);
    assert_eq!(fx.publish, Some(Route::Remote(NODE_B)));
}

// ---------------------------------------------------------------------------------------------
// Announcements: greets carry the brief projection, and presence is refreshed periodically.

#[test]
fn greet_from_a_peer_with_a_catalog_is_published_with_the_brief_projection() {
    let mut n = catalog_scene();
    let id = n.fresh("greet");
    let fx = n.send(&greet(&id, tester_card()), 2);
    accepted(&fx);
    assert_eq!(fx.publish, Some(Route::Broadcast));
    let out = fx
        .rewritten
        .as_ref()
        .expect("a greet re-encoded with the projection");
    assert_eq!(out.id, id, "same envelope, same id");
    assert_validates(out);
    let card = &json_of(out)["body"]["peer_card"];
    let cat = catalog();
    let ids: Vec<&str> = cat.ids().collect();
    assert_eq!(card["capabilities"], json!(ids));
    let brief = card["ext"]["agh.capabilities_brief"]
        .as_array()
        .expect("brief list");
    assert_eq!(brief.len(), ids.len());
    for (entry, doc) in brief.iter().zip(catalog().docs()) {
        assert_eq!(entry, &json!({"id": doc.id, "summary": doc.summary}));
    }

    // Without a catalog the agent's own bytes go out unchanged.
    let id = n.fresh("greet");
    let fx = n.send(&greet(&id, reviewer_card()), 1);
    assert!(fx.rewritten.is_none());
}

#[test]
fn announcements_greet_every_local_peer_with_fresh_ids() {
    let mut n = catalog_scene();
    let later = NOW + 30;
    let out = n.router.announcements(later, &mut n.ids);
    let mut from: Vec<String> = out.iter().map(|r| r.envelope.from.to_string()).collect();
    from.sort();
    assert_eq!(from, [REVIEWER, TESTER]);
    for reply in &out {
        assert_eq!(reply.route, Route::Broadcast);
        assert_eq!(reply.envelope.kind, Kind::Greet);
        assert_eq!(reply.envelope.ts, later);
        let text = reply.envelope.to_json();
        assert!(validate(text.as_bytes(), later, &ValidationPolicy::default()).is_ok());
        let card = &json_of(&reply.envelope)["body"]["peer_card"];
        if reply.envelope.from == TESTER {
            assert!(card["ext"]["agh.capabilities_brief"].is_array());
        } else {
            assert!(card.get("ext").is_none(), "no catalog, no brief key");
        }
    }
    // Our own announcements echoed back by the mesh are duplicates.
    let echo = out[0].envelope.to_json();
    let fx = n.router.receive(echo.as_bytes(), NODE_B, later, &mut n.ids);
    assert_eq!(rejected(&fx), ReasonCode::Duplicate);
}

#[test]
fn announcements_keep_remote_presence_alive_on_another_router() {
    let mut a = scene();
    let mut b = Node::new();
    // Node B hears node A's announcements every interval for ten minutes: A's peers never expire.
    for tick in 0..20 {
        let now = NOW + tick * 30;
        for reply in a.router.announcements(now, &mut a.ids) {
            let fx = b
                .router
                .receive(reply.envelope.to_json().as_bytes(), NODE_B, now, &mut b.ids);
            accepted(&fx);
        }
        assert!(b.router.presence.lookup(CH, REVIEWER, now + 59).is_some());
    }
    // When A stops, B forgets A's peers after two intervals.
    let last = NOW + 19 * 30;
    assert!(b.router.presence.lookup(CH, REVIEWER, last + 60).is_none());
}

#[test]
fn uuid_ids_have_the_version_4_form() {
    let mut counter = 0u8;
    let mut ids = agora_agh::UuidIds::new(|b: &mut [u8; 16]| {
        counter = counter.wrapping_add(1);
        b.fill(counter.wrapping_mul(37));
    });
    use agora_agh::IdSource;
    let a = ids.next_id();
    let b = ids.next_id();
    assert_ne!(a, b);
    for id in [a, b] {
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{id}");
        assert!(
            matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
            "{id}"
        );
        assert!(
            id.bytes()
                .all(|c| c == b'-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Receiver side of rich discovery.

#[test]
fn rich_catalog_with_a_bad_digest_is_not_cached() {
    let mut n = scene();
    // The coder answers our whois with a card claiming one capability and a catalog whose
    // digest does not verify.
    let mut c = card(CODER);
    c["capabilities"] = json!(["build-site"]);
    let id = n.fresh("resp");
    let entry = json!({"id": "build-site", "summary": "Build.", "outcome": "Done.",
                       "digest": format!("sha256:{}", "0".repeat(64))});
    let resp = whois_response(&id, c.clone(), REVIEWER, "msg-req")
        .ext(json!({"agh.capability_catalog": {"capabilities": [entry]}}));
    accepted(&n.receive(&resp));
    let cached = |n: &Node| match n.router.presence.lookup(CH, CODER, NOW) {
        Some(Peer::Remote(r)) => r.catalog.is_some(),
        _ => panic!("coder is present"),
    };
    assert!(!cached(&n), "a catalog that does not verify is not cached");

    // The same answer with the right digest is cached.
    let mut doc = CapabilityDoc {
        id: "build-site".into(),
        summary: "Build.".into(),
        outcome: "Done.".into(),
        ..CapabilityDoc::default()
    };
    let digest = doc.seal().to_owned();
    let entry =
        json!({"id": "build-site", "summary": "Build.", "outcome": "Done.", "digest": digest});
    let id = n.fresh("resp");
    let resp = whois_response(&id, c, REVIEWER, "msg-req")
        .ext(json!({"agh.capability_catalog": {"capabilities": [entry]}}));
    accepted(&n.receive(&resp));
    assert!(cached(&n));
}

#[test]
fn include_arrays_with_non_string_values_are_ignored() {
    let mut n = catalog_scene();
    let resp = ask(
        &mut n,
        TESTER,
        Some(json!({ "agh.include": ["capability_catalog", 1] })),
    );
    assert!(resp.get("ext").is_none(), "{resp}");
    // Unknown string values beside capability_catalog are fine.
    let resp = ask(
        &mut n,
        TESTER,
        Some(json!({ "agh.include": ["future_thing", "capability_catalog"] })),
    );
    assert!(resp["ext"]["agh.capability_catalog"]["capabilities"].is_array());
}

#[test]
fn interaction_table_full_of_open_interactions_answers_busy() {
    let mut n = Node::with_config(RouterConfig {
        interaction_capacity: 2,
        ..RouterConfig::default()
    });
    n.join(reviewer_card(), 1);
    n.hear(card(CODER), NODE_B);
    for i in 0..2 {
        let id = n.fresh("open");
        let fx = n.receive(&direct(&id, CODER, REVIEWER, &format!("int-{i}"), "work"));
        assert_eq!(accepted(&fx).lifecycle, Outcome::Opened);
    }
    let id = n.fresh("open");
    let fx = n.receive(&direct(&id, CODER, REVIEWER, "int-2", "work"));
    assert_eq!(rejected(&fx), ReasonCode::Busy);
    // Finishing one makes room: finished interactions are forgotten first.
    let id = n.fresh("done");
    accepted(&n.send(&trace(&id, REVIEWER, CODER, "int-0", "completed"), 1));
    let id = n.fresh("open");
    let fx = n.receive(&direct(&id, CODER, REVIEWER, "int-3", "work"));
    assert_eq!(accepted(&fx).lifecycle, Outcome::Opened);
    assert_eq!(n.router.interactions.len(), 2);
}

#[test]
fn refused_direct_from_a_local_agent_comes_back_with_its_receipt() {
    let mut n = outbound_in(InteractionState::Completed);
    // More work into the finished interaction: refused, and the sender gets the receipt the
    // target would have sent.
    let id = n.fresh("late");
    let fx = n.send(&direct(&id, REVIEWER, CODER, IID, "one more"), 1);
    assert_eq!(rejected(&fx), ReasonCode::InteractionClosed);
    let reply = only_reply(&fx);
    assert_eq!(reply.route, Route::Local(REVIEWER.to_owned()));
    let r = json_of(&reply.envelope);
    assert_eq!(r["kind"], "receipt");
    assert_eq!(r["from"], CODER);
    assert_eq!(r["to"], REVIEWER);
    assert_eq!(r["body"]["status"], "rejected");
    assert_eq!(r["body"]["reason_code"], "interaction_closed");
    assert_eq!(r["body"]["for_id"], id.as_str());

    // An expired direct gets an expired receipt; a non-direct gets none.
    let id = n.fresh("old");
    let fx = n.send(
        &direct(&id, REVIEWER, CODER, "int-new", "late").ts(NOW - 1000),
        1,
    );
    assert_eq!(rejected(&fx), ReasonCode::Expired);
    assert_eq!(
        json_of(&only_reply(&fx).envelope)["body"]["status"],
        "expired"
    );
    let id = n.fresh("old-say");
    let fx = n.send(&say(&id, REVIEWER, "late").ts(NOW - 1000), 1);
    assert_eq!(rejected(&fx), ReasonCode::Expired);
    assert!(fx.replies.is_empty());

    // A sender that is not a peer of this connection gets no receipt.
    let id = n.fresh("spoof");
    let fx = n.send(&direct(&id, REVIEWER, CODER, IID, "x"), 2);
    assert_eq!(rejected(&fx), ReasonCode::VerificationFailed);
    assert!(fx.replies.is_empty());
}

#[test]
fn an_undone_envelope_leaves_the_interaction_as_it_was_and_is_taken_when_sent_again() {
    // Opening: undone, the interaction is gone and the same envelope opens it again.
    let mut n = scene();
    let id = n.fresh("open");
    let open = direct(&id, REVIEWER, CODER, IID, "please review");
    let fx = n.send(&open, 1);
    let a = accepted(&fx).clone();
    assert_eq!(a.lifecycle, Outcome::Opened);
    assert_eq!(a.prior, None);
    n.router.undo(&a);
    assert_eq!(n.state(IID), None);
    assert_eq!(n.router.interactions.len(), 0);
    let again = n.send(&open, 1);
    assert_eq!(
        accepted(&again).lifecycle,
        Outcome::Opened,
        "not a duplicate"
    );
    // A move: undone, the interaction is back in its state before.
    let mut n = outbound_in(InteractionState::Working);
    let before = n.router.interactions.get(CH, IID).cloned();
    let fx = n.target_trace("completed");
    let a = accepted(&fx).clone();
    assert!(matches!(a.lifecycle, Outcome::Changed { .. }), "{a:?}");
    assert_eq!(a.prior, before);
    n.router.undo(&a);
    assert_eq!(n.router.interactions.get(CH, IID).cloned(), before);
}
