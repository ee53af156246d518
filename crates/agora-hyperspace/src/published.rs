//! The published messages of a gossipsub RPC (the Hyperspace transport, spec §2.1), read
//! without checking them, so that a copy of a message the node already took is known as one
//! before its signature is checked again (`docs/node.md` "Copies before signatures"). Sans IO.
//!
//! Gossipsub's decoder checks the signature of every message in an RPC, and only then does the
//! behaviour see from the message id that the message is a copy. In a mesh every message arrives
//! several times (one copy from each mesh peer that forwards it first), so most of those checks
//! were of copies: in the 200-node profile of `docs/performance.md` the decoder's signature
//! checks were 14–16 % of the process's CPU. [`take_known`] lets the reader take such copies out
//! of an RPC before it is decoded; the node hands them to gossipsub as they came (it still counts
//! them as copies for scoring and IDONTWANT), and only the rest goes through the decoder.
//!
//! What is parsed here is gossipsub's `Message` (`rpc.proto`): `from` = 1, `data` = 2, `seqno` =
//! 3, `topic` = 4, `signature` = 5, `key` = 6, inside `RPC.publish` = 2. Only a message that is
//! plainly well formed is ever taken (each field at most once and length-delimited, `from`
//! present, an 8-byte `seqno`, a UTF-8 `topic`, no other field); anything else stays in the RPC
//! for the decoder to judge as before.

use crate::frames::next_field;

/// Field number of `RPC.publish` in gossipsub's protobuf.
const RPC_PUBLISH: u64 = 2;
/// Wire type of a length-delimited field.
const LENGTH_DELIMITED: u8 = 2;

/// One published message of an RPC, its fields as they came (nothing is checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published<'a> {
    /// `from`: the publisher's PeerId bytes.
    pub from: &'a [u8],
    /// `data` (empty when absent).
    pub data: &'a [u8],
    /// `seqno`, big-endian.
    pub seqno: u64,
    /// `topic`.
    pub topic: &'a str,
    /// `signature`, when present.
    pub signature: Option<&'a [u8]>,
    /// `key`, when present.
    pub key: Option<&'a [u8]>,
}

impl<'a> Published<'a> {
    /// Reads one `Message` body; `None` unless it is plainly well formed (see the module doc).
    #[must_use]
    pub fn parse(body: &'a [u8]) -> Option<Self> {
        let mut slots: [Option<&'a [u8]>; 6] = [None; 6];
        let mut rest = body;
        while !rest.is_empty() {
            let (field, after) = next_field(rest)?;
            if field.wire != LENGTH_DELIMITED {
                return None;
            }
            let slot = slots.get_mut(usize::try_from(field.number.checked_sub(1)?).ok()?)?;
            if slot.replace(field.payload).is_some() {
                return None;
            }
            rest = after;
        }
        let [from, data, seqno, topic, signature, key] = slots;
        let seqno: [u8; 8] = seqno?.try_into().ok()?;
        Some(Self {
            from: from.filter(|f| !f.is_empty())?,
            data: data.unwrap_or_default(),
            seqno: u64::from_be_bytes(seqno),
            topic: std::str::from_utf8(topic?).ok()?,
            signature,
            key,
        })
    }
}

/// An RPC with the messages already known taken out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken<'a> {
    /// The RPC without them: every other field, in its order (no length prefix).
    pub rest: Vec<u8>,
    /// The messages taken, in their order.
    pub known: Vec<Published<'a>>,
}

