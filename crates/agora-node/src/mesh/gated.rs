//! Wake-gated protocols: a [`NetworkBehaviour`] wrapper whose connection handlers are polled only
//! when they asked to be (their waker fired) or were handed something (an event from the
//! behaviour or the connection) since their last poll.
//!
//! libp2p runs one task per connection and, every time that task wakes, polls the handler of every
//! protocol on the connection, then asks each for its listen protocols. On a gossip mesh the task
//! wakes for every frame of every gossip message, so the handlers of the quiet protocols (identify,
//! ping, Kademlia, request-response) are polled thousands of times a second for nothing: each poll
//! re-registers timers and stream wakers, walks futures sets and allocates. Gating them removes
//! that cost without changing what they do, because a handler, like any future, only makes
//! progress after a wake-up or a new input:
//! - the wrapped handler is polled with a waker of its own, which records the wake and then wakes
//!   the connection task;
//! - an event delivered to it (`on_behaviour_event`, `on_connection_event`) marks it for a poll;
//! - after it returned an event it is polled again, so queued work drains as before.
//!
//! Gossipsub itself is not wrapped: its handler is woken by nearly every wake-up of the task.
//! The behaviour side is not gated: [`Gated`] dereferences to the wrapped behaviour, so callers
//! use it exactly as before.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;
use libp2p::PeerId;
use libp2p::swarm::handler::ConnectionEvent;
use libp2p::swarm::{
    ConnectionHandler, ConnectionHandlerEvent, ConnectionId, FromSwarm, NetworkBehaviour,
    SubstreamProtocol, THandlerInEvent, THandlerOutEvent, ToSwarm,
};

/// A connection handler built around the handler of the behaviour it wraps (see [`Wrapped`]).
pub trait WrapHandler<H: ConnectionHandler>:
    ConnectionHandler<FromBehaviour = H::FromBehaviour, ToBehaviour = H::ToBehaviour>
{
    /// Wraps `inner`.
    fn wrap(inner: H) -> Self;
}

/// A behaviour that is `B` in everything but its connection handlers, which are `W`s around
/// `B`'s. It dereferences to `B`, so callers use it exactly as `B`.
pub struct Wrapped<B, W> {
    inner: B,
    handler: PhantomData<fn() -> W>,
}

impl<B, W> Wrapped<B, W> {
    /// Wraps `inner`.
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            handler: PhantomData,
        }
    }
}

impl<B: std::fmt::Debug, W> std::fmt::Debug for Wrapped<B, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wrapped")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<B, W> Deref for Wrapped<B, W> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.inner
    }
}

impl<B, W> DerefMut for Wrapped<B, W> {
    fn deref_mut(&mut self) -> &mut B {
        &mut self.inner
    }
}

/// A behaviour whose connection handlers are wake-gated ([`GatedHandler`]).
pub type Gated<B> = Wrapped<B, GatedHandler<<B as NetworkBehaviour>::ConnectionHandler>>;

/// The four connection-setup methods of a [`NetworkBehaviour`] that wraps another (`self.inner`)
/// and only wraps its connection handlers with `$wrap` (a function of `(&Self, inner handler)`
/// or of the inner handler alone, given as `$wrap` or `self.$method`).
macro_rules! delegate_connection_setup {
    (@wrap $self:ident, $h:ident, self . $method:ident) => {
        $self.$method($h)
    };
    (@wrap $self:ident, $h:ident, $f:path) => {
        $f($h)
    };
    ($($wrap:tt)+) => {
        fn handle_pending_inbound_connection(
            &mut self,
            connection_id: libp2p::swarm::ConnectionId,
            local_addr: &libp2p::Multiaddr,
            remote_addr: &libp2p::Multiaddr,
        ) -> Result<(), libp2p::swarm::ConnectionDenied> {
            self.inner
                .handle_pending_inbound_connection(connection_id, local_addr, remote_addr)
        }

        fn handle_established_inbound_connection(
            &mut self,
            connection_id: libp2p::swarm::ConnectionId,
            peer: libp2p::PeerId,
            local_addr: &libp2p::Multiaddr,
            remote_addr: &libp2p::Multiaddr,
        ) -> Result<libp2p::swarm::THandler<Self>, libp2p::swarm::ConnectionDenied> {
            let handler = self.inner.handle_established_inbound_connection(
                connection_id,
                peer,
                local_addr,
                remote_addr,
            )?;
            Ok(crate::mesh::gated::delegate_connection_setup!(@wrap self, handler, $($wrap)+))
        }

        fn handle_pending_outbound_connection(
            &mut self,
            connection_id: libp2p::swarm::ConnectionId,
            maybe_peer: Option<libp2p::PeerId>,
            addresses: &[libp2p::Multiaddr],
            effective_role: libp2p::core::Endpoint,
        ) -> Result<Vec<libp2p::Multiaddr>, libp2p::swarm::ConnectionDenied> {
            self.inner.handle_pending_outbound_connection(
                connection_id,
                maybe_peer,
                addresses,
                effective_role,
            )
        }

        fn handle_established_outbound_connection(
            &mut self,
            connection_id: libp2p::swarm::ConnectionId,
            peer: libp2p::PeerId,
            addr: &libp2p::Multiaddr,
            role_override: libp2p::core::Endpoint,
            port_use: libp2p::core::transport::PortUse,
        ) -> Result<libp2p::swarm::THandler<Self>, libp2p::swarm::ConnectionDenied> {
            let handler = self.inner.handle_established_outbound_connection(
                connection_id,
                peer,
                addr,
                role_override,
                port_use,
            )?;
            Ok(crate::mesh::gated::delegate_connection_setup!(@wrap self, handler, $($wrap)+))
        }
    };
}
pub(crate) use delegate_connection_setup;

