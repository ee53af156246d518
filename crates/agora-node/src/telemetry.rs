//! Telemetry: the node's Prometheus registry (`prometheus-client`, the crate libp2p's own
//! `metrics` feature uses) and the counters the dashboard reads.
//!
//! One [`Telemetry`] per node, shared by `Arc` with the tasks that count: the serving layer
//! (HTTP requests and their latency per face), the JSON-RPC face (calls per method and outcome,
//! latency per method family), the AGH service (envelopes accepted and rejected by reason code),
//! the mesh task (gossip verdicts per topic family, libp2p's gossipsub / Kademlia / identify /
//! ping / swarm metrics, connection events), the AGTP face (requests per method and status),
//! the store's writer (commit latency). Queue depths are sampled when `/metrics` is scraped.
//!
//! Bounded: every label takes its values from a fixed set (an unknown JSON-RPC method is
//! `other`, a topic is reduced to its family), so the series count is fixed; the connection
//! event log keeps the last [`MAX_EVENTS`].

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Connection events kept for the dashboard.
pub const MAX_EVENTS: usize = 100;

/// The faces the node serves, as labels.
pub const FACES: [&str; 5] = ["agh", "rpc", "http", "agtp", "nats"];

/// Topic families, as labels (see [`topic_family`]).
pub const TOPIC_FAMILIES: [&str; 10] = [
    "agh",
    "capabilities",
    "tasks",
    "memory",
    "trajectories",
    "reputation",
    "settlements",
    "pulse",
    "hyperspace",
    "other",
];

/// The family of a gossip topic: a fixed label value.
pub fn topic_family(topic: &str) -> &'static str {
    let rest = topic.strip_prefix("hyperspace/");
    match rest {
        None if topic.starts_with(crate::mesh::topics::AGH_PREFIX) => "agh",
        None => "other",
        Some(r) if r.starts_with("capabilities/") => "capabilities",
        Some(r) if r.starts_with("tasks/") => "tasks",
        Some(r) if r.starts_with("crdt/sync/memory") => "memory",
        Some(r) if r.starts_with("trajectories") => "trajectories",
        Some(r) if r.starts_with("reputation") => "reputation",
        Some(r) if r.starts_with("settlements") => "settlements",
        Some(r) if r.starts_with("pulse/") => "pulse",
        Some(_) => "hyperspace",
    }
}

/// `face` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FaceLabel {
    /// The face.
    pub face: &'static str,
}

/// HTTP requests: face and status class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The face.
    pub face: &'static str,
    /// `2xx`, `3xx`, `4xx`, `5xx`.
    pub status: &'static str,
}

/// JSON-RPC calls: method and outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    /// A method of the spec, or `other`.
    pub method: &'static str,
    /// `ok` or the JSON-RPC error code.
    pub outcome: String,
}

/// JSON-RPC latency per method family (`state`, `memory`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FamilyLabel {
    /// The part of the method before its first dot, or `other`.
    pub family: &'static str,
}

/// Envelopes and messages: outcome and reason code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EnvelopeLabels {
    /// `accepted` or `rejected`.
    pub outcome: &'static str,
    /// The spec's reason code (`none` when accepted).
    pub reason: &'static str,
}

impl EnvelopeLabels {
    fn of(rejected: Option<&'static str>) -> Self {
        Self {
            outcome: if rejected.is_some() {
                "rejected"
            } else {
                "accepted"
            },
            reason: rejected.unwrap_or("none"),
        }
    }
}

/// Gossip verdicts per topic family.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GossipLabels {
    /// [`topic_family`].
    pub family: &'static str,
    /// `accept`, `relay` (forwarded without being ours), `reject`, `ignore` or `defer` (the
    /// owning service decides).
    pub verdict: &'static str,
}

/// Hyperspace gossip refused by the inline check: topic family and the envelope's refusal
/// reason (`agora_hyperspace::VerifyError::reason`: `stale`, `replayed`, `bad_signature`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// [`topic_family`].
    pub family: &'static str,
    /// The refusal reason.
    pub reason: &'static str,
}

/// AGTP requests: method and status code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgtpLabels {
    /// The AGTP method (`DISCOVER`, …) or `other`.
    pub method: &'static str,
    /// The status code.
    pub status: u16,
}

/// A queue's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// The queue.
    pub queue: &'static str,
}

/// A connection event for the dashboard.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConnEvent {
    /// Unix milliseconds.
    pub at_ms: u64,
    /// The peer.
    pub peer: String,
    /// `connected` or `disconnected`.
    pub kind: &'static str,
}

