//! The stream muxer the mesh runs: yamux, with the sending side of every stream passed through
//! an [`agora_hyperspace::frames::Rewriter`] so that no gossipsub RPC carries more subscriptions
//! than [`SPLIT_AT`] allows (`docs/node.md` "Gossip topics").
//!
//! gossipsub (libp2p-gossipsub 0.50) sends a node's whole subscription list to each new
//! neighbour in one RPC. A rust-libp2p receiver with default settings refuses an RPC whose
//! subscriptions and control parts exceed 16 KiB (and then hears nothing more from that
//! connection), and ignores every subscription of an RPC that carries more than 100. The topic
//! budget keeps a node's list within 100 topics and 12 KiB; splitting it as well keeps each RPC
//! under both receiver limits whatever the list holds.
//! gossipsub's handler owns its stream as a `Framed<libp2p::Stream, _>`, which cannot be wrapped
//! from outside, so the splitting happens one layer down, on the muxer's streams: the rewriter
//! recognises gossipsub's streams by their multistream-select negotiation and lets every other
//! stream's bytes through untouched.
//!
//! Costs: streams of other protocols pay one comparison per write once negotiated; gossipsub's
//! outbound stream has each frame's length prefix read, and only an RPC that starts with a
//! subscription is held whole and examined (the rewriter holds at most one, up to 1 MiB).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use agora_hyperspace::frames::{Rewriter, RpcLimits};
use futures::{AsyncRead, AsyncWrite};
use libp2p::core::muxing::{StreamMuxer, StreamMuxerEvent};

/// Most one gossipsub RPC carries in subscriptions: 8 KiB (half of rust-libp2p's default control
/// limit) and 64 subscriptions (its default is 100 per RPC), so each piece fits any receiver
/// that keeps those defaults.
pub const SPLIT_AT: RpcLimits = RpcLimits {
    bytes: 8 * 1024,
    subscriptions: 64,
};

/// Gossipsub RPCs split so far, over all connections.
#[derive(Clone, Debug, Default)]
pub struct Splits(Arc<AtomicU64>);

