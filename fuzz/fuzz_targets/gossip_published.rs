//! `gossip_published`: arbitrary bytes as one gossipsub RPC through
//! `agora_hyperspace::published::take_known`, the reading side's check for copies of messages
//! the node already took (`docs/node.md` "Copies before signatures"), with a predicate that picks
//! the messages whose seqno has the bit the input's first byte names.
//!
//! Properties checked: nothing panics; the messages taken are exactly the well-formed published
//! messages the predicate picks, in their order; what is left is every other field of the RPC in
//! its order, byte for byte; nothing is taken from bytes that are not whole protobuf fields.
#![no_main]

use agora_hyperspace::frames::{next_field, rpc_fields};
use agora_hyperspace::published::{Published, take_known};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bit = data.first().map_or(0, |b| b % 64);
    let picked = |m: &Published<'_>| m.seqno >> bit & 1 == 1;
    let Some(t) = take_known(data, picked) else {
        return;
    };
    let all = rpc_fields(data).expect("only whole fields are taken from");
    let mut expected = Vec::new();
    let mut known = 0;
    for (_, raw) in &all {
        let taken = next_field(raw)
            .filter(|(f, _)| f.number == 2 && f.wire == 2)
            .and_then(|(f, _)| Published::parse(f.payload))
            .filter(picked);
        match taken {
            Some(m) => {
                assert_eq!(t.known.get(known), Some(&m), "taken in order");
                known += 1;
            }
            None => expected.extend_from_slice(raw),
        }
    }
    assert!(known > 0, "something was taken");
    assert_eq!(known, t.known.len(), "nothing else was taken");
    assert_eq!(t.rest, expected, "taking loses nothing");
});
