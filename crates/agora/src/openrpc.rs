//! `agora openrpc`: the OpenRPC document of a node's JSON-RPC face, without a node
//! ([`agora_node::openrpc`]); `--markdown` prints the method tables of `docs/node.md` instead,
//! `--splice <file>` rewrites them in place between their markers.

use std::path::PathBuf;
use std::process::ExitCode;

use agora_node::openrpc;

/// `agora openrpc` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct OpenrpcArgs {
    /// The `servers` entry: the node's JSON-RPC face.
    #[arg(long, default_value = openrpc::DEFAULT_RPC_URL)]
    server: String,
    /// Print the Markdown tables of `docs/node.md` instead of the JSON document.
    #[arg(long, conflicts_with = "splice")]
    markdown: bool,
    /// Replace the tables between the markers of this Markdown file (`docs/node.md`).
    #[arg(long, value_name = "FILE")]
    splice: Option<PathBuf>,
}

/// Runs `agora openrpc`.
pub(crate) fn run(args: &OpenrpcArgs) -> ExitCode {
    let document = openrpc::document(&args.server);
    if let Some(path) = &args.splice {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("agora openrpc: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        };
        let Some(spliced) = openrpc::splice_markdown(&text, &openrpc::markdown(&document)) else {
            eprintln!(
                "agora openrpc: {} has no {} … {} markers",
                path.display(),
                openrpc::MARKDOWN_BEGIN,
                openrpc::MARKDOWN_END
            );
            return ExitCode::FAILURE;
        };
        if let Err(e) = std::fs::write(path, spliced) {
            eprintln!("agora openrpc: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    if args.markdown {
        print!("{}", openrpc::markdown(&document));
    } else {
        match serde_json::to_string_pretty(&document) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("agora openrpc: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