impl Splits {
    /// The count.
    #[must_use]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A muxer whose streams split long subscription lists (see the module docs).
#[derive(Debug)]
pub struct SplittingMuxer<M> {
    inner: M,
    splits: Splits,
}

impl<M> SplittingMuxer<M> {
    /// `inner`'s streams, counted in `splits`.
    pub fn new(inner: M, splits: Splits) -> Self {
        Self { inner, splits }
    }
}

/// How an inner muxer yields a new stream (inbound or outbound).
type Open<M> = fn(
    Pin<&mut M>,
    &mut Context<'_>,
) -> Poll<Result<<M as StreamMuxer>::Substream, <M as StreamMuxer>::Error>>;

impl<M> SplittingMuxer<M>
where
    M: StreamMuxer + Unpin,
    M::Substream: Unpin,
{
    /// The inner muxer's next stream from `open`, wrapped.
    fn open(
        &mut self,
        cx: &mut Context<'_>,
        open: Open<M>,
    ) -> Poll<Result<SplittingStream<M::Substream>, M::Error>> {
        let splits = &self.splits;
        open(Pin::new(&mut self.inner), cx).map_ok(|s| SplittingStream::new(s, splits.clone()))
    }
}

impl<M> StreamMuxer for SplittingMuxer<M>
where
    M: StreamMuxer + Unpin,
    M::Substream: Unpin,
{
    type Substream = SplittingStream<M::Substream>;
    type Error = M::Error;

    fn poll_inbound(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::Substream, Self::Error>> {
        self.get_mut().open(cx, M::poll_inbound)
    }

    fn poll_outbound(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::Substream, Self::Error>> {
        self.get_mut().open(cx, M::poll_outbound)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }

    fn poll(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<StreamMuxerEvent, Self::Error>> {
        Pin::new(&mut self.get_mut().inner).poll(cx)
    }
}

/// One stream of a [`SplittingMuxer`]: reads go straight to the inner stream, writes through a
/// [`Rewriter`].
#[derive(Debug)]
pub struct SplittingStream<S> {
    inner: S,
    rewriter: Rewriter,
    /// Rewritten bytes not yet taken by the inner stream (from `sent` on).
    out: Vec<u8>,
    sent: usize,
    splits: Splits,
    /// The rewriter's splits already added to `splits`.
    counted: u64,
}

impl<S: AsyncWrite + Unpin> SplittingStream<S> {
    fn new(inner: S, splits: Splits) -> Self {
        Self {
            inner,
            rewriter: Rewriter::new(SPLIT_AT),
            out: Vec::new(),
            sent: 0,
            splits,
            counted: 0,
        }
    }

    /// Writes out rewritten bytes still held; ready when none are left.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.out.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    fn count(&mut self) {
        let now = self.rewriter.splits();
        if now > self.counted {
            self.splits
                .0
                .fetch_add(now - self.counted, Ordering::Relaxed);
            self.counted = now;
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SplittingStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }

    fn poll_read_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &mut [io::IoSliceMut<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_read_vectored(cx, bufs)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SplittingStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        let through = this.rewriter.through();
        if through > 0 {
            let n =
                ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..through.min(buf.len())]))?;
            this.rewriter.sent_through(n);
            return Poll::Ready(Ok(n));
        }
        let n = this.rewriter.write(buf, &mut this.out);
        this.count();
        // Start sending at once; what the inner stream cannot take now goes before the next
        // write, or on flush.
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        this.rewriter.flush(&mut this.out);
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use libp2p::core::muxing::StreamMuxerBox;
    use libp2p::swarm::SwarmEvent;
    use libp2p::{Swarm, Transport, gossipsub, noise, tcp, yamux};

    use super::*;

    /// A gossipsub node with rust-libp2p's default limits on one RPC (16 KiB of subscriptions
    /// and control, 100 subscriptions) but room for 1,000 topics per peer; its streams split
    /// subscription lists when `splits` is given.
    fn node(splits: Option<Splits>) -> Swarm<gossipsub::Behaviour> {
        libp2p::SwarmBuilder::with_new_identity()
            .with_tokio()
            .with_other_transport(
                |key| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
                    Ok(tcp::tokio::Transport::new(tcp::Config::default())
                        .upgrade(libp2p::core::upgrade::Version::V1Lazy)
                        .authenticate(noise::Config::new(key)?)
                        .multiplex(yamux::Config::default())
                        .map(move |(peer, muxer), _| match splits {
                            Some(s) => (peer, StreamMuxerBox::new(SplittingMuxer::new(muxer, s))),
                            None => (peer, StreamMuxerBox::new(muxer)),
                        }))
                },
            )
            .unwrap()
            .with_behaviour(|key| {
                let defaults = gossipsub::MaxCountSubscriptionFilter::<
                    gossipsub::AllowAllSubscriptionFilter,
                >::default();
                gossipsub::Behaviour::new_with_subscription_filter(
                    gossipsub::MessageAuthenticity::Signed(key.clone()),
                    gossipsub::Config::default(),
                    gossipsub::MaxCountSubscriptionFilter {
                        max_subscribed_topics: 1000,
                        ..defaults
                    },
                )
                .unwrap()
            })
            .unwrap()
            .build()
    }

    /// How many of `topics` a receiver with default RPC limits takes from a sender subscribed to
    /// them all, when they meet.
    async fn subscriptions_heard(topics: &[String], splits: Option<Splits>) -> usize {
        let mut sender = node(splits);
        for t in topics {
            let topic = gossipsub::IdentTopic::new(t);
            sender.behaviour_mut().subscribe(&topic).unwrap();
        }
        let mut receiver = node(None);
        receiver
            .listen_on("/ip4/127.0.0.1/tcp/0".parse().unwrap())
            .unwrap();
        let addr = loop {
            if let SwarmEvent::NewListenAddr { address, .. } = receiver.select_next_some().await {
                break address;
            }
        };
        sender.dial(addr).unwrap();
        let mut heard = 0;
        // The list arrives within moments or never; the deadline only ends the refused case.
        let deadline = tokio::time::sleep(Duration::from_secs(3));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut deadline => return heard,
                _ = sender.select_next_some() => {}
                e = receiver.select_next_some() => {
                    if let SwarmEvent::Behaviour(gossipsub::Event::Subscribed { .. }) = e {
                        heard += 1;
                        if heard == topics.len() {
                            return heard;
                        }
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn long_subscription_lists_reach_a_receiver_with_default_limits_only_when_split() {
        // 90 long names: about 18.6 KiB in one RPC, over the 16 KiB control limit.
        let long: Vec<String> = (0..90)
            .map(|i| format!("hyperspace/tasks/{i:03}-{}", "x".repeat(180)))
            .collect();
        // 300 short names: about 7 KiB, but over 100 subscriptions in one RPC.
        let many: Vec<String> = (0..300).map(|i| format!("t/{i}")).collect();
        for topics in [&long, &many] {
            let splits = Splits::default();
            assert_eq!(
                subscriptions_heard(topics, Some(splits.clone())).await,
                topics.len()
            );
            assert_eq!(splits.get(), 1, "the list was split once");
            // The same list in one RPC: the receiver refuses all of it.
            assert_eq!(subscriptions_heard(topics, None).await, 0);
        }
    }
}
