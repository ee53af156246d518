//! The Learning primitive (spec §5.1), sans IO: playbooks of context bullets that an agent grows
//! from its own executions (ACE's Generator/Reflector/Curator,
//! Agentic Context Engineering).
//!
//! | module | owns |
//! |---|---|
//! | [`playbook`] | bullets, ids, grow-and-refine (repeats, near-duplicates), pruning, curation to a token budget, stats |
//! | [`reflect`] | the built-in deterministic reflector, training modes, the LLM reflector's answer schema and prompt |
//! | [`params`] | the six methods' parameters and limits; their descriptors ([`DOCS`]) for the OpenRPC document |
//!
//! Everything here is a pure function of its inputs: time comes in as Unix milliseconds,
//! tokens are counted by an injected [`playbook::TokenCounter`], vectors (for near-duplicate
//! merging) are computed by the caller. The same inputs give the same bullets, ids, scores and
//! order on every node.
//!
//! A playbook is created by its first write (`learning.reflect` or `learning.addBullet`); the
//! other methods on a playbook that does not exist answer −32602 with `reason: "not-found"`
//! ([`not_found`]).

pub mod params;
pub mod playbook;
pub mod reflect;

pub use params::DOCS;

/// `learning.getPlaybook`.
pub const GET_PLAYBOOK: &str = "learning.getPlaybook";
/// `learning.getStats`.
pub const GET_STATS: &str = "learning.getStats";
/// `learning.feedback`.
pub const FEEDBACK: &str = "learning.feedback";
/// `learning.addBullet`.
pub const ADD_BULLET: &str = "learning.addBullet";
/// `learning.curate`.
pub const CURATE: &str = "learning.curate";
/// `learning.reflect`.
pub const REFLECT: &str = "learning.reflect";
/// Every `learning.*` method, in the order the node serves them.
pub const METHODS: [&str; 6] = [
    GET_PLAYBOOK,
    GET_STATS,
    FEEDBACK,
    ADD_BULLET,
    CURATE,
    REFLECT,
];

use serde_json::json;

use crate::jsonrpc::RpcError;

pub use playbook::{Bullet, Playbook, PlaybookLimits, Section, TokenCounter};
pub use reflect::{Execution, Mode, Reflection};

/// −32602 for a playbook or bullet that does not exist.
#[must_use]
pub fn not_found(what: &str, id: &str) -> RpcError {
    RpcError::invalid_params()
        .with_message(format!(
            "Invalid params: {what} {id:?} does not exist (a playbook is created by learning.reflect or learning.addBullet)"
        ))
        .with_data(json!({ "reason": "not-found", "field": what, "id": id }))
}
