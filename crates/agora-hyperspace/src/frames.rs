//! Length-delimited frames as gossipsub (the Hyperspace transport, spec §2.1) sends them on a
//! stream: an unsigned-varint length, then that many bytes. Sans IO: bytes go in with
//! [`Splitter::push`], whole frames or refusals come out of [`Splitter::next_piece`].
//!
//! Unlike a codec that gives up on the first frame it cannot take, the splitter refuses one frame
//! at a time and goes on: a frame longer than the limit is reported and then skipped as its bytes
//! arrive (never buffered), so the frame after it is read normally. Only a length prefix that is
//! not a varint (more than ten bytes, or over 64 bits) leaves the stream unreadable; the splitter
//! then reports [`Piece::Broken`] and yields nothing more.
//!
//! Memory: at most one frame within the limit plus the last chunk pushed.
//!
//! For the sending side, [`split_subscriptions`] cuts an RPC whose subscription list is too long
//! for a receiver's control limit into several RPCs that a receiver takes as the one they came
//! from (gossipsub sends a node's whole subscription list to each new neighbour in one
//! RPC).

/// What the splitter found next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// A whole frame, length prefix included (as gossipsub's decoder takes it).
    Frame(Vec<u8>),
    /// A frame of `len` bytes, over the limit: it is being skipped.
    TooLarge {
        /// Its length (prefix excluded).
        len: u64,
    },
    /// The length prefix is not a varint; nothing more can be read from this stream.
    Broken,
}

/// Splits a byte stream into frames of at most `limit` bytes each.
#[derive(Debug)]
pub struct Splitter {
    limit: usize,
    buf: Vec<u8>,
    /// Where the unread part of `buf` starts.
    start: usize,
    /// Bytes of a refused frame still to drop.
    skip: u64,
    broken: bool,
}

/// Where a frame starts: `Ok(Some((prefix length, frame length)))`, `Ok(None)` when more bytes
/// are needed, `Err(())` when the prefix is not a varint.
fn header(buf: &[u8]) -> Result<Option<(usize, u64)>, ()> {
    match unsigned_varint::decode::u64(buf) {
        Ok((len, rest)) => Ok(Some((buf.len() - rest.len(), len))),
        Err(unsigned_varint::decode::Error::Insufficient) => Ok(None),
        Err(_) => Err(()),
    }
}

impl Splitter {
    /// A splitter for frames of at most `limit` bytes (prefix excluded).
    #[must_use]
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            buf: Vec::new(),
            start: 0,
            skip: 0,
            broken: false,
        }
    }

    /// A splitter that starts with `bytes` already read.
    #[must_use]
    pub fn with_buffered(limit: usize, bytes: &[u8]) -> Self {
        let mut s = Self::new(limit);
        s.push(bytes);
        s
    }

    /// Bytes read from the stream. Bytes of a frame being skipped are dropped at once.
    pub fn push(&mut self, mut data: &[u8]) {
        if self.broken {
            return;
        }
        if self.skip > 0 {
            let dropped = usize::try_from(self.skip)
                .unwrap_or(usize::MAX)
                .min(data.len());
            self.skip -= dropped as u64;
            data = &data[dropped..];
        }
        if data.is_empty() {
            return;
        }
        // Keep the unread part at the front once more than half of the buffer was read.
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes held that were not handed out yet.
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether the stream can no longer be followed.
    #[must_use]
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// The next complete frame or refusal, or `None` until more bytes are pushed.
    pub fn next_piece(&mut self) -> Option<Piece> {
        if self.broken {
            return None;
        }
        if self.skip > 0 {
            return None;
        }
        let unread = &self.buf[self.start..];
        match header(unread) {
            Err(()) => {
                self.broken = true;
                self.buf = Vec::new();
                self.start = 0;
                Some(Piece::Broken)
            }
            Ok(None) => None,
            Ok(Some((prefix, len))) if len > self.limit as u64 => {
                // What is buffered of it goes now; the rest as it is pushed.
                let held = (unread.len() - prefix) as u64;
                let dropped = held.min(len);
                self.start += prefix + usize::try_from(dropped).unwrap_or(usize::MAX);
                self.skip = len - dropped;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                }
                Some(Piece::TooLarge { len })
            }
            Ok(Some((prefix, len))) => {
                // Within the limit, so it fits in usize.
                let end = prefix + usize::try_from(len).unwrap_or(usize::MAX);
                if unread.len() < end {
                    self.buf.reserve(end - unread.len());
                    return None;
                }
                let frame = unread[..end].to_vec();
                self.start += end;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                }
                Some(Piece::Frame(frame))
            }
        }
    }
}

