//! The Self-Improving primitive (spec §5.2, §7.3, §9.3, §9.4), sans IO: trajectories, the
//! library of one task type, exemplar selection, curation, augmentation by critique, difficulty
//! and contributor reputation.
//!
//! | module | owns |
//! |---|---|
//! | [`trajectory`] | the trajectory record, its checks (−32008), states, ids, content hash |
//! | [`library`] | admission, utility, reputation, exemplars (strategies, diversity), curation, critique, difficulty, stats |
//! | [`params`] | the other methods' parameters; the six methods' descriptors ([`DOCS`]) for the OpenRPC document |
//! | [`augment`] | `FULL_PIPELINE`'s prompt and the schema of the regenerated run |
//! | [`gossip`] | the trajectory and reputation topics' payloads, redaction, attribution, the gossip score of a contributor |
//!
//! Every function is pure: time, randomness and reputation come in as arguments, so the same
//! inputs give the same scores and order on every node. What goes on the wire is redacted with
//! [`crate::guard::redact_value`] first ([`gossip::redacted`]). The node's side (libraries in
//! redb, the topics, reputation in gossipsub's peer scores, the `improving.*` methods) is
//! `agora-node`'s `hyperspace::improving`.

pub mod augment;
pub mod gossip;
pub mod library;
pub mod params;
pub mod trajectory;

pub use params::DOCS;

/// `improving.recordTrajectory`.
pub const RECORD_TRAJECTORY: &str = "improving.recordTrajectory";
/// `improving.getExemplars`.
pub const GET_EXEMPLARS: &str = "improving.getExemplars";
/// `improving.curate`.
pub const CURATE: &str = "improving.curate";
/// `improving.augment`.
pub const AUGMENT: &str = "improving.augment";
/// `improving.assessDifficulty`.
pub const ASSESS_DIFFICULTY: &str = "improving.assessDifficulty";
/// `improving.getLibraryStats`.
pub const GET_LIBRARY_STATS: &str = "improving.getLibraryStats";
/// Every `improving.*` method, in the order the node serves them.
pub const METHODS: [&str; 6] = [
    RECORD_TRAJECTORY,
    GET_EXEMPLARS,
    CURATE,
    AUGMENT,
    ASSESS_DIFFICULTY,
    GET_LIBRARY_STATS,
];
/// The `selfImproving.*` alias of each of [`METHODS`], at the same index.
pub const ALIASES: [&str; 6] = [
    "selfImproving.recordTrajectory",
    "selfImproving.getExemplars",
    "selfImproving.curate",
    "selfImproving.augment",
    "selfImproving.assessDifficulty",
    "selfImproving.getLibraryStats",
];

/// The `improving.*` name of `method`, which may be one of [`METHODS`] or of [`ALIASES`].
pub fn canonical(method: &str) -> Option<&'static str> {
    METHODS
        .iter()
        .zip(ALIASES)
        .find(|(m, a)| **m == method || *a == method)
        .map(|(m, _)| *m)
}

pub use library::{Library, Reputation, Strategy};
pub use trajectory::{RecordParams, Trajectory, TrajectoryLimits, TrajectoryState};
