//! The routers through real channels: calls by prefix, events by topic, protocol and kind, the
//! drop-when-full entries, and the metrics' method labels against the methods the services serve.

use agora_hyperspace::jsonrpc::Request;
use libp2p::PeerId;
use libp2p::gossipsub::MessageId;
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::call::Principal;
use crate::hyperspace::{self, improving, learning, memory, payments};
use crate::telemetry;

struct Queues {
    hs: mpsc::Receiver<hyperspace::Input>,
    memory: mpsc::Receiver<memory::Input>,
    learning: mpsc::Receiver<learning::Input>,
    improving: mpsc::Receiver<improving::Input>,
    payments: mpsc::Receiver<payments::Input>,
    agh: mpsc::Receiver<mesh::Event>,
}

fn routers(capacity: usize) -> (CallRouter, EventRouter, Queues) {
    let (hs_tx, hs) = mpsc::channel(capacity);
    let (mem_tx, memory) = mpsc::channel(capacity);
    let (learn_tx, learning) = mpsc::channel(capacity);
    let (imp_tx, improving) = mpsc::channel(capacity);
    let (pay_tx, payments) = mpsc::channel(capacity);
    let (agh_tx, agh) = mpsc::channel(capacity);
    // The A2A bridge's queue: dropped when this returns (its routes drop when full, and no
    // test here routes a bridge call).
    let (a2a_tx, _a2a) = mpsc::channel(capacity);
    // `rpc.discover`'s, `node.info`'s, the MCP bridge's and the directory's queues, likewise.
    let (discover_tx, _discover) = mpsc::channel(capacity);
    let (info_tx, _info) = mpsc::channel(capacity);
    let (mcp_tx, _mcp) = mpsc::channel(capacity);
    let (dir_tx, _directory) = mpsc::channel(capacity);
    let calls = CallRouter::new(
        vec![
            memory::call_route(&mem_tx),
            learning::call_route(&learn_tx),
            improving::call_route(&imp_tx),
            payments::call_route(&pay_tx),
            crate::bridge::mcp::call_route(&mcp_tx),
            crate::bridge::a2a::call_route(&a2a_tx),
            crate::info::call_route(&info_tx),
            crate::openrpc::call_route(&discover_tx),
            crate::directory::call_route(&dir_tx),
        ],
        hyperspace::call_route(&hs_tx),
    );
    let mut routes = hyperspace::event_routes(&hs_tx);
    routes.extend(memory::event_routes(&mem_tx));
    routes.extend(improving::event_routes(&imp_tx));
    routes.extend(payments::event_routes(&pay_tx));
    routes.extend(crate::bridge::a2a::event_routes(&a2a_tx));
    let events = EventRouter::new(routes, Sink::new(agh_tx, Delivery::Wait, Some));
    let queues = Queues {
        hs,
        memory,
        learning,
        improving,
        payments,
        agh,
    };
    (calls, events, queues)
}

fn call(method: &str) -> Call {
    Call {
        principal: Principal::Local,
        conn: 1,
        request: Request {
            id: None,
            method: method.to_owned(),
            params: None,
        },
        reply: oneshot::channel().0,
    }
}

fn gossip_on(topic: &str, needs_verdict: bool) -> mesh::Event {
    mesh::Event::Gossip {
        topic: topic.to_owned(),
        data: b"x".to_vec(),
        source: None,
        id: MessageId::new(b"id"),
        propagation_source: PeerId::random(),
        needs_verdict,
    }
}

#[tokio::test]
async fn calls_go_to_the_service_of_their_prefix() {
    let (router, _events, mut q) = routers(16);
    for method in [
        "memory.store",
        "learning.reflect",
        "improving.augment",
        "selfImproving.getLibraryStats",
        "micropayments.channel.pay",
        "state.createSession",
        "tool.invoke",
        "no.such",
    ] {
        assert!(router.route(method).sink.deliver(call(method)).await);
    }
    assert!(
        matches!(q.memory.try_recv(), Ok(memory::Input::Call(c)) if c.request.method == "memory.store")
    );
    assert!(matches!(
        q.learning.try_recv(),
        Ok(learning::Input::Call(_))
    ));
    for m in ["improving.augment", "selfImproving.getLibraryStats"] {
        assert!(
            matches!(q.improving.try_recv(), Ok(improving::Input::Call(c)) if c.request.method == m)
        );
    }
    assert!(matches!(
        q.payments.try_recv(),
        Ok(payments::Input::Call(_))
    ));
    for m in ["state.createSession", "tool.invoke", "no.such"] {
        assert!(matches!(q.hs.try_recv(), Ok(hyperspace::Input::Call(c)) if c.request.method == m));
    }
}

#[tokio::test]
async fn the_call_router_runs_until_its_input_closes() {
    let (router, _events, mut q) = routers(16);
    let (tx, rx) = mpsc::channel(4);
    let task = tokio::spawn(router.run(rx));
    tx.send(call("memory.list")).await.ok();
    drop(tx);
    task.await.ok();
    assert!(matches!(q.memory.try_recv(), Ok(memory::Input::Call(_))));
}

