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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut b = unsigned_varint::encode::usize_buffer();
        let mut out = unsigned_varint::encode::usize(body.len(), &mut b).to_vec();
        out.extend_from_slice(body);
        out
    }

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
