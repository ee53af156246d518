//! The connection manager's watermarks (`peers_low`, `AGORA_PEERS_LOW`, `--peers-low`;
//! `peers_high`, `AGORA_PEERS_HIGH`, `--peers-high`), at the top level of `agora.toml`.

use std::time::Duration;

/// The watermarks and the grace period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLimits {
    /// Trim down to this many connected peers.
    pub low: usize,
    /// Trim only when more than this many peers are connected.
    pub high: usize,
    /// How long a new or just-used connection is left alone.
    pub grace: Duration,
}

impl Default for PeerLimits {
    fn default() -> Self {
        Self {
            low: 8,
            high: 16,
            grace: Duration::from_secs(10),
        }
    }
}
