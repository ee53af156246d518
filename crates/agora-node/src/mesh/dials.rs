//! The dial budget: how many connections the node opens on its own initiative (`docs/node.md`
//! "DHT chores").
//!
//! Kademlia dials every peer its queries visit that the node is not connected to, and the
//! rendezvous dials providers; the connection manager closes most of those connections again
//! after its grace period. At 500 nodes that was about 900 connections per node in one bench run,
//! each a TCP and Noise handshake on both sides. [`DialGate`] bounds them with a token bucket:
//! [`DIAL_BURST`] at once, refilled at [`DIALS_PER_HOUR`]. A dial past the budget is denied
//! before it starts (`DialError::Denied`): Kademlia counts the peer as failed and goes on with
//! the peers it is connected to, so when dials are scarce a query runs over connected peers.
//!
//! Not counted, because the node cannot do its work without them: a dial to a peer a request is
//! addressed to (a tool call, a memory or directory request: [`DialGate::exempt`], for
//! [`EXEMPT_FOR`]), a dial back to a peer whose connection the frame guard reset, and a dial to
//! a bootstrap address the operator gave (with its peer id, or without one). Inbound connections are not
//! counted either: they are their dialler's budget.
//!
//! So a node opens at most `DIAL_BURST + DIALS_PER_HOUR × hours` connections on its own, plus
//! those its requests need. `/status` shows `dht.dials.{opened, denied, exempt}`, and, to tell
//! where they come from, the DHT queries that ended by kind with the requests they sent
//! ([`QueryCensus`], `dht.queries`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use libp2p::core::Endpoint;
use libp2p::core::transport::PortUse;
use libp2p::swarm::{
    ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, THandler, THandlerInEvent,
    THandlerOutEvent, ToSwarm, dummy,
};
use libp2p::{Multiaddr, PeerId};

/// Connections the node may open at once on its own initiative.
pub const DIAL_BURST: u32 = 200;
/// The rate at which that allowance comes back.
pub const DIALS_PER_HOUR: u32 = 600;
/// How long a peer a request is addressed to may be dialled outside the budget.
pub const EXEMPT_FOR: Duration = Duration::from_secs(60);
/// Most peers exempt at once (past it, a new request's dial is counted like any other).
pub const MAX_EXEMPT: usize = 4096;

/// A token bucket of dials. Pure logic with an injected clock.
#[derive(Clone, Copy, Debug)]
pub struct DialBudget {
    tokens: f64,
    at: Instant,
    burst: f64,
    per_second: f64,
}

impl DialBudget {
    /// A full bucket of `burst`, refilled at `per_hour`.
    pub fn new(burst: u32, per_hour: u32, now: Instant) -> Self {
        Self {
            tokens: f64::from(burst),
            at: now,
            burst: f64::from(burst),
            per_second: f64::from(per_hour) / 3600.0,
        }
    }

