//! `agora discover` and `agora ans keygen|activate|lifecycle` with the real binary against real
//! `agora node` processes on 127.0.0.1 (plain AGTP on loopback, and TLS with `--agtp-tls`), plus
//! a canned AGTP server for answers a real name server never gives (unsigned results, 429).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use agora_agtp::codec::{Limits, Request, Response, decode_request};
use agora_agtp::signature::{AnsVerifyingKey, verify_result_with};
use agora_agtp::{Status, jcs};
use agora_node::faces::agtp::client::{self, Transport};
use serde_json::{Value, json};

use crate::support::{Node, spawn_node};

fn agora(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(args)
        .env_remove("AGORA_AGENT_ID")
        .output()
        .unwrap()
}

/// Standard output of a successful run.
fn ok(args: &[&str]) -> String {
    let out = agora(args);
    assert!(
        out.status.success(),
        "agora {args:?}: exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Standard error of a run that exits with `code` and prints nothing on standard output.
fn fails(args: &[&str], code: i32) -> String {
    let out = agora(args);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "agora {args:?}: stdout {} stderr {stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stdout.is_empty(),
        "agora {args:?} printed {}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// One JSON line, parsed exactly (signed bodies must round-trip their numbers).
fn one_json_line(stdout: &str) -> Value {
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    jcs::parse(stdout.trim_end()).unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `host:port` of a node's AGTP face.
fn addr(node: &Node) -> String {
    node.agtp.strip_prefix("agtp://").unwrap().to_owned()
}

fn manifest(id: &str, label: &str, tier: u8, trust: f64, job: &str, caps: &[&str]) -> Value {
    json!({
        "canonical_id": id,
        "agent_label": label,
        "org_domain": format!("{}.example", id.split('.').next().unwrap()),
        "governance_zone": "zone:finance",
        "trust_tier": tier,
        "behavioral_trust_score": trust,
        "supported_methods": ["QUERY", "RECONCILE"],
        "job_description": job,
        "capabilities": caps,
    })
}

fn write_json(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

/// The name server's own manifest (DESCRIBE over plain AGTP), fetched without the CLI.
fn describe(addr: &str) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let request = Request::new("DESCRIBE").with_header("Agent-ID", "agtp-cli-test");
    let response = rt
        .block_on(client::request(
            addr,
            &Transport::Plain,
            &request,
            Duration::from_secs(10),
        ))
        .unwrap();
    assert_eq!(response.status, Status::OK);
    let body = jcs::parse(std::str::from_utf8(&response.body).unwrap()).unwrap();
    body["result"].clone()
}

/// `agora ans keygen --out <dir>/<name>.json`: the private key's path.
fn keygen(dir: &Path, name: &str, kid: &str) -> PathBuf {
    let out = dir.join(format!("{name}.json"));
    ok(&["ans", "keygen", "--out", path(&out), "--kid", kid]);
    out
}

/// A node whose ANS trusts the governance key `<dir>/gov.pub.json` (made here).
fn governed_node(dir: &Path, extra: &[&str]) -> (Node, PathBuf) {
    let gov = keygen(dir, "gov", "gov-1");
    let config = dir.join("agora.toml");
    std::fs::write(&config, "[agtp]\ngovernance_keys = [\"gov.pub.json\"]\n").unwrap();
    let mut args = vec!["--config", path(&config)];
    args.extend_from_slice(extra);
    (spawn_node(&dir.join("node"), &[], 30, &args), gov)
}

#[test]
fn keygen_writes_a_private_and_a_public_jwk() {
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("gov.json");
    let stdout = ok(&["ans", "keygen", "--out", path(&private), "--kid", "gov-7"]);
    let public = one_json_line(&stdout);
    assert_eq!(public["kid"], "gov-7");
    assert_eq!(public["kty"], "EC");
    assert_eq!(public["crv"], "P-256");
    assert!(public.get("d").is_none(), "{public}");

    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("gov.pub.json")).unwrap())
            .unwrap();
    assert_eq!(on_disk, public);
    let secret: Value = serde_json::from_str(&std::fs::read_to_string(&private).unwrap()).unwrap();
    assert!(
        secret["d"].as_str().is_some_and(|d| d.len() == 43),
        "{secret}"
    );
    assert_eq!(secret["x"], public["x"]);
    assert_eq!(secret["kid"], "gov-7");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
    }
    AnsVerifyingKey::from_jwk(&public).unwrap();
    agora_node::ans::signing_key_from_jwk(&std::fs::read_to_string(&private).unwrap()).unwrap();

    // No overwriting without --force; the files stay as they were.
    let err = fails(&["ans", "keygen", "--out", path(&private)], 2);
    assert!(err.contains("--force"), "{err}");
    let again: Value = serde_json::from_str(&std::fs::read_to_string(&private).unwrap()).unwrap();
    assert_eq!(again, secret);
    let replaced = one_json_line(&ok(&["ans", "keygen", "--out", path(&private), "--force"]));
    assert_ne!(replaced["x"], public["x"]);
    assert!(replaced["kid"].as_str().unwrap().starts_with("ans-"));

    // A name without .json gets .pub.json appended.
    let bare = dir.path().join("signer");
    ok(&["ans", "keygen", "--out", path(&bare)]);
    assert!(dir.path().join("signer.pub.json").is_file());
}

#[test]
fn register_discover_verify_and_revoke() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (node, gov) = governed_node(d, &[]);
    let ans = addr(&node);
    let gov = path(&gov);
    let m1 = write_json(
        d,
        "m1.json",
        &manifest(
            "acme.reconciler",
            "Invoice Reconciler",
            1,
            0.92,
            "Reconciles supplier invoices against purchase orders",
            &["invoice reconciliation", "purchase orders"],
        ),
    );
    let m2 = write_json(
        d,
        "m2.json",
        &manifest(
            "beta.ledger",
            "Ledger Poster",
            2,
            0.7,
            "Posts reconciled invoices to the general ledger",
            &["ledger posting", "invoices"],
        ),
    );

    assert_eq!(
        ok(&["ans", "activate", path(&m1), "--ans", &ans, "--key", gov]),
        "ACTIVATE acme.reconciler: Active (was none), audit #1\n"
    );
    let body = one_json_line(&ok(&[
        "ans",
        "activate",
        path(&m2),
        "--ans",
        &ans,
        "--key",
        gov,
        "--reason",
        "onboarding",
        "--json",
    ]));
    assert_eq!(body["status"], 200);
    assert_eq!(body["result"]["canonical_id"], "beta.ledger");
    assert_eq!(body["result"]["lifecycle_state"], "Active");
    assert_eq!(body["result"]["audit_seq"], 2);
    assert_eq!(
        ok(&["ans", "activate", path(&m1), "--ans", &ans, "--key", gov]),
        "ACTIVATE acme.reconciler: Active (was Active), no change\n"
    );

    // DISCOVER, as JSON: both, ranked, signed by the key the ANS publishes.
    let intent = "reconcile invoices";
    let body = one_json_line(&ok(&[
        "discover", "--ans", &ans, "--intent", intent, "--json",
    ]));
    assert_eq!(body["status"], 200);
    assert!(body["task_id"].as_str().unwrap().starts_with("cli-"));
    let result = &body["result"];
    let ids: Vec<&str> = result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["canonical_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["acme.reconciler", "beta.ledger"]);
    assert_eq!(result["results"][0]["rank"], 1);
    assert_eq!(result["results"][1]["rank"], 2);
    assert_eq!(result["total_matches"], 2);
    assert_eq!(result["returned"], 2);
    let own = describe(&ans);
    let keys: Vec<AnsVerifyingKey> = own["ans_keys"]
        .as_object()
        .unwrap()
        .values()
        .map(|jwk| AnsVerifyingKey::from_jwk(jwk).unwrap())
        .collect();
    verify_result_with(&keys, result).unwrap();
    let key_id = result["ans_signature"]["key_id"].as_str().unwrap();
    assert_eq!(keys[0].key_id(), key_id);

    // Filters reach the ANS.
    let body = one_json_line(&ok(&[
        "discover",
        "--ans",
        &ans,
        "--intent",
        intent,
        "--trust-tier-min",
        "1",
        "--behavioral-trust-min",
        "0.5",
        "--zone",
        "zone:finance",
        "--org",
        "acme.example",
        "--capability-domain",
        "methods",
        "--limit",
        "5",
        "--json",
    ]));
    assert_eq!(body["result"]["returned"], 1, "{body}");
    assert_eq!(
        body["result"]["results"][0]["canonical_id"],
        "acme.reconciler"
    );

    // The table for people.
    let table = ok(&["discover", "--ans", &ans, "--intent", intent]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("RANK"), "{table}");
    for column in ["CANONICAL_ID", "LABEL", "TIER", "TRUST", "MATCH", "SCORE"] {
        assert!(lines[0].contains(column), "{table}");
    }
    assert!(lines[1].starts_with("1 ") && lines[1].contains("acme.reconciler"));
    assert!(lines[1].contains("Invoice Reconciler") && lines[1].contains("0.920"));
    assert!(lines[2].starts_with("2 ") && lines[2].contains("beta.ledger"));
    assert!(table.contains("\nquery_id qry-"), "{table}");
    assert!(table.contains("\ntotal_matches 2, returned 2\n"), "{table}");
    assert!(
        table.ends_with(&format!("signature: ES256 {key_id} verified\n")),
        "{table}"
    );

    // --explain: the score components, in JSON and in the table.
    let body = one_json_line(&ok(&[
        "discover",
        "--ans",
        &ans,
        "--intent",
        intent,
        "--explain",
        "--json",
    ]));
    let components = &body["result"]["results"][0]["score_components"];
    assert_eq!(components["weights"]["behavioral_trust_weight"], 0.4);
    let score = components["rank_score"].as_f64().unwrap();
    let table = ok(&["discover", "--ans", &ans, "--intent", intent, "--explain"]);
    assert!(
        table.contains(
            "components #1 acme.reconciler: tier 1.000*0.300 + trust 0.920*0.400 + match "
        ),
        "{table}"
    );
    assert!(table.contains(&format!("{score:.3}")), "{table}");

    // Routing: an unknown preferred agent gets an alternative, marked.
    let table = ok(&[
        "discover",
        "--ans",
        &ans,
        "--intent",
        intent,
        "--preferred-agent",
        "gone.agent",
    ]);
    assert!(
        table.contains("routing: preferred gone.agent is not-registered"),
        "{table}"
    );

    // A pinned key: the right one verifies, a stranger's or an impostor's is refused.
    let pinned = write_json(d, "ans.pub.json", &own["ans_keys"][key_id]);
    ok(&[
        "discover",
        "--ans",
        &ans,
        "--intent",
        intent,
        "--ans-key",
        path(&pinned),
    ]);
    let stranger = keygen(d, "stranger", "stranger-1");
    let stranger_pub = d.join("stranger.pub.json");
    let err = fails(
        &[
            "discover",
            "--ans",
            &ans,
            "--intent",
            intent,
            "--ans-key",
            path(&stranger_pub),
        ],
        1,
    );
    assert!(err.contains("refusing") && err.contains(key_id), "{err}");
    keygen(d, "impostor", key_id);
    let err = fails(
        &[
            "discover",
            "--ans",
            &ans,
            "--intent",
            intent,
            "--ans-key",
            path(&d.join("impostor.pub.json")),
        ],
        1,
    );
    assert!(err.contains("does not verify"), "{err}");
    let err = fails(
        &[
            "discover",
            "--ans",
            &ans,
            "--intent",
            intent,
            "--ans-key",
            path(&d.join("missing.json")),
        ],
        2,
    );
    assert!(err.contains("missing.json"), "{err}");

    // Errors from the ANS: scope, bad parameter, untrusted governance key, unknown agent.
    let err = fails(
        &[
            "discover",
            "--ans",
            &ans,
            "--intent",
            intent,
            "--scope",
            "other:thing",
        ],
        1,
    );
    assert!(
        err.starts_with("agora: the ANS answered 451 Scope Violation: ")
            && err.contains("required_scope: discovery:query"),
        "{err}"
    );
    let err = fails(
        &[
            "discover", "--ans", &ans, "--intent", intent, "--limit", "500",
        ],
        1,
    );
    assert!(
        err.starts_with("agora: the ANS answered 400 ") && err.contains("parameter: limit"),
        "{err}"
    );
    let err = fails(
        &[
            "ans",
            "activate",
            path(&m1),
            "--ans",
            &ans,
            "--key",
            path(&stranger),
        ],
        1,
    );
    assert!(err.starts_with("agora: the ANS answered 401 "), "{err}");
    let err = fails(
        &[
            "ans",
            "lifecycle",
            "deactivate",
            "nobody.here",
            "--ans",
            &ans,
            "--key",
            gov,
        ],
        1,
    );
    assert!(err.starts_with("agora: the ANS answered 404 "), "{err}");

    // Revocation needs a reason (checked before connecting: port 1 is never dialled).
    let err = fails(
        &[
            "ans",
            "lifecycle",
            "revoke",
            "beta.ledger",
            "--ans",
            "127.0.0.1:1",
            "--key",
            gov,
        ],
        2,
    );
    assert!(err.contains("--reason"), "{err}");
    assert_eq!(
        ok(&[
            "ans",
            "lifecycle",
            "revoke",
            "beta.ledger",
            "--ans",
            &ans,
            "--key",
            gov,
            "--reason",
            "retired by its owner",
        ]),
        "REVOKE beta.ledger: Revoked (was Active), audit #3\n"
    );
    let body = one_json_line(&ok(&[
        "discover", "--ans", &ans, "--intent", intent, "--json",
    ]));
    let ids: Vec<&str> = body["result"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["canonical_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["acme.reconciler"]);
    let err = fails(
        &[
            "ans",
            "lifecycle",
            "reinstate",
            "beta.ledger",
            "--ans",
            &ans,
            "--key",
            gov,
        ],
        1,
    );
    assert!(err.starts_with("agora: the ANS answered 409 "), "{err}");

    // The other transitions.
    assert_eq!(
        ok(&[
            "ans",
            "lifecycle",
            "deactivate",
            "acme.reconciler",
            "--ans",
            &ans,
            "--key",
            gov,
        ]),
        "DEACTIVATE acme.reconciler: Suspended (was Active), audit #4\n"
    );
    assert_eq!(
        ok(&["discover", "--ans", &ans, "--intent", intent])
            .lines()
            .next(),
        Some("no agent matched")
    );
    assert_eq!(
        ok(&[
            "ans",
            "lifecycle",
            "reinstate",
            "acme.reconciler",
            "--ans",
            &ans,
            "--key",
            gov,
        ]),
        "REINSTATE acme.reconciler: Active (was Suspended), audit #5\n"
    );
    assert_eq!(
        ok(&[
            "ans",
            "lifecycle",
            "deprecate",
            "acme.reconciler",
            "--ans",
            &ans,
            "--key",
            gov,
        ]),
        "DEPRECATE acme.reconciler: Deprecated (was Active), audit #6\n"
    );

    // Usage errors: exit 2.
    fails(
        &[
            "ans",
            "activate",
            path(&d.join("nope.json")),
            "--ans",
            &ans,
            "--key",
            gov,
        ],
        2,
    );
    fails(
        &[
            "ans",
            "activate",
            path(&m1),
            "--ans",
            &ans,
            "--key",
            path(&m1),
        ],
        2,
    );
    fails(&["discover", "--ans", "no-port", "--intent", intent], 2);
    fails(
        &[
            "discover",
            "--ans",
            &ans,
            "--intent",
            intent,
            "--tls",
            "--insecure",
        ],
        2,
    );
    // Nobody listening: exit 1.
    let err = fails(&["discover", "--ans", "127.0.0.1:1", "--intent", intent], 1);
    assert!(err.contains("127.0.0.1:1"), "{err}");
}

#[test]
fn discover_over_tls_trusts_only_the_given_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (node, gov) = governed_node(dir.path(), &["--agtp-tls"]);
    let ans = addr(&node);
    let cert = node.data.join("agtp-cert.pem");
    assert!(cert.is_file());
    let m = write_json(
        dir.path(),
        "m.json",
        &manifest(
            "acme.auditor",
            "Contract Auditor",
            1,
            0.95,
            "Audits smart contracts",
            &["contract audit"],
        ),
    );
    let tls = ["--tls", "--ca", path(&cert)];
    let mut args = vec![
        "ans",
        "activate",
        path(&m),
        "--ans",
        &ans,
        "--key",
        path(&gov),
    ];
    args.extend(tls);
    assert_eq!(
        ok(&args),
        "ACTIVATE acme.auditor: Active (was none), audit #1\n"
    );
    let mut args = vec!["discover", "--ans", &ans, "--intent", "audit contracts"];
    args.extend(tls);
    let table = ok(&args);
    assert!(table.contains("acme.auditor"), "{table}");
    assert!(table.contains("signature: ES256 "), "{table}");

    let err = fails(
        &[
            "discover",
            "--ans",
            &ans,
            "--intent",
            "audit contracts",
            "--tls",
        ],
        1,
    );
    assert!(err.contains("certificate"), "{err}");
    // A file that holds no certificate is a configuration error.
    let mut args = vec![
        "discover", "--ans", &ans, "--intent", "audit", "--tls", "--ca",
    ];
    args.push(path(&gov));
    fails(&args, 2);
}

/// A one-connection AGTP server on 127.0.0.1 that answers its first request with `reply`.
fn canned(reply: Response) -> (String, std::thread::JoinHandle<Request>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut buf = Vec::new();
        let request = loop {
            if let Some((request, _)) = decode_request(&buf, &Limits::default()).unwrap() {
                break request;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "the client closed before a whole request");
            buf.extend_from_slice(&chunk[..n]);
        };
        stream.write_all(&reply.encode()).unwrap();
        // Wait for the client to close.
        let _ = stream.read_to_end(&mut Vec::new());
        request
    });
    (addr, handle)
}