/// Takes out of one RPC (`body`, without its length prefix) each published message that `known`
/// says the node already took. `None` when it takes none (the RPC is then decoded as it is), or
/// when `body` is not a sequence of whole protobuf fields (the decoder refuses it as before).
///
/// Protobuf merges repeated fields in order, so the rest decodes to the same RPC minus the
/// messages taken.
pub fn take_known<'a>(
    body: &'a [u8],
    mut known: impl FnMut(&Published<'a>) -> bool,
) -> Option<Taken<'a>> {
    let mut taken: Option<Taken<'a>> = None;
    let mut rest = body;
    let mut kept_until = 0;
    while !rest.is_empty() {
        let (field, after) = next_field(rest)?;
        let start = body.len() - rest.len();
        rest = after;
        if field.number != RPC_PUBLISH || field.wire != LENGTH_DELIMITED {
            continue;
        }
        let Some(message) = Published::parse(field.payload).filter(|m| known(m)) else {
            continue;
        };
        let t = taken.get_or_insert_with(|| Taken {
            rest: Vec::with_capacity(body.len()),
            known: Vec::new(),
        });
        t.rest.extend_from_slice(&body[kept_until..start]);
        kept_until = start + field.whole.len();
        t.known.push(message);
    }
    let mut t = taken?;
    t.rest.extend_from_slice(&body[kept_until..]);
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn field(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = unsigned_varint::encode::u64_buffer();
        out.extend_from_slice(unsigned_varint::encode::u64(number << 3 | 2, &mut buf));
        let mut buf = unsigned_varint::encode::usize_buffer();
        out.extend_from_slice(unsigned_varint::encode::usize(payload.len(), &mut buf));
        out.extend_from_slice(payload);
        out
    }

    fn message(from: &[u8], seqno: u64, topic: &str, data: &[u8]) -> Vec<u8> {
        [
            field(1, from),
            field(2, data),
            field(3, &seqno.to_be_bytes()),
            field(4, topic.as_bytes()),
            field(5, b"sig"),
        ]
        .concat()
    }

    #[test]
    fn a_well_formed_message_is_read_field_by_field() {
        let m = message(b"peer", 7, "t", b"hello");
        let p = Published::parse(&m).expect("well formed");
        assert_eq!(p.from, b"peer");
        assert_eq!(p.data, b"hello");
        assert_eq!(p.seqno, 7);
        assert_eq!(p.topic, "t");
        assert_eq!(p.signature, Some(&b"sig"[..]));
        assert_eq!(p.key, None);
    }

    #[test]
    fn anything_unusual_is_left_to_the_decoder() {
        let base = message(b"peer", 7, "t", b"x");
        // a repeated field, an unknown field, a short seqno, no from, a topic not UTF-8,
        // a varint field
        for bad in [
            [base.clone(), field(2, b"y")].concat(),
            [base.clone(), field(7, b"y")].concat(),
            [field(1, b"peer"), field(3, &[0; 7]), field(4, b"t")].concat(),
            [field(3, &[0; 8]), field(4, b"t")].concat(),
            [field(1, b"peer"), field(3, &[0; 8]), field(4, &[0xff])].concat(),
            [base, vec![0x38, 0x01]].concat(),
        ] {
            assert_eq!(Published::parse(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn known_messages_are_taken_and_the_rest_keeps_its_order() {
        let sub = field(1, &[0x08, 0x01, 0x12, 0x01, b't']);
        let a = field(2, &message(b"a", 1, "t", b"1"));
        let b = field(2, &message(b"b", 2, "t", b"2"));
        let c = field(2, &message(b"c", 3, "t", b"3"));
        let control = field(3, &[0x12, 0x00]);
        let body = [sub.clone(), a.clone(), b, control.clone(), c.clone()].concat();
        let t = take_known(&body, |m| m.from == b"b").expect("b is known");
        assert_eq!(t.rest, [sub, a, control, c].concat());
        assert_eq!(t.known.len(), 1);
        assert_eq!(t.known[0].seqno, 2);
        assert_eq!(take_known(&body, |_| false), None);
        assert_eq!(take_known(&[0xff], |_| true), None);
    }

    proptest! {
        /// Whatever the bytes: nothing panics, and what is left is whole fields, fewer bytes.
        #[test]
        fn any_bytes_are_safe(body in proptest::collection::vec(any::<u8>(), 0..256), pick in any::<u64>()) {
            let mut i = 0u32;
            if let Some(t) = take_known(&body, |_| { i += 1; pick >> (i % 64) & 1 == 1 }) {
                prop_assert!(!t.known.is_empty());
                prop_assert!(t.rest.len() < body.len());
                let mut rest = t.rest.as_slice();
                while !rest.is_empty() {
                    let (_, after) = next_field(rest).expect("whole fields");
                    rest = after;
                }
            }
        }

        /// An RPC of subscriptions, control and messages, some of them known: the known ones
        /// are taken in order, and the rest is every other field in order, byte for byte.
        #[test]
        fn taking_loses_nothing(
            parts in proptest::collection::vec((0u8..4, any::<u8>(), any::<u64>()), 0..12),
        ) {
            let mut body = Vec::new();
            let mut rest = Vec::new();
            let mut known = Vec::new();
            for (kind, who, seqno) in &parts {
                let from = [*who];
                let bytes = match kind {
                    0 => field(1, &[0x08, 0x01, 0x12, 0x01, *who]),
                    1 => field(3, &[0x12, 0x00]),
                    _ => field(2, &message(&from, *seqno, "t", &[*kind])),
                };
                body.extend_from_slice(&bytes);
                if *kind >= 2 && who % 2 == 0 {
                    known.push((*who, *seqno));
                } else {
                    rest.extend_from_slice(&bytes);
                }
            }
            match take_known(&body, |m| m.from[0] % 2 == 0) {
                None => prop_assert!(known.is_empty()),
                Some(t) => {
                    prop_assert_eq!(t.rest, rest);
                    let got: Vec<(u8, u64)> = t.known.iter().map(|m| (m.from[0], m.seqno)).collect();
                    prop_assert_eq!(got, known);
                }
            }
        }

        /// Messages made of arbitrary field values read back as they were written.
        #[test]
        fn messages_round_trip(from in proptest::collection::vec(any::<u8>(), 1..40), seqno in any::<u64>(), topic in ".{0,20}", data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let m = message(&from, seqno, &topic, &data);
            let p = Published::parse(&m).expect("well formed");
            prop_assert_eq!(p.from, from.as_slice());
            prop_assert_eq!(p.seqno, seqno);
            prop_assert_eq!(p.topic, topic.as_str());
            prop_assert_eq!(p.data, data.as_slice());
        }
    }
}
