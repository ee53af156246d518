//! `agora`: the Agora command-line tool.
//!
//! `agora agh …` exposes the AGH Network v0 engine to scripts (a stable contract: flags, output
//! lines and exit codes are relied upon); `agora discover` and `agora ans …` talk to an AGTP
//! Agent Name Service (`agtp`); `agora memory install-model` installs the sentence-embedding
//! model the node's memory uses (`memory`); `agora call`, `agora tools` and `agora session`
//! talk to the Hyperspace JSON-RPC face (`call`); `agora directory search` searches the node's
//! directory (`directory`); `agora bridge mcp …` manages the node's MCP
//! bridge through it (`bridge`); `agora mcp` serves a node's tools to a desktop MCP client over
//! stdio (`mcp`); `agora openrpc` prints the OpenRPC document of the JSON-RPC face (`openrpc`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod agh;
mod agtp;
mod bridge;
mod call;
mod client;
mod directory;
mod http;
mod hyperspace;
mod input;
mod mcp;
mod memory;
mod node;
mod openrpc;

/// jemalloc, whose background thread gives freed pages back to the system within seconds;
/// glibc's malloc kept the memory of closed connections (thousands of them after a flood) for
/// the life of the process.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Agora: let AI agents find each other, learn what each can do, and hand work to each other.
#[derive(Debug, Parser)]
#[command(name = "agora", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// AGH Network v0 tools: validate envelopes, compute capability digests, route tokens.
    #[command(subcommand)]
    Agh(agh::AghCommand),
    /// Hyperspace tools: sign and verify v2 gossip envelopes.
    #[command(subcommand)]
    Hyperspace(hyperspace::HyperspaceCommand),
    /// Semantic memory: install the sentence-embedding model.
    #[command(subcommand)]
    Memory(memory::MemoryCommand),
    /// Run a node: the AGH face for agents, the HTTP API, and the peer-to-peer mesh.
    Node(node::NodeArgs),
    /// Show a running node's identity, listeners, neighbours and counters.
    Status {
        #[command(flatten)]
        opts: client::ClientOpts,
    },
    /// List the peers a node knows (local and remote).
    Peers {
        #[command(flatten)]
        opts: client::ClientOpts,
        /// Only this channel.
        #[arg(long)]
        channel: Option<String>,
    },
    /// Ask who is in a channel (AGH whois), optionally with full capability catalogs.
    Whois {
        #[command(flatten)]
        opts: client::ClientOpts,
        #[command(flatten)]
        args: client::WhoisArgs,
    },
    /// Say something to a channel.
    Say {
        #[command(flatten)]
        opts: client::ClientOpts,
        #[command(flatten)]
        args: client::SayArgs,
    },
    /// Hand work to a peer (a direct in an interaction) and follow its receipts and traces.
    Send {
        #[command(flatten)]
        opts: client::ClientOpts,
        #[command(flatten)]
        args: client::SendArgs,
    },
    /// Manage local capability catalogs.
    #[command(subcommand)]
    Capability(client::CapabilityCommand),
    /// Call a method of a node's Hyperspace JSON-RPC face; prints the result as JSON.
    Call(call::CallArgs),
    /// List the tools a node can find (`tool.discover`).
    Tools(call::ToolsArgs),
    /// Serve the tools of a running node to a desktop MCP client over standard input and output
    /// (a proxy to the node's `/mcp`).
    Mcp(mcp::McpArgs),
    /// Create or end a Hyperspace session.
    #[command(subcommand)]
    Session(call::SessionCommand),
    /// Bridges: MCP servers whose tools the node serves to the mesh.
    #[command(subcommand)]
    Bridge(bridge::BridgeCommand),
    /// The directory: every agent and tool known from every face, searched by meaning.
    #[command(subcommand)]
    Directory(directory::DirectoryCommand),
    /// Ask an Agent Name Service for agents (AGTP DISCOVER) and verify its signed answer.
    Discover(agtp::DiscoverArgs),
    /// Agent Name Service governance: keys, and signed ACTIVATE and lifecycle changes.
    #[command(subcommand)]
    Ans(agtp::AnsCommand),
    /// Print the OpenRPC document of a node's JSON-RPC face (or its Markdown tables).
    Openrpc(openrpc::OpenrpcArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Agh(cmd) => agh::run(cmd),
        Command::Hyperspace(cmd) => hyperspace::run(cmd),
        Command::Memory(cmd) => memory::run(cmd),
        Command::Node(args) => node::run(args),
        Command::Status { opts } => client::block_on(client::status(opts)),
        Command::Peers { opts, channel } => client::block_on(client::peers(opts, channel)),
        Command::Whois { opts, args } => client::block_on(client::whois(opts, args)),
        Command::Say { opts, args } => client::block_on(client::say(opts, args)),
        Command::Send { opts, args } => client::block_on(client::send(opts, args)),
        Command::Capability(command) => client::block_on(client::capability(command)),
        Command::Call(args) => call::call_command(args),
        Command::Tools(args) => call::tools_command(args),
        Command::Session(cmd) => call::session_command(cmd),
        Command::Bridge(cmd) => bridge::run(cmd),
        Command::Mcp(args) => mcp::run(args),
        Command::Directory(cmd) => directory::run_command(cmd),
        Command::Discover(args) => client::block_on(agtp::discover(&args)),
        Command::Ans(cmd) => agtp::ans(cmd),
        Command::Openrpc(args) => openrpc::run(&args),
    }
}
