//! The node's two routers, as tables: JSON-RPC calls go to a service by their method's prefix
//! ([`CallRouter`]); mesh events go to a service by their protocol, topic or kind
//! ([`EventRouter`]). Each service declares the entries it owns (its `call_route` and
//! `event_routes`); `run_until` collects them. Neither router knows a service.
//!
//! An entry says how an item is handed over ([`Delivery`]): the router waits for room in the
//! service's queue (and stops once the service is gone), or drops the item when the queue is full
//! (for messages a protocol makes up for: sync gossip, reputation views, settlement copies).
//!
//! Events that no entry claims go to the fallback service (AGH); calls that no entry claims go to
//! the Hyperspace service (state, guard, recursive, tool).

use std::future::Future;
use std::pin::Pin;

use libp2p::PeerId;
use libp2p::gossipsub::MessageId;
use libp2p::request_response::ResponseChannel;
use tokio::sync::mpsc;

use crate::call::Call;
use crate::mesh;

type Delivered = Pin<Box<dyn Future<Output = bool> + Send>>;

/// How a router hands an item to a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Wait for room in the queue; the router stops once the service is gone.
    Wait,
    /// Drop the item when the queue is full (the protocol makes up for a lost one).
    DropWhenFull,
}

/// A service's queue seen by a router: converts what is routed (`T`) into the service's input and
/// delivers it as its [`Delivery`] says.
pub struct Sink<T> {
    deliver: Box<dyn Fn(T) -> Delivered + Send + Sync>,
}

impl<T> std::fmt::Debug for Sink<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sink")
    }
}

impl<T: 'static> Sink<T> {
    /// Hands `wrap(item)` to `tx`; an item `wrap` turns into `None` is dropped.
    pub fn new<I: Send + 'static>(
        tx: mpsc::Sender<I>,
        delivery: Delivery,
        wrap: impl Fn(T) -> Option<I> + Send + Sync + 'static,
    ) -> Self {
        let deliver: Box<dyn Fn(T) -> Delivered + Send + Sync> = match delivery {
            Delivery::Wait => Box::new(move |item| {
                let tx = tx.clone();
                let input = wrap(item);
                Box::pin(async move {
                    match input {
                        Some(input) => tx.send(input).await.is_ok(),
                        None => true,
                    }
                })
            }),
            Delivery::DropWhenFull => Box::new(move |item| {
                if let Some(input) = wrap(item) {
                    let _ = tx.try_send(input);
                }
                Box::pin(std::future::ready(true))
            }),
        };
        Self { deliver }
    }

    /// Delivers `item`; false when the service is gone.
    pub async fn deliver(&self, item: T) -> bool {
        (self.deliver)(item).await
    }
}

// ---------------------------------------------------------------------------------------------
// JSON-RPC calls
// ---------------------------------------------------------------------------------------------

/// The calls one service answers: the method prefixes routed to it and the methods it serves
/// (its primitive's `METHODS`, for the metrics' labels and their test).
#[derive(Debug)]
pub struct CallRoute {
    /// Method prefixes (`memory.`).
    pub prefixes: &'static [&'static str],
    /// The methods the service serves.
    pub methods: &'static [&'static [&'static str]],
    /// The service's queue.
    pub sink: Sink<Call>,
}

impl CallRoute {
    /// The calls with `prefixes`, served as `methods`, handed to `tx` as `wrap(call)` (waiting
    /// for room in its queue).
    pub fn new<I: Send + 'static>(
        prefixes: &'static [&'static str],
        methods: &'static [&'static [&'static str]],
        tx: &mpsc::Sender<I>,
        wrap: fn(Call) -> I,
    ) -> Self {
        Self {
            prefixes,
            methods,
            sink: Sink::new(tx.clone(), Delivery::Wait, move |c| Some(wrap(c))),
        }
    }
}

/// Routes each JSON-RPC call to the service that owns its method's prefix.
#[derive(Debug)]
pub struct CallRouter {
    routes: Vec<CallRoute>,
    rest: CallRoute,
}

impl CallRouter {
    /// A router over `routes`; calls no prefix claims go to `rest`.
    pub fn new(routes: Vec<CallRoute>, rest: CallRoute) -> Self {
        Self { routes, rest }
    }

    /// The route of `method`.
    pub fn route(&self, method: &str) -> &CallRoute {
        self.routes
            .iter()
            .find(|r| r.prefixes.iter().any(|p| method.starts_with(p)))
            .unwrap_or(&self.rest)
    }