/// The node's metrics (see the module documentation).
pub struct Telemetry {
    registry: Mutex<Registry>,
    started: Instant,
    /// HTTP requests per face and status class.
    pub http_requests: Family<HttpLabels, Counter>,
    /// HTTP request latency per face (for a WebSocket, until the upgrade answer).
    pub http_latency: Family<FaceLabel, Histogram>,
    /// Messages handled per face (AGH envelopes from agents, JSON-RPC calls, HTTP requests,
    /// AGTP requests, NATS messages): the dashboard's traffic per face.
    pub face_messages: Family<FaceLabel, Counter>,
    /// JSON-RPC calls per method and outcome.
    pub rpc_calls: Family<RpcLabels, Counter>,
    /// JSON-RPC call latency per method family.
    pub rpc_latency: Family<FamilyLabel, Histogram>,
    /// AGH envelopes from agents, accepted or rejected by reason.
    pub agh_envelopes: Family<EnvelopeLabels, Counter>,
    /// AGH envelopes from other nodes (the mesh, NATS), accepted or rejected by reason.
    pub agh_network_envelopes: Family<EnvelopeLabels, Counter>,
    /// Gossip messages received per topic family and verdict.
    pub gossip: Family<GossipLabels, Counter>,
    /// Hyperspace gossip refused per topic family and reason.
    pub gossip_refused: Family<RefusedLabels, Counter>,
    /// AGTP requests per method and status.
    pub agtp_requests: Family<AgtpLabels, Counter>,
    /// AGTP request latency.
    pub agtp_latency: Histogram,
    /// Store commit latency (one durable redb transaction).
    pub store_commit: Histogram,
    /// Queue depths, sampled when scraped.
    pub queue_depth: Family<QueueLabel, Gauge>,
    /// libp2p's own metrics (gossipsub, Kademlia, identify, ping, swarm).
    pub libp2p: libp2p::metrics::Metrics,
    events: Mutex<VecDeque<ConnEvent>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

fn latency_histogram() -> Histogram {
    // 100 µs to about 13 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Telemetry {
    /// A registry with every metric registered (libp2p's under the `libp2p_` prefix) and the
    /// registry itself, for the swarm builder's bandwidth metrics before it is sealed in.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("agora");
        let http_requests = Family::<HttpLabels, Counter>::default();
        let http_latency =
            Family::<FaceLabel, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        let face_messages = Family::<FaceLabel, Counter>::default();
        let rpc_calls = Family::<RpcLabels, Counter>::default();
        let rpc_latency =
            Family::<FamilyLabel, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        let agh_envelopes = Family::<EnvelopeLabels, Counter>::default();
        let gossip = Family::<GossipLabels, Counter>::default();
        let gossip_refused = Family::<RefusedLabels, Counter>::default();
        let agh_network_envelopes = Family::<EnvelopeLabels, Counter>::default();
        let agtp_requests = Family::<AgtpLabels, Counter>::default();
        let agtp_latency = latency_histogram();
        let store_commit = latency_histogram();
        let queue_depth = Family::<QueueLabel, Gauge>::default();
        registry.register(
            "http_requests",
            "HTTP requests per face and status class",
            http_requests.clone(),
        );
        registry.register(
            "http_request_seconds",
            "HTTP request latency per face (a WebSocket: until the upgrade answer)",
            http_latency.clone(),
        );
        registry.register(
            "face_messages",
            "Messages handled per face: AGH envelopes, JSON-RPC calls, HTTP and AGTP requests, NATS messages",
            face_messages.clone(),
        );
        registry.register(
            "rpc_calls",
            "JSON-RPC calls per method and outcome (ok or the error code)",
            rpc_calls.clone(),
        );
        registry.register(
            "rpc_call_seconds",
            "JSON-RPC call latency per method family",
            rpc_latency.clone(),
        );
        registry.register(
            "agh_envelopes",
            "AGH envelopes from agents, accepted or rejected by reason code",
            agh_envelopes.clone(),
        );
        registry.register(
            "agh_network_envelopes",
            "AGH envelopes from other nodes (the mesh, NATS), accepted or rejected by reason code (expired: outside the replay age)",
            agh_network_envelopes.clone(),
        );
        registry.register(
            "gossip_messages",
            "Gossip messages received per topic family and validation verdict",
            gossip.clone(),
        );
        registry.register(
            "gossip_refused",
            "Hyperspace gossip refused by the inline check, per topic family and reason (stale, replayed, bad_signature, …)",
            gossip_refused.clone(),
        );
        registry.register(
            "agtp_requests",
            "AGTP requests per method and status code",
            agtp_requests.clone(),
        );
        registry.register(
            "agtp_request_seconds",
            "AGTP request latency",
            agtp_latency.clone(),
        );
        registry.register(
            "store_commit_seconds",
            "Durable redb commit latency",
            store_commit.clone(),
        );
        registry.register(
            "queue_depth",
            "Messages waiting in a service's input queue (sampled when scraped)",
            queue_depth.clone(),
        );
        let libp2p = libp2p::metrics::Metrics::new(&mut registry);
        Self {
            registry: Mutex::new(registry),
            started: Instant::now(),
            http_requests,
            http_latency,
            face_messages,
            rpc_calls,
            rpc_latency,
            agh_envelopes,
            agh_network_envelopes,
            gossip,
            gossip_refused,
            agtp_requests,
            agtp_latency,
            store_commit,
            queue_depth,
            libp2p,
            events: Mutex::new(VecDeque::with_capacity(MAX_EVENTS)),
        }
    }

