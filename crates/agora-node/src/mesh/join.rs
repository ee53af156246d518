//! Joining the mesh and staying in it: the configured bootstrap peers, dialled with exponential
//! backoff until they answer and again whenever they go away.

use std::time::Duration;

use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId, Swarm};
use tokio::time::Instant;

use super::swarm::Behaviour;

/// How soon a bootstrap peer that closed its connection is dialled again while the node still
/// has other connections (it is dialled at once, with a short backoff, when the node has none,
/// and when the connection failed rather than closed).
const REJOIN_INTERVAL: Duration = Duration::from_secs(60);
/// First and largest delay between dials of a bootstrap peer that does not answer. The largest
/// bounds how long a healed network link waits for its first dial: a partition measured on
/// namespaced hosts (`docs/reliability.md`) healed about 50 s after the link came back with
/// a fixed 60 s rejoin after a failed connection.
const INITIAL_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// One configured bootstrap address.
struct Bootstrap {
    addr: Multiaddr,
    peer: Option<PeerId>,
    connected: bool,
    next_attempt: Instant,
    backoff: Duration,
}

/// Joining the mesh and staying in it: the configured bootstrap peers are dialled until they
/// answer; Kademlia's bootstrap runs when the first of them connects and again whenever the
/// node lost every connection. A bootstrap peer that went away (its connection idled out, or it
/// restarted) is dialled again after [`REJOIN_INTERVAL`], or at once when the node is alone; one
/// whose connection failed (the link went down, the host stopped answering) is dialled again
/// with the backoff, so that the node rejoins within [`MAX_BACKOFF`] of the link healing.
pub(super) struct Join {
    peers: Vec<Bootstrap>,
    /// No Kademlia bootstrap since the node started or was last left without connections.
    needs_kad_bootstrap: bool,
}

impl Join {
    pub(super) fn new(addrs: &[Multiaddr]) -> Self {
        let now = Instant::now();
        Self {
            peers: addrs
                .iter()
                .map(|addr| Bootstrap {
                    addr: addr.clone(),
                    peer: addr.iter().find_map(|p| match p {
                        Protocol::P2p(id) => Some(id),
                        _ => None,
                    }),
                    connected: false,
                    next_attempt: now,
                    backoff: INITIAL_BACKOFF,
                })
                .collect(),
            needs_kad_bootstrap: true,
        }
    }

    /// Dials the bootstrap peers that are due.
    pub(super) fn redial(&mut self, swarm: &mut Swarm<Behaviour>) {
        let now = Instant::now();
        for b in self
            .peers
            .iter_mut()
            .filter(|b| !b.connected && b.next_attempt <= now)
        {
            // The operator's bootstrap peers are dialled outside the dial budget.
            if let Some(peer) = b.peer {
                swarm.behaviour_mut().dials.exempt(peer);
            }
            if let Err(e) = swarm.dial(b.addr.clone()) {
                tracing::debug!(addr = %b.addr, error = %e, "bootstrap dial failed");
            }
            b.next_attempt = now + b.backoff;
            b.backoff = (b.backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// The bootstrap peers connected now.
    pub(super) fn connected_peers(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.peers
            .iter()
            .filter(|b| b.connected)
            .filter_map(|b| b.peer)
    }

    pub(super) fn on_connected(
        &mut self,
        swarm: &mut Swarm<Behaviour>,
        peer_id: PeerId,
        endpoint: &libp2p::core::ConnectedPoint,
    ) {
        let mut bootstrap_peer = false;
        for b in &mut self.peers {
            let same_addr = endpoint.is_dialer() && *endpoint.get_remote_address() == b.addr;
            if b.peer == Some(peer_id) || same_addr {
                b.connected = true;
                b.peer = Some(peer_id);
                b.backoff = INITIAL_BACKOFF;
                bootstrap_peer = true;
            }
        }
        if bootstrap_peer
            && self.needs_kad_bootstrap
            && let Ok(id) = swarm.behaviour_mut().kad.bootstrap()
        {
            tracing::debug!(?id, "kademlia bootstrap started");
            self.needs_kad_bootstrap = false;
        }
    }

    /// The last connection to `peer_id` closed — `failed` when on an error rather than by
    /// either side closing it; `alone` when the node has no connection left.
    pub(super) fn on_disconnected(&mut self, peer_id: PeerId, alone: bool, failed: bool) {
        let now = Instant::now();
        if alone {
            self.needs_kad_bootstrap = true;
        }
        for b in &mut self.peers {
            if b.peer == Some(peer_id) {
                b.connected = false;
                b.next_attempt = now
                    + if alone || failed {
                        b.backoff
                    } else {
                        REJOIN_INTERVAL
                    };
            } else if alone && !b.connected {
                b.next_attempt = b.next_attempt.min(now + b.backoff);
            }
        }
    }
}
