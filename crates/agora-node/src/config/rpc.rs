//! `[rpc]`: the JSON-RPC face's flow limits and its guard workers (`AGORA_RPC_*`), with their
//! defaults (the face and the Hyperspace service read them from here).

use std::time::Duration;

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
