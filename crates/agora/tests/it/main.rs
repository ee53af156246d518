//! The node's integration suite: real `agora` processes (nodes and CLI commands) on 127.0.0.1
//! with ephemeral ports, driven over their faces (AGH WebSocket, HTTP API, JSON-RPC, AGTP, NATS)
//! and through the command line. One test binary, so the node is linked once; each module is one
//! area, and `support` is the shared harness (starting nodes, agents, polling with deadlines).
//!
//! Run everything with `cargo test -p agora --test it`, one area with a module filter:
//!
//! ```sh
//! cargo test -p agora --test it -- memory::
//! cargo test -p agora --test it -- hostile_rpc::a_junk_flood
//! ```
//!
//! Tests that need a program from outside the workspace (`nats-server`, Chromium and
//! `chromedriver`, Node.js, `python3`, the MiniLM model) print one `skipped:` line and pass
//! without it, unless `AGORA_REQUIRE_EXTERNAL=1` (as `.ci/run` sets) makes that a failure.
//!
//! All modules share one process: nothing here may change process-wide state (environment,
//! working directory); children get their settings through `Command`. Tests that measure a
//! node's latency or memory under load hold [`support::HEAVY`] so they do not overlap.

mod support;

mod agtp_ans;
mod agtp_cli;
mod agtp_reference;
mod bridge_a2a;
mod bridge_mcp;
mod cli;
mod cli_call;
mod client;
mod crash;
mod crash_loop;
mod dashboard;
mod dashboard_browser;
mod directory;
mod full_disk;
mod hostile_faces;
mod hostile_guard;
mod hostile_rpc;
mod hosts;
mod hyperspace_cli;
mod hyperspace_mesh;
mod improving;
mod interop_js;
mod layout;
mod learning;
mod logs;
mod mcp_face;
mod memory;
mod memory_cli;
mod mesh;
mod nats;
mod openrpc;
mod partition;
mod payments;
mod pulse;
mod restart;
mod rpc;
mod sdk_python;
mod sdk_typescript;
mod wrong_face;
