//! Route tokens and the reference NATS subjects.
//!
//! Delivery page and the Go reference runtime: a Peer ID's route token is the lowercase hex of the first 16
//! bytes of SHA-256 over the (trimmed) Peer ID; broadcasts use `agh.network.v0.<channel>.broadcast`
//! and directed envelopes `agh.network.v0.<channel>.peer.<route_token>`.

use sha2::{Digest as _, Sha256};

use crate::grammar::{is_channel, is_peer_id};

/// Subject prefix of the v0 NATS profile.
pub const SUBJECT_PREFIX: &str = "agh.network.v0";

/// A route token, a subject or a subject pattern could not be formed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The Peer ID does not match the grammar.
    #[error("{0:?} is not a Peer ID ([a-z0-9][a-z0-9._-]{{0,127}})")]
    InvalidPeerId(String),
    /// The channel does not match the grammar.
    #[error("{0:?} is not a channel name ([a-z0-9][a-z0-9_-]{{0,63}})")]
    InvalidChannel(String),
}

/// The 32-hex-digit route token of `peer_id` (trimmed first, then grammar-checked).
pub fn route_token(peer_id: &str) -> Result<String, RouteError> {
    let peer_id = peer_id.trim();
    if !is_peer_id(peer_id) {
        return Err(RouteError::InvalidPeerId(peer_id.to_owned()));
    }
    let hash = Sha256::digest(peer_id.as_bytes());
    Ok(hex::encode(&hash[..16]))
}

fn checked_channel(channel: &str) -> Result<&str, RouteError> {
    let channel = channel.trim();
    if is_channel(channel) {
        Ok(channel)
    } else {
        Err(RouteError::InvalidChannel(channel.to_owned()))
    }
}

/// `agh.network.v0.<channel>.broadcast`.
pub fn broadcast_subject(channel: &str) -> Result<String, RouteError> {
    Ok(format!(
        "{SUBJECT_PREFIX}.{}.broadcast",
        checked_channel(channel)?
    ))
}

/// `agh.network.v0.<channel>.peer.<route_token>`.
pub fn direct_subject(channel: &str, peer_id: &str) -> Result<String, RouteError> {
    let channel = checked_channel(channel)?;
    Ok(format!(
        "{SUBJECT_PREFIX}.{channel}.peer.{}",
        route_token(peer_id)?
    ))
}

/// What a NATS subject of the v0 profile addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject<'a> {
    /// `agh.network.v0.<channel>.broadcast`.
    Broadcast {
        /// The channel.
        channel: &'a str,
    },
    /// `agh.network.v0.<channel>.peer.<route_token>`.
    Peer {
        /// The channel.
        channel: &'a str,
        /// The addressed peer's route token.
        route_token: &'a str,
    },
}

/// Parses a v0 subject; `None` for anything else.
pub fn parse_subject(subject: &str) -> Option<Subject<'_>> {
    let rest = subject.strip_prefix(SUBJECT_PREFIX)?.strip_prefix('.')?;
    let (channel, tail) = rest.split_once('.')?;
    if !is_channel(channel) {
        return None;
    }
    if tail == "broadcast" {
        return Some(Subject::Broadcast { channel });
    }
    let token = tail.strip_prefix("peer.")?;
    let is_token = token.len() == 32
        && token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    is_token.then_some(Subject::Peer {
        channel,
        route_token: token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_lowercase() {
        // Moved from the hand-written encoder this crate had: the `hex` crate writes lowercase.
        assert_eq!(hex::encode([0x00, 0x7f, 0xab, 0xff]), "007fabff");
    }

    #[test]
    fn reference_vectors() {
        assert_eq!(
            route_token("reviewer.sess-xyz").unwrap(),
            "790dd5515558f7784877abcbca51c5ba"
        );
        assert_eq!(
            route_token(" coder.sess-abc ").unwrap(),
            "07f9c1120ea61cb8f1a14ebec70c8912"
        );
        assert_eq!(
            broadcast_subject("builders").unwrap(),
            "agh.network.v0.builders.broadcast"
        );
        assert_eq!(
            direct_subject("builders", "reviewer.sess-xyz").unwrap(),
            "agh.network.v0.builders.peer.790dd5515558f7784877abcbca51c5ba"
        );
    }

    #[test]
    fn invalid_inputs() {
        assert!(matches!(
            route_token("BadPeer"),
            Err(RouteError::InvalidPeerId(_))
        ));
        assert!(matches!(
            broadcast_subject("Bad Channel"),
            Err(RouteError::InvalidChannel(_))
        ));
        assert!(direct_subject("builders", "BadPeer").is_err());
    }

    #[test]
    fn subjects_parse_back() {
        let s = direct_subject("builders", "echo.demo").unwrap();
        assert_eq!(
            parse_subject(&s),
            Some(Subject::Peer {
                channel: "builders",
                route_token: "96b61db360703e491489caf5fbbd45bc"
            })
        );
        assert_eq!(
            parse_subject("agh.network.v0.builders.broadcast"),
            Some(Subject::Broadcast {
                channel: "builders"
            })
        );
        for bad in [
            "agh.network.v1.b.broadcast",
            "agh.network.v0.B.broadcast",
            "agh.network.v0.b.peer.xyz",
            "agh.network.v0.b",
        ] {
            assert_eq!(parse_subject(bad), None, "{bad}");
        }
    }
}
