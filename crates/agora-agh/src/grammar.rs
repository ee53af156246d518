//! Identifier grammars of AGH Network v0.
//!
//! Envelope page, "Fields": `channel` matches `[a-z0-9][a-z0-9_-]{0,63}`; Peer IDs (`from`, `to`,
//! `peer_card.peer_id`) match `[a-z0-9][a-z0-9._-]{0,127}` (Peer Discovery page, "Peer
//! identity"). Hand-written byte checks: these run on every envelope.

/// The protocol string every v0 envelope carries.
pub const PROTOCOL_V0: &str = "agh-network/v0";

/// Longest channel name the grammar allows.
pub const MAX_CHANNEL_LEN: usize = 64;

/// Longest Peer ID the grammar allows.
pub const MAX_PEER_ID_LEN: usize = 128;

const fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `true` when `s` matches `[a-z0-9][a-z0-9_-]{0,63}`.
pub fn is_channel(s: &str) -> bool {
    let b = s.as_bytes();
    match b.split_first() {
        Some((&first, rest)) if b.len() <= MAX_CHANNEL_LEN && is_lower_alnum(first) => rest
            .iter()
            .all(|&c| is_lower_alnum(c) || c == b'_' || c == b'-'),
        _ => false,
    }
}

/// `true` when `s` matches `[a-z0-9][a-z0-9._-]{0,127}`.
pub fn is_peer_id(s: &str) -> bool {
    let b = s.as_bytes();
    match b.split_first() {
        Some((&first, rest)) if b.len() <= MAX_PEER_ID_LEN && is_lower_alnum(first) => rest
            .iter()
            .all(|&c| is_lower_alnum(c) || c == b'_' || c == b'-' || c == b'.'),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_grammar() {
        for ok in ["default", "builders", "a", "0", "a-b_c", &"a".repeat(64)] {
            assert!(is_channel(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "_a",
            "bad.channel",
            "Bad",
            "a b",
            &"a".repeat(65),
            "é",
        ] {
            assert!(!is_channel(bad), "{bad}");
        }
    }

    #[test]
    fn peer_id_grammar() {
        for ok in ["coder.sess-abc", "a", "9.x_y-z", &"p".repeat(128)] {
            assert!(is_peer_id(ok), "{ok}");
        }
        for bad in [
            "",
            ".a",
            "BadPeer",
            "alice@39f713d0a644253f04529421b9f51b9b",
            "missing channel",
            &"p".repeat(129),
        ] {
            assert!(!is_peer_id(bad), "{bad}");
        }
    }
}
