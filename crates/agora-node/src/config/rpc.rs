//! `[rpc]`: the JSON-RPC face's flow limits and its guard workers (`AGORA_RPC_*`), with their
//! defaults (the face and the Hyperspace service read them from here).

use std::time::Duration;

use serde::Deserialize;
use struct_patch::Patch;

use super::{ConfigError, check, de};

/// Largest JSON-RPC message accepted (larger ones close the connection with 1009).
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// Default requests per second per connection.
pub const CONN_RATE: f64 = 200.0;
/// Default requests per second per credential (API key or session token).
pub const KEY_RATE: f64 = 1000.0;
/// Default most frames one connection may have in flight (read, reply not yet written).
pub const CONN_FRAMES: usize = 64;
/// Default most bytes one connection may hold: frames in flight, their replies and the
/// server-to-client requests waiting to be written. Also the largest reply to one frame.
pub const CONN_BYTES: usize = 4 << 20;
/// Default most bytes all JSON-RPC connections together may hold.
pub const TOTAL_BYTES: usize = 64 << 20;
/// Default longest time one write to a client may take before the connection is closed.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `guard.validate` / `guard.checkSafety` calls running at once (worker threads): the
/// cores of a small machine, so long calls never take more than that from the node.
pub const GUARD_WORKERS: usize = 2;
/// Default time budget of one such call, waiting included: a validation within the default
/// limits takes well under 0.5 s even in a debug build.
pub const GUARD_BUDGET: Duration = Duration::from_secs(2);

/// `[rpc]` settings: the JSON-RPC face's flow limits and its guard workers.
#[derive(Clone, Debug, PartialEq, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[rpc]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct RpcConfig {
    /// An older name of the top-level `api_key` (`AGORA_RPC_API_KEY`): each layer's value is
    /// moved there as the layer is applied, so this is always `None` once applied.
    #[patch(skip_wrap)]
    pub api_key: Option<String>,
    /// Requests per second per connection (`conn_rate`, `AGORA_RPC_CONN_RATE`).
    pub conn_rate: f64,
    /// Requests per second per credential (`key_rate`, `AGORA_RPC_KEY_RATE`).
    pub key_rate: f64,
    /// Frames in flight per connection (`conn_frames`, `AGORA_RPC_CONN_FRAMES`).
    pub conn_frames: usize,
    /// Bytes held per connection (`conn_bytes`, `AGORA_RPC_CONN_BYTES`).
    pub conn_bytes: usize,
    /// Bytes held for all connections (`total_bytes`, `AGORA_RPC_TOTAL_BYTES`).
    pub total_bytes: usize,
    /// Longest write to a client (`write_timeout_secs`, `AGORA_RPC_WRITE_TIMEOUT_SECS`).
    #[patch(attribute(serde(rename = "write_timeout_secs", deserialize_with = "de::secs")))]
    pub write_timeout: Duration,
    /// `guard.validate` / `guard.checkSafety` calls running at once (`guard_workers`,
    /// `AGORA_RPC_GUARD_WORKERS`).
    pub guard_workers: usize,
    /// Time budget of one such call, waiting included (`guard_budget_ms`,
    /// `AGORA_RPC_GUARD_BUDGET_MS`).
    #[patch(attribute(serde(rename = "guard_budget_ms", deserialize_with = "de::millis")))]
    pub guard_budget: Duration,
}

impl Default for RpcConfig {
    fn default() -> Self {
        Self {
            api_key: None,
            conn_rate: CONN_RATE,
            key_rate: KEY_RATE,
            conn_frames: CONN_FRAMES,
            conn_bytes: CONN_BYTES,
            total_bytes: TOTAL_BYTES,
            write_timeout: WRITE_TIMEOUT,
            guard_workers: GUARD_WORKERS,
            guard_budget: GUARD_BUDGET,
        }
    }
}

impl RpcConfig {
    /// Checks each `[rpc]` setting.
    pub(super) fn settle(&self) -> Result<(), ConfigError> {
        let rate = "must be at least 1 request per second";
        check("rpc.conn_rate", self.conn_rate, 1.0..=f64::MAX, rate)?;
        check("rpc.key_rate", self.key_rate, 1.0..=f64::MAX, rate)?;
        check(
            "rpc.conn_frames",
            self.conn_frames,
            1..,
            "must be at least 1",
        )?;
        // A connection must be able to hold one message of the largest size.
        let bytes = "must be at least 1048576 bytes (one message of the largest size)";
        check(
            "rpc.conn_bytes",
            self.conn_bytes,
            MAX_MESSAGE_BYTES..,
            bytes,
        )?;
        check(
            "rpc.total_bytes",
            self.total_bytes,
            MAX_MESSAGE_BYTES..,
            bytes,
        )?;
        check(
            "rpc.write_timeout_secs",
            self.write_timeout,
            Duration::from_secs(1)..,
            "must be at least 1 second",
        )?;
        check(
            "rpc.guard_workers",
            self.guard_workers,
            1..=64,
            "must be 1..64",
        )?;
        check(
            "rpc.guard_budget_ms",
            self.guard_budget,
            Duration::from_millis(10)..=Duration::from_millis(600_000),
            "must be 10..600000 milliseconds",
        )
    }
}