    /// Routes calls until `calls` closes or a service is gone.
    pub async fn run(self, mut calls: mpsc::Receiver<Call>) {
        while let Some(call) = calls.recv().await {
            let route = self.route(&call.request.method);
            if !route.sink.deliver(call).await {
                break;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Mesh events
// ---------------------------------------------------------------------------------------------

/// Which mesh events an entry claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKey {
    /// Gossip on exactly this topic.
    Topic(&'static str),
    /// Gossip on topics with this prefix (a topic family).
    TopicPrefix(&'static str),
    /// Node-to-node requests on this protocol.
    Proto(mesh::Proto),
    /// Subscriptions of neighbours to topics with this prefix.
    Subscribed(&'static str),
    /// DHT records offered to this node.
    RecordOffered,
    /// The DHT routing table's first peer.
    DhtPeer,
}

impl EventKey {
    fn claims(&self, event: &mesh::Event) -> bool {
        match (self, event) {
            (Self::Topic(t), mesh::Event::Gossip { topic, .. }) => topic == t,
            (Self::TopicPrefix(p), mesh::Event::Gossip { topic, .. }) => topic.starts_with(p),
            (Self::Proto(p), mesh::Event::Direct { proto, .. }) => proto == p,
            (Self::Subscribed(p), mesh::Event::Subscribed(_, topic)) => topic.starts_with(p),
            (Self::RecordOffered, mesh::Event::RecordOffered { .. })
            | (Self::DhtPeer, mesh::Event::DhtPeer(_)) => true,
            _ => false,
        }
    }

    /// Exact topics before prefixes, longer prefixes before shorter: the most specific entry
    /// claims an event, whatever order services declared them in.
    fn specificity(&self) -> (u8, usize) {
        match self {
            Self::Topic(t) => (2, t.len()),
            Self::TopicPrefix(p) | Self::Subscribed(p) => (1, p.len()),
            Self::Proto(_) | Self::RecordOffered | Self::DhtPeer => (2, 0),
        }
    }
}

/// One entry of the mesh-event table.
#[derive(Debug)]
pub struct EventRoute {
    /// The events it claims.
    pub key: EventKey,
    /// Gossip that an inline validator already accepted (`needs_verdict: false`) is dropped
    /// instead: the gate relayed it and the service needs no copy.
    pub verdicts_only: bool,
    /// The service's queue.
    pub sink: Sink<mesh::Event>,
}

impl EventRoute {
    /// An entry handing the events `key` claims to `tx`, converted by `wrap`.
    pub fn new<I: Send + 'static>(
        key: EventKey,
        tx: &mpsc::Sender<I>,
        delivery: Delivery,
        wrap: impl Fn(mesh::Event) -> Option<I> + Send + Sync + 'static,
    ) -> Self {
        Self {
            key,
            verdicts_only: false,
            sink: Sink::new(tx.clone(), delivery, wrap),
        }
    }

    /// The same entry, dropping gossip that needs no verdict.
    pub fn verdicts_only(mut self) -> Self {
        self.verdicts_only = true;
        self
    }
}

/// A gossip message as a service receives it.
#[derive(Debug)]
pub struct Gossip {
    /// Topic string.
    pub topic: String,
    /// Payload.
    pub data: Vec<u8>,
    /// Gossipsub's message id.
    pub id: MessageId,
    /// The peer that forwarded it.
    pub propagation_source: PeerId,
}

/// The gossip message of `event`, if it is one.
pub fn gossip(event: mesh::Event) -> Option<Gossip> {
    match event {
        mesh::Event::Gossip {
            topic,
            data,
            id,
            propagation_source,
            ..
        } => Some(Gossip {
            topic,
            data,
            id,
            propagation_source,
        }),
        _ => None,
    }
}

/// A node-to-node request as a service receives it.
#[derive(Debug)]
pub struct Request {
    /// The requesting node.
    pub peer: PeerId,
    /// The request's bytes.
    pub data: Vec<u8>,
    /// Where the response goes.
    pub channel: ResponseChannel<Vec<u8>>,
}

/// The node-to-node request of `event`, if it is one.
pub fn request(event: mesh::Event) -> Option<Request> {
    match event {
        mesh::Event::Direct {
            peer,
            data,
            channel,
            ..
        } => Some(Request {
            peer,
            data,
            channel,
        }),
        _ => None,
    }
}

/// Hands each mesh event to the service whose entry claims it, the rest to the fallback.
#[derive(Debug)]
pub struct EventRouter {
    routes: Vec<EventRoute>,
    rest: Sink<mesh::Event>,
}

impl EventRouter {
    /// A router over `routes` (most specific first); events no entry claims go to `rest`.
    pub fn new(mut routes: Vec<EventRoute>, rest: Sink<mesh::Event>) -> Self {
        routes.sort_by_key(|r| std::cmp::Reverse(r.key.specificity()));
        Self { routes, rest }
    }

    /// Delivers one event; false when its service is gone.
    pub async fn route(&self, event: mesh::Event) -> bool {
        let Some(route) = self.routes.iter().find(|r| r.key.claims(&event)) else {
            return self.rest.deliver(event).await;
        };
        if route.verdicts_only
            && matches!(
                event,
                mesh::Event::Gossip {
                    needs_verdict: false,
                    ..
                }
            )
        {
            return true;
        }
        route.sink.deliver(event).await
    }

    /// Routes events until `events` closes or a service is gone.
    pub async fn run(self, mut events: mpsc::Receiver<mesh::Event>) {
        while let Some(event) = events.recv().await {
            if !self.route(event).await {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests;
