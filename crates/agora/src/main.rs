//! `agora`: the Agora command-line tool.
//!
//! `agora agh …` exposes the AGH Network v0 engine to scripts (a stable contract: flags, output
//! lines and exit codes are relied upon).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod agh;
mod input;
mod node;

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
    /// Run a node: the AGH face for agents, the HTTP API, and the peer-to-peer mesh.
    Node(node::NodeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Agh(cmd) => agh::run(cmd),
        Command::Node(args) => node::run(args),
    }
}
