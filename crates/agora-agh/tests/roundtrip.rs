//! Property tests for the envelope codec: on valid envelopes, parse ∘ serialize is the identity,
//! serialisation is stable, `ext` (any JSON) survives unchanged, and what we emit validates.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;

use agora_agh::greet::GreetBody;
use agora_agh::message::MessageBody;
use agora_agh::receipt::{ReceiptBody, ReceiptStatus};
use agora_agh::trace::TraceBody;
use agora_agh::whois::WhoisBody;
use agora_agh::{
    Envelope, InteractionState, Kind, OwnedEnvelope, PeerCard, RawJson, ReasonCode,
    ValidationPolicy, validate,
};
use proptest::prelude::*;
use serde_json::Value;

fn channel() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9_-]{0,63}"
}

fn peer_id() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9._-]{0,127}"
}

/// Non-blank text without surrounding white space (identifiers are trimmed on parse), with
/// characters that need escaping.
fn ident() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.:/\"\\\\é😀<>&-][A-Za-z0-9_.:/\"\\\\é😀<>& \t-]{0,30}[A-Za-z0-9_\"\\\\é😀-]"
}

fn text() -> impl Strategy<Value = String> {
    "[ \t\n]{0,2}[A-Za-z0-9\"\\\\é😀\u{1}<>&][ -~é\n\u{7f}\u{2028}]{0,60}"
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        "[ -~é😀\n\t\u{0}]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-z.]{1,8}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn ext() -> impl Strategy<Value = Option<String>> {
    prop::option::of(
        prop::collection::btree_map("[a-z]{1,6}\\.[a-z_]{1,10}", json_value(), 0..4).prop_map(
            |m| {
                let obj: serde_json::Map<String, Value> = m.into_iter().collect();
                // Keep whatever spacing a sender used: pretty-print half of them.
                if obj.len().is_multiple_of(2) {
                    serde_json::to_string(&obj).unwrap()
                } else {
                    serde_json::to_string_pretty(&obj).unwrap()
                }
            },
        ),
    )
}

fn card(peer: String) -> impl Strategy<Value = PeerCard<'static>> {
    let list = || prop::collection::vec(ident(), 0..3);
    (prop::option::of(ident()), list(), list(), list(), list()).prop_map(
        move |(display, profiles, caps, arts, trust)| {
            let own = |l: Vec<String>| l.into_iter().map(Cow::Owned).collect();
            PeerCard {
                peer_id: Cow::Owned(peer.clone()),
                display_name: display.map(Cow::Owned),
                profiles_supported: own(profiles),
                capabilities: own(caps),
                artifacts_supported: own(arts),
                trust_modes_supported: own(trust),
                ext: None,
            }
        },
    )
}

fn raw(json: String) -> RawJson<'static> {
    RawJson::from_string(json).unwrap()
}

fn envelope() -> impl Strategy<Value = OwnedEnvelope> {
    let header = (
        ident(),
        channel(),
        peer_id(),
        peer_id(),
        1i64..4_000_000_000,
        prop::option::of(0i64..600),
        prop::option::of(ident()),
        prop::option::of(ident()),
    );
    (
        header,
        prop::sample::select(Kind::ALL.to_vec()),
        text(),
        any::<u8>(),
    )
        .prop_flat_map(
            |((id, channel, from, to, ts, exp_in, trace, causation), kind, text, pick)| {
                let body: BoxedStrategy<String> = match kind {
                    Kind::Greet => (card(from.clone()), prop::option::of(ident()))
                        .prop_map(|(peer_card, summary)| {
                            GreetBody {
                                peer_card,
                                summary: summary.map(Cow::Owned),
                            }
                            .to_json()
                        })
                        .boxed(),
                    Kind::Whois if pick % 2 == 0 => card(from.clone())
                        .prop_map(|peer_card| WhoisBody::Response { peer_card }.to_json())
                        .boxed(),
                    Kind::Whois => ident()
                        .prop_map(|q| {
                            WhoisBody::Request {
                                query: Cow::Owned(q),
                            }
                            .to_json()
                        })
                        .boxed(),
                    Kind::Say | Kind::Direct => {
                        Just(MessageBody::json(&text, Some("status"))).boxed()
                    }
                    Kind::Capability => Just(capability_body()).boxed(),
                    Kind::Receipt => Just(
                        ReceiptBody {
                            for_id: Cow::Owned(id.clone()),
                            status: ReceiptStatus::ALL[usize::from(pick) % 6],
                            reason_code: (ReceiptStatus::ALL[usize::from(pick) % 6]
                                != ReceiptStatus::Accepted)
                                .then_some(ReasonCode::ALL[usize::from(pick) % 11]),
                            detail: None,
                        }
                        .to_json(),
                    )
                    .boxed(),
                    Kind::Trace => Just(TraceBody::json(
                        InteractionState::ALL[usize::from(pick) % 6],
                        Some(&text),
                    ))
                    .boxed(),
                };
                let needs_to =
                    matches!(kind, Kind::Direct) || (kind == Kind::Whois && pick % 2 == 0);
                let needs_iid = matches!(kind, Kind::Direct | Kind::Receipt | Kind::Trace);
                (body, ext()).prop_map(move |(body, ext)| Envelope {
                    id: Cow::Owned(id.clone()),
                    kind,
                    channel: Cow::Owned(channel.clone()),
                    from: Cow::Owned(from.clone()),
                    to: (needs_to || pick % 3 == 0).then(|| Cow::Owned(to.clone())),
                    interaction_id: (needs_iid || pick % 5 == 0)
                        .then(|| Cow::Owned(format!("int-{pick}"))),
                    reply_to: (kind == Kind::Whois).then(|| Cow::Owned("msg_req".to_owned())),
                    trace_id: trace.clone().map(Cow::Owned),
                    causation_id: causation.clone().map(Cow::Owned),
                    ts,
                    expires_at: exp_in.map(|d| ts + 1 + d),
                    body: raw(body),
                    proof: (pick % 7 == 0).then(|| raw(r#"{"profile":"x"}"#.to_owned())),
                    ext: ext.map(raw),
                })
            },
        )
}

fn capability_body() -> String {
    let mut doc = agora_agh::CapabilityDoc {
        id: "review-fix".into(),
        summary: "Review <fix> & flow".into(),
        outcome: "Done.".into(),
        requirements: vec!["zeta".into(), "alpha".into()],
        ..Default::default()
    };
    doc.seal();
    agora_agh::body::capability_body_json(&doc)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parse_after_serialize_is_identity(env in envelope()) {
        let json = env.to_json();
        let parsed = Envelope::parse(json.as_bytes()).unwrap();
        prop_assert_eq!(&parsed, &env);
        prop_assert_eq!(parsed.to_json(), json);
    }

    #[test]
    fn emitted_envelopes_validate_and_keep_ext(env in envelope()) {
        let json = env.to_json();
        let v = validate(json.as_bytes(), env.ts, &ValidationPolicy::default())
            .map_err(|e| TestCaseError::fail(format!("{e}\n{json}")))?;
        prop_assert_eq!(
            v.envelope.ext.as_ref().map(RawJson::get),
            env.ext.as_ref().map(RawJson::get)
        );
        prop_assert_eq!(v.envelope.kind, env.kind);
    }

    #[test]
    fn parser_never_panics_on_mutated_envelopes(env in envelope(), at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = env.to_json().into_bytes();
        let i = at % bytes.len();
        bytes[i] = byte;
        let _ = validate(&bytes, env.ts, &ValidationPolicy::default());
    }
}