/// `body` as one frame: its length as an unsigned varint, then the body.
#[must_use]
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut prefix = unsigned_varint::encode::usize_buffer();
    let mut out = unsigned_varint::encode::usize(body.len(), &mut prefix).to_vec();
    out.extend_from_slice(body);
    out
}

/// The body of one whole frame (its length prefix removed), if `frame` is exactly that.
#[must_use]
pub fn body(frame: &[u8]) -> Option<&[u8]> {
    let (len, body) = unsigned_varint::decode::usize(frame).ok()?;
    (len == body.len()).then_some(body)
}

/// Field number of `RPC.subscriptions` in gossipsub's protobuf.
const RPC_SUBSCRIPTIONS: u64 = 1;
/// The tag byte that starts an `RPC.subscriptions` field (field 1, length-delimited).
const RPC_SUBSCRIPTIONS_TAG: u8 = 0x0a;

/// One field of a protobuf message as it is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field<'a> {
    /// The field number.
    pub number: u64,
    /// The wire type: 0 varint, 1 fixed 64 bits, 2 length-delimited, 5 fixed 32 bits.
    pub wire: u8,
    /// The whole encoding, tag included.
    pub whole: &'a [u8],
    /// The value: the varint's bytes, the fixed bytes, or what a length delimits.
    pub payload: &'a [u8],
}

/// The field at the start of `body` and what follows it; `None` if `body` does not start with a
/// whole field (groups, wire types 3 and 4, are not used by gossipsub and count as not protobuf).
#[must_use]
pub fn next_field(body: &[u8]) -> Option<(Field<'_>, &[u8])> {
    let (tag, after_tag) = unsigned_varint::decode::u64(body).ok()?;
    let wire = u8::try_from(tag & 7).ok()?;
    let (skip, len) = match wire {
        0 => {
            let (_, after) = unsigned_varint::decode::u64(after_tag).ok()?;
            (0, after_tag.len() - after.len())
        }
        1 => (0, 8),
        2 => {
            let (n, after) = unsigned_varint::decode::u64(after_tag).ok()?;
            (after_tag.len() - after.len(), usize::try_from(n).ok()?)
        }
        5 => (0, 4),
        _ => return None,
    };
    let end = skip.checked_add(len)?;
    let payload = after_tag.get(skip..end)?;
    let rest = &after_tag[end..];
    let field = Field {
        number: tag >> 3,
        wire,
        whole: &body[..body.len() - rest.len()],
        payload,
    };
    Some((field, rest))
}

/// The top-level fields of a protobuf message (a gossipsub RPC): each field's number and its
/// whole encoding (tag included), in order; `None` if `body` is not a sequence of whole fields.
#[must_use]
pub fn rpc_fields(body: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (field, after) = next_field(rest)?;
        out.push((field.number, field.whole));
        rest = after;
    }
    Some(out)
}

/// Most a receiver takes in one RPC: bytes of subscriptions and control together, and
/// subscriptions (rust-libp2p's defaults: 16 KiB, and 100 subscriptions per request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RpcLimits {
    /// Most bytes of one RPC body carrying subscriptions.
    pub bytes: usize,
    /// Most subscriptions in one RPC.
    pub subscriptions: usize,
}

