//! `GET /status`: the node's state as one JSON document (also the base of the dashboard's
//! snapshot).

use serde_json::json;
use tokio::sync::oneshot;

use crate::agh::Input;
use crate::faces::state::{AppState, ask};
use crate::mesh;

/// The `/status` document; `None` when the mesh or the AGH service is gone.
pub async fn status_value(state: &AppState) -> Option<serde_json::Value> {
    let (tx, rx) = oneshot::channel();
    let (stx, srx) = oneshot::channel();
    if state.mesh.send(mesh::Command::Status(tx)).await.is_err()
        || state.agh.send(Input::Stats(stx)).await.is_err()
    {
        return None;
    }
    let (Ok(mesh), Ok(agh)) = (rx.await, srx.await) else {
        return None;
    };
    use crate::hyperspace::{improving, learning, memory, payments};
    let memory = ask(&state.memory, memory::Input::Status).await;
    let learning = ask(&state.learning, learning::Input::Status).await;
    let improving = ask(&state.improving, improving::Input::Status).await;
    let payments = ask(&state.payments, payments::Input::Status).await;
    Some(json!({
        "peer_id": mesh.peer_id,
        "uptime_secs": state.started.elapsed().as_secs(),
        "listen": mesh.listen,
        "faces": state.faces.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        "connected": mesh.connected,
        "clock": state.clocks.view(crate::clock::now_ms()).to_json(),
        "topics": mesh.topics,
        "gossip": {
            "message_limit": mesh::MAX_MESSAGE_BYTES,
            "frame_limit": mesh::MAX_FRAME_BYTES,
            "topic_budget": {
                "max_topics": mesh.topic_budget.max_topics,
                "max_bytes": mesh.topic_budget.max_bytes,
                "topics": mesh.topic_budget.topics,
                "bytes": mesh.topic_budget.bytes,
                "by_class": mesh.topic_budget.by_class,
                "rendezvous": mesh.topic_budget.rendezvous,
                "refused": mesh.topic_budget.refused,
            },
            "refused": mesh.refused,
            "dropped": mesh.dropped,
            "mesh": mesh.mesh,
            "neighbours": mesh.neighbours,
            "outbound_streams": mesh.outbound_streams,
            "signatures": mesh.signatures,
            "split_rpcs": mesh.split_rpcs,
            "scores": mesh.scores,
        },
        "agh": agh,
        "memory": memory,
        "learning": learning,
        "improving": improving,
        "payments": payments,
        "kad_peers": mesh.kad_peers,
        "dht": {
            "dials": mesh.dials,
            "provided_keys": mesh.provided_keys,
            "queries": mesh.queries,
        },
        "mesh_peers": mesh.mesh_peers,
    }))
}
