//! The Memory primitive (`memory.*`), sans IO: the consistent hash ring that places memories on
//! members, memory records and tombstones with last-writer-wins, the parameters of the six
//! methods, the merge of partial search results, the node-to-node wire messages and the
//! anti-entropy digests.
//!
//! Hyperspace spec references: §4.4 "Memory Primitive" (750
//! virtual nodes, 3× replication, SHA-256 routing, O(log V) lookup; the methods and the
//! `memory.search` example), §2.1 topic `hyperspace/crdt/sync/memory`, §8 −32007 "Replication
//! Failed", §9.3 "Memory encryption at rest", "GDPR-compliant data deletion". The spec leaves the
//! ring's details, ids, versions and the replication protocol open; the choices pinned here are
//! listed in `docs/hyperspace-wire.md` "Memory" (each has one function and a vector or test).
//!
//! | module | owns |
//! |---|---|
//! | [`ring`] | the ring: positions, owners of a key, covering sets, which keys move |
//! | [`record`] | memory records, tombstones, versions, the last-writer-wins merge, ids, times |
//! | [`params`] | the six methods' parameters and their limits; their descriptors ([`DOCS`]) for the OpenRPC document |
//! | [`search`] | search hits and the merge of partial results |
//! | [`wire`] | node-to-node requests and responses (`/agora/memory/1.0.0`) |
//! | [`sync`] | anti-entropy digests and version diffs |

pub mod params;
pub mod record;
pub mod ring;
pub mod search;
pub mod sync;
pub mod wire;

pub use params::DOCS;

/// `memory.store`.
pub const STORE: &str = "memory.store";
/// `memory.search`.
pub const SEARCH: &str = "memory.search";
/// `memory.get`.
pub const GET: &str = "memory.get";
/// `memory.list`.
pub const LIST: &str = "memory.list";
/// `memory.delete`.
pub const DELETE: &str = "memory.delete";
/// `memory.archive`.
pub const ARCHIVE: &str = "memory.archive";
/// `memory.reembed` (Agora's, not the spec's: an operator moves the memories this node holds
/// from the lexical fallback to the installed embedder).
pub const REEMBED: &str = "memory.reembed";
/// Every `memory.*` method, in the order the node serves them.
pub const METHODS: [&str; 7] = [STORE, SEARCH, GET, LIST, DELETE, ARCHIVE, REEMBED];

/// The gossip topic of memory synchronisation (spec §2.1).
pub const SYNC_TOPIC: &str = "hyperspace/crdt/sync/memory";
