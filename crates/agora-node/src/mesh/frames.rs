//! Gossipsub's inbound stream, read frame by frame so that one bad frame never silences a peer
//! (`docs/node.md` "Gossip limits").
//!
//! rust-libp2p's gossipsub reads its inbound stream through a codec that fails on the first frame
//! it cannot take (too large, undecodable) and then closes the stream, expecting the sender to
//! open a new one. js-libp2p never does: it keeps writing into the closed stream while the
//! connection stays up, so everything after one oversized message was lost without a trace. The
//! same codec also compared its size limit with the whole read buffer (the frame *plus* whatever
//! of the next frame was already read), so a message just under the limit followed at once by
//! another was refused too.
//!
//! [`FrameGuard`] wraps the gossipsub behaviour; its connection handler ([`FrameHandler`]) takes
//! the negotiated inbound stream away from gossipsub's handler and reads it itself:
//! - frames are delimited by their varint length prefix, exactly as gossipsub frames them
//!   (`agora_hyperspace::frames::Splitter`, sans IO and fuzzed);
//! - a frame over the frame limit is skipped byte for byte without being buffered;
//! - a frame within it is cut out on its own; the copies of messages gossipsub took lately are
//!   taken out of it unchecked (`super::copies`, `docs/node.md` "Copies before signatures"), and
//!   the rest goes to gossipsub's own decoder (signature checks, RPC limits and all), whose
//!   result, with the copies added, goes to the gossipsub behaviour as its own handler would
//!   have sent it; a frame it cannot decode is dropped;
//! - the stream stays open after every such refusal, so the next valid frame is read.
//!
//! Every refusal is reported to the behaviour, counted ([`Refusals`]) and logged once per peer
//! and reason. A stream whose framing itself is broken (a length prefix that is not a varint), or
//! one that keeps sending bad frames ([`MAX_BAD_FRAMES`]), cannot be trusted any further: the
//! connection is closed so that the peer starts afresh (the mesh dials it back).
//!
//! Gossipsub's handler still owns the outbound stream and everything else; it learns the peer's
//! protocol version from the outbound negotiation, which every new connection starts at once.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::{Context, Poll};

use agora_hyperspace::frames::{Piece, Splitter, body as frame_body, frame as frame_bytes};
use agora_hyperspace::published::{Published, take_known};
use bytes::BytesMut;
use futures::{AsyncRead, AsyncWrite};
use libp2p::gossipsub::{self, AllowAllSubscriptionFilter, IdentityTransform, MessageId};
use libp2p::swarm::handler::{ConnectionEvent, FullyNegotiatedInbound};
use libp2p::swarm::{
    CloseConnection, ConnectionHandler, ConnectionHandlerEvent, ConnectionId, FromSwarm,
    NetworkBehaviour, SubstreamProtocol, THandlerInEvent, THandlerOutEvent, ToSwarm,
};
use libp2p::{PeerId, Stream};

use crate::mesh::copies::{SignatureCounts, Taken};

/// The gossipsub behaviour the mesh runs.
pub type Gossipsub = gossipsub::Behaviour<
    IdentityTransform,
    gossipsub::MaxCountSubscriptionFilter<AllowAllSubscriptionFilter>,
>;
type Inner = <Gossipsub as NetworkBehaviour>::ConnectionHandler;
type InnerEvent = <Inner as ConnectionHandler>::ToBehaviour;

/// Bad frames one inbound stream may send before its connection is closed.
pub const MAX_BAD_FRAMES: u32 = 16;
/// Outbound stream negotiations (successful or not) after which gossipsub's handler disables
/// itself for the rest of the connection (`MAX_SUBSTREAM_ATTEMPTS` in libp2p-gossipsub 0.50).
/// A disabled handler never takes another message from the peer's send queue, so everything
/// queued for that peer on the connection waits out its deadline and is dropped.
pub const GOSSIPSUB_OUTBOUND_ATTEMPTS: u32 = 5;
/// Reads of the stream per poll before the handler yields to the connection's other work.
const READS_PER_POLL: usize = 64;
/// Bytes asked of the stream per read.
const CHUNK: usize = 16 * 1024;
/// Most (peer, reason) pairs remembered for log-once; past it the memory starts over.
const MAX_LOGGED: usize = 4096;

