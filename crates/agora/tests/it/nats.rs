//! The AGH NATS bridge: two nodes that share only a real `nats-server` (no libp2p link) carry
//! greets, says, whois and a directed interaction between their agents over the reference
//! subjects `agh.network.v0.<channel>.broadcast` and `….peer.<route_token>`; with a server that
//! requires a password, a token, an NKey, a creds file, TLS or a client certificate (right and
//! wrong credentials), and across a two-server cluster when the server a node is connected to is
//! killed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::json;

use crate::support::{
    Agent, Log, Node, connected, eventually, get_json, peer_ids, see_each_other, spawn_nats,
    spawn_nats_with, spawn_node_env, spawn_node_logged_env,
};

const CH: &str = "builders";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_sharing_only_a_nats_server_exchange_envelopes() {
    let Some(nats) = spawn_nats() else { return };
    let dir = tempfile::tempdir().unwrap();
    let env = [("AGORA_AGH_NATS_URL", nats.url.as_str())];
    let a = spawn_node_env(&dir.path().join("a"), &[], 1, &[], &env);
    let b = spawn_node_env(&dir.path().join("b"), &[], 1, &[], &env);
    assert!(
        connected(&a.http).await.is_empty(),
        "no libp2p link between the nodes"
    );

    let (mut alice, mut bob) = alice_and_bob(&a, &b, Duration::from_secs(10)).await;

    // Broadcast.
    let say = alice.envelope("say", None, json!({"text": "over nats"}));
    alice.send(&say).await;
    let got = bob
        .expect(Duration::from_secs(5), |v| v["id"] == say["id"])
        .await
        .expect("bob hears alice");
    assert_eq!(got, say, "the envelope arrives unchanged");

    // whois, answered over the peer subject of the requester.
    let whois = alice.envelope(
        "whois",
        None,
        json!({"type": "request", "query": "test.run"}),
    );
    alice.send(&whois).await;
    let answer = alice
        .expect(Duration::from_secs(5), |v| v["reply_to"] == whois["id"])
        .await
        .expect("bob's node answers");
    assert_eq!(answer["from"], "bob.sess-1");

    // A directed interaction both ways.
    let mut direct = alice.envelope("direct", Some("bob.sess-1"), json!({"text": "please test"}));
    direct["interaction_id"] = json!("int-nats-1");
    alice.send(&direct).await;
    bob.expect(Duration::from_secs(5), |v| v["id"] == direct["id"])
        .await
        .expect("bob receives the direct");
    let mut receipt = bob.envelope(
        "receipt",
        Some("alice.sess-1"),
        json!({"for_id": direct["id"], "status": "accepted"}),
    );
    receipt["interaction_id"] = json!("int-nats-1");
    bob.send(&receipt).await;
    alice
        .expect(Duration::from_secs(5), |v| v["id"] == receipt["id"])
        .await
        .expect("alice receives the receipt");
}

/// Agents alice (on `a`) and bob (on `b`) in [`CH`], greeted, once each node sees both.
async fn alice_and_bob(a: &Node, b: &Node, within: Duration) -> (Agent, Agent) {
    let mut alice = Agent::connect(&a.agh, "alice.sess-1", CH).await;
    let mut bob = Agent::connect(&b.agh, "bob.sess-1", CH).await;
    alice.greet(&["code.review"]).await;
    bob.greet(&["test.run"]).await;
    assert!(
        see_each_other(
            (&a.http, "alice.sess-1"),
            (&b.http, "bob.sess-1"),
            CH,
            within
        )
        .await,
        "greets cross NATS between the nodes"
    );
    (alice, bob)
}

