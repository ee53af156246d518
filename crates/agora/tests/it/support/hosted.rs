//! What a client on a cluster host ([`super::cluster`]) needs of the nodes: a node's endpoints
//! ([`Ep`]), one JSON-RPC call on its own connection, the Agent Name Service over AGTP with TLS
//! ([`AnsAt`], with federation configured between name servers by [`ans_config`]), and payment
//! channels with what their payer was told ([`Paying`]). Used by the partition and crash-loop
//! scenarios.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agora_agtp::Status;
use agora_agtp::codec::{Request, Response};
use agora_agtp::manifest::Transition;
use agora_agtp::signature::AnsSigningKey;
use agora_node::faces::agtp::client::{self, Transport};
use agora_node::faces::agtp::tls::{self, Roots};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::cluster::Cluster;
use super::{Node, TEST_API_KEY, request};

/// What a client needs of a node (owned, for tasks on other runtimes).
#[derive(Clone)]
pub(crate) struct Ep {
    pub(crate) rpc: String,
    /// `host:port` of the HTTP face.
    pub(crate) http: String,
    pub(crate) agh: String,
}

impl Ep {
    pub(crate) fn of(node: &Node) -> Self {
        Self {
            rpc: node.rpc.clone(),
            http: node.http.trim_start_matches("http://").to_owned(),
            agh: node.agh.clone(),
        }
    }
}

/// `Bearer` with the test API key.
pub(crate) fn auth() -> String {
    format!("Bearer {TEST_API_KEY}")
}

/// One call on its own connection; `None` when the node is gone or does not answer in 10 s.
pub(crate) async fn try_call(ep: &Ep, method: &str, params: Value) -> Option<Value> {
    let mut req = IntoClientRequest::into_client_request(ep.rpc.as_str()).ok()?;
    req.headers_mut()
        .insert("authorization", auth().parse().ok()?);
    let (mut ws, _) = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(req),
    )
    .await
    .ok()?
    .ok()?;
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    ws.send(Message::Text(req.to_string().into())).await.ok()?;
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(msg)) = ws.next().await {
            if let Message::Text(t) = msg {
                return serde_json::from_str::<Value>(t.as_str()).ok();
            }
        }
        None
    })
    .await
    .ok()??;
    let _ = ws.close(None).await;
    Some(answer)
}

/// `GET path` with the API key; the body as JSON (`Null` when the node does not answer 200).
pub(crate) async fn get(ep: &Ep, path: &str) -> Value {
    let a = auth();
    let (code, body) = request(&ep.http, "GET", path, &[("Authorization", &a)], "").await;
    if code == 200 {
        serde_json::from_str(&body).unwrap_or_default()
    } else {
        Value::Null
    }
}

/// A node's name server over AGTP with TLS, trusting the certificate it generated.
#[derive(Clone)]
pub(crate) struct AnsAt {
    addr: String,
    transport: Transport,
}

impl AnsAt {
    pub(crate) fn of(node: &Node) -> Self {
        let addr = node.agtp.trim_start_matches("agtp://").to_owned();
        let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
        let cert = std::fs::read(node.data.join(tls::CERT_FILE)).unwrap();
        let transport = Transport::for_host(host, true, false, &Roots::Pem(cert)).unwrap();
        Self { addr, transport }
    }

    /// `None` when the name server cannot be reached or does not answer in 10 s.
    pub(crate) async fn send(&self, request: &Request) -> Option<Response> {
        client::request(
            &self.addr,
            &self.transport,
            request,
            Duration::from_secs(10),
        )
        .await
        .ok()
    }

    /// ACTIVATE of agent `id` whose job is `text`; whether it was acknowledged (200).
    pub(crate) async fn activate(&self, gov: &AnsSigningKey, id: &str, text: &str) -> bool {
        let m = manifest(id, text);
        let req = super::agtp_lifecycle_request(gov, Transition::Activate, id, Some(&m), None);
        self.send(&req)
            .await
            .is_some_and(|r| r.status == Status::OK)
    }

    /// The registry state of agent `id` (DESCRIBE `/agents/{id}`), `None` without an answer.
    pub(crate) async fn lifecycle_state(&self, id: &str) -> Option<String> {
        let req = Request::new("DESCRIBE").with_target(format!("/agents/{id}"));
        let r = self.send(&req).await?;
        let body: Value = serde_json::from_slice(&r.body).ok()?;
        body["result"]["lifecycle_state"]
            .as_str()
            .map(str::to_owned)
    }

    /// DISCOVER of `intent` (up to 100 results): the result object, `None` without a 200.
    pub(crate) async fn discover(&self, intent: &str) -> Option<Value> {
        let req = Request::new("DISCOVER")
            .with_header("Agent-ID", "agent-caller")
            .with_header("Authority-Scope", "discovery:query")
            .with_json_body(
                &json!({"method": "DISCOVER", "parameters": {"intent": intent, "limit": 100}}),
            );
        let r = self.send(&req).await?;
        if r.status != Status::OK {
            return None;
        }
        let body: Value = serde_json::from_slice(&r.body).ok()?;
        Some(body["result"].clone())
    }
}

