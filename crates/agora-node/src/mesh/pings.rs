//! Ping that keeps answering peers which do not answer ours (`/ipfs/ping/1.0.0`).
//!
//! libp2p-ping's handler stops serving a connection altogether once the remote refused *our*
//! ping protocol: it returns before it reads inbound pings. js-libp2p's connection monitor, on by
//! default, pings every connection every 10 s and closes the connection when the ping fails, and
//! a js node that runs no ping service of its own refuses ours. Together that cut every such js
//! peer off 10–15 s after it connected (found by the interop test, `docs/interop.md`).
//!
//! [`Pings`] wraps the ping behaviour ([`Wrapped`]) and withholds that one refusal from the handler: the handler
//! then never learns that the remote refused, so it stops pinging it (its outbound ping stays
//! "opening" for the life of the connection) and goes on answering the remote's pings.

use std::task::{Context, Poll};
use std::time::Duration;

use libp2p::ping;
use libp2p::swarm::handler::{ConnectionEvent, DialUpgradeError};
use libp2p::swarm::{
    ConnectionHandler, ConnectionHandlerEvent, NetworkBehaviour, StreamUpgradeError,
    SubstreamProtocol,
};

use crate::mesh::gated::{WrapHandler, Wrapped};

type Inner = <ping::Behaviour as NetworkBehaviour>::ConnectionHandler;

/// How often each connection is pinged.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// How long a ping may wait for its answer. libp2p-ping reports a failure only when two pings
/// in a row failed (the first is "free"), and its second try over a dead link fails when its
/// stream cannot be opened; the mesh then closes the connection (`mesh::ping_timeouts`): a link
/// that went down is noticed within about 30 s, where TCP would hold the connection for minutes
/// (and after the link healed resume only at its next retransmission: about 50 s after a 60 s
/// cut, measured on namespaced hosts, `docs/reliability.md`).
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The ping behaviour, answering peers that do not answer it.
pub type Pings = Wrapped<ping::Behaviour, PingHandler>;

/// Ping's handler, minus the refusal that would stop it answering.
pub struct PingHandler(Inner);

impl std::fmt::Debug for PingHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PingHandler").finish_non_exhaustive()
    }
}

impl WrapHandler<Inner> for PingHandler {
    fn wrap(inner: Inner) -> Self {
        Self(inner)
    }
}

impl ConnectionHandler for PingHandler {
    type FromBehaviour = <Inner as ConnectionHandler>::FromBehaviour;
    type ToBehaviour = <Inner as ConnectionHandler>::ToBehaviour;
    type InboundProtocol = <Inner as ConnectionHandler>::InboundProtocol;
    type OutboundProtocol = <Inner as ConnectionHandler>::OutboundProtocol;
    type InboundOpenInfo = <Inner as ConnectionHandler>::InboundOpenInfo;
    type OutboundOpenInfo = <Inner as ConnectionHandler>::OutboundOpenInfo;

    fn listen_protocol(&self) -> SubstreamProtocol<Self::InboundProtocol, Self::InboundOpenInfo> {
        self.0.listen_protocol()
    }

    fn connection_keep_alive(&self) -> bool {
        self.0.connection_keep_alive()
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<
        ConnectionHandlerEvent<Self::OutboundProtocol, Self::OutboundOpenInfo, Self::ToBehaviour>,
    > {
        self.0.poll(cx)
    }

    fn on_behaviour_event(&mut self, event: Self::FromBehaviour) {
        self.0.on_behaviour_event(event);
    }

    fn on_connection_event(
        &mut self,
        event: ConnectionEvent<
            '_,
            Self::InboundProtocol,
            Self::OutboundProtocol,
            Self::InboundOpenInfo,
            Self::OutboundOpenInfo,
        >,
    ) {
        if let ConnectionEvent::DialUpgradeError(DialUpgradeError {
            error: StreamUpgradeError::NegotiationFailed,
            ..
        }) = event
        {
            tracing::debug!("a peer does not answer ping; it is not pinged again, but answered");
            return;
        }
        self.0.on_connection_event(event);
    }
}