/// Splits one gossipsub RPC (`body`, the frame without its length prefix) whose encoding is
/// over `limits` into several RPCs that carry its subscriptions in order, each within `limits`
/// (a single subscription longer than `limits.bytes` travels alone); everything else the RPC
/// holds (messages, control) goes, in its own order, into the last one, after every
/// subscription (protobuf merges repeated fields, so only the order within each kind matters).
/// The result is whole frames, length prefixes included.
///
/// A receiver treats a run of such RPCs exactly as the one they came from, but no single one of
/// them exceeds its limits: gossipsub sends a node's whole subscription list to a new neighbour
/// in one RPC, and a receiver refuses an RPC over its limits (rust-libp2p's then hears nothing
/// more from that connection, or ignores every subscription in it).
/// `None` when `body` is within `limits`, carries at most one subscription, or is not protobuf
/// (it is then sent as it is).
#[must_use]
pub fn split_subscriptions(body: &[u8], limits: RpcLimits) -> Option<Vec<Vec<u8>>> {
    // A subscription takes at least two bytes: a short body needs no parsing.
    if body.len() <= limits.bytes && body.len() / 2 <= limits.subscriptions {
        return None;
    }
    let fields = rpc_fields(body)?;
    let subscriptions = fields
        .iter()
        .filter(|(n, _)| *n == RPC_SUBSCRIPTIONS)
        .count();
    if subscriptions < 2 || (body.len() <= limits.bytes && subscriptions <= limits.subscriptions) {
        return None;
    }
    let max = limits.bytes;
    let per_rpc = limits.subscriptions.max(1);
    let mut bodies: Vec<Vec<u8>> = vec![Vec::new()];
    let mut in_last = 0;
    for (_, raw) in fields.iter().filter(|(n, _)| *n == RPC_SUBSCRIPTIONS) {
        let last = bodies.last_mut()?;
        if !last.is_empty() && (last.len() + raw.len() > max || in_last == per_rpc) {
            bodies.push(Vec::new());
            in_last = 0;
        }
        bodies.last_mut()?.extend_from_slice(raw);
        in_last += 1;
    }
    let others: Vec<u8> = fields
        .iter()
        .filter(|(n, _)| *n != RPC_SUBSCRIPTIONS)
        .flat_map(|(_, raw)| raw.iter().copied())
        .collect();
    if !others.is_empty() {
        let last = bodies.last_mut()?;
        if last.len() + others.len() > max {
            bodies.push(others);
        } else {
            last.extend_from_slice(&others);
        }
    }
    Some(bodies.iter().map(|b| frame(b)).collect())
}

/// How a [`Rewriter`] treats what is written on its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// multistream-select is still negotiating: its messages are watched for the protocol.
    Negotiating,
    /// The stream carries gossipsub RPCs: frames are examined for long subscription lists.
    Gossip,
    /// Anything else: bytes go through untouched.
    Through,
}

/// Longest multistream-select message taken as a protocol proposal.
const MAX_PROTOCOL_LINE: u64 = 1024;
/// Longest RPC held whole to be split; a longer one goes out as written (gossipsub's own
/// senders never put more than the subscription list of one node in one RPC).
pub const MAX_HELD_RPC: u64 = 1024 * 1024;
/// Most bytes taken from one write while frames are being examined.
const TAKE_PER_WRITE: usize = 64 * 1024;

/// The sending side of one libp2p stream, sans IO: bytes the writer writes go in, bytes for the
/// wire come out, the same except that a gossipsub RPC whose subscriptions are over its
/// [`RpcLimits`] goes out as several (see [`split_subscriptions`]).
///
/// A libp2p stream starts with multistream-select: length-prefixed lines, `/multistream/1.0.0`
/// then the protocol proposed (or echoed, on a stream the peer opened). The rewriter watches
/// those; when data starts after a `/meshsub/…` line it examines every frame (a varint length and
/// that many bytes, as gossipsub writes them), otherwise it lets everything through untouched.
/// On a gossip stream only RPCs that start with a subscription are held whole and examined (at
/// most [`MAX_HELD_RPC`]); every other frame passes through unexamined.
///
/// The writer drives it: [`Self::through`] says how many of the next bytes may go to the wire
/// as they are (then [`Self::sent_through`]); the rest goes to [`Self::write`], which takes some
/// bytes and appends what is ready to send. [`Self::flush`] is for a writer that flushes: bytes
/// held go out unchanged and the rewriter stops examining (nothing is ever held across a flush,
/// so no writer waits on it).
#[derive(Debug)]
pub struct Rewriter {
    limits: RpcLimits,
    mode: Mode,
    /// The last protocol line was a `/meshsub/…` proposal.
    meshsub: bool,
    /// Bytes taken and not yet sent: the start of a frame being examined.
    head: Vec<u8>,
    /// Bytes of the current frame that go through unexamined.
    raw: u64,
    /// RPCs split so far.
    splits: u64,
}

