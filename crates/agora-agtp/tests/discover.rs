//! DISCOVER over a real index: parameters, filters, ranking, deregistration, and determinism
//! whatever the order agents were registered in.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agora_agtp::discover::{self, Params, Target};
use agora_agtp::index::{Availability, Entry, Index};
use agora_agtp::manifest::{Lifecycle, Manifest};
use agora_agtp::rank::Weights;
use proptest::prelude::*;
use serde_json::{Value, json};

fn manifest(id: &str, tier: u8, trust: f64, zone: &str, org: &str, text: &str) -> Manifest {
    Manifest::from_value(json!({
        "canonical_id": id,
        "manifest_uri": format!("agtp://agtp.{org}/agents/{id}"),
        "agent_label": id,
        "org_domain": org,
        "governance_zone": zone,
        "trust_tier": tier,
        "behavioral_trust_score": trust,
        "supported_methods": ["QUERY", "ANALYZE"],
        "authority_scope_categories": ["audit:read", "code:analyze"],
        "job_description": text,
    }))
    .unwrap()
}

fn entry(m: Manifest) -> Entry {
    Entry {
        manifest: m,
        state: Lifecycle::Active,
        availability: Availability::Available,
        registered_ms: 0,
        updated_ms: 0,
    }
}

fn sample() -> Index {
    let mut index = Index::new();
    for m in [
        manifest(
            "a-solidity",
            1,
            0.97,
            "zone:finance",
            "auditor.tld",
            "Static and dynamic analysis of Solidity smart contracts. Detects reentrancy, overflow, and access control vulnerabilities.",
        ),
        manifest(
            "b-contracts",
            2,
            0.91,
            "zone:finance",
            "review.tld",
            "Reviews smart contracts for security vulnerabilities.",
        ),
        manifest(
            "c-experimental",
            3,
            0.99,
            "zone:finance",
            "lab.tld",
            "Experimental Solidity smart contract auditor.",
        ),
        manifest(
            "d-translate",
            1,
            0.95,
            "zone:finance",
            "lang.tld",
            "Translates legal documents between English and German.",
        ),
        manifest(
            "e-lowtrust",
            1,
            0.40,
            "zone:public",
            "auditor.tld",
            "Audits Solidity smart contracts for reentrancy.",
        ),
    ] {
        index.upsert(entry(m));
    }
    index
}

#[allow(clippy::needless_pass_by_value)] // callers build the value inline
fn params(v: Value) -> Params {
    let body = json!({"method": "DISCOVER", "parameters": v});
    Params::from_parts(None, Some(&body), &Target::Root).unwrap()
}

fn ids(outcome: &discover::Outcome) -> Vec<&str> {
    outcome.items.iter().map(|i| i.canonical_id()).collect()
}

#[test]
fn ranks_by_rank_score_and_never_returns_tier_3() {
    let index = sample();
    let p =
        params(json!({"intent": "Audit Solidity smart contracts for security vulnerabilities"}));
    let out = discover::evaluate(&index, &p, &Weights::default());
    assert_eq!(ids(&out), vec!["a-solidity", "b-contracts", "e-lowtrust"]);
    assert_eq!(out.total_matches, 3);
    for pair in out.items.windows(2) {
        assert!(pair[0].rank_score >= pair[1].rank_score);
    }
    let top = &out.items[0].fields;
    let cms = |i: usize| {
        out.items[i].fields["capability_match_score"]
            .as_f64()
            .unwrap()
    };
    assert!(cms(0) > 0.0 && cms(0) <= 1.0, "{}", cms(0));
    // b matches more of the rare query terms ("security", "vulnerabilities") in fewer words,
    // so its match is better; a still ranks first on tier and trust.
    assert!(cms(1) > cms(0), "{} {}", cms(1), cms(0));
    assert!(!top.contains_key("required_scope"));
    assert!(!top.contains_key("score_components"));
}