/// Why a gossip frame or message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// A frame longer than the frame limit (skipped unread).
    FrameTooLarge,
    /// A frame gossipsub's decoder refused (malformed protobuf, over its RPC limits).
    Undecodable,
    /// A length prefix that is not a varint: the stream cannot be followed.
    Unframeable,
    /// A message larger than the application limit.
    OverLimit,
    /// A message the node's validation rejected (forged, malformed, not for this topic).
    Invalid,
}

impl Reason {
    /// Every reason, in report order.
    pub const ALL: [Self; 5] = [
        Self::FrameTooLarge,
        Self::Undecodable,
        Self::Unframeable,
        Self::OverLimit,
        Self::Invalid,
    ];

    /// The name in `/status` and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::FrameTooLarge => "frame_too_large",
            Self::Undecodable => "undecodable",
            Self::Unframeable => "unframeable",
            Self::OverLimit => "over_limit",
            Self::Invalid => "invalid",
        }
    }
}

/// Refusals counted by reason, logged once per peer and reason.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: [u64; Reason::ALL.len()],
    logged: HashSet<(PeerId, Reason)>,
}

impl Refusals {
    /// Counts a refusal from `peer` and logs it if it is the first of its kind from that peer.
    pub fn record(&mut self, peer: PeerId, reason: Reason, detail: &str) {
        self.counts[reason as usize] += 1;
        if self.logged.len() >= MAX_LOGGED {
            self.logged.clear();
        }
        if self.logged.insert((peer, reason)) {
            tracing::warn!(
                peer_id = %peer,
                reason = reason.name(),
                detail,
                "gossip refused (counted; further ones from this peer are not logged)"
            );
        }
    }

    /// The count of `reason`.
    pub fn count(&self, reason: Reason) -> u64 {
        self.counts[reason as usize]
    }

    /// Every count by name.
    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        Reason::ALL
            .iter()
            .map(|r| (r.name(), self.count(*r)))
            .collect()
    }
}

/// A refused frame, reported by a connection handler.
#[derive(Debug)]
pub struct Refusal {
    reason: Reason,
    detail: String,
    /// The connection must be closed.
    fatal: bool,
}

/// What a [`FrameHandler`] tells the behaviour.
// Gossipsub's event is the hot path (one per RPC); boxing it would allocate for every one to
// save a few bytes on the rare refusals.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum HandlerOut {
    /// What gossipsub's handler (or our reading of its stream) has for gossipsub's behaviour.
    Inner(InnerEvent),
    /// A frame was refused.
    Refused(Refusal),
    /// Gossipsub's handler negotiated its outbound stream once more (the first time, or again
    /// after losing it); `exhausted` when that was its last attempt and it has disabled itself.
    Outbound {
        /// The handler has given up: the connection must be closed.
        exhausted: bool,
    },
}

/// What happened to gossipsub's outbound streams, counted over all connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OutboundStreams {
    /// Outbound stream negotiations (one per connection when all goes well).
    pub opened: u64,
    /// Connections closed (and the peer dialled back) because gossipsub's handler had used up
    /// its attempts and would never send on them again.
    pub exhausted: u64,
}

/// The gossipsub behaviour with its inbound streams read by [`FrameHandler`]s.
pub struct FrameGuard {
    inner: Gossipsub,
    frame_limit: usize,
    refusals: Refusals,
    actions: VecDeque<ToSwarm<gossipsub::Event, THandlerInEvent<Gossipsub>>>,
    /// Peers whose connection was closed for bad framing (the mesh dials them back).
    reset: Vec<PeerId>,
    outbound: OutboundStreams,
    /// The ids of the messages gossipsub took lately, shared with every inbound reader.
    taken: Taken,
}

impl std::fmt::Debug for FrameGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameGuard")
            .field("frame_limit", &self.frame_limit)
            .field("refusals", &self.refusals)
            .finish_non_exhaustive()
    }
}

impl FrameGuard {
    /// Wraps `inner`, whose frames may be up to `frame_limit` bytes (the length prefix aside).
    pub fn new(inner: Gossipsub, frame_limit: usize) -> Self {
        Self {
            inner,
            frame_limit,
            refusals: Refusals::default(),
            actions: VecDeque::new(),
            reset: Vec::new(),
            outbound: OutboundStreams::default(),
            taken: Taken::default(),
        }
    }

    /// Gossipsub's outbound streams so far.
    pub fn outbound(&self) -> OutboundStreams {
        self.outbound
    }

    /// The refusals so far.
    pub fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    /// Counts a refusal made outside the frame reader (validation of a decoded message).
    pub fn refuse(&mut self, peer: PeerId, reason: Reason, detail: &str) {
        self.refusals.record(peer, reason, detail);
    }