impl Rewriter {
    /// A rewriter that splits subscription lists over `limits`.
    #[must_use]
    pub fn new(limits: RpcLimits) -> Self {
        Self {
            limits,
            mode: Mode::Negotiating,
            meshsub: false,
            head: Vec::new(),
            raw: 0,
            splits: 0,
        }
    }

    /// How many of the next bytes written may go to the wire untouched (`usize::MAX`: all).
    #[must_use]
    pub fn through(&self) -> usize {
        match self.mode {
            Mode::Through => usize::MAX,
            _ => usize::try_from(self.raw).unwrap_or(usize::MAX),
        }
    }

    /// `n` bytes went to the wire untouched (at most [`Self::through`]).
    pub fn sent_through(&mut self, n: usize) {
        if self.mode != Mode::Through {
            self.raw = self.raw.saturating_sub(n as u64);
        }
    }

    /// RPCs split so far.
    #[must_use]
    pub fn splits(&self) -> u64 {
        self.splits
    }

    /// Whether this is a gossipsub stream (its data has started).
    #[must_use]
    pub fn is_gossip(&self) -> bool {
        self.mode == Mode::Gossip
    }

    /// Takes bytes written (call only when [`Self::through`] is 0), appends what may be sent to
    /// `out` and returns how many bytes of `data` it took (at least one if `data` is not empty).
    pub fn write(&mut self, data: &[u8], out: &mut Vec<u8>) -> usize {
        let take = data.len().min(TAKE_PER_WRITE);
        self.head.extend_from_slice(&data[..take]);
        self.examine(out);
        take
    }