    /// Takes one dial if there is one left.
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.at = now.max(self.at);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Dials counted by the gate, for `/status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DialCounts {
    /// Dials the budget allowed.
    pub opened: u64,
    /// Dials the budget denied.
    pub denied: u64,
    /// Dials outside the budget (requests, resets, bootstrap addresses).
    pub exempt: u64,
}

/// Finished Kademlia queries by kind, and the requests they sent: `kind → (queries, requests)`.
/// The kinds are a fixed set of names, so the map stays small.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueryCensus(pub std::collections::BTreeMap<&'static str, (u64, u64)>);

impl QueryCensus {
    /// A query of `kind` ended after sending `requests` requests.
    pub fn ended(&mut self, kind: &'static str, requests: u32) {
        let e = self.0.entry(kind).or_default();
        e.0 += 1;
        e.1 += u64::from(requests);
    }
}

/// The budget was spent (the reason of a denied dial).
#[derive(Debug, thiserror::Error)]
#[error("the dial budget is spent ({DIALS_PER_HOUR} per hour, {DIAL_BURST} at once)")]
pub struct BudgetSpent;

/// A behaviour with no protocol of its own that allows or denies the node's outbound dials.
#[derive(Debug)]
pub struct DialGate {
    budget: DialBudget,
    exempt: HashMap<PeerId, Instant>,
    counts: DialCounts,
}

impl Default for DialGate {
    fn default() -> Self {
        Self {
            budget: DialBudget::new(DIAL_BURST, DIALS_PER_HOUR, Instant::now()),
            exempt: HashMap::new(),
            counts: DialCounts::default(),
        }
    }
}

impl DialGate {
    /// The node is about to dial `peer` for a request (or a reset): allow it outside the budget
    /// for [`EXEMPT_FOR`].
    pub fn exempt(&mut self, peer: PeerId) {
        let now = Instant::now();
        if self.exempt.len() >= MAX_EXEMPT {
            self.exempt.retain(|_, until| *until > now);
        }
        if self.exempt.len() < MAX_EXEMPT || self.exempt.contains_key(&peer) {
            self.exempt.insert(peer, now + EXEMPT_FOR);
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> DialCounts {
        self.counts
    }

    fn allow(&mut self, peer: Option<PeerId>, now: Instant) -> bool {
        let exempt = peer.is_none_or(|p| self.exempt.get(&p).is_some_and(|until| *until > now));
        if exempt {
            self.counts.exempt += 1;
            true
        } else if self.budget.take(now) {
            self.counts.opened += 1;
            true
        } else {
            self.counts.denied += 1;
            false
        }
    }
}

impl NetworkBehaviour for DialGate {
    type ConnectionHandler = dummy::ConnectionHandler;
    type ToSwarm = Infallible;

    fn handle_pending_outbound_connection(
        &mut self,
        _connection_id: ConnectionId,
        maybe_peer: Option<PeerId>,
        _addresses: &[Multiaddr],
        _effective_role: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        if self.allow(maybe_peer, Instant::now()) {
            Ok(Vec::new())
        } else {
            Err(ConnectionDenied::new(BudgetSpent))
        }
    }

    fn handle_established_inbound_connection(
        &mut self,
        _connection_id: ConnectionId,
        _peer: PeerId,
        _local_addr: &Multiaddr,
        _remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(dummy::ConnectionHandler)
    }

    fn handle_established_outbound_connection(
        &mut self,
        _connection_id: ConnectionId,
        _peer: PeerId,
        _addr: &Multiaddr,
        _role_override: Endpoint,
        _port_use: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(dummy::ConnectionHandler)
    }

    fn on_swarm_event(&mut self, _event: FromSwarm<'_>) {}

    fn on_connection_handler_event(
        &mut self,
        _peer_id: PeerId,
        _connection_id: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        match event {}
    }

    fn poll(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_census_counts_queries_and_requests_by_kind() {
        let mut c = QueryCensus::default();
        c.ended("bootstrap", 30);
        c.ended("bootstrap", 12);
        c.ended("put_record", 20);
        assert_eq!(c.0["bootstrap"], (2, 42));
        assert_eq!(c.0["put_record"], (1, 20));
    }

    #[test]
    fn the_bucket_allows_a_burst_then_its_rate() {
        let now = Instant::now();
        let mut b = DialBudget::new(10, 3600, now);
        assert_eq!((0..20).filter(|_| b.take(now)).count(), 10);
        // One per second comes back, never more than the burst.
        assert!(b.take(now + Duration::from_secs(1)));
        assert!(!b.take(now + Duration::from_secs(1)));
        let later = now + Duration::from_secs(3600);
        assert_eq!((0..20).filter(|_| b.take(later)).count(), 10);
    }

    #[test]
    fn an_hour_opens_at_most_the_burst_and_the_rate() {
        let now = Instant::now();
        let mut b = DialBudget::new(DIAL_BURST, DIALS_PER_HOUR, now);
        let mut opened = 0;
        // A dial asked for every 100 ms for an hour.
        for i in 0..36_000u64 {
            if b.take(now + Duration::from_millis(i * 100)) {
                opened += 1;
            }
        }
        assert!(opened <= DIAL_BURST + DIALS_PER_HOUR, "{opened}");
        assert!(opened >= DIAL_BURST + DIALS_PER_HOUR - 1, "{opened}");
    }

    #[test]
    fn requests_and_addresses_are_exempt_others_are_counted() {
        let mut g = DialGate {
            budget: DialBudget::new(1, 0, Instant::now()),
            ..DialGate::default()
        };
        let (a, b, c) = (PeerId::random(), PeerId::random(), PeerId::random());
        let now = Instant::now();
        assert!(g.allow(Some(a), now), "the one dial of the budget");
        assert!(!g.allow(Some(b), now), "spent");
        g.exempt(c);
        assert!(g.allow(Some(c), Instant::now()), "a request's peer");
        assert!(g.allow(None, now), "an address without a peer id");
        assert!(
            !g.allow(
                Some(c),
                Instant::now() + EXEMPT_FOR + Duration::from_secs(1)
            ),
            "the exemption ends"
        );
        assert_eq!(
            g.counts(),
            DialCounts {
                opened: 1,
                denied: 2,
                exempt: 2
            }
        );
    }
}
