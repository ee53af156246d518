//! The Tool primitive on the node (spec §4.3 "Tool Primitive"): `tool.register`,
//! `tool.getAnalytics` and `tool.listRegistered` are answered by the Hyperspace service from its
//! registry (`agora_hyperspace::tool`); the two that reach across the mesh live here.
//!
//! | module | owns |
//! |---|---|
//! | [`discover`] | `tool.discover` over the local registry, then the DHT, then a gossip ask |
//! | [`listing`] | the directory's feed: every tool known here as a directory record |
//! | [`invoke`] | `tool.invoke` of local and remote tools (priced ones charged first), and node-to-node requests on `/agora/hyperspace/1.0.0` |

pub(super) mod discover;
pub(super) mod invoke;
pub(crate) mod listing;
