//! `agora bridge mcp add|list|remove`: the MCP bridge of a running node (Hyperspace spec §10.1,
//! `bridge.registerMCPServer`, `bridge.listMCPServers`, `bridge.unregisterMCPServer`) from the
//! shell, over the node's JSON-RPC face with the API key (`--api-key`/`AGORA_API_KEY`, as `agora
//! call`). Output and exit codes are `agora call`'s (`call`).

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::call::{self, RpcOpts, usage};

/// `agora bridge …`.
#[derive(Debug, Subcommand)]
pub(crate) enum BridgeCommand {
    /// MCP servers whose tools this node serves to the mesh.
    #[command(subcommand)]
    Mcp(McpCommand),
}

/// `agora bridge mcp …`.
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// Bridge an MCP server (`bridge.registerMCPServer`); prints `{serverId, tools}`.
    Add(AddArgs),
    /// List the bridged MCP servers (`bridge.listMCPServers`).
    List {
        #[command(flatten)]
        opts: RpcOpts,
        /// Print the JSON result instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Stop bridging an MCP server (`bridge.unregisterMCPServer`).
    Remove {
        #[command(flatten)]
        opts: RpcOpts,
        /// The server's id (its name).
        server_id: String,
    },
}

/// `agora bridge mcp add`.
#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    #[command(flatten)]
    opts: RpcOpts,
    /// `stdio://<name>` (a program the node starts) or `http://…` (Streamable HTTP).
    url: String,
    /// The server's name on the node (tools are named `<name>.<tool>`).
    #[arg(long, value_name = "N")]
    name: Option<String>,
    /// The program of a stdio server.
    #[arg(long, value_name = "C")]
    command: Option<String>,
    /// An argument of the program (repeatable, in order).
    #[arg(long = "arg", value_name = "A", allow_hyphen_values = true)]
    args: Vec<String>,
    /// A variable of the program's environment (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// The program's working directory.
    #[arg(long, value_name = "DIR")]
    cwd: Option<String>,
    /// Bridge only this tool (repeatable; all when absent).
    #[arg(long = "tool", value_name = "T")]
    tools: Vec<String>,
    /// A capability tag added to every tool (repeatable).
    #[arg(long = "tag", value_name = "T")]
    tags: Vec<String>,
    /// A price per call, as JSON (`{"points": 5}`).
    #[arg(long, value_name = "JSON")]
    price: Option<String>,
}

impl AddArgs {
    /// The params of `bridge.registerMCPServer`.
    fn params(&self) -> Result<Value, call::Failure> {
        let mut env = BTreeMap::new();
        for kv in &self.env {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(usage(format!("--env {kv:?} is not K=V")));
            };
            env.insert(k.to_owned(), v.to_owned());
        }
        let mut p = json!({"url": self.url});
        let mut set = |k: &str, v: Value| {
            p[k] = v;
        };
        if let Some(n) = &self.name {
            set("name", json!(n));
        }
        if let Some(c) = &self.command {
            set("command", json!(c));
        }
        if !self.args.is_empty() {
            set("args", json!(self.args));
        }
        if !env.is_empty() {
            set("env", json!(env));
        }
        if let Some(c) = &self.cwd {
            set("cwd", json!(c));
        }
        if !self.tools.is_empty() {
            set("tools", json!(self.tools));
        }
        if !self.tags.is_empty() {
            set("tags", json!(self.tags));
        }
        if let Some(price) = &self.price {
            let v: Value = serde_json::from_str(price)
                .map_err(|e| usage(format!("--price is not JSON: {e}")))?;
            set("price", v);
        }
        Ok(p)
    }
}

/// `agora bridge …`.
pub(crate) fn run(command: BridgeCommand) -> ExitCode {
    call::run(async move {
        let BridgeCommand::Mcp(command) = command;
        match command {
            McpCommand::Add(args) => {
                let params = args.params()?;
                call::print(
                    &call::call(&args.opts, "bridge.registerMCPServer", Some(params)).await?,
                );
            }
            McpCommand::List { opts, json } => {
                let result = call::call(&opts, "bridge.listMCPServers", Some(json!({}))).await?;
                if json {
                    call::print(&result);
                    return Ok(());
                }
                let servers = result["servers"].as_array().map_or(&[][..], Vec::as_slice);
                if servers.is_empty() {
                    println!("no MCP servers bridged");
                    return Ok(());
                }
                let rows: Vec<Vec<String>> = servers.iter().map(row).collect();
                crate::client::table(&["SERVER", "STATE", "ERA", "TOOLS", "URL"], &rows);
            }
            McpCommand::Remove { opts, server_id } => {
                let params = json!({"serverId": server_id});
                call::print(&call::call(&opts, "bridge.unregisterMCPServer", Some(params)).await?);
            }
        }
        Ok(())
    })
}

/// One row of the `agora bridge mcp list` table.
fn row(s: &Value) -> Vec<String> {
    let text = |k: &str| s[k].as_str().unwrap_or("").to_owned();
    let tools = s["tools"].as_array().map_or(0, Vec::len);
    vec![
        text("serverId"),
        text("state"),
        text("era"),
        tools.to_string(),
        text("url"),
    ]
}
