//! The faces: how agents, tools and operators reach the node.
//!
//! | module | face |
//! |---|---|
//! | [`serve`] | the serving layer in front of the axum faces: connection limits, timeouts, Host, Origin and API key checks |
//! | [`agh_ws`] | the AGH WebSocket face, `ws://<agh-listen>/agh/v0` (AGH Network v0) |
//! | [`http`] | the HTTP API, the dashboard and `/metrics` |
//! | [`mcp`] | the node as an MCP server, `/mcp` on the HTTP face (Streamable HTTP, both eras) |
//! | [`rpc`] | the Hyperspace JSON-RPC 2.0 WebSocket face (Hyperspace spec §2.2) |
//! | [`agtp`] | the AGTP listener, its TLS and the AGTP client (AGTP ANS draft) |
//! | [`nats`] | the AGH bridge to NATS (over `async-nats`) |
//! | [`serving`] | binding the listeners, serving every face until the node stops |
//! | [`state`] | what the axum faces share: the services' senders |
//! | [`wrong_face`] | one line naming the right face for a client that speaks another face's protocol |

pub mod a2a;
pub mod agh_ws;
pub mod agtp;
pub mod http;
pub mod mcp;
pub mod nats;
pub mod rpc;
pub mod serve;
pub mod serving;
pub mod state;
pub mod wrong_face;