#[test]
fn every_served_method_has_its_label_and_every_label_is_served() {
    let (router, _events, _q) = routers(1);
    let mut served = Vec::new();
    for route in router.routes.iter().chain([&router.rest]) {
        for &method in route.methods.iter().flat_map(|set| set.iter()) {
            assert!(
                std::ptr::eq(router.route(method), route),
                "{method} is not routed to the service that serves it"
            );
            assert_eq!(
                telemetry::known_method(method),
                method,
                "{method} has no label"
            );
            served.push(method);
        }
    }
    for label in telemetry::RPC_METHOD_SETS.iter().flat_map(|set| set.iter()) {
        assert!(
            served.contains(label),
            "the label {label} names no served method"
        );
    }
    for once_other in [
        "improving.augment",
        "improving.assessDifficulty",
        "improving.getLibraryStats",
        "selfImproving.recordTrajectory",
    ] {
        assert!(served.contains(&once_other));
    }
    for unserved in ["recursive.spawn", "tool.unregister", "state.listSessions"] {
        assert_eq!(telemetry::known_method(unserved), "other");
    }
}

#[tokio::test]
async fn events_go_to_the_service_that_owns_them() {
    let (_calls, router, mut q) = routers(16);
    let events = [
        gossip_on(memory::SYNC_TOPIC, true),
        gossip_on("hyperspace/trajectories/code", true),
        gossip_on("hyperspace/reputation/code", false),
        gossip_on("hyperspace/settlements/1", false),
        gossip_on("hyperspace/capabilities/12D3", true),
        gossip_on("agh/v0/general", true),
        mesh::Event::Subscribed(PeerId::random(), "hyperspace/capabilities/12D3".into()),
        mesh::Event::Subscribed(PeerId::random(), "agh/v0/general".into()),
        mesh::Event::DhtPeer(PeerId::random()),
        mesh::Event::RecordOffered {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
        },
        mesh::Event::Connected(PeerId::random()),
    ];
    for e in events {
        assert!(router.route(e).await);
    }
    assert!(matches!(q.memory.try_recv(), Ok(memory::Input::Gossip(_))));
    assert!(matches!(
        q.improving.try_recv(),
        Ok(improving::Input::Trajectory { topic, .. }) if topic == "hyperspace/trajectories/code"
    ));
    assert!(matches!(
        q.improving.try_recv(),
        Ok(improving::Input::View(_))
    ));
    assert!(matches!(
        q.payments.try_recv(),
        Ok(payments::Input::Settlement(_))
    ));
    assert!(matches!(
        q.hs.try_recv(),
        Ok(hyperspace::Input::Gossip(g)) if g.topic == "hyperspace/capabilities/12D3"
    ));
    assert!(matches!(
        q.hs.try_recv(),
        Ok(hyperspace::Input::Subscribed(_))
    ));
    assert!(matches!(q.hs.try_recv(), Ok(hyperspace::Input::DhtPeer)));
    assert!(matches!(
        q.hs.try_recv(),
        Ok(hyperspace::Input::RecordOffered { .. })
    ));
    assert!(q.hs.try_recv().is_err());
    assert!(
        matches!(q.agh.try_recv(), Ok(mesh::Event::Gossip { topic, .. }) if topic == "agh/v0/general")
    );
    assert!(matches!(q.agh.try_recv(), Ok(mesh::Event::Subscribed(..))));
    assert!(matches!(q.agh.try_recv(), Ok(mesh::Event::Connected(_))));
    assert!(q.agh.try_recv().is_err());
}

#[tokio::test]
async fn hyperspace_gossip_without_a_verdict_to_give_is_dropped() {
    let (_calls, router, mut q) = routers(16);
    assert!(router.route(gossip_on("hyperspace/tasks/x", false)).await);
    // on a topic another service owns, it is still handed over
    assert!(
        router
            .route(gossip_on("hyperspace/trajectories/t", false))
            .await
    );
    assert!(q.hs.try_recv().is_err());
    assert!(q.agh.try_recv().is_err());
    assert!(matches!(
        q.improving.try_recv(),
        Ok(improving::Input::Trajectory { .. })
    ));
}

#[tokio::test]
async fn drop_when_full_entries_never_wait_and_wait_entries_stop_when_a_service_is_gone() {
    let (_calls, router, mut q) = routers(1);
    for _ in 0..3 {
        // the memory queue holds one: the other two sync messages are dropped, never awaited
        assert!(router.route(gossip_on(memory::SYNC_TOPIC, true)).await);
    }
    assert!(matches!(q.memory.try_recv(), Ok(memory::Input::Gossip(_))));
    assert!(q.memory.try_recv().is_err());
    drop(q.agh);
    assert!(!router.route(mesh::Event::Connected(PeerId::random())).await);
}
