//! The Tool primitive and capability cards: register/list/analytics round trips, discover filters
//! and deterministic ranking, the spec's example JSON, invoke routing errors, card TTL,
//! newest-wins and delta heartbeats.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::needless_pass_by_value
)]

use agora_hyperspace::card::{
    CARD_TTL_MS, CapabilityCard, CardError, CardLimits, CardTable, CardUpdate, apply_delta,
    heartbeat_delta,
};
use agora_hyperspace::jsonrpc::{RpcCode, RpcError};
use agora_hyperspace::tool::{
    self, BridgedTool, DiscoverParams, InvokeParams, InvokeResult, InvokeTarget, RegisterParams,
    ToolRegistry, ToolsResult,
};
use agora_hyperspace::tool_record::{ToolLimits, ToolRecord, ToolSource};
use proptest::prelude::*;
use serde_json::{Value, json};

const LOCAL: &str = "12D3KooWLocal";
const REMOTE: &str = "12D3KooWRx434ACwmJz...";
const T0: u64 = 1_773_842_400_000;

fn counter_ids() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("tool-{n:04}")
    }
}

fn schema() -> Value {
    json!({
        "input": { "type": "object", "properties": { "query": { "type": "string" } } },
        "output": { "type": "object", "properties": { "results": { "type": "array" } } }
    })
}

fn register(
    reg: &mut ToolRegistry,
    ids: &mut impl FnMut() -> String,
    name: &str,
    caps: &[&str],
) -> String {
    reg.register(
        &RegisterParams {
            name: name.into(),
            description: format!("{name} tool"),
            schema: schema(),
            capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
            price: None,
        },
        "conn-1",
        ids,
    )
    .unwrap()
    .tool_id
}

fn remote_tool(id: &str, name: &str, caps: &[&str], reputation: f64, latency: u64) -> ToolRecord {
    ToolRecord {
        id: id.into(),
        name: name.into(),
        peer_id: String::new(),
        description: format!("{name} service"),
        capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
        reputation,
        avg_latency: latency,
        schema: schema(),
        price: None,
        source: None,
    }
}

fn card(peer: &str, tools: Vec<ToolRecord>, version: u64) -> CapabilityCard {
    CapabilityCard {
        peer_id: peer.into(),
        tools,
        task_types: vec!["web-research".into()],
        reputation: 1.0,
        geo: Some("us-east".into()),
        latency: 40,
        version,
        updated_at: T0 + version,
        wallet_address: None,
    }
}

fn call(reg: &mut ToolRegistry, method: &str, params: Value) -> Result<Value, RpcError> {
    let mut ids = counter_ids();
    reg.call(method, &params, T0, "conn-1", &mut ids).unwrap()
}

fn discover(reg: &ToolRegistry, params: Value, now: u64) -> Vec<String> {
    let params: DiscoverParams = serde_json::from_value(params).unwrap();
    reg.discover(&params, now)
        .unwrap()
        .tools
        .into_iter()
        .map(|t| t.id)
        .collect()
}

// ----------------------------------------------------------------------------------------------
// register / list / analytics
// ----------------------------------------------------------------------------------------------

#[test]
fn register_list_round_trip_over_call() {
    let mut reg = ToolRegistry::new(LOCAL);
    let mut ids = counter_ids();
    let result = reg
        .call(
            tool::REGISTER,
            &json!({
                "name": "web-search",
                "description": "Full-text web search",
                "schema": schema(),
                "capabilities": ["search", "Search", "scrape"]
            }),
            T0,
            "conn-1",
            &mut ids,
        )
        .unwrap()
        .unwrap();
    assert_eq!(result, json!({ "toolId": "tool-0001" }));

    let listed = call(&mut reg, tool::LIST_REGISTERED, Value::Null).unwrap();
    assert_eq!(
        listed,
        json!({ "tools": [{
            "id": "tool-0001",
            "name": "web-search",
            "peerId": LOCAL,
            "description": "Full-text web search",
            "capabilities": ["search", "scrape"],
            "reputation": 0.5,
            "avgLatency": 0,
            "schema": schema(),
        }]})
    );
    assert_eq!(reg.local_tool("tool-0001").unwrap().owner, "conn-1");
    assert!(
        reg.call(tool::INVOKE, &json!({}), T0, "c", &mut ids)
            .is_none()
    );
    assert!(
        reg.call("tool.nope", &json!({}), T0, "c", &mut ids)
            .is_none()
    );
    assert_eq!(tool::METHODS.len(), 5);
}