    /// Closes one connection of `peer`; the mesh dials the peer back.
    fn close(&mut self, peer_id: PeerId, connection: ConnectionId) {
        self.reset.push(peer_id);
        self.actions.push_back(ToSwarm::CloseConnection {
            peer_id,
            connection: CloseConnection::One(connection),
        });
    }

    fn wrap_handler(&self, inner: Inner) -> FrameHandler {
        FrameHandler::new(inner, self.frame_limit, self.taken.clone())
    }

    /// What the inbound readers did with the published messages they read.
    pub fn signatures(&self) -> SignatureCounts {
        self.taken.counts()
    }

    /// The peers whose connection was closed for bad framing since the last call.
    pub fn take_reset(&mut self) -> Vec<PeerId> {
        std::mem::take(&mut self.reset)
    }
}

impl Deref for FrameGuard {
    type Target = Gossipsub;
    fn deref(&self) -> &Gossipsub {
        &self.inner
    }
}

impl DerefMut for FrameGuard {
    fn deref_mut(&mut self) -> &mut Gossipsub {
        &mut self.inner
    }
}

impl NetworkBehaviour for FrameGuard {
    type ConnectionHandler = FrameHandler;
    type ToSwarm = gossipsub::Event;

    crate::mesh::gated::delegate_connection_setup!(self.wrap_handler);

    fn on_swarm_event(&mut self, event: FromSwarm<'_>) {
        self.inner.on_swarm_event(event);
    }

    fn on_connection_handler_event(
        &mut self,
        peer_id: PeerId,
        connection_id: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        match event {
            HandlerOut::Inner(e) => {
                self.inner
                    .on_connection_handler_event(peer_id, connection_id, e);
            }
            HandlerOut::Refused(r) => {
                self.refusals.record(peer_id, r.reason, &r.detail);
                if r.fatal {
                    self.close(peer_id, connection_id);
                }
            }
            HandlerOut::Outbound { exhausted } => {
                self.outbound.opened += 1;
                if exhausted {
                    self.outbound.exhausted += 1;
                    tracing::warn!(
                        peer_id = %peer_id,
                        "gossipsub's handler used up its outbound stream attempts on this connection; closing it so the peer is dialled afresh"
                    );
                    self.close(peer_id, connection_id);
                }
            }
        }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        if let Some(a) = self.actions.pop_front() {
            return Poll::Ready(a);
        }
        let polled = self.inner.poll(cx);
        // Gossipsub emits a message only once its id is in its duplicate cache: from now on a
        // copy can go to it unchecked (`copies`).
        if let Poll::Ready(ToSwarm::GenerateEvent(gossipsub::Event::Message {
            message_id, ..
        })) = &polled
        {
            self.taken.record(message_id);
        }
        polled
    }
}

/// Gossipsub's decoder, behind an object so that its (unnamed) type need not be spelled.
trait FrameDecoder<E>: Send {
    /// Decodes one whole frame (length prefix included).
    fn decode_frame(&mut self, frame: &mut BytesMut) -> Result<Option<E>, String>;
}

impl<C, E> FrameDecoder<E> for C
where
    C: asynchronous_codec::Decoder<Item = E> + Send,
    C::Error: std::fmt::Display,
{
    fn decode_frame(&mut self, frame: &mut BytesMut) -> Result<Option<E>, String> {
        self.decode(frame).map_err(|e| e.to_string())
    }
}

/// Gossipsub's decoder behind the copies check (`copies`): the published messages of a frame that
/// gossipsub took lately are taken out and handed on as they came, unchecked; the rest of the
/// frame is decoded and checked by gossipsub's decoder as before.
struct CopiesFirst<C> {
    codec: C,
    taken: Taken,
}

impl<C> CopiesFirst<C> {
    /// The message id gossipsub gives `m` (`mesh::message_id`), if `from` is a PeerId.
    fn id(m: &Published<'_>) -> Option<(PeerId, MessageId)> {
        let source = PeerId::from_bytes(m.from).ok()?;
        let id = super::signed_message_id(&source, m.seqno);
        Some((source, id))
    }
}