    /// The registry, to register more metrics (the swarm's bandwidth counters).
    pub fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        lock(&self.registry)
    }

    /// The registry in the text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = lock(&self.registry);
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }

    /// Counts a message on `face`.
    pub fn face_message(&self, face: &'static str) {
        self.face_messages.get_or_create(&FaceLabel { face }).inc();
    }

    /// Counts a JSON-RPC call and its latency.
    pub fn rpc_call(&self, method: &str, outcome: Option<i64>, elapsed: std::time::Duration) {
        let method = known_method(method);
        let family = method.split('.').next().unwrap_or("other");
        self.rpc_calls
            .get_or_create(&RpcLabels {
                method,
                outcome: outcome.map_or_else(|| "ok".to_owned(), |c| c.to_string()),
            })
            .inc();
        self.rpc_latency
            .get_or_create(&FamilyLabel { family })
            .observe(elapsed.as_secs_f64());
        self.face_message("rpc");
    }

    /// Counts an AGH envelope from another node, `rejected` with its reason code or accepted.
    pub fn agh_network_envelope(&self, rejected: Option<&'static str>) {
        self.agh_network_envelopes
            .get_or_create(&EnvelopeLabels::of(rejected))
            .inc();
    }

    /// Counts an AGH envelope from an agent.
    pub fn agh_envelope(&self, rejected: Option<&'static str>) {
        self.agh_envelopes
            .get_or_create(&EnvelopeLabels::of(rejected))
            .inc();
        self.face_message("agh");
    }

    /// Counts a gossip message's verdict.
    pub fn gossip_verdict(&self, topic: &str, verdict: &'static str) {
        self.gossip
            .get_or_create(&GossipLabels {
                family: topic_family(topic),
                verdict,
            })
            .inc();
    }

    /// Records a connection event.
    pub fn conn_event(&self, peer: String, kind: &'static str) {
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut events = lock(&self.events);
        if events.len() == MAX_EVENTS {
            events.pop_front();
        }
        events.push_back(ConnEvent { at_ms, peer, kind });
    }

    /// The last connection events, oldest first.
    pub fn conn_events(&self) -> Vec<ConnEvent> {
        lock(&self.events).iter().cloned().collect()
    }

    /// Messages per face and gossip messages per topic family since start (the dashboard
    /// computes rates from successive values).
    pub fn traffic(&self) -> serde_json::Value {
        let faces: serde_json::Map<String, serde_json::Value> = FACES
            .iter()
            .map(|&face| {
                let n = self.face_messages.get_or_create(&FaceLabel { face }).get();
                (face.to_owned(), n.into())
            })
            .collect();
        let families: serde_json::Map<String, serde_json::Value> = TOPIC_FAMILIES
            .iter()
            .map(|&family| {
                let n: u64 = ["accept", "relay", "reject", "ignore", "defer"]
                    .iter()
                    .map(|&verdict| {
                        self.gossip
                            .get_or_create(&GossipLabels { family, verdict })
                            .get()
                    })
                    .sum();
                (family.to_owned(), n.into())
            })
            .collect();
        serde_json::json!({
            "uptime_ms": u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "faces": faces,
            "gossip": families,
        })
    }
}