impl<B, W> NetworkBehaviour for Wrapped<B, W>
where
    B: NetworkBehaviour,
    W: WrapHandler<B::ConnectionHandler> + 'static,
{
    type ConnectionHandler = W;
    type ToSwarm = B::ToSwarm;

    crate::mesh::gated::delegate_connection_setup!(W::wrap);

    fn on_swarm_event(&mut self, event: FromSwarm<'_>) {
        self.inner.on_swarm_event(event);
    }

    fn on_connection_handler_event(
        &mut self,
        peer_id: PeerId,
        connection_id: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        self.inner
            .on_connection_handler_event(peer_id, connection_id, event);
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        self.inner.poll(cx)
    }
}

/// Records that the wrapped handler was woken, then wakes the connection task.
#[derive(Debug, Default)]
struct WakeFlag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for WakeFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// A connection handler polled only after its own wake-up, a new input, or an event it returned.
pub struct GatedHandler<H> {
    inner: H,
    flag: Arc<WakeFlag>,
    waker: Waker,
    /// Polls the inner handler at the next poll whatever the flag says.
    due: bool,
}

impl<H> std::fmt::Debug for GatedHandler<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatedHandler")
            .field("due", &self.due)
            .finish_non_exhaustive()
    }
}

impl<H: ConnectionHandler> WrapHandler<H> for GatedHandler<H> {
    fn wrap(inner: H) -> Self {
        let flag = Arc::new(WakeFlag::default());
        Self {
            inner,
            waker: Waker::from(Arc::clone(&flag)),
            flag,
            due: true,
        }
    }
}

impl<H: ConnectionHandler> ConnectionHandler for GatedHandler<H> {
    type FromBehaviour = H::FromBehaviour;
    type ToBehaviour = H::ToBehaviour;
    type InboundProtocol = H::InboundProtocol;
    type OutboundProtocol = H::OutboundProtocol;
    type InboundOpenInfo = H::InboundOpenInfo;
    type OutboundOpenInfo = H::OutboundOpenInfo;

    fn listen_protocol(&self) -> SubstreamProtocol<Self::InboundProtocol, Self::InboundOpenInfo> {
        self.inner.listen_protocol()
    }

