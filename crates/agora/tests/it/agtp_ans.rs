//! The Agent Name Service end to end, over real TLS 1.3 sockets to real `agora node`
//! processes on 127.0.0.1: governance-signed activation, signed DISCOVER, revocation, the
//! audit log and the index surviving a restart, refresh against a test AGTP agent (built from
//! our codec and listener) that fails three times, and federation across two name servers with
//! a third peer that never answers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use agora_agtp::codec::{Request, Response};
use agora_agtp::manifest::Transition;
use agora_agtp::signature::{AnsSigningKey, AnsVerifyingKey, verify_result_with};
use agora_agtp::{AgtpError, Status};
use agora_node::ans;
use agora_node::faces::agtp::client::{self, Transport};
use agora_node::faces::agtp::listener::Handler;
use agora_node::faces::agtp::tls::{self, Roots};
use serde_json::{Value, json};

use crate::support::agtp_governance_key as governance_key;
use crate::support::{self, Node, eventually, spawn_node};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A name server process and how to talk to it.
struct NameServer {
    node: Node,
    addr: String,
    transport: Transport,
    key: AnsVerifyingKey,
}

/// Starts a TLS name server whose `agora.toml` is `config` (in `dir`).
async fn start(dir: &Path, name: &str, config: &str) -> NameServer {
    std::fs::create_dir_all(dir).unwrap();
    let cfg = dir.join("agora.toml");
    std::fs::write(&cfg, format!("[agtp]\nname = \"{name}\"\n{config}")).unwrap();
    let data = dir.join("data");
    let node = spawn_node(
        &data,
        &[],
        30,
        &["--config", cfg.to_str().unwrap(), "--agtp-tls"],
    );
    connect_to(node).await
}

/// Completes a [`NameServer`] for a running node: trusts its generated certificate and reads
/// its key from its own manifest (DESCRIBE).
async fn connect_to(node: Node) -> NameServer {
    let addr = node.agtp.strip_prefix("agtp://").unwrap().to_owned();
    let cert = std::fs::read(node.data.join(tls::CERT_FILE)).unwrap();
    let transport = Transport::for_host("127.0.0.1", true, false, &Roots::Pem(cert)).unwrap();
    let described = client::request(&addr, &transport, &Request::new("DESCRIBE"), TIMEOUT)
        .await
        .expect("DESCRIBE over TLS");
    assert_eq!(described.status, Status::OK);
    let manifest = described.json_body().unwrap().unwrap()["result"].clone();
    let keys = manifest["ans_keys"].as_object().unwrap();
    assert_eq!(keys.len(), 1);
    let key = AnsVerifyingKey::from_jwk(keys.values().next().unwrap()).unwrap();
    assert_eq!(
        manifest["ranking"]["weights"],
        json!({"trust_tier": 0.3, "behavioral_trust": 0.4, "capability_match": 0.3})
    );
    NameServer {
        node,
        addr,
        transport,
        key,
    }
}

impl NameServer {
    async fn send(&self, request: &Request) -> Response {
        client::request(&self.addr, &self.transport, request, TIMEOUT)
            .await
            .expect("the name server answers")
    }

    async fn lifecycle(
        &self,
        gov: &AnsSigningKey,
        t: Transition,
        id: &str,
        manifest: Option<&Value>,
        reason: Option<&str>,
    ) -> Response {
        self.send(&support::agtp_lifecycle_request(
            gov, t, id, manifest, reason,
        ))
        .await
    }

    /// DISCOVER; asserts 200 and a valid signature; returns the result object.
    async fn discover(&self, parameters: Value) -> Value {
        let response = self
            .send(
                &Request::new("DISCOVER")
                    .with_header("Agent-ID", "agent-caller")
                    .with_header("Authority-Scope", "discovery:query agents:delegate")
                    .with_header("Task-ID", "task-1")
                    .with_json_body(&json!({"method": "DISCOVER", "parameters": parameters})),
            )
            .await;
        assert_eq!(
            response.status,
            Status::OK,
            "{}",
            String::from_utf8_lossy(&response.body)
        );
        let body = agora_agtp::jcs::parse(std::str::from_utf8(&response.body).unwrap()).unwrap();
        assert_eq!(body["status"], 200);
        assert_eq!(body["task_id"], "task-1");
        let result = body["result"].clone();
        verify_result_with(std::slice::from_ref(&self.key), &result).expect("signed by the ANS");
        result
    }
}

