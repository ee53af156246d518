//! `agora call`, `agora tools`, `agora session`: the Hyperspace JSON-RPC face from the shell.
//!
//! Contract (scripts rely on it): the result is printed on stdout as JSON (pretty), exit 0; a
//! JSON-RPC error prints `error <code>: <message>` on stderr (and `data: <json>` on a second line
//! when the error has data), exit 1; a usage or connection problem prints `agora: <what>` on
//! stderr, exit 2. `--batch FILE` sends the file's array of `{"method", "params"}` as one
//! JSON-RPC batch and prints the array of responses in request order (exit 1, with
//! `error: at least one call of the batch failed …` on stderr, when any is an error).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// How long to wait for the node's answer.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Where the JSON-RPC face is and how to authenticate.
#[derive(Debug, Args)]
pub(crate) struct RpcOpts {
    /// The node's JSON-RPC face.
    #[arg(
        long,
        env = "AGORA_RPC",
        default_value = "ws://127.0.0.1:3100",
        value_name = "URL"
    )]
    rpc: String,
    /// The API key or a session token, sent as `Authorization: Bearer`.
    #[arg(long, env = "AGORA_TOKEN", hide_env_values = true, value_name = "T")]
    token: Option<String>,
}

/// `agora call`.
#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    #[command(flatten)]
    opts: RpcOpts,
    /// The method (`state.createSession`, `memory.search`, …).
    #[arg(required_unless_present = "batch")]
    method: Option<String>,
    /// Its parameters as JSON (an object or an array); `-` reads them from stdin.
    params: Option<String>,
    /// Send the calls of FILE (a JSON array of `{"method", "params"}`) as one batch.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["method", "params"])]
    batch: Option<std::path::PathBuf>,
}

/// `agora session …`.
#[derive(Debug, Subcommand)]
pub(crate) enum SessionCommand {
    /// Create a session (`state.createSession`); prints its id and token.
    Create {
        #[command(flatten)]
        opts: RpcOpts,
        /// Extra parameters as JSON (e.g. `{"ttl": 3600}`).
        params: Option<String>,
    },
    /// End a session (`state.endSession`).
    End {
        #[command(flatten)]
        opts: RpcOpts,
        /// The session id.
        id: String,
    },
}

/// `agora tools`.
#[derive(Debug, Args)]
pub(crate) struct ToolsArgs {
    #[command(flatten)]
    opts: RpcOpts,
    /// Only tools matching this query.
    #[arg(long)]
    query: Option<String>,
    /// Print the JSON result instead of a table.
    #[arg(long)]
    json: bool,
}

enum Failure {
    /// Usage or connection: exit 2.
    Usage(String),
    /// A JSON-RPC error: exit 1.
    Rpc(Value),
    /// A batch with at least one error (printed with the responses): exit 1.
    Batch,
}

fn usage(m: impl Into<String>) -> Failure {
    Failure::Usage(m.into())
}

fn finish(outcome: Result<(), Failure>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            eprintln!("agora: {m}");
            ExitCode::from(2)
        }
        Err(Failure::Batch) => {
            eprintln!("error: at least one call of the batch failed (see its response)");
            ExitCode::from(1)
        }
        Err(Failure::Rpc(e)) => {
            eprintln!(
                "error {}: {}",
                e["code"],
                e["message"].as_str().unwrap_or("(no message)")
            );
            if let Some(d) = e.get("data") {
                eprintln!("data: {d}");
            }
            ExitCode::from(1)
        }
    }
}

fn run(fut: impl Future<Output = Result<(), Failure>>) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => finish(rt.block_on(fut)),
        Err(e) => finish(Err(usage(format!("cannot start the async runtime: {e}")))),
    }
}

fn params_of(text: Option<&str>) -> Result<Option<Value>, Failure> {
    let text = match text {
        None => return Ok(None),
        Some("-") => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| usage(format!("cannot read the parameters from stdin: {e}")))?;
            s
        }
        Some(t) => t.to_owned(),
    };
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| usage(format!("the parameters are not JSON: {e}")))?;
    if !v.is_object() && !v.is_array() {
        return Err(usage("the parameters must be a JSON object or array"));
    }
    Ok(Some(v))
}