#[test]
fn register_validation_names_the_field() {
    let mut reg = ToolRegistry::new(LOCAL);
    let cases = [
        (
            json!({"name": " ", "description": "d", "schema": {}, "capabilities": ["a"]}),
            "name",
        ),
        (
            json!({"name": "n", "description": "", "schema": {}, "capabilities": ["a"]}),
            "description",
        ),
        (
            json!({"name": "n", "description": "d", "schema": [], "capabilities": ["a"]}),
            "schema",
        ),
        (
            json!({"name": "n", "description": "d", "schema": {}, "capabilities": []}),
            "capabilities",
        ),
        (
            json!({"name": "n", "description": "d", "schema": {}, "capabilities": ["a", ""]}),
            "capabilities[1]",
        ),
        (
            json!({"name": "n", "description": "d", "schema": {}}),
            "capabilities",
        ),
        (
            json!({"name": 1, "description": "d", "schema": {}, "capabilities": ["a"]}),
            "name",
        ),
    ];
    for (params, field) in cases {
        let error = call(&mut reg, tool::REGISTER, params.clone()).unwrap_err();
        assert_eq!(error.code, RpcCode::INVALID_PARAMS, "{params}");
        assert_eq!(field_of(&error), Some(json!(field)), "{params}");
    }
    // Positional params follow the spec's order.
    let ok = call(&mut reg, tool::REGISTER, json!(["n", "d", {}, ["a"]])).unwrap();
    assert_eq!(ok, json!({ "toolId": "tool-0001" }));
}

#[test]
fn register_capacity_and_bad_ids() {
    let limits = ToolLimits {
        max_local_tools: 1,
        ..ToolLimits::default()
    };
    let mut reg = ToolRegistry::with_limits(LOCAL, limits, CardLimits::default());
    let mut ids = counter_ids();
    register(&mut reg, &mut ids, "a", &["x"]);
    let params = RegisterParams {
        name: "b".into(),
        description: "b".into(),
        schema: json!({}),
        capabilities: vec!["x".into()],
        price: None,
    };
    let error = reg.register(&params, "c", &mut ids).unwrap_err();
    assert_eq!(error.code, RpcCode::RATE_LIMITED);

    let mut reg = ToolRegistry::new(LOCAL);
    let mut same = || "tool-x".to_owned();
    reg.register(&params, "c", &mut same).unwrap();
    let error = reg.register(&params, "c", &mut same).unwrap_err();
    assert_eq!(error.code, RpcCode::INTERNAL_ERROR);
}

#[test]
fn analytics_round_trip_and_reputation() {
    let mut reg = ToolRegistry::new(LOCAL);
    let mut ids = counter_ids();
    let id = register(&mut reg, &mut ids, "web-search", &["search"]);
    assert_eq!(
        call(&mut reg, tool::GET_ANALYTICS, json!({ "toolId": id })).unwrap(),
        json!({ "invocations": 0, "avgLatency": 0, "successRate": 0.0 })
    );
    reg.record_invocation(&id, 100, true).unwrap();
    reg.record_invocation(&id, 200, true).unwrap();
    reg.record_invocation(&id, 301, true).unwrap();
    let last = reg.record_invocation(&id, 400, false).unwrap();
    assert_eq!(
        call(&mut reg, tool::GET_ANALYTICS, json!([id])).unwrap(),
        json!({ "invocations": 4, "avgLatency": 250, "successRate": 0.75 })
    );
    assert_eq!(last.invocations, 4);
    // (3 + 4 × 0.5) / (4 + 4)
    let a = reg.analytics(&id).unwrap();
    assert!((a.reputation() - 5.0 / 8.0).abs() < 1e-12);
    let listed = reg.list_registered().tools;
    assert_eq!(listed[0].avg_latency, 250);
    assert!((listed[0].reputation - 0.625).abs() < 1e-12);

    let error = call(&mut reg, tool::GET_ANALYTICS, json!({ "toolId": "nope" })).unwrap_err();
    assert_eq!(error.code, RpcCode::INVALID_PARAMS);
    assert_eq!(field_of(&error), Some(json!("toolId")));
    assert_eq!(
        reg.record_invocation("nope", 1, true).unwrap_err().code,
        RpcCode::INVALID_PARAMS
    );
    let error = call(&mut reg, tool::GET_ANALYTICS, json!({})).unwrap_err();
    assert_eq!(field_of(&error), Some(json!("toolId")));

    // Removing the owner drops its tools and their analytics.
    assert_eq!(reg.remove_owner("conn-1"), 1);
    assert!(reg.list_registered().tools.is_empty());
    assert!(reg.analytics(&id).is_none());
}