fn ids(result: &Value) -> Vec<String> {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["canonical_id"].as_str().unwrap().to_owned())
        .collect()
}

fn manifest(id: &str, tier: u8, trust: f64, text: &str, endpoint: Option<&str>) -> Value {
    let mut m = json!({
        "canonical_id": id,
        "manifest_uri": format!("agtp://agents.example/agents/{id}"),
        "agent_label": id,
        "org_domain": "example.org",
        "governance_zone": "zone:test",
        "trust_tier": tier,
        "behavioral_trust_score": trust,
        "supported_methods": ["QUERY", "ANALYZE"],
        "authority_scope_categories": ["documents:query"],
        "job_description": text,
    });
    if let Some(e) = endpoint {
        m["endpoint"] = json!(e);
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activation_discovery_revocation_audit_and_restart_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let gov = governance_key(dir.path());
    let ns = start(
        dir.path(),
        "ans.one",
        "governance_keys = [\"gov.pub.json\"]\n",
    )
    .await;

    // Activation: the index answers with the new state at once.
    for (id, tier, trust, text) in [
        (
            "agt-audit",
            1,
            0.95,
            "Audits Solidity smart contracts for reentrancy",
        ),
        ("agt-review", 2, 0.80, "Reviews smart contracts and code"),
        ("agt-weather", 1, 0.99, "Forecasts the weather"),
    ] {
        let r = ns
            .lifecycle(
                &gov,
                Transition::Activate,
                id,
                Some(&manifest(id, tier, trust, text, None)),
                None,
            )
            .await;
        assert_eq!(r.status, Status::OK, "{}", String::from_utf8_lossy(&r.body));
        let b = r.json_body().unwrap().unwrap();
        assert_eq!(b["result"]["lifecycle_state"], "Active");
        assert_eq!(b["result"]["previous_state"], Value::Null);
    }
    let found = ns
        .discover(json!({"intent": "audit smart contracts", "limit": 5}))
        .await;
    assert_eq!(ids(&found), vec!["agt-audit", "agt-review"]);
    assert_eq!(found["total_matches"], 2);
    assert_eq!(found["returned"], 2);
    assert_eq!(found["ans_signature"]["algorithm"], "ES256");
    assert_eq!(found["ans_signature"]["key_id"], ns.key.key_id());

    // Without discovery:query: 451 as in the draft.
    let refused = ns
        .send(
            &Request::new("DISCOVER")
                .with_header("Agent-ID", "agent-caller")
                .with_header("Authority-Scope", "documents:query")
                .with_json_body(&json!({"parameters": {"intent": "x"}})),
        )
        .await;
    assert_eq!(refused.status, Status(451));
    // A bad parameter is a 400 naming it.
    let bad = ns
        .send(
            &Request::new("DISCOVER")
                .with_header("Agent-ID", "agent-caller")
                .with_header("Authority-Scope", "discovery:query")
                .with_json_body(&json!({"parameters": {"intent": "x", "limit": 500}})),
        )
        .await;
    assert_eq!(bad.status, Status::BAD_REQUEST);
    assert_eq!(
        bad.json_body().unwrap().unwrap()["error"]["parameter"],
        "limit"
    );
    // Per-Agent-ID rate limit (burst 40): a hot caller gets 429 with a retry hint, others not.
    let mut limited = None;
    for _ in 0..60 {
        let r = ns
            .send(
                &Request::new("DISCOVER")
                    .with_header("Agent-ID", "agent-hot")
                    .with_header("Authority-Scope", "discovery:query")
                    .with_json_body(&json!({"parameters": {"intent": "weather"}})),
            )
            .await;
        if r.status == Status::RATE_LIMITED {
            limited = Some(r);
            break;
        }
    }
    let limited = limited.expect("the 41st request within a second or so is refused");
    assert!(
        limited.json_body().unwrap().unwrap()["error"]["retry_after_ms"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(
        ids(&ns.discover(json!({"intent": "weather"})).await),
        vec!["agt-weather"]
    );
    // A lifecycle request signed by an untrusted key: 401, nothing changes.
    let rogue = ans::generate_key(Some("gov-test")).unwrap();
    let r = ns
        .lifecycle(&rogue, Transition::Revoke, "agt-audit", None, Some("rogue"))
        .await;
    assert_eq!(r.status, Status::UNAUTHORIZED);

    // Revocation takes effect before the next DISCOVER.
    let r = ns
        .lifecycle(
            &gov,
            Transition::Revoke,
            "agt-audit",
            None,
            Some("key compromise"),
        )
        .await;
    assert_eq!(r.status, Status::OK);
    let after = ns
        .discover(json!({"intent": "audit smart contracts", "limit": 5}))
        .await;
    assert_eq!(ids(&after), vec!["agt-review"]);
    // Revocation is permanent.
    let r = ns
        .lifecycle(
            &gov,
            Transition::Activate,
            "agt-audit",
            Some(&manifest("agt-audit", 1, 0.9, "again", None)),
            None,
        )
        .await;
    assert_eq!(r.status, Status::CONFLICT);
    // Suspension and reinstatement.
    let r = ns
        .lifecycle(&gov, Transition::Deactivate, "agt-review", None, None)
        .await;
    assert_eq!(r.status, Status::OK);
    assert!(ids(&ns.discover(json!({"intent": "review code"})).await).is_empty());
    let r = ns
        .lifecycle(&gov, Transition::Reinstate, "agt-review", None, None)
        .await;
    assert_eq!(r.status, Status::OK);
    assert_eq!(
        ids(&ns.discover(json!({"intent": "review code"})).await),
        vec!["agt-review"]
    );

    // Restart: the index is rebuilt from the store and the audit log holds every change.
    let data = ns.node.data.clone();
    let key_before = ns.key.to_jwk();
    drop(ns);
    let node = spawn_node(
        &data,
        &[],
        30,
        &[
            "--config",
            dir.path().join("agora.toml").to_str().unwrap(),
            "--agtp-tls",
        ],
    );
    let ns = connect_to(node).await;
    assert_eq!(ns.key.to_jwk(), key_before, "the signing key is kept");
    assert_eq!(
        ids(&ns.discover(json!({"intent": "review code"})).await),
        vec!["agt-review"]
    );
    let r = ns
        .send(&Request::new("DESCRIBE").with_target("/agents/agt-audit"))
        .await;
    assert_eq!(
        r.json_body().unwrap().unwrap()["result"]["lifecycle_state"],
        "Revoked"
    );
    drop(ns);
    let store = eventually(Duration::from_secs(10), async || {
        agora_node::store::Store::open(&data).ok()
    })
    .await
    .expect("the store opens once the node has stopped");
    let audit: Vec<Value> = store
        .ans_audit()
        .unwrap()
        .into_iter()
        .map(|(_, v)| serde_json::from_str(&v).unwrap())
        .collect();
    let methods: Vec<(&str, &str)> = audit
        .iter()
        .map(|a| {
            (
                a["method"].as_str().unwrap(),
                a["canonical_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        methods,
        vec![
            ("ACTIVATE", "agt-audit"),
            ("ACTIVATE", "agt-review"),
            ("ACTIVATE", "agt-weather"),
            ("REVOKE", "agt-audit"),
            ("DEACTIVATE", "agt-review"),
            ("REINSTATE", "agt-review"),
        ]
    );
    assert_eq!(audit[3]["reason"], "key compromise");
    assert_eq!(audit[3]["key_id"], "gov-test");
}

/// A test AGTP agent: answers DESCRIBE with its manifest, or 503 while `failing`.
struct TestAgent {
    failing: AtomicBool,
    describes: AtomicU32,
    job: std::sync::Mutex<String>,
}

impl Handler for TestAgent {
    fn handle(
        &self,
        request: Request,
        _remote: SocketAddr,
    ) -> impl Future<Output = Response> + Send {
        self.describes.fetch_add(1, Ordering::SeqCst);
        let response = if request.method != "DESCRIBE" {
            Response::from_error(&AgtpError::MethodViolation(request.method), None)
        } else if request.headers.agent_id() != Some("agt-refresh") {
            Response::from_error(&AgtpError::NotFound("agent-not-found".into()), None)
        } else if self.failing.load(Ordering::SeqCst) {
            Response::from_error(&AgtpError::Unavailable("down for the test".into()), None)
        } else {
            let job = self.job.lock().unwrap().clone();
            Response::new(Status::OK).with_json_body(&json!({
                "agent_id": "agt-refresh",
                "name": "agt-refresh",
                "description": job,
                "methods": ["QUERY", "SUMMARIZE"],
                "trust_score": 0.7,
            }))
        };
        std::future::ready(response)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_replaces_data_and_three_failures_remove_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let gov = governance_key(dir.path());
    let agent = Arc::new(TestAgent {
        failing: AtomicBool::new(false),
        describes: AtomicU32::new(0),
        job: std::sync::Mutex::new("Summarises quarterly reports".into()),
    });
    let (agent_addr, stop_tx) = support::serve_agtp_host(Arc::clone(&agent)).await;
    let ns = start(
        dir.path(),
        "ans.refresh",
        "governance_keys = [\"gov.pub.json\"]\nrefresh_interval = 1\nrefresh_retry = 1\nrefresh_timeout_ms = 2000\nrate = 10000.0\nburst = 10000.0\n",
    )
    .await;
    let endpoint = format!("agtp://{agent_addr}/agents/agt-refresh");
    let r = ns
        .lifecycle(
            &gov,
            Transition::Activate,
            "agt-refresh",
            Some(&manifest(
                "agt-refresh",
                2,
                0.5,
                "Translates menus",
                Some(&endpoint),
            )),
            None,
        )
        .await;
    assert_eq!(r.status, Status::OK);
    let r = ns
        .send(&Request::new("DESCRIBE").with_target("/agents/agt-refresh"))
        .await;
    assert_eq!(
        r.json_body().unwrap().unwrap()["result"]["lifecycle_state"],
        "Active"
    );

    // The refreshed data (newer Identity Document names) replaces the old.
    let refreshed = eventually(Duration::from_secs(15), async || {
        let r = ns
            .discover(json!({"intent": "summarise quarterly reports"}))
            .await;
        (ids(&r) == vec!["agt-refresh"]).then_some(r)
    })
    .await
    .expect("the agent is re-described");
    assert_eq!(refreshed["results"][0]["behavioral_trust_score"], 0.7);
    assert!(ids(&ns.discover(json!({"intent": "translate menus"})).await).is_empty());

    // Three consecutive failures remove it.
    agent.failing.store(true, Ordering::SeqCst);
    let before = agent.describes.load(Ordering::SeqCst);
    let removed = eventually(Duration::from_secs(20), async || {
        let r = ns
            .send(&Request::new("DESCRIBE").with_target("/agents/agt-refresh"))
            .await;
        (r.status == Status::NOT_FOUND).then_some(())
    })
    .await;
    assert!(removed.is_some(), "removed after three failed refreshes");
    assert!(agent.describes.load(Ordering::SeqCst) >= before + 3);
    assert!(
        ids(&ns
            .discover(json!({"intent": "summarise quarterly reports"}))
            .await)
        .is_empty()
    );
    let _ = stop_tx.send(());
    let data = ns.node.data.clone();
    drop(ns);
    let store = eventually(Duration::from_secs(10), async || {
        agora_node::store::Store::open(&data).ok()
    })
    .await
    .unwrap();
    let last: Value = serde_json::from_str(&store.ans_audit().unwrap().last().unwrap().1).unwrap();
    assert_eq!(last["method"], "REFRESH-REMOVE");
    assert_eq!(last["canonical_id"], "agt-refresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn federation_merges_verified_peer_results_within_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let gov = governance_key(dir.path());
    std::fs::copy(dir.path().join("gov.pub.json"), {
        std::fs::create_dir_all(dir.path().join("b")).unwrap();
        dir.path().join("b/gov.pub.json")
    })
    .unwrap();
    std::fs::create_dir_all(dir.path().join("a")).unwrap();
    std::fs::copy(
        dir.path().join("gov.pub.json"),
        dir.path().join("a/gov.pub.json"),
    )
    .unwrap();

    let b = start(
        &dir.path().join("b"),
        "ans.b",
        "governance_keys = [\"gov.pub.json\"]\n",
    )
    .await;
    // A peer that accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    std::fs::write(
        dir.path().join("a/silent.pub.json"),
        ans::generate_key(Some("x"))
            .unwrap()
            .verifying_key()
            .to_jwk()
            .to_string(),
    )
    .unwrap();
    let config_a = format!(
        "governance_keys = [\"gov.pub.json\"]\nfederation_deadline_ms = 800\n\
         [[agtp.peers]]\nname = \"ans.b\"\nendpoint = \"{}\"\nkey = \"{}\"\nca = \"{}\"\ntls = true\n\
         [[agtp.peers]]\nname = \"ans.silent\"\nendpoint = \"{silent_addr}\"\nkey = \"silent.pub.json\"\n",
        b.addr,
        b.node.data.join(ans::KEY_FILE).display(),
        b.node.data.join(tls::CERT_FILE).display(),
    );
    let a = start(&dir.path().join("a"), "ans.a", &config_a).await;

    for (ns, id, tier, trust) in [
        (&a, "agt-a1", 1, 0.9),
        (&b, "agt-b1", 1, 0.95),
        (&b, "agt-b2", 2, 0.6),
    ] {
        let r = ns
            .lifecycle(
                &gov,
                Transition::Activate,
                id,
                Some(&manifest(
                    id,
                    tier,
                    trust,
                    "Analyses invoices for fraud",
                    None,
                )),
                None,
            )
            .await;
        assert_eq!(r.status, Status::OK);
    }
    // The same agent registered on both: deduplicated by canonical_id.
    let r = b
        .lifecycle(
            &gov,
            Transition::Activate,
            "agt-a1",
            Some(&manifest(
                "agt-a1",
                1,
                0.9,
                "Analyses invoices for fraud",
                None,
            )),
            None,
        )
        .await;
    assert_eq!(r.status, Status::OK);

    let started = Instant::now();
    let merged = a
        .discover(json!({"intent": "invoice fraud", "limit": 10}))
        .await;
    let took = started.elapsed();
    assert_eq!(ids(&merged), vec!["agt-b1", "agt-a1", "agt-b2"]);
    assert_eq!(merged["federation_path"], json!(["ans.a", "ans.b"]));
    assert_eq!(merged["total_matches"], 3);
    assert!(
        took < Duration::from_millis(800 + 1500),
        "the silent peer held the answer for {took:?}"
    );
    assert!(
        took >= Duration::from_millis(700),
        "the deadline was not waited for: {took:?}"
    );

    // Thresholds are never relaxed on the way: B's tier-2 agent is not returned for tier 1.
    let strict = a
        .discover(json!({"intent": "invoice fraud", "trust_tier_min": 1}))
        .await;
    assert_eq!(ids(&strict), vec!["agt-b1", "agt-a1"]);

    // Enough local results: no forwarding, no federation_path.
    let local = a
        .discover(json!({"intent": "invoice fraud", "limit": 1}))
        .await;
    assert_eq!(ids(&local), vec!["agt-a1"]);
    assert!(local.get("federation_path").is_none());

    // A forwarded query is answered from B's own index and not forwarded again.
    let forwarded = b
        .send(
            &Request::new("DISCOVER")
                .with_header("Agent-ID", "agent-caller")
                .with_header("Authority-Scope", "discovery:query")
                .with_header("Federation-Forwarded", "ans.a")
                .with_json_body(&json!({"parameters": {"intent": "invoice fraud"}})),
        )
        .await;
    let body = agora_agtp::jcs::parse(std::str::from_utf8(&forwarded.body).unwrap()).unwrap();
    assert!(body["result"].get("federation_path").is_none());
    drop(silent);
}
