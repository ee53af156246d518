//! The AGTP reference implementation's clients against real `agora node` processes on
//! 127.0.0.1 (plain AGTP on loopback, as the reference speaks it; `docs/agtp-ans.md`):
//!
//! - the wire transcripts of `tests/vectors/agtp/reference-clients.json`, sent byte for byte
//!   over a socket each: server manifest, DESCRIBE by `Agent-ID` / name / id, `DISCOVER
//!   /population` with the reference's parameter names, its query string and body-over-query
//!   precedence, unknown parameters and paths, scope claims, both error vocabularies, and
//!   `Server-ID` / `Response-ID` on every answer;
//! - the settings that govern unregistered callers' claims and the open `/population`;
//! - the "ANS anomaly" log line, once per burst under a sustained flood from one `Agent-ID`;
//! - refresh applying the lifecycle state the host's DESCRIBE declares (the reference
//!   server's answer replayed from the vectors), back to Active only through governance.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agora_agtp::codec::{Limits, Request, Response, decode_request, decode_response};
use agora_agtp::manifest::Transition;
use agora_agtp::signature::{AnsSigningKey, AnsVerifyingKey, verify_result_with};
use agora_agtp::{AgtpError, Status};
use agora_node::faces::agtp::client::{self, Transport};
use agora_node::faces::agtp::listener::Handler;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{self, Log, Node, agtp_governance_key, agtp_lifecycle_request, eventually};

const TIMEOUT: Duration = Duration::from_secs(10);

fn vectors() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/vectors/agtp/reference-clients.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A plain-AGTP name server process.
struct NameServer {
    node: Node,
    name: String,
    addr: String,
    key: AnsVerifyingKey,
    gov: AnsSigningKey,
}

