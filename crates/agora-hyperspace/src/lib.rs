//! # agora-hyperspace — the Hyperspace Gossiping Agents Protocol, sans IO
//!
//! Signed v2 envelopes (sign, verify, domain separation per topic, replay window), gossip topic
//! names and owner rules, and JSON-RPC 2.0 framing with the spec's error codes. No sockets, no
//! async, no clock reads: time and randomness come in as arguments.
#![warn(missing_docs)]

pub mod announce;
pub mod card;
pub mod envelope;
pub mod frames;
pub mod guard;
pub mod improving;
pub mod jsonrpc;
pub mod learning;
pub mod memory;
pub mod params;
pub mod payments;
pub mod peer_id;
pub mod recursive;
pub mod state;
pub mod strict_key;
pub mod timestamp;
pub mod tool;
pub mod tool_record;
pub mod topic;

pub use envelope::{Envelope, KeyCache, ReplayWindow, VerifyError, sign, verify, verify_keyed};
pub use peer_id::peer_id_of;
pub use topic::Topic;
