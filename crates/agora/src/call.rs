//! `agora call`, `agora tools`, `agora session`: the Hyperspace JSON-RPC face from the shell.
//!
//! This module owns the command line's side of the face: one WebSocket connection per command,
//! the request frame (ids assigned here), waiting for its answer, and the output contract.
//!
//! Contract (scripts rely on it; `docs/node.md` "The command line"): the result is printed on
//! stdout as pretty JSON, exit 0 (`agora bridge mcp …` shares it, `bridge`); a JSON-RPC error prints `error <code>: <message>` on stderr
//! (and `data: <compact json>` on a second line when the error has data), exit 1; a usage or
//! connection problem — bad parameters, an unreadable batch file, a node that cannot be reached,
//! a refused credential, no answer within [`TIMEOUT`] — prints one line `agora: <what>` on
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
    /// The node's API key (or a session token), sent as `Authorization: Bearer`. `--token` and
    /// `AGORA_TOKEN`, its earlier names, still work.
    #[arg(
        long = "api-key",
        alias = "token",
        env = "AGORA_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
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
    /// Create a session (`state.createSession`); prints `{sessionId, createdAt, sessionToken}`.
    Create {
        #[command(flatten)]
        opts: RpcOpts,
        /// The agent's name (`agentName`).
        #[arg(long, value_name = "NAME")]
        agent_name: Option<String>,
        /// The agent's kind (`agentType`, e.g. `autonomous`).
        #[arg(long, value_name = "TYPE")]
        agent_type: Option<String>,
        /// The model the agent runs (`model`).
        #[arg(long, value_name = "MODEL")]
        model: Option<String>,
        /// Free-form metadata, a JSON object (`{"budget": 100, "maxDepth": 3}`).
        #[arg(long, value_name = "JSON")]
        metadata: Option<String>,
        /// Any parameters as a JSON object (`-` reads it from stdin); the flags above override it.
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
    /// Only tools matching this text (name, description, capabilities).
    #[arg(long, value_name = "TEXT")]
    query: Option<String>,
    /// Only tools with this capability tag (repeatable: every tag must match).
    #[arg(long = "capability", value_name = "TAG")]
    capabilities: Vec<String>,
    /// Print the JSON result instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) enum Failure {
    /// Usage or connection: exit 2.
    Usage(String),
    /// A JSON-RPC error: exit 1.
    Rpc(Value),
    /// A batch with at least one error (printed with the responses): exit 1.
    Batch,
}

pub(crate) fn usage(m: impl Into<String>) -> Failure {
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

pub(crate) fn run(fut: impl Future<Output = Result<(), Failure>>) -> ExitCode {
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

/// Why the face refused the WebSocket upgrade: its status and, when the body is the node's
/// `{"error": …}`, that reason.
fn refusal(
    url: &str,
    response: &tokio_tungstenite::tungstenite::handshake::client::Response,
) -> Failure {
    let reason = response
        .body()
        .as_deref()
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .and_then(|v| v["error"].as_str().map(str::to_owned));
    let status = response.status();
    usage(match reason {
        Some(r) => format!("{url} refused the connection (HTTP {status}): {r}"),
        None => format!("{url} refused the connection (HTTP {status})"),
    })
}

/// Where the JSON-RPC face is, for a client at another address.
const RPC_FACE_HINT: &str = "`agora node` prints its JSON-RPC face as the `listening on rpc …` \
                             line (ws://127.0.0.1:3100 by default); pass it with --rpc";

/// Whether `v` is a JSON-RPC 2.0 message (or a batch of them).
fn is_jsonrpc(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.get("jsonrpc").is_some_and(|j| j == "2.0"),
        Value::Array(items) => items.first().is_none_or(is_jsonrpc),
        _ => false,
    }
}

/// Whether `v` is the answer to `frame`: an array for a batch; for one call, a response with its
/// id (or id `null`: the face could not read the request). Requests from the face to the client
/// (they carry a `method`) are not answers.
fn answers(frame: &Value, v: &Value) -> bool {
    match (frame, v) {
        (Value::Array(_), Value::Array(_)) => true,
        (_, Value::Object(o)) if o.contains_key("method") => false,
        (Value::Array(_), Value::Object(o)) => o.contains_key("error"),
        (_, Value::Object(o)) => o
            .get("id")
            .is_some_and(|id| id.is_null() || *id == frame["id"]),
        _ => false,
    }
}

/// Sends one frame to the face and returns the answer.
async fn exchange(opts: &RpcOpts, frame: &Value) -> Result<Value, Failure> {
    use tokio_tungstenite::tungstenite::Error as WsError;
    let url = opts.rpc.as_str();
    let mut request = url
        .into_client_request()
        .map_err(|e| usage(format!("{url:?} is not a WebSocket URL: {e}")))?;
    let token = opts
        .token
        .clone()
        .or_else(|| std::env::var("AGORA_TOKEN").ok().filter(|t| !t.is_empty()));
    if let Some(t) = &token {
        let value = format!("Bearer {t}")
            .parse()
            .map_err(|_| usage("the API key cannot go in a header"))?;
        request.headers_mut().insert("authorization", value);
    }
    let connect = tokio_tungstenite::connect_async(request);
    let (mut ws, _) = match tokio::time::timeout(TIMEOUT, connect).await {
        Err(_) => return Err(usage(format!("{url} did not answer within {TIMEOUT:?}"))),
        Ok(Err(WsError::Http(response))) => return Err(refusal(url, &response)),
        Ok(Err(e)) => return Err(usage(format!("cannot connect to {url}: {e}"))),
        Ok(Ok(pair)) => pair,
    };
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .map_err(|e| usage(format!("cannot send to {url}: {e}")))?;
    let answer = tokio::time::timeout(TIMEOUT, async {
        while let Some(msg) = ws.next().await {
            match msg {
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str()).map_err(|e| {
                        usage(format!(
                            "the answer of {url} is not JSON ({e}): is it the node's JSON-RPC \
                             face? {RPC_FACE_HINT}"
                        ))
                    })?;
                    if !is_jsonrpc(&v) {
                        let mut said = v.to_string();
                        if said.len() > 120 {
                            let cut = (0..=120).rev().find(|&i| said.is_char_boundary(i));
                            said.truncate(cut.unwrap_or(0));
                            said.push('…');
                        }
                        return Err(usage(format!(
                            "{url} is not a JSON-RPC face: it answered {said}. {RPC_FACE_HINT}"
                        )));
                    }
                    if answers(frame, &v) {
                        return Ok(v);
                    }
                }
                Ok(Message::Close(Some(c))) => {
                    return Err(usage(format!(
                        "{url} closed the connection without answering ({} {})",
                        u16::from(c.code),
                        c.reason
                    )));
                }
                Ok(Message::Close(None)) => break,
                Err(e) => return Err(usage(format!("the connection to {url} failed: {e}"))),
                Ok(_) => {}
            }
        }
        Err(usage(format!(
            "{url} closed the connection without answering"
        )))
    })
    .await
    .map_err(|_| usage(format!("no answer from {url} within {TIMEOUT:?}")))??;
    let _ = ws.close(None).await;
    Ok(answer)
}

