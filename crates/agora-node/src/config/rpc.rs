//! `[rpc]`: the JSON-RPC face's flow limits and its guard workers (`AGORA_RPC_*`), with their
//! defaults (the face and the Hyperspace service read them from here).

use serde::Deserialize;

use std::time::Duration;

use super::{Config, ConfigError, Overrides, in_range, set_in_range};

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

impl Config {
    /// Applies the `[rpc]` settings of one layer.
    pub(super) fn apply_rpc(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        let rate = "must be at least 1 request per second";
        set_in_range(
            &mut self.rpc_conn_rate,
            "rpc.conn_rate",
            o.rpc.conn_rate,
            1.0..=f64::MAX,
            rate,
        )?;
        set_in_range(
            &mut self.rpc_key_rate,
            "rpc.key_rate",
            o.rpc.key_rate,
            1.0..=f64::MAX,
            rate,
        )?;
        set_in_range(
            &mut self.rpc_conn_frames,
            "rpc.conn_frames",
            o.rpc.conn_frames,
            1..,
            "must be at least 1",
        )?;
        // A connection must be able to hold one message of the largest size.
        let bytes = "must be at least 1048576 bytes (one message of the largest size)";
        set_in_range(
            &mut self.rpc_conn_bytes,
            "rpc.conn_bytes",
            o.rpc.conn_bytes,
            MAX_MESSAGE_BYTES..,
            bytes,
        )?;
        set_in_range(
            &mut self.rpc_total_bytes,
            "rpc.total_bytes",
            o.rpc.total_bytes,
            MAX_MESSAGE_BYTES..,
            bytes,
        )?;
        if let Some(secs) = o.rpc.write_timeout_secs {
            self.rpc_write_timeout = Duration::from_secs(in_range(
                "rpc.write_timeout_secs",
                secs,
                1..,
                "must be at least 1 second",
            )?);
        }
        set_in_range(
            &mut self.rpc_guard_workers,
            "rpc.guard_workers",
            o.rpc.guard_workers,
            1..=64,
            "must be 1..64",
        )?;
        if let Some(ms) = o.rpc.guard_budget_ms {
            self.rpc_guard_budget = Duration::from_millis(in_range(
                "rpc.guard_budget_ms",
                ms,
                10..=600_000,
                "must be 10..600000 milliseconds",
            )?);
        }
        Ok(())
    }
}

/// `[rpc]` in one layer of settings (see [`Overrides`]).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RpcOverrides {
    /// `api_key`.
    pub api_key: Option<String>,
    /// `conn_rate`.
    pub conn_rate: Option<f64>,
    /// `key_rate`.
    pub key_rate: Option<f64>,
    /// `conn_frames`.
    pub conn_frames: Option<usize>,
    /// `conn_bytes`.
    pub conn_bytes: Option<usize>,
    /// `total_bytes`.
    pub total_bytes: Option<usize>,
    /// `write_timeout_secs`.
    pub write_timeout_secs: Option<u64>,
    /// `guard_workers`.
    pub guard_workers: Option<usize>,
    /// `guard_budget_ms`.
    pub guard_budget_ms: Option<u64>,
}
