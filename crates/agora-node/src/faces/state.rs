//! What the axum faces share: the senders of the services they reach ([`AppState`]) and how
//! they ask a service for a report (`ask`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use crate::agh::{ConnId, Input};
use crate::mesh;

/// Shared state of the listeners.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The AGH service.
    pub agh: mpsc::Sender<Input>,
    /// The mesh.
    pub mesh: mpsc::Sender<mesh::Command>,
    /// The Hyperspace service.
    pub hyperspace: mpsc::Sender<crate::hyperspace::Input>,
    /// The memory service.
    pub memory: mpsc::Sender<crate::hyperspace::memory::Input>,
    /// The learning service.
    pub learning: mpsc::Sender<crate::hyperspace::learning::Input>,
    /// The Self-Improving service.
    pub improving: mpsc::Sender<crate::hyperspace::improving::Input>,
    /// The Micropayments service.
    pub payments: mpsc::Sender<crate::hyperspace::payments::Input>,
    /// Connection id source.
    pub conn_ids: Arc<AtomicU64>,
    /// Node start time.
    pub started: Instant,
    /// The faces this node serves (`agh` → `ws://…/agh/v0`, `http` → `http://…`).
    pub faces: Arc<Vec<(&'static str, String)>>,
    /// How often agents are pinged ([`crate::faces::serve::ws_ping_interval`]).
    pub ping_every: std::time::Duration,
    /// The node's metrics.
    pub telemetry: Arc<crate::telemetry::Telemetry>,
    /// The Agent Name Service (for the dashboard).
    pub ans: Arc<crate::ans::Ans>,
    /// The data directory, as configured (shown on the dashboard).
    pub data_dir: Arc<str>,
    /// The dashboard's last snapshot, shared by every open dashboard.
    pub snapshot: crate::faces::http::dashboard::cache::Cache,
    /// The node as an A2A agent (its card key, its tasks).
    pub a2a: crate::faces::a2a::agent::A2aFace,
    /// The OpenRPC document of the JSON-RPC face ([`crate::openrpc`]), built at start-up.
    pub openrpc: Arc<serde_json::Value>,
    /// The directory service (`directory.search` over HTTP, the AI Catalog).
    pub directory: mpsc::Sender<crate::directory::Input>,
    /// What the peers' clocks say (`/status` `clock`).
    pub clocks: Arc<crate::clock::PeerClocks>,
    /// Bytes of agents' envelopes in flight to the AGH service, all faces together.
    pub agh_in_flight: crate::agh::InFlight,
}

impl AppState {
    pub(crate) fn next_conn(&self) -> ConnId {
        ConnId(self.conn_ids.fetch_add(1, Ordering::Relaxed))
    }
}

/// Asks a service for a JSON report (`make` wraps the reply channel in its input); `null` when
/// the service is gone.
pub(crate) async fn ask<I>(
    service: &mpsc::Sender<I>,
    make: impl FnOnce(oneshot::Sender<serde_json::Value>) -> I,
) -> serde_json::Value {
    let (tx, rx) = oneshot::channel();
    if service.send(make(tx)).await.is_err() {
        return serde_json::Value::Null;
    }
    rx.await.unwrap_or(serde_json::Value::Null)
}