/// One call: the result, or the JSON-RPC error.
pub(crate) async fn call(
    opts: &RpcOpts,
    method: &str,
    params: Option<Value>,
) -> Result<Value, Failure> {
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

pub(crate) fn print(v: &Value) {
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
        let mut params = json!({"query": args.query.clone().unwrap_or_default()});
        if !args.capabilities.is_empty() {
            params["capabilities"] = json!(args.capabilities);
        }
        let result = call(&args.opts, "tool.discover", Some(params)).await?;
        if args.json {
            print(&result);
            return Ok(());
        }
        let tools = result["tools"].as_array().map_or(&[][..], Vec::as_slice);
        if tools.is_empty() {
            println!("no tools found");
            return Ok(());
        }
        let rows: Vec<Vec<String>> = tools.iter().map(tool_row).collect();
        crate::client::table(
            &[
                "ID",
                "NAME",
                "REPUTATION",
                "LATENCY_MS",
                "CAPABILITIES",
                "PEER",
                "DESCRIPTION",
            ],
            &rows,
        );
        Ok(())
    })
}

/// Longest description shown in the table (in characters); `--json` has them whole.
const DESCRIPTION_CHARS: usize = 60;

/// One row of the `agora tools` table.
fn tool_row(t: &Value) -> Vec<String> {
    let text = |k: &str| t[k].as_str().unwrap_or("").to_owned();
    let description = text("description");
    let description = if description.chars().count() > DESCRIPTION_CHARS {
        let cut: String = description.chars().take(DESCRIPTION_CHARS - 1).collect();
        format!("{cut}…")
    } else {
        description
    };
    let capabilities = t["capabilities"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    vec![
        text("id"),
        text("name"),
        t["reputation"]
            .as_f64()
            .map_or_else(String::new, |r| format!("{r:.2}")),
        t["avgLatency"]
            .as_u64()
            .map_or_else(String::new, |l| l.to_string()),
        capabilities,
        text("peerId"),
        description,
    ]
}

/// The params of `agora session create`: PARAMS (an object), then the flags over it.
fn create_params(
    params: Option<&str>,
    fields: [(&str, Option<String>); 3],
    metadata: Option<&str>,
) -> Result<Value, Failure> {
    let mut p = params_of(params)?.unwrap_or_else(|| json!({}));
    let Some(obj) = p.as_object_mut() else {
        return Err(usage("the session's parameters must be a JSON object"));
    };
    for (key, value) in fields {
        if let Some(v) = value {
            obj.insert(key.to_owned(), Value::String(v));
        }
    }
    if let Some(m) = metadata {
        let m: Value =
            serde_json::from_str(m).map_err(|e| usage(format!("--metadata is not JSON: {e}")))?;
        if !m.is_object() {
            return Err(usage("--metadata must be a JSON object"));
        }
        obj.insert("metadata".to_owned(), m);
    }
    Ok(p)
}

/// `agora session …`.
pub(crate) fn session_command(command: SessionCommand) -> ExitCode {
    run(async move {
        match command {
            SessionCommand::Create {
                opts,
                agent_name,
                agent_type,
                model,
                metadata,
                params,
            } => {
                let params = create_params(
                    params.as_deref(),
                    [
                        ("agentName", agent_name),
                        ("agentType", agent_type),
                        ("model", model),
                    ],
                    metadata.as_deref(),
                )?;
                print(&call(&opts, "state.createSession", Some(params)).await?);
            }
            SessionCommand::End { opts, id } => {
                print(&call(&opts, "state.endSession", Some(json!({"sessionId": id}))).await?);
            }
        }
        Ok(())
    })
}
