//! `agora directory search "…"`: one search over every agent and tool the node knows, from
//! every face (`directory.search` on the JSON-RPC face). A table by default (score, source,
//! trust, online, name, how to call it); `--explain` adds each score's explanation, `--json`
//! prints the result as the node sent it. Exit 0 with results or none, 1 for a refused search
//! (the −32602 names the field), 2 for usage or connection problems.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use crate::call::{Failure, RpcOpts, call, print, run, usage};

/// `agora directory …`.
#[derive(Debug, Subcommand)]
pub(crate) enum DirectoryCommand {
    /// Search every agent and tool known from every face, by words and by meaning.
    Search(SearchArgs),
}

/// `agora directory search`.
#[derive(Debug, Args)]
pub(crate) struct SearchArgs {
    #[command(flatten)]
    opts: RpcOpts,
    /// What you are looking for, in words.
    query: String,
    /// Only these sources (agh, ans, hyperspace, mcp, a2a; repeat or comma-separate).
    #[arg(long, value_delimiter = ',', value_name = "SOURCE")]
    source: Vec<String>,
    /// The lowest trust accepted: claimed, signed or verified.
    #[arg(long, value_name = "LEVEL")]
    trust: Option<String>,
    /// A capability or tag the result must list.
    #[arg(long, value_name = "TAG")]
    capability: Option<String>,
    /// Only agents or only tools.
    #[arg(long, value_name = "agent|tool")]
    kind: Option<String>,
    /// Only what is reachable now.
    #[arg(long)]
    online: bool,
    /// The highest price per call, in USDC (e.g. 0.01).
    #[arg(long, value_name = "USDC")]
    max_price: Option<String>,
    /// The highest measured latency, in milliseconds.
    #[arg(long, value_name = "MS")]
    max_latency_ms: Option<u64>,
    /// Most results (1–100).
    #[arg(long, default_value_t = 10)]
    limit: u64,
    /// Search this node only (default: this node, then the mesh).
    #[arg(long)]
    local: bool,
    /// Show why each result scored what it did.
    #[arg(long)]
    explain: bool,
    /// Print the JSON result instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `agora directory …`.
pub(crate) fn run_command(command: DirectoryCommand) -> ExitCode {
    match command {
        DirectoryCommand::Search(args) => run(search(args)),
    }
}

fn params(args: &SearchArgs) -> Value {
    let mut filters = Map::new();
    if !args.source.is_empty() {
        filters.insert("source".into(), json!(args.source));
    }
    let text = [
        ("trust", &args.trust),
        ("capability", &args.capability),
        ("kind", &args.kind),
        ("maxPrice", &args.max_price),
    ];
    for (k, v) in text {
        if let Some(v) = v {
            filters.insert(k.into(), json!(v));
        }
    }
    if args.online {
        filters.insert("online".into(), json!(true));
    }
    if let Some(ms) = args.max_latency_ms {
        filters.insert("maxLatencyMs".into(), json!(ms));
    }
    json!({
        "query": args.query,
        "filters": filters,
        "limit": args.limit,
        "scope": if args.local { "local" } else { "mesh" },
    })
}

async fn search(args: SearchArgs) -> Result<(), Failure> {
    if args.query.trim().is_empty() && args.source.is_empty() && args.capability.is_none() {
        return Err(usage(
            "say what you are looking for (a QUERY), or give a filter",
        ));
    }
    let result = call(
        &args.opts,
        agora_directory::rpc::SEARCH,
        Some(params(&args)),
    )
    .await?;
    if args.json {
        print(&result);
        return Ok(());
    }
    let results = result["results"].as_array().map_or(&[][..], Vec::as_slice);
    if results.is_empty() {
        println!("nothing found");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = results.iter().map(row).collect();
    crate::client::table(
        &["SCORE", "SOURCE", "TRUST", "ONLINE", "NAME", "CALL", "ID"],
        &rows,
    );
    if args.explain {
        println!();
        for (i, r) in results.iter().enumerate() {
            println!(
                "{}. {}: {}",
                i + 1,
                r["name"].as_str().unwrap_or(""),
                r["explain"]["text"].as_str().unwrap_or("")
            );
            if let Some(by) = r["answeredBy"].as_str() {
                println!("   answered by node {by}");
            }
        }
    }
    Ok(())
}

fn row(r: &Value) -> Vec<String> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let call = &r["call"];
    let how = [s(&call["face"]), s(&call["method"]), s(&call["target"])]
        .into_iter()
        .filter(|x| !x.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    vec![
        r["score"]
            .as_f64()
            .map_or_else(String::new, |x| format!("{x:.3}")),
        s(&r["source"]),
        s(&r["trust"]["level"]),
        if r["online"].as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        }
        .into(),
        s(&r["name"]),
        how,
        s(&r["id"]),
    ]
}