    /// The writer flushes: whatever is held goes to `out` as it is, and from now on everything
    /// goes through (a frame cut by a flush cannot be followed reliably any more).
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        if !self.head.is_empty() {
            out.append(&mut self.head);
            self.mode = Mode::Through;
        }
    }

    /// Sends on from `head` what is settled.
    fn examine(&mut self, out: &mut Vec<u8>) {
        loop {
            if self.mode == Mode::Through {
                out.append(&mut self.head);
                return;
            }
            if self.raw > 0 {
                let n = usize::try_from(self.raw)
                    .unwrap_or(usize::MAX)
                    .min(self.head.len());
                out.extend(self.head.drain(..n));
                self.raw -= n as u64;
                if self.raw > 0 {
                    return;
                }
            }
            let (prefix, len) = match header(&self.head) {
                Ok(Some(h)) => h,
                Ok(None) => return,
                Err(()) => {
                    self.mode = Mode::Through;
                    continue;
                }
            };
            let Some(&first) = self.head.get(prefix) else {
                if len == 0 {
                    // An empty frame: nothing to examine.
                    self.raw = prefix as u64;
                    continue;
                }
                return;
            };
            let total = (prefix as u64).saturating_add(len);
            match self.mode {
                Mode::Negotiating if first == b'/' && len <= MAX_PROTOCOL_LINE => {
                    let Ok(total) = usize::try_from(total) else {
                        return;
                    };
                    if self.head.len() < total {
                        return;
                    }
                    self.meshsub = self.head[prefix..total].starts_with(b"/meshsub/");
                    out.extend(self.head.drain(..total));
                }
                Mode::Negotiating => {
                    self.mode = if self.meshsub {
                        Mode::Gossip
                    } else {
                        Mode::Through
                    };
                }
                Mode::Gossip if first == RPC_SUBSCRIPTIONS_TAG && len <= MAX_HELD_RPC => {
                    let Ok(total) = usize::try_from(total) else {
                        return;
                    };
                    if self.head.len() < total {
                        return;
                    }
                    match split_subscriptions(&self.head[prefix..total], self.limits) {
                        Some(frames) => {
                            self.splits += 1;
                            frames.iter().for_each(|f| out.extend_from_slice(f));
                            self.head.drain(..total);
                        }
                        None => out.extend(self.head.drain(..total)),
                    }
                }
                Mode::Gossip => self.raw = total,
                Mode::Through => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// `SubOpts { subscribe = true, topic_id = topic }` as RPC field 1.
    fn sub(topic: &str) -> Vec<u8> {
        let mut opts = vec![0x08, 0x01, 0x12, topic.len() as u8];
        opts.extend_from_slice(topic.as_bytes());
        let mut f = vec![0x0a, opts.len() as u8];
        f.extend_from_slice(&opts);
        f
    }

    /// Limits on bytes only.
    fn bytes(max: usize) -> RpcLimits {
        RpcLimits {
            bytes: max,
            subscriptions: usize::MAX,
        }
    }

    fn unframe(frame: &[u8]) -> &[u8] {
        let (len, rest) = unsigned_varint::decode::usize(frame).expect("prefix");
        assert_eq!(rest.len(), len);
        rest
    }

    #[test]
    fn a_long_subscription_list_is_split_in_order_and_the_rest_goes_last() {
        let topics: Vec<String> = (0..300)
            .map(|i| format!("hyperspace/tasks/t-{i:04}"))
            .collect();
        let mut body: Vec<u8> = topics.iter().flat_map(|t| sub(t)).collect();
        // A control part (field 3) and a varint field after the subscriptions.
        let control = [0x1a, 0x03, 0x01, 0x02, 0x03];
        body.extend_from_slice(&control);
        body.extend_from_slice(&[0x28, 0x96, 0x01]);
        let frames = split_subscriptions(&body, bytes(1024)).expect("split");
        assert!(frames.len() > 1);
        let bodies: Vec<&[u8]> = frames.iter().map(|f| unframe(f)).collect();
        assert!(bodies.iter().all(|b| b.len() <= 1024));
        // Concatenated, the bodies are the original RPC (protobuf merges repeated fields).
        assert_eq!(bodies.concat(), body);
        // Only the last carries anything but subscriptions.
        for b in &bodies[..bodies.len() - 1] {
            assert!(
                rpc_fields(b)
                    .unwrap()
                    .iter()
                    .all(|(n, _)| *n == RPC_SUBSCRIPTIONS)
            );
        }
        assert!(bodies.last().unwrap().ends_with(&[0x28, 0x96, 0x01]));
    }

    #[test]
    fn a_list_of_many_short_subscriptions_is_split_by_count() {
        let body: Vec<u8> = (0..250).flat_map(|i| sub(&format!("t{i}"))).collect();
        let limits = RpcLimits {
            bytes: 16 * 1024,
            subscriptions: 100,
        };
        let frames = split_subscriptions(&body, limits).expect("over the count");
        let counts: Vec<usize> = frames
            .iter()
            .map(|f| rpc_fields(unframe(f)).unwrap().len())
            .collect();
        assert_eq!(counts, [100, 100, 50]);
        let bodies: Vec<&[u8]> = frames.iter().map(|f| unframe(f)).collect();
        assert_eq!(bodies.concat(), body);
        let fewer: Vec<u8> = (0..100).flat_map(|i| sub(&format!("t{i}"))).collect();
        assert_eq!(split_subscriptions(&fewer, limits), None, "at the count");
    }

    #[test]
    fn what_fits_or_cannot_be_split_is_left_alone() {
        let one = sub("hyperspace/tasks/x");
        assert_eq!(split_subscriptions(&one, bytes(1024)), None, "fits");
        assert_eq!(
            split_subscriptions(&one, bytes(4)),
            None,
            "a single subscription"
        );
        assert_eq!(
            split_subscriptions(&[0x0f; 64], bytes(8)),
            None,
            "not protobuf"
        );
        assert_eq!(
            split_subscriptions(&[0x0a, 0x7f, 0x00], bytes(1)),
            None,
            "truncated"
        );
    }

    /// Everything a [`Rewriter`] sends for `input` written in chunks of `chunk` bytes, with a
    /// flush at the end.
    fn rewrite(r: &mut Rewriter, input: &[u8], chunk: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = input;
        while !rest.is_empty() {
            let c = &rest[..chunk.max(1).min(rest.len())];
            let through = r.through();
            let n = if through > 0 {
                let n = through.min(c.len());
                out.extend_from_slice(&c[..n]);
                r.sent_through(n);
                n
            } else {
                r.write(c, &mut out)
            };
            assert!(n > 0);
            rest = &rest[n..];
        }
        r.flush(&mut out);
        out
    }

    /// multistream-select's opening and one protocol line, as a dialer writes them.
    fn negotiation(protocol: &str) -> Vec<u8> {
        let mut v = frame(b"/multistream/1.0.0\n");
        v.extend(frame(format!("{protocol}\n").as_bytes()));
        v
    }

    fn subscriptions(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| sub(&format!("hyperspace/capabilities/peer-{i:06}")))
            .collect()
    }

    #[test]
    fn a_gossip_stream_has_its_long_subscription_lists_split_and_nothing_else_changed() {
        let subs = subscriptions(400);
        let publish = [0x12, 0x03, 0x01, 0x02, 0x03];
        let big_publish: Vec<u8> = [&[0x12, 0x90, 0x4e][..], &[9u8; 10_000]].concat();
        let mut input = frame(b"/multistream/1.0.0\n");
        // Refused first, then accepted: both proposals are protocol lines.
        input.extend(frame(b"/meshsub/1.2.0\n"));
        input.extend(frame(b"/meshsub/1.1.0\n"));
        input.extend(frame(&subs));
        input.extend(frame(&publish));
        input.extend(frame(&big_publish));
        input.extend(frame(&subs[..200]));
        let mut want = negotiation("/meshsub/1.2.0");
        want.extend(frame(b"/meshsub/1.1.0\n"));
        split_subscriptions(&subs, bytes(4096))
            .unwrap()
            .iter()
            .for_each(|f| want.extend_from_slice(f));
        want.extend(frame(&publish));
        want.extend(frame(&big_publish));
        want.extend(frame(&subs[..200]));
        for chunk in [1, 3, 100, 4096, 70_000, usize::MAX] {
            let mut r = Rewriter::new(bytes(4096));
            assert_eq!(rewrite(&mut r, &input, chunk), want, "chunks of {chunk}");
            assert_eq!(r.splits(), 1);
            assert!(r.is_gossip());
        }
    }

    #[test]
    fn other_protocols_and_what_follows_a_flush_go_through_untouched() {
        let subs = subscriptions(400);
        let mut other = negotiation("/ipfs/kad/1.0.0");
        other.extend(frame(&subs));
        let mut r = Rewriter::new(bytes(4096));
        assert_eq!(rewrite(&mut r, &other, 1000), other);
        assert_eq!(r.through(), usize::MAX, "kad: everything goes through");
        // A listener's echo then data that is not a frame at all.
        let mut odd = negotiation("/agora/rpc/1");
        odd.extend([0xff; 20]);
        assert_eq!(rewrite(&mut Rewriter::new(bytes(16)), &odd, 7), odd);
        // A gossip frame that claims 2^64 - 1 bytes (found by the fuzzer: the length overflowed).
        let mut huge = negotiation("/meshsub/1.1.0");
        huge.extend([0xff; 9]);
        huge.extend([0x01, 0x12, 0x00]);
        assert_eq!(rewrite(&mut Rewriter::new(bytes(16)), &huge, 5), huge);
        // A flush in the middle of a gossip frame: held bytes go out, the rest goes through.
        let mut r = Rewriter::new(bytes(4096));
        let mut out = Vec::new();
        let mut gossip = negotiation("/meshsub/1.1.0");
        gossip.extend(frame(&subs));
        let cut = gossip.len() - 100;
        let mut taken = 0;
        while taken < cut {
            taken += r.write(&gossip[taken..cut], &mut out);
        }
        r.flush(&mut out);
        assert_eq!(r.through(), usize::MAX);
        out.extend_from_slice(&gossip[cut..]);
        assert_eq!(out, gossip);
        assert_eq!(r.splits(), 0);
    }

    proptest::proptest! {
        #[test]
        fn splitting_any_bytes_is_safe_and_loses_nothing(
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..2048),
            max in 0usize..512,
        ) {
            if let Some(frames) = split_subscriptions(&body, bytes(max)) {
                let bodies: Vec<&[u8]> = frames.iter().map(|f| unframe(f)).collect();
                proptest::prop_assert_eq!(bodies.concat(), body);
            }
        }

        #[test]
        fn rewriting_any_bytes_changes_nothing_unless_it_splits(
            start in proptest::sample::select(vec!["/meshsub/1.1.0", "/ipfs/id/1.0.0", ""]),
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..4096),
            chunk in 1usize..5000,
            split_at in 0usize..1024,
        ) {
            let mut input = if start.is_empty() { Vec::new() } else { negotiation(start) };
            input.extend_from_slice(&body);
            let mut r = Rewriter::new(bytes(split_at));
            let out = rewrite(&mut r, &input, chunk);
            if r.splits() == 0 {
                proptest::prop_assert_eq!(out, input);
            }
        }

        #[test]
        fn rewriting_frames_splits_exactly_the_long_subscription_lists(
            rpcs in proptest::collection::vec((0usize..60, proptest::num::u8::ANY, 0usize..300), 0..12),
            chunk in 1usize..3000,
            split_at in 64usize..2048,
            per_rpc in 1usize..50,
        ) {
            let limits = RpcLimits { bytes: split_at, subscriptions: per_rpc };
            let mut input = negotiation("/meshsub/1.1.0");
            let mut want = input.clone();
            for (subs, byte, len) in rpcs {
                // Either a subscription list or an opaque publish-like field.
                let body = if subs > 0 {
                    subscriptions(subs)
                } else {
                    let mut b = vec![0x12];
                    b.extend(frame(&vec![byte; len]));
                    b
                };
                input.extend(frame(&body));
                match split_subscriptions(&body, limits) {
                    Some(frames) => frames.iter().for_each(|f| want.extend_from_slice(f)),
                    None => want.extend(frame(&body)),
                }
            }
            let out = rewrite(&mut Rewriter::new(limits), &input, chunk);
            proptest::prop_assert_eq!(out, want);
        }

        #[test]
        fn splitting_keeps_every_byte_in_order(
            topics in proptest::collection::vec("[a-z/]{1,100}", 0..200),
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..50),
            max in 1usize..4096,
        ) {
            let mut body: Vec<u8> = topics.iter().flat_map(|t| sub(t)).collect();
            // An opaque length-delimited field 3 after them.
            body.push(0x1a);
            body.push(tail.len() as u8);
            body.extend_from_slice(&tail);
            if let Some(frames) = split_subscriptions(&body, bytes(max)) {
                let bodies: Vec<&[u8]> = frames.iter().map(|f| unframe(f)).collect();
                proptest::prop_assert_eq!(bodies.concat(), body);
                for b in &bodies {
                    let subs = rpc_fields(b).unwrap();
                    proptest::prop_assert!(b.len() <= max || subs.len() == 1 || b == bodies.last().unwrap());
                }
            }
        }
    }

    use super::*;
    use proptest::prelude::*;

    /// Everything `bytes` yields when pushed in chunks of `chunk` bytes, taking at most `take`
    /// pieces between two pushes (a reader may push again before draining).
    fn split_taking(bytes: &[u8], limit: usize, chunk: usize, take: usize) -> Vec<Piece> {
        let mut s = Splitter::new(limit);
        let mut out = Vec::new();
        for c in bytes.chunks(chunk.max(1)) {
            s.push(c);
            for _ in 0..take {
                match s.next_piece() {
                    Some(p) => out.push(p),
                    None => break,
                }
            }
        }
        while let Some(p) = s.next_piece() {
            out.push(p);
        }
        out
    }

    fn split(bytes: &[u8], limit: usize, chunk: usize) -> Vec<Piece> {
        split_taking(bytes, limit, chunk, usize::MAX)
    }

    #[test]
    fn a_frame_gives_back_its_body_and_nothing_else_does() {
        assert_eq!(body(&frame(b"abc")), Some(&b"abc"[..]));
        assert_eq!(body(&frame(b"")), Some(&b""[..]));
        assert_eq!(body(&[3, b'a', b'b']), None);
        assert_eq!(body(&[1, b'a', b'b']), None);
        assert_eq!(body(&[0xff]), None);
    }

    #[test]
    fn frames_at_the_limit_followed_at_once_by_others_are_read() {
        let big = vec![7u8; 1000];
        let mut bytes = frame(&big);
        bytes.extend(frame(b"small"));
        assert_eq!(
            split(&bytes, 1000, 8192),
            [Piece::Frame(frame(&big)), Piece::Frame(frame(b"small"))]
        );
    }

    #[test]
    fn an_oversized_frame_is_skipped_and_the_stream_goes_on() {
        let mut bytes = frame(b"first");
        bytes.extend(frame(&vec![1u8; 50_000]));
        bytes.extend(frame(b"after"));
        for chunk in [1, 7, 4096, 100_000] {
            assert_eq!(
                split(&bytes, 1000, chunk),
                [
                    Piece::Frame(frame(b"first")),
                    Piece::TooLarge { len: 50_000 },
                    Piece::Frame(frame(b"after"))
                ],
                "chunks of {chunk}"
            );
        }
    }

    #[test]
    fn a_prefix_that_is_not_a_varint_breaks_the_stream() {
        let mut bytes = frame(b"ok");
        bytes.extend([0xff; 11]);
        bytes.extend(frame(b"never"));
        assert_eq!(
            split(&bytes, 1000, 3),
            [Piece::Frame(frame(b"ok")), Piece::Broken]
        );
    }

    #[test]
    fn skipped_bytes_are_not_buffered() {
        let mut s = Splitter::new(10);
        s.push(&frame(&[0u8; 1_000_000])[..5000]);
        assert_eq!(s.next_piece(), Some(Piece::TooLarge { len: 1_000_000 }));
        assert_eq!(s.next_piece(), None);
        assert_eq!(s.buffered(), 0);
        s.push(&[0u8; 100_000]);
        assert_eq!(s.buffered(), 0);
    }

    proptest! {
        /// Any sequence of frames, cut into any chunks, comes back frame for frame, the ones
        /// over the limit reported instead.
        #[test]
        fn frames_survive_any_chunking(
            bodies in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..20),
            limit in 0usize..300,
            chunk in 1usize..64,
            take in 1usize..3,
        ) {
            let bytes: Vec<u8> = bodies.iter().flat_map(|b| frame(b)).collect();
            let want: Vec<Piece> = bodies
                .iter()
                .map(|b| if b.len() > limit {
                    Piece::TooLarge { len: b.len() as u64 }
                } else {
                    Piece::Frame(frame(b))
                })
                .collect();
            prop_assert_eq!(split_taking(&bytes, limit, chunk, take), want);
        }

        /// Arbitrary bytes never panic, and a frame handed out is always within the limit.
        #[test]
        fn arbitrary_bytes_are_safe(bytes in prop::collection::vec(any::<u8>(), 0..2000), chunk in 1usize..50) {
            for p in split(&bytes, 100, chunk) {
                if let Piece::Frame(f) = p {
                    prop_assert!(f.len() <= 100 + 2);
                }
            }
        }
    }
}