#[test]
fn a_closed_connections_tools_are_orphaned_and_adopted_by_an_identical_registration() {
    let mut reg = ToolRegistry::new(LOCAL);
    let mut ids = counter_ids();
    let id = register(&mut reg, &mut ids, "web-search", &["search"]);
    let other = register(&mut reg, &mut ids, "scrape", &["scrape"]);
    assert_eq!(reg.take_dirty(), vec![id.clone(), other.clone()]);
    reg.record_invocation(&id, 100, true).unwrap();

    assert_eq!(reg.orphan_owner("conn-1", T0), 2);
    assert_eq!(reg.take_dirty().len(), 2);
    // Orphans are neither listed, discovered nor invocable; their analytics stay.
    assert!(reg.list_registered().tools.is_empty());
    let found = reg
        .discover(
            &DiscoverParams {
                query: String::new(),
                capabilities: None,
                min_reputation: None,
                max_latency: None,
                geo: None,
            },
            T0,
        )
        .unwrap();
    assert!(found.tools.is_empty());
    let err = reg
        .plan_invoke(
            &InvokeParams {
                tool_id: id.clone(),
                params: json!({}),
                session_id: None,
                payment: None,
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(err.code, RpcCode::PEER_UNAVAILABLE);
    assert_eq!(reg.get_analytics(&id).unwrap().invocations, 1);

    // Registering the same tool again (from another connection) gives the old id back.
    let again = reg
        .register(
            &RegisterParams {
                name: "web-search".into(),
                description: "web-search tool".into(),
                schema: schema(),
                capabilities: vec!["search".into()],
                price: None,
            },
            "conn-2",
            &mut ids,
        )
        .unwrap();
    assert_eq!(again.tool_id, id);
    assert_eq!(reg.local_tool(&id).unwrap().owner, "conn-2");
    assert_eq!(reg.take_dirty(), vec![id.clone()]);
    assert_eq!(reg.list_registered().tools.len(), 1);
    // A different tool is new.
    let fresh = register(&mut reg, &mut ids, "web-search-2", &["search"]);
    assert_ne!(fresh, id);

    // Old orphans are forgotten.
    assert_eq!(reg.forget_orphans(T0 + 10, 10), 1);
    assert!(reg.local_tool(&other).is_none());
    assert!(reg.take_dirty().contains(&other));
}

#[test]
fn a_full_registry_makes_room_by_dropping_the_oldest_orphan() {
    let limits = ToolLimits {
        max_local_tools: 2,
        ..ToolLimits::default()
    };
    let mut reg = ToolRegistry::with_limits(LOCAL, limits, CardLimits::default());
    let mut ids = counter_ids();
    let a = register(&mut reg, &mut ids, "a", &["x"]);
    register(&mut reg, &mut ids, "b", &["x"]);
    let err = reg
        .register(
            &RegisterParams {
                name: "c".into(),
                description: "c tool".into(),
                schema: schema(),
                capabilities: vec!["x".into()],
                price: None,
            },
            "conn-9",
            &mut ids,
        )
        .unwrap_err();
    assert_eq!(err.code, RpcCode::RATE_LIMITED);
    reg.orphan_owner("conn-1", T0);
    let c = register(&mut reg, &mut ids, "c", &["x"]);
    assert!(reg.local_tool(&c).is_some());
    assert_eq!(reg.list_registered().tools.len(), 1);
    // One of the two orphans made room (the smallest id among equally old ones).
    assert!(reg.local_tool(&a).is_none());
}

// ----------------------------------------------------------------------------------------------
// discover
// ----------------------------------------------------------------------------------------------

fn mesh() -> ToolRegistry {
    let mut reg = ToolRegistry::new(LOCAL);
    reg.set_local_geo(Some("eu-west".into()));
    let mut ids = counter_ids();
    let local = register(&mut reg, &mut ids, "local-search", &["search"]);
    for _ in 0..20 {
        reg.record_invocation(&local, 100, true).unwrap(); // reputation 22/24 ≈ 0.917
    }
    reg.cards_mut()
        .upsert(
            card(
                REMOTE,
                vec![
                    remote_tool(
                        "tool-8f3a2b",
                        "web-search",
                        &["search", "scrape", "summarize"],
                        0.94,
                        230,
                    ),
                    remote_tool("tool-slow", "web-search", &["search", "scrape"], 0.94, 900),
                    remote_tool("tool-low", "web-search", &["search"], 0.3, 50),
                ],
                1,
            ),
            T0,
        )
        .unwrap();
    let mut other = card(
        "12D3KooWOther",
        vec![remote_tool("tool-img", "image-gen", &["image"], 0.99, 10)],
        1,
    );
    other.geo = Some("US-EAST".into());
    reg.cards_mut().upsert(other, T0).unwrap();
    reg
}

#[test]
fn discover_filters() {
    let reg = mesh();
    // Spec §4.3 example request.
    assert_eq!(
        discover(
            &reg,
            json!({"query": "web search", "capabilities": ["search", "scrape"],
                   "minReputation": 0.7, "maxLatency": 500, "geo": "us-east"}),
            T0
        ),
        ["tool-8f3a2b"]
    );
    // Ranking: reputation desc, then latency asc, then id.
    assert_eq!(
        discover(&reg, json!({"query": ""}), T0),
        [
            "tool-img",
            "tool-8f3a2b",
            "tool-slow",
            "tool-0001",
            "tool-low"
        ]
    );
    // Token-prefix, case-insensitive query across name/description/capabilities.
    assert_eq!(
        discover(&reg, json!({"query": "SUMMAR"}), T0),
        ["tool-8f3a2b"]
    );
    assert_eq!(
        discover(&reg, json!({"query": "web nothing"}), T0),
        Vec::<String>::new()
    );
    // Capabilities compare case-insensitively; all must be present.
    assert_eq!(
        discover(
            &reg,
            json!({"query": "", "capabilities": ["SCRAPE", "summarize"]}),
            T0
        ),
        ["tool-8f3a2b"]
    );
    // Geo is an exact, case-sensitive match on the peer's region.
    assert_eq!(
        discover(&reg, json!({"query": "", "geo": "eu-west"}), T0),
        ["tool-0001"]
    );
    assert_eq!(
        discover(&reg, json!({"query": "", "geo": "US-EAST"}), T0),
        ["tool-img"]
    );
    assert_eq!(
        discover(&reg, json!({"query": "", "maxLatency": 100}), T0),
        ["tool-img", "tool-0001", "tool-low"]
    );
    // Example 1 step 2: minReputation 0.8 excludes the low-reputation tool.
    assert_eq!(
        discover(
            &reg,
            json!({"query": "web search", "minReputation": 0.8}),
            T0
        ),
        ["tool-8f3a2b", "tool-slow"]
    );
    // Expired cards are not discovered.
    assert_eq!(
        discover(&reg, json!({"query": "web"}), T0 + CARD_TTL_MS),
        Vec::<String>::new()
    );

    let mut reg = reg;
    let error = call(
        &mut reg,
        tool::DISCOVER,
        json!({"query": "x", "maxLatency": -1}),
    )
    .unwrap_err();
    assert_eq!(field_of(&error), Some(json!("maxLatency")));
    let error = call(&mut reg, tool::DISCOVER, json!({})).unwrap_err();
    assert_eq!(field_of(&error), Some(json!("query")));
}

#[test]
fn observed_analytics_override_card_claims() {
    let mut reg = mesh();
    for _ in 0..4 {
        reg.record_invocation("tool-low", 10, true).unwrap();
    }
    // (4 + 2) / (4 + 4) = 0.75 observed, instead of the claimed 0.3.
    let tools = reg
        .discover(
            &serde_json::from_value(json!({"query": "", "minReputation": 0.7})).unwrap(),
            T0,
        )
        .unwrap()
        .tools;
    let low = tools.iter().find(|t| t.id == "tool-low").unwrap();
    assert!((low.reputation - 0.75).abs() < 1e-12);
    assert_eq!(low.avg_latency, 10);
    assert_eq!(low.peer_id, REMOTE);
}

proptest! {
    #[test]
    fn ranking_is_independent_of_insertion_order(
        specs in proptest::collection::vec((0u8..5, 0u64..4, any::<bool>()), 1..12),
        seed in any::<u64>(),
    ) {
        let build = |order: &[usize]| {
            let mut reg = ToolRegistry::new(LOCAL);
            for &i in order {
                let (rep, latency, remote) = specs[i];
                let id = format!("tool-{i:02}");
                if remote {
                    let peer = format!("peer-{i:02}");
                    let t = remote_tool(&id, "web-search", &["search"], f64::from(rep) / 4.0, latency * 100);
                    reg.cards_mut().upsert(card(&peer, vec![t], 1), T0).unwrap();
                } else {
                    let mut next = || id.clone();
                    reg.register(&RegisterParams {
                        name: "web-search".into(),
                        description: "search".into(),
                        schema: json!({}),
                        capabilities: vec!["search".into()],
                        price: None,
                    }, "c", &mut next).unwrap();
                    for k in 0..u64::from(rep) {
                        reg.record_invocation(&id, latency * 100, k % 2 == 0).unwrap();
                    }
                }
            }
            reg.discover(&serde_json::from_value(json!({"query": "web"})).unwrap(), T0).unwrap()
        };
        let forward: Vec<usize> = (0..specs.len()).collect();
        let mut shuffled = forward.clone();
        // Deterministic Fisher–Yates from the seed.
        let mut state = seed | 1;
        for i in (1..shuffled.len()).rev() {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17;
            let j = usize::try_from(state % (i as u64 + 1)).unwrap();
            shuffled.swap(i, j);
        }
        let a = build(&forward);
        let b = build(&shuffled);
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(a.tools.len(), specs.len());
        for pair in a.tools.windows(2) {
            let (x, y) = (&pair[0], &pair[1]);
            prop_assert!(
                x.reputation > y.reputation
                    || (x.reputation == y.reputation && (x.avg_latency, &x.id) < (y.avg_latency, &y.id))
            );
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Spec example JSON
// ----------------------------------------------------------------------------------------------

#[test]
fn spec_examples_round_trip() {
    let discover_params = json!({
        "query": "web search",
        "capabilities": ["search", "scrape"],
        "minReputation": 0.7,
        "maxLatency": 500,
        "geo": "us-east"
    });
    let p: DiscoverParams = serde_json::from_value(discover_params).unwrap();
    assert_eq!(p.max_latency, Some(500.0));
    assert_eq!(p.geo.as_deref(), Some("us-east"));

    let discover_result = json!({
        "tools": [{
            "id": "tool-8f3a2b",
            "name": "web-search",
            "peerId": "12D3KooWRx434ACwmJz...",
            "description": "Full-text web search with snippet extraction",
            "capabilities": ["search", "scrape", "summarize"],
            "reputation": 0.94,
            "avgLatency": 230,
            "schema": schema()
        }]
    });
    let r: ToolsResult = serde_json::from_value(discover_result.clone()).unwrap();
    assert_eq!(serde_json::to_value(&r).unwrap(), discover_result);

    // Example 1 step 3.
    let invoke = json!({
        "toolId": "tool-web-9f1c",
        "params": { "query": "solid-state battery breakthroughs 2026" },
        "sessionId": "sess-a8c3f210"
    });
    let p: InvokeParams = serde_json::from_value(invoke.clone()).unwrap();
    assert_eq!(serde_json::to_value(&p).unwrap(), invoke);
    let invoke_result = json!({
        "result": { "results": [{ "title": "...", "url": "...", "snippet": "..." }] },
        "duration": 195,
        "peerId": "12D3KooWRx434ACwmJz..."
    });
    let r: InvokeResult = serde_json::from_value(invoke_result.clone()).unwrap();
    assert_eq!(serde_json::to_value(&r).unwrap(), invoke_result);
}

#[test]
fn example_1_discover_then_invoke_plan() {
    let mut reg = ToolRegistry::new(LOCAL);
    let mut t = remote_tool("tool-web-9f1c", "web-search", &["search"], 0.95, 180);
    t.description = "Full-text web search".into();
    reg.cards_mut()
        .upsert(card(REMOTE, vec![t], 7), T0)
        .unwrap();
    let found = call(
        &mut reg,
        tool::DISCOVER,
        json!({"query": "web search", "minReputation": 0.8}),
    )
    .unwrap();
    assert_eq!(
        found,
        json!({ "tools": [{
            "id": "tool-web-9f1c",
            "name": "web-search",
            "peerId": REMOTE,
            "description": "Full-text web search",
            "capabilities": ["search"],
            "reputation": 0.95,
            "avgLatency": 180,
            "schema": schema()
        }]})
    );
    let params: InvokeParams = serde_json::from_value(json!({
        "toolId": "tool-web-9f1c", "params": {"query": "q"}, "sessionId": "sess-a8c3f210"
    }))
    .unwrap();
    let plan = reg.plan_invoke(&params, T0 + 1000).unwrap();
    assert_eq!(
        plan.target,
        InvokeTarget::Remote {
            peer_id: REMOTE.into()
        }
    );
    assert_eq!(plan.peer_id, REMOTE);
    let a = reg.record_invocation(&plan.tool_id, 195, true).unwrap();
    assert_eq!((a.invocations, a.avg_latency), (1, 195));
}

// ----------------------------------------------------------------------------------------------
// invoke plans
// ----------------------------------------------------------------------------------------------

#[test]
fn invoke_plan_local_unknown_and_expired() {
    let mut reg = mesh();
    let local = InvokeParams {
        tool_id: "tool-0001".into(),
        params: json!({}),
        session_id: None,
        payment: None,
    };
    let plan = reg.plan_invoke(&local, T0).unwrap();
    assert_eq!(
        plan.target,
        InvokeTarget::Local {
            owner: "conn-1".into()
        }
    );
    assert_eq!(plan.peer_id, LOCAL);

    let unknown = InvokeParams {
        tool_id: "tool-none".into(),
        params: json!({}),
        session_id: None,
        payment: None,
    };
    let error = reg.plan_invoke(&unknown, T0).unwrap_err();
    assert_eq!(error.code, RpcCode::INVALID_PARAMS);
    assert_eq!(field_of(&error), Some(json!("toolId")));

    let remote = InvokeParams {
        tool_id: "tool-8f3a2b".into(),
        params: json!({}),
        session_id: None,
        payment: None,
    };
    assert!(reg.plan_invoke(&remote, T0 + CARD_TTL_MS - 1).is_ok());
    let error = reg.plan_invoke(&remote, T0 + CARD_TTL_MS).unwrap_err();
    assert_eq!(error.code, RpcCode::PEER_UNAVAILABLE);
    assert_eq!(error.code.0, -32006);
    assert_eq!(error.data.as_ref().unwrap()["peerId"], json!(REMOTE));
    assert_eq!(error.data.as_ref().unwrap()["toolId"], json!("tool-8f3a2b"));

    // Once the expired card is forgotten the tool is simply unknown.
    let forget = CardLimits::default().forget_after_ms;
    assert_eq!(reg.cards_mut().prune(T0 + CARD_TTL_MS + forget - 1), 0);
    assert_eq!(reg.cards_mut().prune(T0 + CARD_TTL_MS + forget), 2);
    let error = reg
        .plan_invoke(&remote, T0 + CARD_TTL_MS + forget)
        .unwrap_err();
    assert_eq!(error.code, RpcCode::INVALID_PARAMS);
}

// ----------------------------------------------------------------------------------------------
// Cards
// ----------------------------------------------------------------------------------------------

#[test]
fn card_json_shape() {
    let c = card(REMOTE, vec![remote_tool("t1", "x", &["a"], 0.5, 1)], 3);
    let v = serde_json::to_value(&c).unwrap();
    for key in [
        "peerId",
        "tools",
        "taskTypes",
        "reputation",
        "geo",
        "latency",
        "version",
        "updatedAt",
    ] {
        assert!(v.get(key).is_some(), "{key}");
    }
    let back: CapabilityCard = serde_json::from_value(v).unwrap();
    assert_eq!(back, c);
}

#[test]
fn card_ttl_expires_at_exactly_five_minutes() {
    let mut table = CardTable::new();
    assert_eq!(
        table.upsert(card(REMOTE, vec![], 1), T0).unwrap(),
        CardUpdate::Inserted
    );
    assert!(table.is_live(REMOTE, T0 + CARD_TTL_MS - 1));
    assert!(!table.is_live(REMOTE, T0 + CARD_TTL_MS));
    assert_eq!(CARD_TTL_MS, 300_000);
    // A newer heartbeat at +4 min extends the TTL from that moment.
    assert_eq!(
        table.upsert(card(REMOTE, vec![], 2), T0 + 240_000).unwrap(),
        CardUpdate::Replaced
    );
    assert!(table.is_live(REMOTE, T0 + 240_000 + CARD_TTL_MS - 1));
    assert!(!table.is_live(REMOTE, T0 + 240_000 + CARD_TTL_MS));
    assert_eq!(table.live_cards(T0 + 240_000 + CARD_TTL_MS).count(), 0);
    assert_eq!(table.len(), 1);
}

#[test]
fn newest_card_wins() {
    let mut table = CardTable::new();
    table.upsert(card(REMOTE, vec![], 5), T0).unwrap();
    let mut older = card(REMOTE, vec![remote_tool("t", "x", &["a"], 0.5, 1)], 4);
    older.updated_at = T0 + 999_999;
    assert_eq!(table.upsert(older, T0 + 10).unwrap(), CardUpdate::Stale);
    assert_eq!(
        table.upsert(card(REMOTE, vec![], 5), T0 + 200_000).unwrap(),
        CardUpdate::Duplicate
    );
    // Neither refreshed the TTL.
    assert!(!table.is_live(REMOTE, T0 + CARD_TTL_MS));
    assert!(table.entry(REMOTE).unwrap().card.tools.is_empty());
    let newer = card(REMOTE, vec![remote_tool("t", "x", &["a"], 0.5, 1)], 6);
    assert_eq!(table.upsert(newer, T0 + 20).unwrap(), CardUpdate::Replaced);
    let stored = table.live(REMOTE, T0 + 20).unwrap();
    assert_eq!(stored.version, 6);
    assert_eq!(
        stored.tools[0].peer_id, REMOTE,
        "omitted tool peerId is filled in"
    );
}

#[test]
fn invalid_cards_are_rejected() {
    let mut table = CardTable::new();
    let mut c = card(REMOTE, vec![], 1);
    c.reputation = 1.5;
    assert!(
        matches!(table.upsert(c, T0), Err(CardError::Invalid { field, .. }) if field == "reputation")
    );
    let mut t = remote_tool("t", "x", &["a"], 0.5, 1);
    t.peer_id = "someone-else".into();
    assert!(matches!(
        table.upsert(card(REMOTE, vec![t], 1), T0),
        Err(CardError::Invalid { field, .. }) if field == "tools[0].peerId"
    ));
    let t = remote_tool("t", "x", &[], 0.5, 1);
    assert!(matches!(
        table.upsert(card(REMOTE, vec![t], 1), T0),
        Err(CardError::Invalid { field, .. }) if field == "tools[0].capabilities"
    ));
    let limits = CardLimits {
        max_cards: 1,
        ..CardLimits::default()
    };
    let mut table = CardTable::with_limits(limits);
    table.upsert(card("a", vec![], 1), T0).unwrap();
    assert_eq!(
        table.upsert(card("b", vec![], 1), T0),
        Err(CardError::Full { limit: 1 })
    );
    // An expired card makes room.
    assert_eq!(
        table
            .upsert(card("b", vec![], 1), T0 + CARD_TTL_MS)
            .unwrap(),
        CardUpdate::Inserted
    );
    assert!(table.entry("a").is_none());
}

#[test]
fn delta_contains_only_changes() {
    let mut prev = card(REMOTE, vec![remote_tool("t", "x", &["a"], 0.5, 1)], 1);
    // The round trip is exact for normalized cards (tool peerIds filled in, as the table stores).
    prev.tools[0].peer_id = REMOTE.into();
    let mut cur = prev.clone();
    cur.version = 2;
    cur.updated_at += 30_000;
    cur.latency = 55;
    cur.geo = None;
    let delta = heartbeat_delta(&prev, &cur).unwrap();
    assert_eq!(
        delta,
        json!({
            "peerId": REMOTE, "baseVersion": 1, "version": 2,
            "updatedAt": cur.updated_at, "latency": 55, "geo": null
        })
    );
    assert_eq!(
        apply_delta(&prev, &delta, &CardLimits::default()).unwrap(),
        cur
    );
    // Not newer, or another peer: no delta.
    assert!(heartbeat_delta(&cur, &prev).is_none());
    assert!(heartbeat_delta(&prev, &card("other", vec![], 9)).is_none());
}

#[test]
fn table_applies_deltas_and_detects_gaps() {
    let mut table = CardTable::new();
    let v1 = card(REMOTE, vec![], 1);
    let mut v2 = v1.clone();
    v2.version = 2;
    v2.tools = vec![remote_tool("t", "x", &["a"], 0.5, 1)];
    let mut v3 = v2.clone();
    v3.version = 3;
    v3.reputation = 0.9;
    let d12 = heartbeat_delta(&v1, &v2).unwrap();
    let d23 = heartbeat_delta(&v2, &v3).unwrap();

    assert_eq!(
        table.apply_delta(&d12, T0),
        Err(CardError::MissingBase {
            peer_id: REMOTE.into()
        })
    );
    table.upsert(v1, T0).unwrap();
    assert_eq!(
        table.apply_delta(&d23, T0),
        Err(CardError::VersionGap {
            stored_version: 1,
            base_version: 2
        })
    );
    assert_eq!(
        table.apply_delta(&d12, T0 + 30_000).unwrap(),
        CardUpdate::Replaced
    );
    assert_eq!(
        table.apply_delta(&d12, T0 + 60_000).unwrap(),
        CardUpdate::Duplicate
    );
    assert_eq!(
        table.apply_delta(&d23, T0 + 60_000).unwrap(),
        CardUpdate::Replaced
    );
    let stored = table.live(REMOTE, T0 + 60_000 + CARD_TTL_MS - 1).unwrap();
    assert_eq!(stored.tools[0].peer_id, REMOTE);
    assert_eq!(*stored, {
        let mut v = v3;
        v.tools[0].peer_id = REMOTE.into();
        v
    });
}

#[test]
fn local_card_advertises_local_tools() {
    let mut reg = ToolRegistry::new(LOCAL);
    reg.set_local_geo(Some("eu-west".into()));
    let mut ids = counter_ids();
    register(&mut reg, &mut ids, "web-search", &["search"]);
    let c = reg.local_card(vec!["web-research".into()], 0.9, 20, 1, T0);
    assert_eq!(c.tools.len(), 1);
    assert_eq!(c.tools[0].peer_id, LOCAL);
    // A receiver accepts it.
    let mut table = CardTable::new();
    assert_eq!(table.upsert(c, T0).unwrap(), CardUpdate::Inserted);
}

fn arb_tool() -> impl Strategy<Value = ToolRecord> {
    (
        "[a-z]{1,6}",
        "[a-z]{1,8}",
        proptest::collection::vec("[a-z]{1,5}", 1..4),
        0u32..=100,
        0u64..1000,
    )
        .prop_map(|(id, name, caps, rep, latency)| ToolRecord {
            id,
            name: name.clone(),
            peer_id: REMOTE.into(),
            description: format!("{name} tool"),
            capabilities: caps,
            reputation: f64::from(rep) / 100.0,
            avg_latency: latency,
            schema: json!({ "n": latency }),
            price: None,
            source: None,
        })
}

fn arb_card(version: u64) -> impl Strategy<Value = CapabilityCard> {
    (
        proptest::collection::btree_map("[a-z]{1,6}", arb_tool(), 0..4),
        proptest::collection::vec("[a-z-]{1,10}", 0..3),
        0u32..=100,
        proptest::option::of(prop_oneof![
            Just("us-east".to_owned()),
            Just("eu-west".to_owned())
        ]),
        0u64..500,
        0u64..100_000,
    )
        .prop_map(
            move |(tools, task_types, rep, geo, latency, updated_at)| CapabilityCard {
                peer_id: REMOTE.into(),
                tools: tools
                    .into_iter()
                    .map(|(id, mut t)| {
                        t.id = id;
                        t
                    })
                    .collect(),
                task_types,
                reputation: f64::from(rep) / 100.0,
                geo,
                latency,
                version,
                updated_at,
                wallet_address: None,
            },
        )
}

proptest! {
    #[test]
    fn delta_apply_round_trip(prev in arb_card(1), cur in arb_card(2)) {
        let delta = heartbeat_delta(&prev, &cur).unwrap();
        prop_assert_eq!(&apply_delta(&prev, &delta, &CardLimits::default()).unwrap(), &cur);
        // Over the wire, too.
        let text = serde_json::to_string(&delta).unwrap();
        let wire: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(apply_delta(&prev, &wire, &CardLimits::default()).unwrap(), cur);
    }
}

fn bridged(id: &str, name: &str) -> BridgedTool {
    BridgedTool {
        id: id.into(),
        params: RegisterParams {
            name: name.into(),
            description: format!("{name}, bridged"),
            schema: schema(),
            capabilities: vec!["mcp".into()],
            price: None,
        },
        source: ToolSource {
            bridge: ToolSource::MCP.into(),
            server: "everything".into(),
            name: name.into(),
            verified: None,
        },
    }
}

#[test]
fn a_bridge_sets_its_whole_list_and_tools_leave_and_come_back_under_their_ids() {
    let mut reg = ToolRegistry::new(LOCAL);
    let set = reg.set_owner_tools(
        "mcp:e",
        vec![bridged("t-echo", "e.echo"), bridged("t-sum", "e.sum")],
        1,
    );
    assert!(set.changed && set.refused.is_empty(), "{set:?}");
    let listed = reg.list_registered().tools;
    assert_eq!(
        listed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["t-echo", "t-sum"]
    );
    assert_eq!(
        listed[0].source.as_ref().map(|s| s.bridge.as_str()),
        Some("mcp")
    );
    // The same list again changes nothing: no new card.
    let again = reg.set_owner_tools(
        "mcp:e",
        vec![bridged("t-echo", "e.echo"), bridged("t-sum", "e.sum")],
        2,
    );
    assert!(!again.changed, "{again:?}");
    // The child died: its tools leave the card, and invoking one is −32006.
    assert!(reg.set_owner_tools("mcp:e", vec![], 3).changed);
    assert!(reg.list_registered().tools.is_empty());
    let invoke = InvokeParams {
        tool_id: "t-echo".into(),
        params: json!({}),
        session_id: None,
        payment: None,
    };
    assert_eq!(
        reg.plan_invoke(&invoke, 4).map(|_| ()).unwrap_err().code,
        RpcCode::PEER_UNAVAILABLE
    );
    // Listed again: back under the same id.
    assert!(
        reg.set_owner_tools("mcp:e", vec![bridged("t-echo", "e.echo")], 5)
            .changed
    );
    assert!(reg.plan_invoke(&invoke, 6).is_ok());
    // Another owner cannot take a served id; a tool with a bad field is refused alone.
    let mut bad = bridged("t-bad", "e.bad");
    bad.params.description = " ".into();
    let other = reg.set_owner_tools(
        "a2a:x",
        vec![bridged("t-echo", "x.echo"), bad, bridged("t-ok", "x.ok")],
        7,
    );
    assert_eq!(
        other
            .refused
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        ["t-echo", "t-bad"]
    );
    assert!(other.refused[1].1.contains("description"), "{other:?}");
    assert!(reg.local_tool("t-ok").is_some());
}

/// `data.field` of a −32602, after checking that its `data.errors`, when it has them, list that
/// field first.
fn field_of(error: &RpcError) -> Option<Value> {
    let data = error.data.as_ref()?;
    if let Some(errors) = data.get("errors") {
        assert_eq!(errors[0]["field"], data["field"], "{data}");
    }
    data.get("field").cloned()
}