/// The canonical ids a DISCOVER result lists.
pub(crate) fn discovered(result: &Value) -> Vec<String> {
    result["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["canonical_id"].as_str().map(str::to_owned))
        .collect()
}

/// A tier-1 agent's manifest whose job is `text`.
pub(crate) fn manifest(id: &str, text: &str) -> Value {
    json!({
        "canonical_id": id,
        "manifest_uri": format!("agtp://agents.example/agents/{id}"),
        "agent_label": id,
        "org_domain": "example.org",
        "governance_zone": "zone:test",
        "trust_tier": 1,
        "behavioral_trust_score": 0.9,
        "supported_methods": ["QUERY", "ANALYZE"],
        "authority_scope_categories": ["documents:query"],
        "job_description": text,
    })
}

/// Writes the `agora.toml` of host `i`'s node (next to its data directory) and returns its
/// path: name server `ans.{i}`, trusting the governance key `gov_pub`, federating to the name
/// servers of `peers` (their generated key and certificate are read from their data
/// directories, so those nodes have started once).
pub(crate) fn ans_config(cluster: &Cluster, i: usize, gov_pub: &Path, peers: &[usize]) -> PathBuf {
    let mut toml = format!(
        "[agtp]\nname = \"ans.{i}\"\ngovernance_keys = [\"{}\"]\nrate = 1000.0\nburst = 1000.0\n",
        gov_pub.display()
    );
    for &j in peers {
        let h = cluster.host(j);
        toml.push_str(&format!(
            "[[agtp.peers]]\nname = \"ans.{j}\"\nendpoint = \"{}:4480\"\nkey = \"{}\"\nca = \"{}\"\ntls = true\n",
            h.ip,
            h.data.join(agora_node::ans::KEY_FILE).display(),
            h.data.join(tls::CERT_FILE).display(),
        ));
    }
    let path = cluster.host(i).data.with_extension("toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// A payment channel (points) and what its payer's client was told.
#[derive(Clone, Debug)]
pub(crate) struct Paying {
    pub(crate) payer: usize,
    pub(crate) payee: usize,
    pub(crate) id: String,
    /// The sum of the amounts answered `paid`, and how many.
    pub(crate) acked: u64,
    pub(crate) paid: u64,
    /// The sum of the amounts answered with an error or not at all (each may have landed).
    pub(crate) unsure: u64,
    pub(crate) failed: u64,
    /// Of the failures, the −32006 (payee unreachable) that named the voucher left pending.
    pub(crate) pending_named: u64,
}

/// The budget of every test channel, in points.
pub(crate) const CHANNEL_BUDGET: u64 = 1_000_000_000;

impl Paying {
    /// Opens a points channel from the node of `payer` to the node `payee_peer` (of host `payee`).
    pub(crate) async fn open(ep: &Ep, payer: usize, payee: usize, payee_peer: &str) -> Self {
        let r = try_call(
            ep,
            "micropayments.channel.open",
            json!({"payee": payee_peer, "budgetAtomic": CHANNEL_BUDGET, "currency": "points"}),
        )
        .await;
        let id = r
            .as_ref()
            .and_then(|r| r["result"]["channelId"].as_str())
            .unwrap_or_else(|| panic!("channel {payer} → {payee} opens: {r:?}"))
            .to_owned();
        Self {
            payer,
            payee,
            id,
            acked: 0,
            paid: 0,
            unsure: 0,
            failed: 0,
            pending_named: 0,
        }
    }

    /// Pays `amount` on the channel through `ep` (its payer's node) and records the answer;
    /// whether it was paid.
    pub(crate) async fn pay(&mut self, ep: &Ep, amount: u64) -> bool {
        let r = try_call(
            ep,
            "micropayments.channel.pay",
            json!({"channelId": self.id, "amountAtomic": amount}),
        )
        .await;
        if r.as_ref().is_some_and(|r| r["result"]["nonce"].is_u64()) {
            self.acked += amount;
            self.paid += 1;
            true
        } else {
            self.unsure += amount;
            self.failed += 1;
            if let Some(r) = &r
                && r["error"]["code"] == -32006
            {
                assert!(r["error"]["data"]["pendingNonce"].is_u64(), "{r}");
                self.pending_named += 1;
            }
            false
        }
    }

    /// The channel's total as the node of `ep` holds it (`/status`), `None` when it does not
    /// list it.
    pub(crate) async fn spent_at(&self, ep: &Ep) -> Option<u64> {
        let status = get(ep, "/status").await;
        status["payments"]["openChannels"]
            .as_array()?
            .iter()
            .find(|c| c["channelId"] == self.id.as_str())?["spent"]
            .as_u64()
    }

    /// Both ends hold the same total, and it is what was acknowledged plus some of what was
    /// not (no voucher counted twice, none acknowledged and lost); the problem otherwise.
    pub(crate) async fn ends_agree(&self, eps: &[Ep]) -> Result<u64, String> {
        let payer = self.spent_at(&eps[self.payer]).await;
        let payee = self.spent_at(&eps[self.payee]).await;
        match (payer, payee) {
            (Some(a), Some(b)) if a == b && a >= self.acked && a <= self.acked + self.unsure => {
                Ok(a)
            }
            _ => Err(format!(
                "channel {} → {}: payer holds {payer:?}, payee {payee:?}; acknowledged {} in {} payments, {} in {} unanswered",
                self.payer, self.payee, self.acked, self.paid, self.unsure, self.failed
            )),
        }
    }
}
