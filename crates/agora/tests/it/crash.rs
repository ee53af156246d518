//! `kill -9` in the middle of writes loses no acknowledged write (a crash probe kept as a regression
//! test): a node is killed five times while a client writes session state as
//! fast as it is answered; after each restart on the same data directory every write that was
//! answered before the kill, and every session created, is still there.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{Ws, eventually, rpc_connect, spawn_node};

const KILLS: usize = 5;
/// Writes answered in a round before its kill.
const BEFORE_KILL: usize = 200;

/// One call that may meet a dead node: `None` when the connection ends first. Calls over the
/// rate limit (−32003) are sent again after the `retryAfterMs` they were given, as a client does.
async fn try_call(ws: &mut Ws, id: u64, method: &str, params: Value) -> Option<Value> {
    let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    'send: loop {
        ws.send(Message::Text(req.to_string().into())).await.ok()?;
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(20), ws.next())
                .await
                .ok()??
                .ok()?;
            let Message::Text(text) = msg else { continue };
            let v: Value = serde_json::from_str(text.as_str()).ok()?;
            if v["id"] != id {
                continue;
            }
            if v["error"]["code"] == -32003 {
                let wait = v["error"]["data"]["retryAfterMs"].as_u64().unwrap_or(10);
                tokio::time::sleep(Duration::from_millis(wait)).await;
                continue 'send;
            }
            return Some(v);
        }
    }
}

/// [`try_call`] on a node that must be alive.
async fn call(ws: &mut Ws, id: u64, method: &str, params: Value) -> Value {
    try_call(ws, id, method, params)
        .await
        .unwrap_or_else(|| panic!("{method}: the node answers"))
}

fn kill_9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_writes_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n");
    // (session, key, value) answered `updated: true` before a kill.
    let mut acked: Vec<(String, String, u64)> = Vec::new();
    let mut sessions: Vec<String> = Vec::new();
    for round in 0..=KILLS {
        let mut node = spawn_node(&data, &[], 30, &[]);
        let mut ws = rpc_connect(&node.rpc).await;
        // Everything acknowledged before the earlier kills is there.
        let mut id = 0;
        for s in &sessions {
            id += 1;
            let r = call(&mut ws, id, "state.getSession", json!({ "sessionId": s })).await;
            assert_eq!(r["result"]["sessionId"], json!(s), "round {round}: {r}");
        }
        for (s, key, value) in &acked {
            id += 1;
            let r = call(
                &mut ws,
                id,
                "state.getState",
                json!({"sessionId": s, "key": key}),
            )
            .await;
            assert_eq!(
                r["result"]["value"],
                json!(value),
                "round {round}: {key} was acknowledged before a kill: {r}"
            );
        }
        if round == KILLS {
            break;
        }
        // A new session each round, then writes as fast as they are answered, killed mid-way.
        id += 1;
        let r = call(
            &mut ws,
            id,
            "state.createSession",
            json!({"agentName": format!("crash-{round}"), "agentType": "autonomous"}),
        )
        .await;
        let session = r["result"]["sessionId"].as_str().unwrap().to_owned();
        sessions.push(session.clone());
        let answered = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&answered);
        let writer = tokio::spawn(async move {
            let mut done = Vec::new();
            for i in 0u64.. {
                let key = format!("k{round}-{i}");
                let params = json!({"sessionId": session, "key": key, "value": i});
                match try_call(&mut ws, 1_000_000 + i, "state.setState", params).await {
                    Some(r) if r["result"]["updated"] == true => {
                        done.push((session.clone(), key, i));
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(r) => panic!("a write was refused: {r}"),
                    None => break,
                }
            }
            done
        });
        // Kill while writes are in flight, once a few hundred were answered.
        eventually(Duration::from_secs(30), async || {
            (answered.load(Ordering::Relaxed) >= BEFORE_KILL).then_some(())
        })
        .await
        .expect("writes are answered");
        kill_9(node.child.id());
        let _ = node.child.wait();
        let done = tokio::time::timeout(Duration::from_secs(30), writer)
            .await
            .expect("the writer ends with the node")
            .unwrap();
        assert!(!done.is_empty(), "round {round}: no write was answered");
        acked.extend(done);
    }
    assert!(
        acked.len() >= KILLS * BEFORE_KILL,
        "{} writes acknowledged",
        acked.len()
    );
}
