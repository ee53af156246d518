//! The dashboard's shared snapshot: one snapshot is made per period however many dashboards
//! are open, and the number of open event streams is counted.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

/// A snapshot's JSON and when it was made.
type Made = Option<(Instant, Arc<String>)>;

/// The last snapshot and when it was made, shared by the open dashboards.
#[derive(Clone, Debug, Default)]
pub struct Cache {
    pub(super) last: Arc<tokio::sync::Mutex<Made>>,
    pub(super) viewers: Arc<AtomicUsize>,
}
