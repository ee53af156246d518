//! `gossip_frames`: arbitrary bytes as a gossipsub stream, cut into chunks at arbitrary places,
//! through `agora_hyperspace::frames::Splitter`.
//!
//! Properties checked: nothing panics; every frame handed out is whole (its varint prefix names
//! exactly the bytes that follow) and within the limit; the same bytes cut differently give the
//! same pieces; nothing comes after `Broken`; the bytes held never exceed one frame plus the last
//! chunk. The same bytes as one RPC through `split_subscriptions` (the sending side): nothing
//! panics, and the RPCs it makes, prefixes removed and joined, are the input's subscriptions in
//! their order followed by its other fields in theirs. The same bytes written on a gossipsub
//! stream through `Rewriter` (after a `/meshsub/1.1.0` negotiation, in the same chunks): nothing
//! panics, every write takes at least one byte, and when nothing was split the bytes sent are
//! exactly the bytes written.
#![no_main]

use agora_hyperspace::frames::{
    Piece, Rewriter, RpcLimits, Splitter, frame, rpc_fields, split_subscriptions,
};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 256;

fn split(data: &[u8], cuts: &[u8]) -> Vec<Piece> {
    let mut s = Splitter::new(LIMIT);
    let mut out = Vec::new();
    let mut rest = data;
    let mut cuts = cuts.iter().cycle();
    while !rest.is_empty() {
        let n = usize::from(*cuts.next().unwrap_or(&255))
            .max(1)
            .min(rest.len());
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        s.push(chunk);
        assert!(
            s.buffered() <= LIMIT + 10 + n,
            "holds {} bytes",
            s.buffered()
        );
        while let Some(p) = s.next_piece() {
            out.push(p);
        }
    }
    out
}

/// What a `Rewriter` sends for `data` written in the chunks `cuts` gives, on a gossipsub stream.
fn rewrite(data: &[u8], cuts: &[u8], limits: RpcLimits) -> (Vec<u8>, Vec<u8>, u64) {
    let mut written = frame(b"/multistream/1.0.0\n");
    written.extend(frame(b"/meshsub/1.1.0\n"));
    written.extend_from_slice(data);
    let mut r = Rewriter::new(limits);
    let mut out = Vec::new();
    let mut rest = &written[..];
    let mut cuts = cuts.iter().cycle();
    while !rest.is_empty() {
        let n = usize::from(*cuts.next().unwrap_or(&255))
            .max(1)
            .min(rest.len());
        let through = r.through();
        let taken = if through > 0 {
            let k = through.min(n);
            out.extend_from_slice(&rest[..k]);
            r.sent_through(k);
            k
        } else {
            r.write(&rest[..n], &mut out)
        };
        assert!(taken > 0, "a write takes something");
        rest = &rest[taken..];
    }
    r.flush(&mut out);
    (written, out, r.splits())
}

fuzz_target!(|input: (Vec<u8>, Vec<u8>)| {
    let (data, cuts) = input;
    let pieces = split(&data, &cuts);
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Frame(f) => {
                let (len, body) =
                    unsigned_varint::decode::usize(f).expect("a frame starts with a varint");
                assert_eq!(len, body.len(), "a frame is whole");
                assert!(len <= LIMIT, "a frame within the limit");
            }
            Piece::TooLarge { len } => assert!(*len > LIMIT as u64),
            Piece::Broken => assert_eq!(i, pieces.len() - 1, "nothing after Broken"),
        }
    }
    assert_eq!(
        pieces,
        split(&data, &[255]),
        "the cuts do not change the pieces"
    );
    let limits = RpcLimits {
        bytes: usize::from(cuts.first().copied().unwrap_or(64)),
        subscriptions: usize::from(cuts.get(1).copied().unwrap_or(100)),
    };
    if let Some(frames) = split_subscriptions(&data, limits) {
        let mut joined = Vec::new();
        for f in &frames {
            let (len, body) = unsigned_varint::decode::usize(f).expect("a whole frame");
            assert_eq!(len, body.len());
            joined.extend_from_slice(body);
        }
        let fields = rpc_fields(&data).expect("only RPCs are split");
        let mut expected: Vec<u8> = Vec::new();
        for (_, raw) in fields.iter().filter(|(n, _)| *n == 1) {
            expected.extend_from_slice(raw);
        }
        for (_, raw) in fields.iter().filter(|(n, _)| *n != 1) {
            expected.extend_from_slice(raw);
        }
        assert_eq!(joined, expected, "splitting loses nothing and keeps each kind's order");
    }
    let (written, sent, splits) = rewrite(&data, &cuts, limits);
    if splits == 0 {
        assert_eq!(written, sent, "nothing split, nothing changed");
    }
});