/// Node `a` with `[agh.nats] url` and `settings` (TOML lines; relative paths from `dir`) in its
/// configuration file, node `b` with the same settings in the environment (`env`, beside
/// `AGORA_AGH_NATS_URL`).
fn from_config_and_from_env(
    dir: &std::path::Path,
    url: &str,
    settings: &str,
    env: &[(&str, &str)],
) -> (Node, Node) {
    let config = dir.join("a.toml");
    std::fs::write(&config, format!("[agh.nats]\nurl = \"{url}\"\n{settings}")).unwrap();
    let a = spawn_node_env(
        &dir.join("a"),
        &[],
        1,
        &["--config", config.to_str().unwrap()],
        &[],
    );
    let mut with_url = vec![("AGORA_AGH_NATS_URL", url)];
    with_url.extend_from_slice(env);
    let b = spawn_node_env(&dir.join("b"), &[], 1, &[], &with_url);
    (a, b)
}

/// Waits until `log` has `n` lines containing `needle`.
async fn log_lines(log: &Log, needle: &str, n: usize, within: Duration) -> bool {
    eventually(within, async || (log.count(&[needle]) >= n).then_some(()))
        .await
        .is_some()
}

/// `from` says something until `to` hears one of its says (publications made while a bridge is
/// not connected are dropped, so one attempt may be lost while it reconnects).
async fn says_get_through(from: &mut Agent, to: &mut Agent, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let say = from.envelope("say", None, json!({"text": "still there?"}));
        from.send(&say).await;
        if to
            .expect(Duration::from_millis(500), |v| v["id"] == say["id"])
            .await
            .is_some()
        {
            return true;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_protected_server_bridges_only_nodes_with_the_right_password() {
    const PASSWORD: &str = "correct-horse-battery";
    let Some(nats) = spawn_nats_with(&["--user", "agora", "--pass", PASSWORD]) else {
        return;
    };
    let url = nats.server.url.as_str();
    let dir = tempfile::tempdir().unwrap();
    // Node a: user and password from the environment.
    let a = spawn_node_env(
        &dir.path().join("a"),
        &[],
        1,
        &[],
        &[
            ("AGORA_AGH_NATS_URL", url),
            ("AGORA_AGH_NATS_USER", "agora"),
            ("AGORA_AGH_NATS_PASSWORD", PASSWORD),
        ],
    );
    // Node b: the password from a file named in its configuration (relative to it).
    std::fs::write(dir.path().join("nats-password"), format!("{PASSWORD}\n")).unwrap();
    let config = dir.path().join("b.toml");
    std::fs::write(
        &config,
        format!("[agh.nats]\nservers = [\"{url}\"]\nuser = \"agora\"\npassword_file = \"nats-password\"\n"),
    )
    .unwrap();
    let b = spawn_node_env(
        &dir.path().join("b"),
        &[],
        1,
        &["--config", config.to_str().unwrap()],
        &[],
    );
    // Node c: a wrong password.
    let (c, c_log) = spawn_node_logged_env(
        &dir.path().join("c"),
        &[],
        1,
        &[],
        &[
            ("AGORA_AGH_NATS_URL", url),
            ("AGORA_AGH_NATS_USER", "agora"),
            ("AGORA_AGH_NATS_PASSWORD", "wrong-password"),
        ],
    );

    let mut carol = Agent::connect(&c.agh, "carol.sess-1", CH).await;
    carol.greet(&["docs.write"]).await;
    // The nodes with the right password see each other's agents.
    let (mut alice, mut bob) = alice_and_bob(&a, &b, Duration::from_secs(10)).await;
    assert!(
        says_get_through(&mut alice, &mut bob, Duration::from_secs(5)).await,
        "a say crosses the protected server"
    );

    // The node with the wrong password says why, once, and keeps serving its own agents.
    assert!(
        log_lines(
            &c_log,
            "NATS server refused the credentials",
            1,
            Duration::from_secs(10)
        )
        .await,
        "a clear authorization error in the log"
    );
    assert!(
        !c_log
            .lines()
            .iter()
            .any(|l| l.contains("wrong-password") || l.contains(PASSWORD)),
        "no password in the log"
    );
    assert_eq!(
        peer_ids(&c.http, CH).await,
        ["carol.sess-1"],
        "its AGH face and HTTP API answer; nothing came over NATS"
    );
    assert!(get_json(&c.http, "/status").await.is_object());
    // Other greets keep flowing between a and b, never reaching c; c logs the refusal once.
    alice.greet(&["code.review"]).await;
    assert!(
        !peer_ids(&a.http, CH)
            .await
            .contains(&"carol.sess-1".to_owned())
    );
    assert_eq!(
        c_log.count(&["NATS server refused the credentials"]),
        1,
        "logged once, not at every retry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_server_sees_the_exact_envelope_bytes_without_headers() {
    const TOKEN: &str = "s3cr3t-token";
    let Some(nats) = spawn_nats_with(&["--auth", TOKEN]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, log) = spawn_node_logged_env(
        &dir.path().join("a"),
        &[],
        1,
        &[],
        &[
            ("AGORA_AGH_NATS_URL", nats.server.url.as_str()),
            ("AGORA_AGH_NATS_TOKEN", TOKEN),
        ],
    );
    assert!(
        log_lines(&log, "NATS bridge connected", 1, Duration::from_secs(10)).await,
        "the node connects with the token"
    );
    // A plain NATS client listening as another AGH runtime would.
    let client = async_nats::ConnectOptions::with_token(TOKEN.into())
        .connect(nats.server.url.as_str())
        .await
        .unwrap();
    let mut sub = client
        .subscribe(format!("agh.network.v0.{CH}.broadcast"))
        .await
        .unwrap();
    client.flush().await.unwrap();

    let mut alice = Agent::connect(&a.agh, "alice.sess-1", CH).await;
    alice.greet(&["code.review"]).await;
    let say = alice.envelope("say", None, json!({"text": "exact bytes"}));
    let text = say.to_string();
    alice.send(&say).await;
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let m = sub.next().await.expect("subscription open");
            if m.payload.as_ref() == text.as_bytes() {
                return m;
            }
        }
    })
    .await
    .expect("the say is published on the broadcast subject as sent");
    assert!(got.headers.is_none(), "no headers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_survives_losing_its_server_in_a_cluster() {
    let Some(s1) = spawn_nats_with(&[
        "--cluster_name",
        "agora",
        "--cluster",
        "nats://127.0.0.1:-1",
    ]) else {
        return;
    };
    // The second server's port is chosen now, so that node a can list both servers while only
    // the first runs (a connects to s1 for certain).
    let port2 = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url2 = format!("nats://127.0.0.1:{port2}");
    let dir = tempfile::tempdir().unwrap();
    let servers = format!("{}, {url2}", s1.server.url);
    let (a, a_log) = spawn_node_logged_env(
        &dir.path().join("a"),
        &[],
        1,
        &[],
        &[("AGORA_AGH_NATS_URL", servers.as_str())],
    );
    assert!(log_lines(&a_log, "NATS bridge connected", 1, Duration::from_secs(10)).await);
    let route = s1.route.clone().unwrap();
    let s2 = spawn_nats_with(&[
        "-p",
        &port2.to_string(),
        "--cluster_name",
        "agora",
        "--cluster",
        "nats://127.0.0.1:-1",
        "--routes",
        &route,
    ])
    .unwrap();
    let b = spawn_node_env(
        &dir.path().join("b"),
        &[],
        1,
        &[],
        &[("AGORA_AGH_NATS_URL", s2.server.url.as_str())],
    );

    let (mut alice, mut bob) = alice_and_bob(&a, &b, Duration::from_secs(15)).await;

    drop(s1);
    assert!(
        log_lines(
            &a_log,
            "NATS bridge disconnected",
            1,
            Duration::from_secs(10)
        )
        .await,
        "the loss is logged"
    );
    assert!(
        log_lines(&a_log, "NATS bridge connected", 2, Duration::from_secs(15)).await,
        "node a reconnects to the other server"
    );
    assert!(
        says_get_through(&mut alice, &mut bob, Duration::from_secs(10)).await,
        "alice's says reach bob through the remaining server"
    );
    assert!(
        says_get_through(&mut bob, &mut alice, Duration::from_secs(10)).await,
        "node a re-subscribed: bob's says reach alice"
    );
    assert_eq!(
        a_log.count(&["NATS bridge disconnected"]),
        1,
        "the disconnection is logged once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_server_is_reached_with_its_ca_file_only() {
    use agora_node::faces::agtp::tls;
    let dir = tempfile::tempdir().unwrap();
    // A self-signed certificate for 127.0.0.1 (the one the AGTP face would generate).
    let certs = dir.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    tls::load_or_generate(&certs, &[]).unwrap();
    let cert = certs.join(tls::CERT_FILE);
    let key = certs.join(tls::KEY_FILE);
    let Some(nats) = spawn_nats_with(&[
        "--tls",
        "--tlscert",
        cert.to_str().unwrap(),
        "--tlskey",
        key.to_str().unwrap(),
    ]) else {
        return;
    };
    let url = nats.server.url.as_str();
    let env = [
        ("AGORA_AGH_NATS_URL", url),
        ("AGORA_AGH_NATS_TLS_REQUIRED", "true"),
        ("AGORA_AGH_NATS_CA_FILE", cert.to_str().unwrap()),
    ];
    let a = spawn_node_env(&dir.path().join("a"), &[], 1, &[], &env);
    let b = spawn_node_env(&dir.path().join("b"), &[], 1, &[], &env);
    // Node c trusts only the Mozilla roots: the handshake fails, the node goes on.
    let (c, c_log) = spawn_node_logged_env(
        &dir.path().join("c"),
        &[],
        1,
        &[],
        &[("AGORA_AGH_NATS_URL", url)],
    );
    let (mut alice, mut bob) = alice_and_bob(&a, &b, Duration::from_secs(10)).await;
    assert!(
        says_get_through(&mut alice, &mut bob, Duration::from_secs(5)).await,
        "a say crosses the TLS server"
    );
    assert!(
        log_lines(
            &c_log,
            "NATS connection attempt failed",
            1,
            Duration::from_secs(10)
        )
        .await,
        "the failed handshake is logged"
    );
    assert_eq!(c_log.count(&["NATS bridge connected"]), 0);
    assert!(get_json(&c.http, "/status").await.is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nkey_seed_file_authenticates_the_bridge() {
    let user = nkeys::KeyPair::new_user();
    let dir = tempfile::tempdir().unwrap();
    let server_conf = dir.path().join("nats.conf");
    std::fs::write(
        &server_conf,
        format!(
            "authorization {{ users = [ {{ nkey: \"{}\" }} ] }}\n",
            user.public_key()
        ),
    )
    .unwrap();
    let Some(nats) = spawn_nats_with(&["-c", server_conf.to_str().unwrap()]) else {
        return;
    };
    let seed = dir.path().join("agora.nk");
    std::fs::write(&seed, user.seed().unwrap()).unwrap();
    // Node a names the seed file in its configuration, node b in the environment.
    let (a, b) = from_config_and_from_env(
        dir.path(),
        &nats.server.url,
        "nkey_seed_file = \"agora.nk\"\n",
        &[("AGORA_AGH_NATS_NKEY_SEED_FILE", seed.to_str().unwrap())],
    );
    let (mut alice, mut bob) = alice_and_bob(&a, &b, Duration::from_secs(10)).await;
    assert!(
        says_get_through(&mut bob, &mut alice, Duration::from_secs(5)).await,
        "a say crosses the NKey-protected server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creds_file_authenticates_the_bridge() {
    use nats_jwt::{KeyPair, Token};
    // A server that trusts one operator key and knows one account signed by it; the user's JWT
    // is signed by the account, and the creds file holds that JWT with the user's seed.
    let operator = KeyPair::new_operator();
    let account = KeyPair::new_account();
    let account_jwt = Token::new_account(account.public_key())
        .name("agora-test")
        .sign(&operator);
    let user = KeyPair::new_user();
    let user_jwt = Token::new_user(account.public_key(), user.public_key())
        .name("agora")
        .sign(&account);
    let dir = tempfile::tempdir().unwrap();
    let server_conf = dir.path().join("nats.conf");
    std::fs::write(
        &server_conf,
        format!(
            "trusted = [\"{}\"]\nresolver = MEMORY\nresolver_preload = {{ {}: \"{}\" }}\n",
            operator.public_key(),
            account.public_key(),
            account_jwt
        ),
    )
    .unwrap();
    let Some(nats) = spawn_nats_with(&["-c", server_conf.to_str().unwrap()]) else {
        return;
    };
    let creds = dir.path().join("agora.creds");
    std::fs::write(
        &creds,
        format!(
            "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            user.seed().unwrap()
        ),
    )
    .unwrap();
    // Node a names the creds file in its configuration, node b in the environment; node c has
    // no credentials and is refused.
    let (a, b) = from_config_and_from_env(
        dir.path(),
        &nats.server.url,
        "creds_file = \"agora.creds\"\n",
        &[("AGORA_AGH_NATS_CREDS_FILE", creds.to_str().unwrap())],
    );
    let (_c, c_log) = spawn_node_logged_env(
        &dir.path().join("c"),
        &[],
        1,
        &[],
        &[("AGORA_AGH_NATS_URL", nats.server.url.as_str())],
    );
    let (mut alice, mut bob) = alice_and_bob(&a, &b, Duration::from_secs(10)).await;
    assert!(
        says_get_through(&mut alice, &mut bob, Duration::from_secs(5)).await,
        "a say crosses the server that takes only the creds"
    );
    assert!(
        log_lines(
            &c_log,
            "NATS server refused the credentials",
            1,
            Duration::from_secs(10)
        )
        .await,
        "a node without the creds is refused, and says so"
    );
    assert_eq!(c_log.count(&["NATS bridge connected"]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_passes_a_server_that_verifies_clients() {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, pem: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    // A private CA issuing the server's certificate (127.0.0.1) and one client certificate.
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let ca = Issuer::new(ca_params, &ca_key);
    let issue = |san: &[&str], usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(san.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = issue(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let (client_cert, client_key) = issue(&["agora"], ExtendedKeyUsagePurpose::ClientAuth);
    let ca_file = write("ca.pem", ca_cert.pem());
    let server_cert = write("server.pem", server_cert);
    let server_key = write("server-key.pem", server_key);
    let client_cert = write("client.pem", client_cert);
    let client_key = write("client-key.pem", client_key);
    let Some(nats) = spawn_nats_with(&[
        "--tlsverify",
        "--tlscert",
        server_cert.to_str().unwrap(),
        "--tlskey",
        server_key.to_str().unwrap(),
        "--tlscacert",
        ca_file.to_str().unwrap(),
    ]) else {
        return;
    };
    let url = nats.server.url.as_str();
    // Node a names its certificate in its configuration, node b in the environment.
    let (a, b) = from_config_and_from_env(
        dir.path(),
        url,
        "ca_file = \"ca.pem\"\ncert_file = \"client.pem\"\nkey_file = \"client-key.pem\"\n",
        &[
            ("AGORA_AGH_NATS_CA_FILE", ca_file.to_str().unwrap()),
            ("AGORA_AGH_NATS_CERT_FILE", client_cert.to_str().unwrap()),
            ("AGORA_AGH_NATS_KEY_FILE", client_key.to_str().unwrap()),
        ],
    );
    // Node c trusts the CA but has no certificate of its own: the server refuses it.
    let (c, c_log) = spawn_node_logged_env(
        &dir.path().join("c"),
        &[],
        1,
        &[],
        &[
            ("AGORA_AGH_NATS_URL", url),
            ("AGORA_AGH_NATS_CA_FILE", ca_file.to_str().unwrap()),
        ],
    );
    let (mut alice, mut bob) = alice_and_bob(&a, &b, Duration::from_secs(10)).await;
    assert!(
        says_get_through(&mut bob, &mut alice, Duration::from_secs(5)).await,
        "a say crosses the server that verifies client certificates"
    );
    assert!(
        log_lines(
            &c_log,
            "NATS connection attempt failed",
            1,
            Duration::from_secs(10)
        )
        .await,
        "a node without a client certificate is refused, and says so"
    );
    assert_eq!(c_log.count(&["NATS bridge connected"]), 0);
    assert!(get_json(&c.http, "/status").await.is_object());
}