#[test]
fn filters_hold() {
    let index = sample();
    let intent = "smart contracts";
    let run = |extra: Value| {
        let mut v = json!({"intent": intent});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        ids(&discover::evaluate(&index, &params(v), &Weights::default()))
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        run(json!({"trust_tier_min": 1})),
        vec!["a-solidity", "e-lowtrust"]
    );
    assert_eq!(
        run(json!({"behavioral_trust_min": 0.9})),
        vec!["a-solidity", "b-contracts"]
    );
    assert_eq!(
        run(json!({"governance_zone": "zone:public"})),
        vec!["e-lowtrust"]
    );
    assert_eq!(
        run(json!({"org_domain": "AUDITOR.tld"})),
        vec!["a-solidity", "e-lowtrust"]
    );
    assert_eq!(run(json!({"limit": 1})), vec!["a-solidity"]);
    // "tools" is a DESCRIBE domain: none of these manifests declares tools.
    assert!(run(json!({"capability_domains": ["tools"]})).is_empty());
    assert_eq!(
        run(json!({"capability_domains": ["methods"], "limit": 1})),
        vec!["a-solidity"]
    );
}

#[test]
fn scope_negotiation_and_explain() {
    let index = sample();
    let p =
        params(json!({"intent": "solidity", "scope_negotiate": true, "explain": true, "limit": 1}));
    let out = discover::evaluate(&index, &p, &Weights::default());
    let f = &out.items[0].fields;
    assert_eq!(f["required_scope"], "audit:read code:analyze");
    let c = &f["score_components"];
    assert_eq!(c["normalized_trust_tier"], 1.0);
    assert_eq!(c["weights"]["behavioral_trust_weight"], 0.4);
    let sum = 0.3 * c["normalized_trust_tier"].as_f64().unwrap()
        + 0.4 * c["behavioral_trust_score"].as_f64().unwrap()
        + 0.3 * c["capability_match_score"].as_f64().unwrap();
    assert!((sum - c["rank_score"].as_f64().unwrap()).abs() < 1e-6);
}

#[test]
fn deregistration_takes_effect_at_once() {
    let mut index = sample();
    let p = params(json!({"intent": "solidity smart contracts"}));
    assert!(ids(&discover::evaluate(&index, &p, &Weights::default())).contains(&"a-solidity"));
    for state in [
        Lifecycle::Suspended,
        Lifecycle::Revoked,
        Lifecycle::Deprecated,
    ] {
        index.set_state("a-solidity", Lifecycle::Active, 1);
        index.set_state("a-solidity", state, 2);
        let out = discover::evaluate(&index, &p, &Weights::default());
        assert!(!ids(&out).contains(&"a-solidity"), "{state}");
    }
    index.set_state("a-solidity", Lifecycle::Active, 3);
    assert!(ids(&discover::evaluate(&index, &p, &Weights::default())).contains(&"a-solidity"));
}

#[test]
fn bad_parameters_are_named() {
    for (v, name) in [
        (json!({"limit": 0}), "limit"),
        (json!({"limit": 101}), "limit"),
        (json!({"limit": 2.5}), "limit"),
        (json!({"trust_tier_min": 4}), "trust_tier_min"),
        (json!({"behavioral_trust_min": 1.2}), "behavioral_trust_min"),
        (
            json!({"behavioral_trust_min": "high"}),
            "behavioral_trust_min",
        ),
        (json!({"intent": 7}), "intent"),
        (json!({"capability_domains": [1]}), "capability_domains"),
        (json!({"scope_negotiate": "yes"}), "scope_negotiate"),
        (json!({"governance_zone": ["a"]}), "governance_zone"),
        (json!({"limt": 3}), "limt"),
    ] {
        let e =
            Params::from_parts(None, Some(&json!({"parameters": v})), &Target::Root).unwrap_err();
        let e = agora_agtp::AgtpError::from(e);
        assert_eq!(e.status().0, 400);
        assert_eq!(e.body(None)["error"]["parameter"], name, "{v}");
    }
}

#[test]
fn query_string_and_body_merge_with_the_body_winning() {
    // The query is the text after `?` (the whole target used to be passed here, which hid
    // that the node passed only the query).
    let p = Params::from_parts(
        Some("intent=audit%20contracts&limit=3&trust_tier_min=2"),
        Some(&json!({"parameters": {"limit": 5}})),
        &Target::Population,
    )
    .unwrap();
    assert_eq!(p.intent.as_deref(), Some("audit contracts"));
    assert_eq!(p.limit, 5);
    assert_eq!(p.trust_tier_min, Some(2));
}