impl<C> asynchronous_codec::Decoder for CopiesFirst<C>
where
    C: asynchronous_codec::Decoder<Item = InnerEvent>,
{
    type Item = InnerEvent;
    type Error = C::Error;

    fn decode(&mut self, frame: &mut BytesMut) -> Result<Option<InnerEvent>, C::Error> {
        let Some(body) = frame_body(frame) else {
            return self.codec.decode(frame);
        };
        let mut sources = Vec::new();
        let taken = take_known(body, |m| match Self::id(m) {
            Some((source, id)) if self.taken.contains(&id) => {
                sources.push(source);
                true
            }
            _ => false,
        });
        let (event, copies) = match taken {
            None => (self.codec.decode(frame)?, Vec::new()),
            Some(t) => {
                let mut rest = BytesMut::from(frame_bytes(&t.rest).as_slice());
                let copies = t
                    .known
                    .iter()
                    .zip(sources)
                    .map(|(m, source)| gossipsub::RawMessage {
                        source: Some(source),
                        data: m.data.to_vec(),
                        sequence_number: Some(m.seqno),
                        topic: gossipsub::TopicHash::from_raw(m.topic),
                        signature: m.signature.map(<[u8]>::to_vec),
                        key: m.key.map(<[u8]>::to_vec),
                        validated: false,
                    })
                    .collect();
                (self.codec.decode(&mut rest)?, copies)
            }
        };
        Ok(match event {
            Some(InnerEvent::Message {
                mut rpc,
                invalid_messages,
            }) => {
                self.taken
                    .count(rpc.messages.len() + invalid_messages.len(), copies.len());
                rpc.messages.extend(copies);
                Some(InnerEvent::Message {
                    rpc,
                    invalid_messages,
                })
            }
            other => other,
        })
    }
}

/// What reading the inbound stream gave.
enum Read<E> {
    /// A decoded RPC for gossipsub.
    Event(E),
    /// A refused frame.
    Refused(Refusal),
    /// The stream ended or failed; it is being closed.
    Ended,
}