/// Starts a name server named `name` whose `[agtp]` section also holds `config`; its log is
/// collected when `logged`.
async fn start(dir: &Path, name: &str, config: &str, logged: bool) -> (NameServer, Log) {
    let gov = agtp_governance_key(dir);
    let cfg = dir.join("agora.toml");
    std::fs::write(
        &cfg,
        format!("[agtp]\nname = \"{name}\"\ngovernance_keys = [\"gov.pub.json\"]\n{config}"),
    )
    .unwrap();
    let data = dir.join("data");
    let extra = ["--config", cfg.to_str().unwrap()];
    let (node, log) = if logged {
        support::spawn_node_logged(&data, &extra)
    } else {
        (support::spawn_node(&data, &[], 30, &extra), Log::default())
    };
    let addr = node.agtp.strip_prefix("agtp://").unwrap().to_owned();
    let described = client::request(&addr, &Transport::Plain, &Request::new("DESCRIBE"), TIMEOUT)
        .await
        .unwrap();
    let manifest = described.json_body().unwrap().unwrap()["result"].clone();
    let jwk = manifest["ans_keys"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap();
    let key = AnsVerifyingKey::from_jwk(jwk).unwrap();
    let ns = NameServer {
        node,
        name: name.to_owned(),
        addr,
        key,
        gov,
    };
    (ns, log)
}

impl NameServer {
    async fn send(&self, request: &Request) -> Response {
        client::request(&self.addr, &Transport::Plain, request, TIMEOUT)
            .await
            .expect("the name server answers")
    }

    async fn lifecycle(&self, t: Transition, id: &str, manifest: Option<&Value>) -> Response {
        self.send(&agtp_lifecycle_request(
            &self.gov,
            t,
            id,
            manifest,
            Some("test"),
        ))
        .await
    }

    /// DESCRIBE /agents/{id}: the registry state, or `None` once it is not registered.
    async fn state(&self, id: &str) -> Option<String> {
        let r = self
            .send(&Request::new("DESCRIBE").with_target(format!("/agents/{id}")))
            .await;
        let body = r.json_body().unwrap().unwrap();
        body["result"]["lifecycle_state"]
            .as_str()
            .map(str::to_owned)
    }

    /// The draft's DISCOVER by a caller holding `discovery:query`: the canonical ids found.
    async fn found(&self, intent: &str) -> Vec<String> {
        let r = self
            .send(
                &Request::new("DISCOVER")
                    .with_header("Agent-ID", "agent-caller")
                    .with_header("Authority-Scope", "discovery:query")
                    .with_json_body(&json!({"parameters": {"intent": intent}})),
            )
            .await;
        assert_eq!(r.status, Status::OK);
        r.json_body().unwrap().unwrap()["result"]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["canonical_id"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Writes `raw` on a new connection and reads one answer; `true` when the server then closed
/// the connection (only waited for when `expect_close`).
async fn exchange(addr: &str, raw: &[u8], expect_close: bool) -> (Response, bool) {
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(raw).await.unwrap();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let mut buf = Vec::new();
    let response = loop {
        if let Some((r, n)) = decode_response(&buf, &Limits::default()).unwrap() {
            buf.drain(..n);
            break r;
        }
        let n = tokio::time::timeout_at(deadline, socket.read_buf(&mut buf))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(n > 0, "closed before answering");
    };
    let closed = expect_close && {
        let mut rest = Vec::new();
        matches!(
            tokio::time::timeout_at(deadline, socket.read_to_end(&mut rest)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    };
    (response, closed)
}

fn at<'a>(v: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() {
        Some(v)
    } else {
        v.pointer(pointer)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_client_transcripts() {
    let v = vectors();
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = start(dir.path(), "ans.reference", "", false).await;
    for m in v["agents"].as_array().unwrap() {
        let id = m["canonical_id"].as_str().unwrap();
        let r = ns.lifecycle(Transition::Activate, id, Some(m)).await;
        assert_eq!(r.status, Status::OK, "{}", String::from_utf8_lossy(&r.body));
    }
    let mut response_ids = HashSet::new();
    for t in v["transcripts"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert!(
            !t["source"].as_str().unwrap().is_empty(),
            "{name}: no source"
        );
        let raw = t["request"].as_str().unwrap().as_bytes();
        let e = &t["expect"];
        let closes = e["closes"].as_bool().unwrap_or(false);
        // The transcript is one whole request (its Content-Length is right), unless it is
        // meant not to be AGTP at all.
        if !closes {
            let (_, used) = decode_request(raw, &Limits::default())
                .unwrap_or_else(|err| panic!("{name}: {err}"))
                .unwrap_or_else(|| panic!("{name}: incomplete"));
            assert_eq!(used, raw.len(), "{name}: bytes after the request");
        }
        let (response, closed) = exchange(&ns.addr, raw, closes).await;
        let text = String::from_utf8_lossy(&response.body).into_owned();
        assert_eq!(
            u64::from(response.status.0),
            e["status"].as_u64().unwrap(),
            "{name}: {text}"
        );
        assert_eq!(closed, closes, "{name}: connection closed?");
        assert_eq!(
            response.headers.get("Server-ID"),
            Some(ns.name.as_str()),
            "{name}"
        );
        let rid = response.headers.get("Response-ID").expect("Response-ID");
        assert!(response_ids.insert(rid.to_owned()), "{name}: {rid} reused");
        if let Some(ct) = e["content_type"].as_str() {
            assert_eq!(response.headers.content_type(), Some(ct), "{name}");
        }
        let body = agora_agtp::jcs::parse(std::str::from_utf8(&response.body).unwrap())
            .unwrap_or_else(|err| panic!("{name}: {err}: {text}"));
        for (pointer, want) in e["json"].as_object().into_iter().flatten() {
            assert_eq!(
                at(&body, pointer),
                Some(want),
                "{name}: {pointer} in {text}"
            );
        }
        for pointer in e["present"].as_array().into_iter().flatten() {
            let p = pointer.as_str().unwrap();
            assert!(at(&body, p).is_some(), "{name}: {p} missing in {text}");
        }
        for pointer in e["absent"].as_array().into_iter().flatten() {
            let p = pointer.as_str().unwrap();
            assert!(at(&body, p).is_none(), "{name}: {p} present in {text}");
        }
        if let Some(p) = e["signed"].as_str() {
            let signed = at(&body, p).unwrap();
            verify_result_with(std::slice::from_ref(&ns.key), signed)
                .unwrap_or_else(|err| panic!("{name}: not signed by the ANS: {err}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistered_claims_and_the_population_gate_follow_the_settings() {
    let v = vectors();
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = start(
        dir.path(),
        "ans.strict",
        "unregistered_scope_claims = \"refused\"\npopulation_open = false\n",
        false,
    )
    .await;
    let reviewer = &v["agents"][1];
    let reviewer_id = reviewer["canonical_id"].as_str().unwrap();
    let r = ns
        .lifecycle(Transition::Activate, reviewer_id, Some(reviewer))
        .await;
    assert_eq!(r.status, Status::OK);
    // An unregistered caller's claim is refused: 262 scope-claim-invalid.
    let claim = |agent: &str| {
        format!(
            "AGTP/1.0 DISCOVER\r\nAccept: application/json\r\nHost: 127.0.0.1\r\nAgent-ID: {agent}\r\nAuthority-Scope: discovery:query\r\n\r\n"
        )
    };
    let (r, _) = exchange(&ns.addr, claim("agent-unknown").as_bytes(), false).await;
    assert_eq!(r.status, Status::AUTHORIZATION_REQUIRED);
    let b = r.json_body().unwrap().unwrap();
    assert_eq!(b["error"]["details"]["code"], "scope-claim-invalid");
    // A registered caller that declares the scope is answered.
    let (r, _) = exchange(&ns.addr, claim(reviewer_id).as_bytes(), false).await;
    assert_eq!(r.status, Status::OK, "{}", String::from_utf8_lossy(&r.body));
    // /population is not open: the presence client (no Authority-Scope) gets the draft's 451.
    let presence = "AGTP/1.0 DISCOVER /population?capability=code\r\nAccept: application/json\r\nHost: 127.0.0.1\r\n\r\n";
    let (r, _) = exchange(&ns.addr, presence.as_bytes(), false).await;
    assert_eq!(r.status, Status(451));
    assert_eq!(
        r.json_body().unwrap().unwrap()["error"]["required_scope"],
        "discovery:query"
    );
}

/// Sends DISCOVER as `agent` until `stop` says so; returns (answered 200, refused 429).
async fn flood(ns: &NameServer, agent: &str, stop: impl Fn(u32, u32) -> bool) -> (u32, u32) {
    let mut conn = client::Connection::connect(&ns.addr, &Transport::Plain, TIMEOUT)
        .await
        .unwrap();
    let request = Request::new("DISCOVER")
        .with_header("Agent-ID", agent)
        .with_header("Authority-Scope", "discovery:query");
    let (mut ok, mut limited) = (0, 0);
    while !stop(ok, limited) {
        let r = conn.send(&request, TIMEOUT).await.unwrap();
        match r.status {
            Status::OK => ok += 1,
            Status::RATE_LIMITED => limited += 1,
            other => panic!("unexpected {other}"),
        }
    }
    (ok, limited)
}

/// Waits until everything the node logged before now has been read: a request that logs a
/// line naming a fresh id, and its line seen.
async fn log_caught_up(ns: &NameServer, log: &Log, tag: &str) {
    let sentinel = format!("sentinel-{tag}");
    let r = ns
        .send(&Request::new("DISCOVER").with_header("Agent-ID", &sentinel))
        .await;
    assert_eq!(r.status, Status(451));
    let seen = eventually(TIMEOUT, async || {
        (log.count(&["ANS: scope violation", &sentinel]) > 0).then_some(())
    })
    .await;
    assert!(seen.is_some(), "the node's log did not show {sentinel}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sustained_flood_is_logged_once_per_burst() {
    let dir = tempfile::tempdir().unwrap();
    // 50 a second, 5 deep: the bucket is full again 100 ms after the flood stops.
    let (ns, log) = start(dir.path(), "ans.flood", "rate = 50.0\nburst = 5.0\n", true).await;
    let anomalies = || log.count(&["ANS anomaly", "agent-flood"]);
    // A flood for 1.5 s: refused most of the time, with answers trickling through as the
    // bucket refills (each of which used to start a new "burst" and a new log line).
    let started = Instant::now();
    let (ok, limited) = flood(&ns, "agent-flood", |_, _| {
        started.elapsed() >= Duration::from_millis(1500)
    })
    .await;
    assert!(limited > 20, "{ok} answered, {limited} refused");
    assert!(ok > 5 + 10, "the refill let answers through: {ok}");
    log_caught_up(&ns, &log, "1").await;
    assert_eq!(anomalies(), 1, "one line for the whole flood");
    // A pause longer than the refill (the behaviour under test, not a synchronisation), then
    // a new burst: a new line.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, limited) = flood(&ns, "agent-flood", |_, limited| limited >= 3).await;
    assert_eq!(limited, 3);
    log_caught_up(&ns, &log, "2").await;
    assert_eq!(anomalies(), 2, "a new burst after the bucket refilled");
    // Another Agent-ID is its own run.
    flood(&ns, "agent-other", |_, limited| limited >= 1).await;
    log_caught_up(&ns, &log, "3").await;
    assert_eq!(log.count(&["ANS anomaly", "agent-other"]), 1);
}

/// A host that answers DESCRIBE with the reference server's bytes from the vectors, its
/// `status` replaced by the current one.
struct ReferenceHost {
    id: String,
    answer: Response,
    status: Mutex<String>,
    describes: AtomicU32,
}

impl Handler for ReferenceHost {
    fn handle(
        &self,
        request: Request,
        _remote: SocketAddr,
    ) -> impl Future<Output = Response> + Send {
        let response = if request.method != "DESCRIBE" {
            Response::from_error(&AgtpError::MethodViolation(request.method), None)
        } else if request.headers.agent_id() != Some(self.id.as_str()) {
            Response::from_error(&AgtpError::NotFound("agent-not-found".into()), None)
        } else {
            self.describes.fetch_add(1, Ordering::SeqCst);
            let mut doc = self.answer.json_body().unwrap().unwrap();
            doc["status"] = json!(*self.status.lock().unwrap());
            let mut r = self.answer.clone();
            r.body = doc.to_string().into_bytes();
            r
        };
        std::future::ready(response)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_applies_the_state_the_host_declares() {
    let v = vectors();
    let h = &v["host_describe"];
    assert!(!h["source"].as_str().unwrap().is_empty());
    let raw = h["response"].as_str().unwrap().as_bytes();
    let (answer, used) = decode_response(raw, &Limits::default()).unwrap().unwrap();
    assert_eq!(used, raw.len());
    assert_eq!(answer.json_body().unwrap().unwrap()["status"], "suspended");
    let id = h["canonical_id"].as_str().unwrap();
    let host = Arc::new(ReferenceHost {
        id: id.to_owned(),
        answer,
        status: Mutex::new("active".into()),
        describes: AtomicU32::new(0),
    });
    let (host_addr, stop_tx) = support::serve_agtp_host(Arc::clone(&host)).await;
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = start(
        dir.path(),
        "ans.refresh",
        "refresh_interval = 1\nrefresh_retry = 1\nrefresh_timeout_ms = 2000\n",
        false,
    )
    .await;
    let manifest = json!({
        "canonical_id": id,
        "manifest_uri": format!("agtp://{host_addr}/agents/refresher"),
        "agent_label": "refresher",
        "org_domain": "example.org",
        "governance_zone": "zone:test",
        "trust_tier": 2,
        "behavioral_trust_score": 0.5,
        "supported_methods": ["QUERY"],
        "authority_scope_categories": ["documents:query"],
        "job_description": "Translates menus",
        "endpoint": format!("agtp://{host_addr}/agents/refresher"),
    });
    let set = |s: &str| *host.status.lock().unwrap() = s.to_owned();
    let state_becomes = async |want: &str| {
        eventually(Duration::from_secs(15), async || {
            (ns.state(id).await.as_deref() == Some(want)).then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("never {want}"));
    };

    // Active at the host: refreshed (its description replaces ours), still Active.
    let r = ns
        .lifecycle(Transition::Activate, id, Some(&manifest))
        .await;
    assert_eq!(r.status, Status::OK);
    let refreshed = eventually(Duration::from_secs(15), async || {
        (ns.found("quarterly reports").await == vec![id.to_owned()]).then_some(())
    })
    .await;
    assert!(refreshed.is_some(), "never re-described");
    assert_eq!(ns.state(id).await.as_deref(), Some("Active"));

    // Suspended at the host: Suspended here, out of discovery.
    set("suspended");
    state_becomes("Suspended").await;
    assert!(ns.found("quarterly reports").await.is_empty());
    // Active at the host again changes nothing here (no longer refreshed); governance does.
    set("active");
    let before = host.describes.load(Ordering::SeqCst);
    let r = ns.lifecycle(Transition::Reinstate, id, None).await;
    assert_eq!(r.status, Status::OK);
    let again = eventually(Duration::from_secs(15), async || {
        (host.describes.load(Ordering::SeqCst) > before).then_some(())
    })
    .await;
    assert!(again.is_some(), "refresh resumes after REINSTATE");
    assert_eq!(ns.state(id).await.as_deref(), Some("Active"));
    assert_eq!(ns.found("quarterly reports").await, vec![id.to_owned()]);

    // Deprecated at the host.
    set("deprecated");
    state_becomes("Deprecated").await;
    // Retired at the host: Revoked, for good.
    set("retired");
    let r = ns
        .lifecycle(Transition::Activate, id, Some(&manifest))
        .await;
    assert_eq!(r.status, Status::OK);
    state_becomes("Revoked").await;
    let r = ns
        .lifecycle(Transition::Activate, id, Some(&manifest))
        .await;
    assert_eq!(r.status, Status::CONFLICT);

    let _ = stop_tx.send(());
    let data = ns.node.data.clone();
    drop(ns);
    let store = eventually(TIMEOUT, async || agora_node::store::Store::open(&data).ok())
        .await
        .unwrap();
    let host_changes: Vec<(String, String)> = store
        .ans_audit()
        .unwrap()
        .into_iter()
        .map(|(_, a)| serde_json::from_str::<Value>(&a).unwrap())
        .filter(|a| a["method"] == "REFRESH-STATE")
        .map(|a| {
            assert_eq!(a["canonical_id"], id);
            (
                a["transition"].as_str().unwrap().to_owned(),
                a["to"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        host_changes,
        vec![
            ("DEACTIVATE".to_owned(), "Suspended".to_owned()),
            ("DEPRECATE".to_owned(), "Deprecated".to_owned()),
            ("REVOKE".to_owned(), "Revoked".to_owned()),
        ]
    );
}