    fn connection_keep_alive(&self) -> bool {
        self.inner.connection_keep_alive()
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<
        ConnectionHandlerEvent<Self::OutboundProtocol, Self::OutboundOpenInfo, Self::ToBehaviour>,
    > {
        // Register first: a wake-up racing with this poll then reaches the task either way.
        self.flag.task.register(cx.waker());
        let woken = self.flag.woken.swap(false, Ordering::AcqRel);
        if !(woken || std::mem::take(&mut self.due)) {
            return Poll::Pending;
        }
        let mut own = Context::from_waker(&self.waker);
        let polled = self.inner.poll(&mut own);
        if polled.is_ready() {
            // It may have more queued: ask again, as an ungated handler would be.
            self.due = true;
        }
        polled
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<Option<Self::ToBehaviour>> {
        self.inner.poll_close(cx)
    }

    fn on_behaviour_event(&mut self, event: Self::FromBehaviour) {
        self.due = true;
        self.inner.on_behaviour_event(event);
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
        self.due = true;
        self.inner.on_connection_event(event);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicUsize;

    use libp2p::core::upgrade::DeniedUpgrade;

    use super::*;

    /// Counts its polls, keeps the waker it was last polled with and hands back the events it
    /// was given; optionally wakes itself while being polled.
    #[derive(Default)]
    struct Probe {
        polls: usize,
        queued: VecDeque<u32>,
        waker: Option<Waker>,
        wake_self: bool,
    }

    impl ConnectionHandler for Probe {
        type FromBehaviour = u32;
        type ToBehaviour = u32;
        type InboundProtocol = DeniedUpgrade;
        type OutboundProtocol = DeniedUpgrade;
        type InboundOpenInfo = ();
        type OutboundOpenInfo = ();

        fn listen_protocol(&self) -> SubstreamProtocol<DeniedUpgrade, ()> {
            SubstreamProtocol::new(DeniedUpgrade, ())
        }

        fn poll(
            &mut self,
            cx: &mut Context<'_>,
        ) -> Poll<ConnectionHandlerEvent<DeniedUpgrade, (), u32>> {
            self.polls += 1;
            self.waker = Some(cx.waker().clone());
            if std::mem::take(&mut self.wake_self) {
                cx.waker().wake_by_ref();
            }
            match self.queued.pop_front() {
                Some(e) => Poll::Ready(ConnectionHandlerEvent::NotifyBehaviour(e)),
                None => Poll::Pending,
            }
        }

        fn on_behaviour_event(&mut self, event: u32) {
            self.queued.push_back(event);
        }

        fn on_connection_event(
            &mut self,
            _: ConnectionEvent<'_, DeniedUpgrade, DeniedUpgrade, (), ()>,
        ) {
        }
    }

    /// The connection task's waker: counts wake-ups.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting_task() -> (Arc<Task>, Waker) {
        let task = Arc::new(Task::default());
        let waker = Waker::from(Arc::clone(&task));
        (task, waker)
    }

    #[test]
    fn polls_the_handler_only_after_its_wake_up_or_an_input() {
        let (task, waker) = counting_task();
        let mut cx = Context::from_waker(&waker);
        let mut h = GatedHandler::wrap(Probe::default());
        assert!(h.poll(&mut cx).is_pending());
        assert_eq!(h.inner.polls, 1, "the first poll goes through");
        for _ in 0..10 {
            assert!(h.poll(&mut cx).is_pending());
        }
        assert_eq!(h.inner.polls, 1, "wake-ups meant for others do not");

        let own = h.inner.waker.take().expect("polled with a waker");
        own.wake_by_ref();
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            1,
            "its wake-up wakes the task"
        );
        assert!(h.poll(&mut cx).is_pending());
        assert_eq!(h.inner.polls, 2, "and lets the next poll through");
        assert!(h.poll(&mut cx).is_pending());
        assert_eq!(h.inner.polls, 2);

        // A stale copy of the handler's waker still works after the task's waker changed.
        let (task2, waker2) = counting_task();
        let mut cx2 = Context::from_waker(&waker2);
        assert!(h.poll(&mut cx2).is_pending());
        own.wake();
        assert_eq!(task2.0.load(Ordering::SeqCst), 1);
        assert!(h.poll(&mut cx2).is_pending());
        assert_eq!(h.inner.polls, 3);
    }

    #[test]
    fn inputs_are_polled_for_and_queued_events_drain() {
        let (_task, waker) = counting_task();
        let mut cx = Context::from_waker(&waker);
        let mut h = GatedHandler::wrap(Probe::default());
        assert!(h.poll(&mut cx).is_pending());
        h.on_behaviour_event(7);
        h.on_behaviour_event(8);
        assert!(matches!(
            h.poll(&mut cx),
            Poll::Ready(ConnectionHandlerEvent::NotifyBehaviour(7))
        ));
        assert!(matches!(
            h.poll(&mut cx),
            Poll::Ready(ConnectionHandlerEvent::NotifyBehaviour(8))
        ));
        assert!(h.poll(&mut cx).is_pending());
        let polls = h.inner.polls;
        assert!(h.poll(&mut cx).is_pending());
        assert_eq!(h.inner.polls, polls);
    }

    #[test]
    fn a_wake_up_during_its_own_poll_is_not_lost() {
        let (task, waker) = counting_task();
        let mut cx = Context::from_waker(&waker);
        let mut h = GatedHandler::wrap(Probe {
            wake_self: true,
            ..Probe::default()
        });
        assert!(h.poll(&mut cx).is_pending());
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert!(h.poll(&mut cx).is_pending());
        assert_eq!(h.inner.polls, 2, "polled again after waking itself");
        assert!(h.poll(&mut cx).is_pending());
        assert_eq!(h.inner.polls, 2);
    }
}