/// Gossipsub's inbound stream, read by us: the bytes go through a [`Splitter`], whose frames go
/// to gossipsub's decoder one at a time.
struct Reader<S, E> {
    io: S,
    decoder: Box<dyn FrameDecoder<E>>,
    split: Splitter,
    limit: usize,
    bad: u32,
    closing: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin, E> Reader<S, E> {
    fn new(io: S, decoder: Box<dyn FrameDecoder<E>>, buffered: &[u8], limit: usize) -> Self {
        Self {
            io,
            decoder,
            split: Splitter::with_buffered(limit, buffered),
            limit,
            bad: 0,
            closing: false,
        }
    }

    fn refused(&mut self, reason: Reason, detail: String) -> Read<E> {
        self.bad += 1;
        let fatal = reason == Reason::Unframeable || self.bad >= MAX_BAD_FRAMES;
        if fatal {
            self.closing = true;
        }
        Read::Refused(Refusal {
            reason,
            detail,
            fatal,
        })
    }

    /// The next frame that is complete, decoded, or its refusal.
    fn next_frame(&mut self) -> Option<Read<E>> {
        Some(match self.split.next_piece()? {
            Piece::Frame(frame) => {
                let len = frame.len();
                match self
                    .decoder
                    .decode_frame(&mut BytesMut::from(frame.as_slice()))
                {
                    Ok(Some(event)) => Read::Event(event),
                    Ok(None) => self.refused(
                        Reason::Undecodable,
                        format!("a {len}-byte frame did not decode"),
                    ),
                    Err(e) => self.refused(
                        Reason::Undecodable,
                        format!("a {len}-byte frame did not decode: {e}"),
                    ),
                }
            }
            Piece::TooLarge { len } => self.refused(
                Reason::FrameTooLarge,
                format!("a {len}-byte frame is over the {}-byte limit", self.limit),
            ),
            Piece::Broken => self.refused(
                Reason::Unframeable,
                "a length prefix that is not a varint".to_owned(),
            ),
        })
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Read<E>>> {
        if self.closing {
            return match Pin::new(&mut self.io).poll_close(cx) {
                Poll::Ready(_) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
        let mut chunk = [0u8; CHUNK];
        for _ in 0..READS_PER_POLL {
            if let Some(read) = self.next_frame() {
                return Poll::Ready(Some(read));
            }
            match Pin::new(&mut self.io).poll_read(cx, &mut chunk) {
                Poll::Ready(Ok(0) | Err(_)) => {
                    self.closing = true;
                    return Poll::Ready(Some(Read::Ended));
                }
                Poll::Ready(Ok(n)) => self.split.push(&chunk[..n]),
                Poll::Pending => return Poll::Pending,
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Gossipsub's connection handler with its inbound stream read by a `Reader`.
pub struct FrameHandler {
    inner: Inner,
    limit: usize,
    inbound: Option<Reader<Stream, InnerEvent>>,
    out: VecDeque<HandlerOut>,
    /// Whether the peer's gossipsub version was passed on from the inbound stream.
    kind_told: bool,
    /// Outbound stream negotiations gossipsub's handler has seen.
    outbound_attempts: Attempts,
    /// The ids of the messages gossipsub took lately (`copies`).
    taken: Taken,
}

/// Gossipsub's outbound stream negotiations on one connection (see
/// [`GOSSIPSUB_OUTBOUND_ATTEMPTS`]).
#[derive(Debug, Default)]
struct Attempts(u32);

impl Attempts {
    /// Counts one negotiation; true when it was the last one gossipsub's handler makes.
    fn count(&mut self) -> bool {
        self.0 = self.0.saturating_add(1);
        self.0 == GOSSIPSUB_OUTBOUND_ATTEMPTS
    }
}

impl std::fmt::Debug for FrameHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameHandler")
            .field("limit", &self.limit)
            .field("inbound", &self.inbound.is_some())
            .finish_non_exhaustive()
    }
}

impl FrameHandler {
    fn new(inner: Inner, limit: usize, taken: Taken) -> Self {
        Self {
            inner,
            limit,
            inbound: None,
            out: VecDeque::new(),
            kind_told: false,
            outbound_attempts: Attempts::default(),
            taken,
        }
    }
}

impl ConnectionHandler for FrameHandler {
    type FromBehaviour = <Inner as ConnectionHandler>::FromBehaviour;
    type ToBehaviour = HandlerOut;
    type InboundProtocol = <Inner as ConnectionHandler>::InboundProtocol;
    type OutboundProtocol = <Inner as ConnectionHandler>::OutboundProtocol;
    type InboundOpenInfo = <Inner as ConnectionHandler>::InboundOpenInfo;
    type OutboundOpenInfo = <Inner as ConnectionHandler>::OutboundOpenInfo;

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
        if let Some(out) = self.out.pop_front() {
            return Poll::Ready(ConnectionHandlerEvent::NotifyBehaviour(out));
        }
        if let Poll::Ready(event) = self.inner.poll(cx) {
            return Poll::Ready(event.map_custom(HandlerOut::Inner));
        }
        if let Some(reader) = &mut self.inbound
            && let Poll::Ready(read) = reader.poll(cx)
        {
            let out = match read {
                Some(Read::Event(e)) => HandlerOut::Inner(e),
                Some(Read::Refused(r)) => HandlerOut::Refused(r),
                Some(Read::Ended) => {
                    // Finish closing at the next poll.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                None => {
                    self.inbound = None;
                    return Poll::Pending;
                }
            };
            return Poll::Ready(ConnectionHandlerEvent::NotifyBehaviour(out));
        }
        Poll::Pending
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<Option<Self::ToBehaviour>> {
        self.inner.poll_close(cx).map(|e| e.map(HandlerOut::Inner))
    }

    fn on_behaviour_event(&mut self, event: Self::FromBehaviour) {
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
        match event {
            ConnectionEvent::FullyNegotiatedInbound(FullyNegotiatedInbound {
                protocol, ..
            }) => match protocol {
                futures::future::Either::Left((framed, kind)) => {
                    // Gossipsub's handler learns the peer's protocol version from whichever of
                    // its streams is negotiated first and tells the behaviour once; the inbound
                    // one never reaches it, so it is told here (the behaviour keeps the first
                    // kind it hears). Without it a peer whose stream to us came first would count
                    // as not speaking gossipsub yet: left out of meshes joined and of IHAVE.
                    if !self.kind_told {
                        self.kind_told = true;
                        self.out
                            .push_back(HandlerOut::Inner(InnerEvent::PeerKind(kind)));
                    }
                    // A new inbound stream replaces the previous one, as in gossipsub.
                    let parts = framed.into_parts();
                    self.inbound = Some(Reader::new(
                        parts.io,
                        Box::new(CopiesFirst {
                            codec: parts.codec,
                            taken: self.taken.clone(),
                        }),
                        &parts.read_buffer,
                        self.limit,
                    ));
                }
                futures::future::Either::Right(never) => match never {},
            },
            other => {
                if other.is_outbound() {
                    let exhausted = self.outbound_attempts.count();
                    self.out.push_back(HandlerOut::Outbound { exhausted });
                }
                self.inner.on_connection_event(other);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fifth_outbound_negotiation_and_only_it_exhausts_the_handler() {
        let mut a = Attempts::default();
        let told: Vec<bool> = (0..8).map(|_| a.count()).collect();
        assert_eq!(
            told,
            [false, false, false, false, true, false, false, false]
        );
    }

    /// Frames whose body starts with 0xff do not decode; others decode to their body.
    struct Bodies;

    impl FrameDecoder<Vec<u8>> for Bodies {
        fn decode_frame(&mut self, frame: &mut BytesMut) -> Result<Option<Vec<u8>>, String> {
            let (_, rest) = unsigned_varint::decode::usize(frame).map_err(|e| e.to_string())?;
            let body = frame.split_off(frame.len() - rest.len());
            if body.first() == Some(&0xff) {
                return Err("bad body".into());
            }
            Ok(Some(body.to_vec()))
        }
    }

    use agora_hyperspace::frames::frame;

    /// Everything `bytes` yields through a reader with frame limit `limit`: bodies and refusals.
    fn read_all(bytes: Vec<u8>, limit: usize) -> Vec<Result<Vec<u8>, (Reason, bool)>> {
        let io = futures::io::Cursor::new(bytes);
        let mut r = Reader::new(io, Box::new(Bodies), &[], limit);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut out = Vec::new();
        loop {
            match r.poll(&mut cx) {
                Poll::Ready(Some(Read::Event(b))) => out.push(Ok(b)),
                Poll::Ready(Some(Read::Refused(f))) => out.push(Err((f.reason, f.fatal))),
                Poll::Ready(Some(Read::Ended)) => {}
                Poll::Ready(None) => return out,
                // The cursor is always ready; the reader only yields after its read budget.
                Poll::Pending => {}
            }
        }
    }

    #[test]
    fn a_frame_at_the_limit_followed_at_once_by_another_is_read() {
        let limit = 100_000;
        let big = vec![7u8; limit];
        let mut bytes = frame(&big);
        bytes.extend(frame(b"small"));
        assert_eq!(read_all(bytes, limit), [Ok(big), Ok(b"small".to_vec())]);
    }

    #[test]
    fn an_oversized_frame_is_skipped_and_the_stream_goes_on() {
        let limit = 1000;
        let mut bytes = frame(b"first");
        bytes.extend(frame(&vec![1u8; 50_000]));
        bytes.extend(frame(b"after"));
        assert_eq!(
            read_all(bytes, limit),
            [
                Ok(b"first".to_vec()),
                Err((Reason::FrameTooLarge, false)),
                Ok(b"after".to_vec())
            ]
        );
    }

    #[test]
    fn an_undecodable_frame_is_dropped_and_the_stream_goes_on() {
        let mut bytes = frame(&[0xff, 1, 2]);
        bytes.extend(frame(b"ok"));
        assert_eq!(
            read_all(bytes, 1000),
            [Err((Reason::Undecodable, false)), Ok(b"ok".to_vec())]
        );
    }

    #[test]
    fn broken_framing_and_too_many_bad_frames_are_fatal() {
        let mut bytes = frame(b"ok");
        bytes.extend([0xff; 11]);
        bytes.extend(frame(b"never"));
        assert_eq!(
            read_all(bytes, 1000),
            [Ok(b"ok".to_vec()), Err((Reason::Unframeable, true))]
        );
        let mut bytes = Vec::new();
        for _ in 0..MAX_BAD_FRAMES + 2 {
            bytes.extend(frame(&[0xff]));
        }
        let got = read_all(bytes, 1000);
        assert_eq!(got.len(), MAX_BAD_FRAMES as usize);
        assert_eq!(got.last(), Some(&Err((Reason::Undecodable, true))));
    }

    #[test]
    fn refusals_are_counted_always_and_logged_once() {
        let mut r = Refusals::default();
        let p = PeerId::random();
        r.record(p, Reason::FrameTooLarge, "x");
        r.record(p, Reason::FrameTooLarge, "x");
        r.record(p, Reason::OverLimit, "y");
        assert_eq!(r.count(Reason::FrameTooLarge), 2);
        assert_eq!(r.counts()["over_limit"], 1);
        assert_eq!(r.counts()["invalid"], 0);
        assert_eq!(r.logged.len(), 2);
    }
}