#[test]
fn unsigned_results_are_refused_and_errors_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    keygen(dir.path(), "k", "ans-k");
    let key = dir.path().join("k.pub.json");
    let unsigned = json!({"status": 200, "task_id": "t", "result": {
        "query_id": "qry-0", "total_matches": 1, "returned": 1,
        "results": [{"rank": 1, "canonical_id": "evil.agent"}]}});
    let (ans, server) = canned(Response::new(Status::OK).with_json_body(&unsigned));
    let err = fails(
        &[
            "discover",
            "--ans",
            &ans,
            "--intent",
            "anything",
            "--ans-key",
            path(&key),
            "--agent-id",
            "tester-1",
            "--limit",
            "3",
            "--scope-negotiate",
        ],
        1,
    );
    assert!(
        err.contains("refusing") && err.contains("no ans_signature"),
        "{err}"
    );
    let request = server.join().unwrap();
    assert_eq!(request.method, "DISCOVER");
    assert_eq!(request.headers.agent_id(), Some("tester-1"));
    assert_eq!(
        request.headers.get("Authority-Scope"),
        Some("discovery:query")
    );
    let sent = request.json_body().unwrap().unwrap();
    assert_eq!(
        sent,
        json!({"method": "DISCOVER", "parameters": {
            "intent": "anything", "limit": 3, "scope_negotiate": true}})
    );

    let limited = json!({"status": 429, "task_id": "t", "error": {
        "code": "rate-limited", "message": "too many DISCOVER requests", "retry_after_ms": 250}});
    let (ans, server) = canned(Response::new(Status::RATE_LIMITED).with_json_body(&limited));
    let err = fails(
        &[
            "discover",
            "--ans",
            &ans,
            "--intent",
            "x",
            "--ans-key",
            path(&key),
        ],
        1,
    );
    assert_eq!(
        err,
        "agora: the ANS answered 429 Rate Limited: too many DISCOVER requests (retry_after_ms: 250)\n"
    );
    server.join().unwrap();
}