#[test]
fn ties_break_by_canonical_id() {
    let mut index = Index::new();
    for id in ["zeta", "alpha", "mid"] {
        index.upsert(entry(manifest(id, 1, 0.9, "z", "o.tld", "same words here")));
    }
    let out = discover::evaluate(
        &index,
        &params(json!({"intent": "same words"})),
        &Weights::default(),
    );
    assert_eq!(ids(&out), vec!["alpha", "mid", "zeta"]);
    let out = discover::evaluate(
        &index,
        &params(json!({"intent": "same words", "limit": 2})),
        &Weights::default(),
    );
    assert_eq!(ids(&out), vec!["alpha", "mid"]);
}

const WORDS: &[&str] = &[
    "audit",
    "solidity",
    "contract",
    "translate",
    "legal",
    "medical",
    "imaging",
    "travel",
    "booking",
    "security",
    "reentrancy",
    "report",
    "finance",
    "invoice",
    "schedule",
];

fn arb_manifest(i: usize) -> impl Strategy<Value = Manifest> {
    (
        1u8..=3,
        0u32..=100,
        prop::collection::vec(prop::sample::select(WORDS), 1..8),
        0usize..3,
    )
        .prop_map(move |(tier, trust, words, zone)| {
            manifest(
                &format!("agent-{i:03}"),
                tier,
                f64::from(trust) / 100.0,
                ["zone:a", "zone:b", "zone:c"][zone],
                "org.tld",
                &words.join(" "),
            )
        })
}

fn arb_index_input() -> impl Strategy<Value = Vec<Manifest>> {
    (1usize..40).prop_flat_map(|n| (0..n).map(arb_manifest).collect::<Vec<_>>())
}

proptest! {
    #[test]
    fn identical_index_gives_identical_results_whatever_the_order(
        manifests in arb_index_input(),
        seed in any::<u64>(),
        words in prop::collection::vec(prop::sample::select(WORDS), 1..4),
        limit in 1usize..20,
    ) {
        let mut a = Index::new();
        for m in &manifests {
            a.upsert(entry(m.clone()));
        }
        // The same agents in another order, with some churn on the way.
        let mut order: Vec<usize> = (0..manifests.len()).collect();
        let mut x = seed | 1;
        for i in (1..order.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut b = Index::new();
        for &i in &order {
            b.upsert(entry(manifests[i].clone()));
            if i % 3 == 0 {
                b.set_state(&manifests[i].canonical_id, Lifecycle::Suspended, 1);
                b.set_state(&manifests[i].canonical_id, Lifecycle::Active, 1);
            }
        }
        prop_assert_eq!(a.digest(), b.digest());
        let p = params(json!({"intent": words.join(" "), "limit": limit, "explain": true}));
        let w = Weights::default();
        let (ra, rb) = (discover::evaluate(&a, &p, &w), discover::evaluate(&b, &p, &w));
        let qa = discover::query_id(&p, "caller", &a.digest());
        let qb = discover::query_id(&p, "caller", &b.digest());
        let ja = serde_json::to_vec(&discover::result_object(&qa, ra.total_matches, ra.items, &[], None)).unwrap();
        let jb = serde_json::to_vec(&discover::result_object(&qb, rb.total_matches, rb.items, &[], None)).unwrap();
        prop_assert_eq!(ja, jb);
    }
}

/// What federation forwards (`Params::to_value`) parses back to the same parameters.
#[test]
fn normalised_parameters_parse_back_to_themselves() {
    for body in [
        json!({"parameters": {"intent": "audit contracts"}}),
        json!({"parameters": {"intent": "audit contracts", "limit": 5, "trust_tier_min": 2,
            "behavioral_trust_min": 0.5, "governance_zone": "zone:a", "org_domain": "o.tld",
            "capability_domains": ["methods", "audit"], "scope_negotiate": true, "explain": true,
            "preferred_agent": "agt-1"}}),
        json!({"parameters": {}}),
    ] {
        let p = Params::from_parts(None, Some(&body), &Target::Root).unwrap();
        let again = Params::from_parts(
            None,
            Some(&json!({"parameters": p.to_value()})),
            &Target::Root,
        )
        .unwrap();
        assert_eq!(again, p, "{body}");
    }
}
