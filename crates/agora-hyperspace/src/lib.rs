//! # agora-hyperspace — the Hyperspace Gossiping Agents Protocol, sans IO
//!
//! Signed v2 envelopes (sign, verify, domain separation per topic, replay window), gossip topic
//! names and owner rules, JSON-RPC 2.0 framing with the spec's error codes, and the eight
//! primitives as state machines. No sockets, no async, no clock reads: time and randomness come
//! in as arguments. The Agora node drives it.
//!
//! | concern | module | Hyperspace spec |
//! |---|---|---|
//! | signed envelopes v2, replay window | [`envelope`] | §2.1 "Signed Envelopes (v2)", §9.2 |
//! | strict Ed25519 verification with a decoded key kept | [`strict_key`] | §2.1 |
//! | PeerIds of Ed25519 keys | [`peer_id`] | §2.1 |
//! | gossip topic names, owner rules | [`topic`] | §2.1 "Gossip Topics", §7.1 |
//! | gossipsub's length-delimited frames | [`frames`] | §2.1 |
//! | JSON-RPC 2.0 framing, error codes | [`jsonrpc`] | §2.2, §3, §8 |
//! | params decoding and the shared −32602/−32003 errors | [`params`] | §2.2, §8 |
//! | method descriptors (params, results, errors, examples) for the OpenRPC document | [`openrpc`] | §2.2, §4–§6, §8 |
//! | RFC 3339 timestamps | [`timestamp`] | §4.1 (`createdAt`), §4.4 |
//! | State primitive: sessions, key/value state, episodes | [`state`] | §4.1 |
//! | Guard primitive: budgets, rate limits, safety, schema validation | [`guard`] | §4.2, §9.3 |
//! | Tool primitive: registry, discovery, analytics, invoke routing | [`tool`] | §4.3 |
//! | one tool record and its checks | [`tool_record`] | §4.3 |
//! | capability cards and delta heartbeats | [`card`] | §2.4, §7.4 |
//! | capability announcements on the DHT | [`announce`] | §2.1, §2.4, §4.3 |
//! | Memory primitive: ring, records, search merge, anti-entropy | [`memory`] | §4.4 |
//! | Recursive primitive: loop detection, depth, traces | [`recursive`] | §4.5 |
//! | Learning primitive: playbooks, reflection | [`learning`] | §5.1 |
//! | Self-Improving primitive: trajectories, libraries, curation | [`improving`] | §5.2, §7.3, §9.4 |
//! | Micropayments primitive: challenges, credentials, channels, settlement | [`payments`] | §6 |
//! | Sybil resistance: pulse rounds (work, Merkle commitment, challenge, participation weights) | [`pulse`] | §9.4 |
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
pub mod openrpc;
pub mod params;
pub mod payments;
pub mod peer_id;
pub mod published;
pub mod pulse;
pub mod recursive;
pub mod state;
pub mod strict_key;
pub mod timestamp;
pub mod tool;
pub mod tool_input;
pub mod tool_record;
pub mod topic;

pub use envelope::{Envelope, KeyCache, ReplayWindow, VerifyError, sign, verify, verify_keyed};
pub use peer_id::peer_id_of;
pub use topic::Topic;