/// Sends one frame to the face and returns the answer.
async fn exchange(opts: &RpcOpts, frame: &Value) -> Result<Value, Failure> {
    let mut request = opts
        .rpc
        .as_str()
        .into_client_request()
        .map_err(|e| usage(format!("{:?} is not a WebSocket URL: {e}", opts.rpc)))?;
    if let Some(t) = &opts.token {
        let value = format!("Bearer {t}")
            .parse()
            .map_err(|_| usage("the token cannot go in a header"))?;
        request.headers_mut().insert("authorization", value);
    }
    let connect = tokio_tungstenite::connect_async(request);
    let (mut ws, _) = tokio::time::timeout(TIMEOUT, connect)
        .await
        .map_err(|_| usage(format!("{} did not answer in time", opts.rpc)))?
        .map_err(|e| usage(format!("cannot connect to {}: {e}", opts.rpc)))?;
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .map_err(|e| usage(format!("cannot send: {e}")))?;
    let answer = tokio::time::timeout(TIMEOUT, async {
        while let Some(msg) = ws.next().await {
            match msg {
                Ok(Message::Text(t)) => return Some(t.to_string()),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => {}
            }
        }
        None
    })
    .await
    .map_err(|_| usage(format!("no answer from {} within {TIMEOUT:?}", opts.rpc)))?
    .ok_or_else(|| {
        usage(format!(
            "{} closed the connection without answering",
            opts.rpc
        ))
    })?;
    let _ = ws.close(None).await;
    serde_json::from_str(&answer).map_err(|e| usage(format!("the answer is not JSON: {e}")))
}

/// One call: the result, or the JSON-RPC error.
async fn call(opts: &RpcOpts, method: &str, params: Option<Value>) -> Result<Value, Failure> {
    let mut frame = json!({"jsonrpc": "2.0", "id": 1, "method": method});
    if let Some(p) = params {
        frame["params"] = p;
    }
    let answer = exchange(opts, &frame).await?;
    if let Some(e) = answer.get("error") {
        return Err(Failure::Rpc(e.clone()));
    }
    Ok(answer.get("result").cloned().unwrap_or(Value::Null))
}

fn print(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// `agora call`.
pub(crate) fn call_command(args: CallArgs) -> ExitCode {
    run(async move {
        if let Some(file) = &args.batch {
            return batch(&args.opts, file).await;
        }
        let method = args
            .method
            .as_deref()
            .ok_or_else(|| usage("a METHOD is required"))?;
        let params = params_of(args.params.as_deref())?;
        print(&call(&args.opts, method, params).await?);
        Ok(())
    })
}

async fn batch(opts: &RpcOpts, file: &std::path::Path) -> Result<(), Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| usage(format!("cannot read {}: {e}", file.display())))?;
    let calls: Vec<Value> = serde_json::from_str(&text)
        .map_err(|e| usage(format!("{} is not a JSON array: {e}", file.display())))?;
    if calls.is_empty() {
        return Err(usage(format!("{} holds no calls", file.display())));
    }
    let mut frame = Vec::with_capacity(calls.len());
    for (i, c) in calls.iter().enumerate() {
        let method = c["method"]
            .as_str()
            .ok_or_else(|| usage(format!("call {i} has no \"method\" string")))?;
        let mut req = json!({"jsonrpc": "2.0", "id": i + 1, "method": method});
        if let Some(p) = c.get("params") {
            req["params"] = p.clone();
        }
        frame.push(req);
    }
    let answer = exchange(opts, &Value::Array(frame)).await?;
    let mut responses = match answer {
        Value::Array(a) => a,
        // a whole-batch error (rate limited, invalid request)
        other => {
            if let Some(e) = other.get("error") {
                return Err(Failure::Rpc(e.clone()));
            }
            return Err(usage(format!("unexpected answer: {other}")));
        }
    };
    responses.sort_by_key(|r| r["id"].as_u64().unwrap_or(u64::MAX));
    let failed = responses.iter().any(|r| r.get("error").is_some());
    print(&Value::Array(responses));
    if failed {
        return Err(Failure::Batch);
    }
    Ok(())
}

/// `agora tools`.
pub(crate) fn tools_command(args: ToolsArgs) -> ExitCode {
    run(async move {
        let params = json!({"query": args.query.clone().unwrap_or_default()});
        let result = call(&args.opts, "tool.discover", Some(params)).await?;
        if args.json {
            print(&result);
            return Ok(());
        }
        let tools = result["tools"].as_array().cloned().unwrap_or_default();
        if tools.is_empty() {
            println!("no tools found");
            return Ok(());
        }
        println!("{:<24} {:<24} {:<20} description", "id", "name", "provider");
        for t in tools {
            let provider = t["peerId"]
                .as_str()
                .or_else(|| t["provider"].as_str())
                .unwrap_or("");
            println!(
                "{:<24} {:<24} {:<20} {}",
                t["id"].as_str().unwrap_or(""),
                t["name"].as_str().unwrap_or(""),
                if provider.len() > 20 {
                    &provider[provider.len() - 20..]
                } else {
                    provider
                },
                t["description"].as_str().unwrap_or("")
            );
        }
        Ok(())
    })
}

/// `agora session …`.
pub(crate) fn session_command(command: SessionCommand) -> ExitCode {
    run(async move {
        match command {
            SessionCommand::Create { opts, params } => {
                let params = params_of(params.as_deref())?.unwrap_or_else(|| json!({}));
                print(&call(&opts, "state.createSession", Some(params)).await?);
            }
            SessionCommand::End { opts, id } => {
                print(&call(&opts, "state.endSession", Some(json!({"sessionId": id}))).await?);
            }
        }
        Ok(())
    })
}