impl Telemetry {
    /// Counts an HTTP request on `face` and its latency.
    pub fn http_request(&self, face: &'static str, status: u16, elapsed: std::time::Duration) {
        let status = match status {
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        self.http_requests
            .get_or_create(&HttpLabels { face, status })
            .inc();
        self.http_latency
            .get_or_create(&FaceLabel { face })
            .observe(elapsed.as_secs_f64());
        if face == "http" {
            self.face_message("http");
        }
    }

    /// Counts an AGTP request and its latency.
    pub fn agtp_request(&self, method: &str, status: u16, elapsed: std::time::Duration) {
        let method = match method {
            "DISCOVER" => "DISCOVER",
            "DESCRIBE" => "DESCRIBE",
            m if agora_agtp::manifest::Transition::from_method(m).is_some() => "lifecycle",
            _ => "other",
        };
        self.agtp_requests
            .get_or_create(&AgtpLabels { method, status })
            .inc();
        self.agtp_latency.observe(elapsed.as_secs_f64());
        self.face_message("agtp");
    }

    /// DISCOVER requests answered since start (the dashboard's DISCOVER rate).
    pub fn discovers(&self) -> u64 {
        [200u16, 400, 401, 403, 404, 429, 500, 503]
            .iter()
            .map(|&status| {
                self.agtp_requests
                    .get_or_create(&AgtpLabels {
                        method: "DISCOVER",
                        status,
                    })
                    .get()
            })
            .sum()
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new()
    }
}

/// The JSON-RPC methods the node serves, as fixed label values: every primitive's `METHODS`
/// (the constants its service dispatches on), the `selfImproving.*` aliases, and `rpc.discover`.
/// Any other method is counted as `other`.
pub const RPC_METHOD_SETS: [&[&str]; 14] = [
    &agora_hyperspace::state::METHODS,
    &agora_hyperspace::guard::METHODS,
    &agora_hyperspace::recursive::METHODS,
    &agora_hyperspace::tool::METHODS,
    &agora_hyperspace::memory::METHODS,
    &agora_hyperspace::learning::METHODS,
    &agora_hyperspace::improving::METHODS,
    &agora_hyperspace::improving::ALIASES,
    &agora_hyperspace::payments::METHODS,
    &agora_bridge::a2a::METHODS,
    &agora_bridge::mcp::METHODS,
    &agora_hyperspace::openrpc::RPC_METHODS,
    &agora_hyperspace::openrpc::NODE_METHODS,
    &agora_directory::rpc::METHODS,
];

/// The label of `method`: its own name when the node serves it, else `other`.
pub fn known_method(method: &str) -> &'static str {
    RPC_METHOD_SETS
        .iter()
        .flat_map(|set| set.iter())
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_reduce_to_a_fixed_family() {
        assert_eq!(topic_family("agh/v0/general"), "agh");
        assert_eq!(topic_family("hyperspace/capabilities/12D3"), "capabilities");
        assert_eq!(topic_family("hyperspace/tasks/tool.discover"), "tasks");
        assert_eq!(topic_family("hyperspace/crdt/sync/memory"), "memory");
        assert_eq!(topic_family("hyperspace/settlements/123"), "settlements");
        assert_eq!(topic_family("hyperspace/whatever"), "hyperspace");
        assert_eq!(topic_family("elsewhere"), "other");
        for t in [
            "agh/v0/x",
            "hyperspace/trajectories/a",
            "hyperspace/reputation",
        ] {
            assert!(TOPIC_FAMILIES.contains(&topic_family(t)));
        }
    }

    #[test]
    fn unknown_methods_share_one_label_and_the_text_format_has_them() {
        let t = Telemetry::new();
        t.rpc_call(
            "state.createSession",
            None,
            std::time::Duration::from_millis(2),
        );
        t.rpc_call("no.such", Some(-32601), std::time::Duration::from_millis(1));
        t.rpc_call(
            "again.nothing",
            Some(-32601),
            std::time::Duration::from_millis(1),
        );
        let text = t.encode();
        assert!(
            text.contains("agora_rpc_calls_total{method=\"state.createSession\",outcome=\"ok\"} 1")
        );
        assert!(text.contains("agora_rpc_calls_total{method=\"other\",outcome=\"-32601\"} 2"));
        assert!(text.contains("# EOF"));
        assert_eq!(t.traffic()["faces"]["rpc"], 3);
    }

    #[test]
    fn the_event_log_is_bounded() {
        let t = Telemetry::new();
        for i in 0..(MAX_EVENTS + 10) {
            t.conn_event(format!("p{i}"), "connected");
        }
        let events = t.conn_events();
        assert_eq!(events.len(), MAX_EVENTS);
        assert_eq!(events[0].peer, "p10");
    }
}
