//! # agora-directory — one directory behind every face, sans IO
//!
//! Agora's founding design is one node, many faces, one directory (issue 33). This crate holds
//! what that directory is, without sockets, tasks or clocks (time is an argument):
//!
//! - [`record`]: one agent or tool as one source knows it — AGH presence and catalogs, ANS
//!   manifests, Hyperspace tools and cards, bridged MCP tools and A2A agents — with its
//!   provenance (face, hosting node, signer), its trust (claimed, signed, verified), its
//!   capabilities and how to call it;
//! - [`query`]: `directory.search(query, filters?)`: its params, checks and filters;
//! - [`rpc`]: the method's name, description and result;
//! - [`index`]: the records of every feed, BM25 and embedding search fused into one ranking that
//!   prefers the live and explains every score, liveness (offline, then gone within the TTL)
//!   and the linking of one agent's records across sources;
//! - [`ask`]: what nodes say to each other to search each other's directories (the DHT and
//!   gossip tiers of a mesh search);
//! - [`hit`]: one search result and its explanation;
//! - [`merge`]: the answers of several nodes to one search, merged and deduplicated;
//! - [`catalog`]: the AI Catalog document (`/.well-known/ai-catalog.json`);
//! - [`eval`]: nDCG and recall for the labelled relevance set.
//!
//! Feature `index` (default) builds the index (it needs `agora-vindex` and `bm25`); without it
//! the crate is the records, the search params and the node-to-node messages (what the fuzz
//! targets read).
//!
//! The node (`agora-node`'s `directory/`) feeds the index from its services, embeds texts on
//! worker threads and serves the search on every face.
#![warn(missing_docs)]

pub mod ask;
pub mod catalog;
pub mod eval;
pub mod hit;
#[cfg(feature = "index")]
pub mod index;
#[cfg(feature = "index")]
mod keywords;
pub mod merge;
pub mod query;
pub mod record;
pub mod rpc;

pub use hit::{Explain, Hit};
#[cfg(feature = "index")]
pub use index::{Applied, Config, Directory, FeedItem, Fusion};
pub use query::{Filters, Query, QueryError, Scope, SearchParams};
pub use record::{Call, Kind, Provenance, Record, Source, Trust, TrustLevel};
