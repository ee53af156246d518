//! Client commands against a running node (`--node http://…`): `status`, `peers`, `whois`,
//! `say`, `send`, `capability publish`.
//!
//! The HTTP API serves reads and one-shot posts, over `ureq` (one request per connection, any
//! status read as an answer); commands that wait for answers from other agents (`whois`, `send`)
//! connect to the node's AGH WebSocket face (`tokio-tungstenite`) as a short-lived agent, greet
//! under a Peer ID (`--as`, default `agora-cli.<random>`) and listen for the replies. Output is a
//! table for people, or JSON with `--json` for scripts. Exit codes: 0 success, 1 the node refused or
//! nothing answered, 2 usage, connection or IO error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

/// Default HTTP API address of a local node.
pub(crate) const DEFAULT_NODE: &str = "http://127.0.0.1:4411";

/// Options shared by every client command.
#[derive(Debug, Args, Clone)]
pub(crate) struct ClientOpts {
    /// The node's HTTP API.
    #[arg(long, env = "AGORA_NODE", default_value = DEFAULT_NODE, value_name = "URL")]
    node: String,
    /// Print JSON for scripts instead of tables.
    #[arg(long)]
    json: bool,
    /// The node's API key, sent as `Authorization: Bearer` (needed once the node has one).
    #[arg(
        long = "api-key",
        env = "AGORA_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    api_key: Option<String>,
}

/// `agora capability …`.
#[derive(Debug, Subcommand)]
pub(crate) enum CapabilityCommand {
    /// Store a capability catalog for a local Peer ID on the node (kept across restarts) and
    /// announce it. FILE holds an array of capability documents, `{"capabilities":[…]}`, or
    /// `{"peer_id":"…","capabilities":[…]}`.
    Publish {
        /// Catalog file (`-` reads standard input).
        file: PathBuf,
        /// Peer ID the catalog belongs to (overrides `peer_id` in the file).
        #[arg(long = "as", value_name = "PEER_ID")]
        peer: Option<String>,
        #[command(flatten)]
        opts: ClientOpts,
    },
}

/// Client errors: the message is printed, the code is the exit status.
pub(crate) struct Failure(pub(crate) u8, pub(crate) String);

type Outcome = Result<(), Failure>;

fn usage(msg: impl Into<String>) -> Failure {
    Failure(2, msg.into())
}

fn refused(msg: impl Into<String>) -> Failure {
    Failure(1, msg.into())
}

pub(crate) fn exit(result: Outcome) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, msg)) => {
            eprintln!("agora: {msg}");
            ExitCode::from(code)
        }
    }
}

pub(crate) fn block_on(fut: impl Future<Output = Outcome>) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => exit(rt.block_on(fut)),
        Err(e) => exit(Err(usage(format!("cannot start the async runtime: {e}")))),
    }
}

/// A response from the node's HTTP API.
struct Response {
    status: u16,
    body: Value,
}

/// One request to the node's JSON API (see [`crate::http::exchange`]).
async fn request(
    opts: &ClientOpts,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<Response, Failure> {
    let node = opts.node.as_str();
    let host = node
        .strip_prefix("http://")
        .ok_or_else(|| usage(format!("--node must be an http:// URL, got {node:?}")))?
        .trim_end_matches('/');
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(format!("http://{host}{path}"))
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .header("connection", "close");
    if let Some(key) = &opts.api_key {
        req = req.header("authorization", format!("Bearer {}", key.trim()));
    }
    let req = req
        .body(body.unwrap_or("").to_owned())
        .map_err(|e| usage(format!("cannot reach the node at {node}: {e}")))?;
    let (status, body) = tokio::task::spawn_blocking(move || crate::http::exchange(req))
        .await
        .map_err(|e| usage(format!("the HTTP request did not finish: {e}")))?
        .map_err(|e| transport(node, e))?;
    Ok(Response { status, body })
}

/// A request that got no HTTP response: the node cannot be reached, or the exchange broke.
fn transport(node: &str, e: ureq::Error) -> Failure {
    use std::io::ErrorKind as K;
    let unreachable = match &e {
        ureq::Error::Io(io) => matches!(
            io.kind(),
            K::ConnectionRefused
                | K::AddrNotAvailable
                | K::HostUnreachable
                | K::NetworkUnreachable
                | K::InvalidInput
        ),
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => true,
        _ => false,
    };
    // An IO error alone, as the operating system words it.
    let detail = match e {
        ureq::Error::Io(io) => io.to_string(),
        e => e.to_string(),
    };
    if unreachable {
        usage(format!(
            "cannot reach the node at {node}: {detail}. Is `agora node` running? Its HTTP API \
             is the `listening on http …` line it prints (http://127.0.0.1:4411 by default): \
             pass it with --node URL or AGORA_NODE"
        ))
    } else {
        usage(format!("talking to {node}: {detail}"))
    }
}

async fn get_ok(opts: &ClientOpts, path: &str) -> Result<Value, Failure> {
    let r = request(opts, "GET", path, None).await?;
    if r.status == 200 {
        Ok(r.body)
    } else {
        Err(refused(api_error(&r)))
    }
}

fn api_error(r: &Response) -> String {
    r.body["error"].as_str().map_or_else(
        || format!("the node answered HTTP {}", r.status),
        str::to_owned,
    )
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Prints rows as aligned columns.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", s.trim_end());
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

fn strings(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

pub(crate) async fn status(opts: ClientOpts) -> Outcome {
    let v = get_ok(&opts, "/status").await?;
    if opts.json {
        print_json(&v);
        return Ok(());
    }
    let agh = &v["agh"];
    let mut rows = vec![
        vec![
            "peer id".into(),
            v["peer_id"].as_str().unwrap_or_default().into(),
        ],
        vec!["uptime".into(), format!("{} s", v["uptime_secs"])],
        vec!["listen".into(), strings(&v["listen"])],
    ];
    let http = v["faces"]["http"].as_str().unwrap_or_default();
    for face in ["agh", "rpc", "http", "agtp"] {
        let url = v["faces"][face].as_str().unwrap_or_default();
        rows.push(vec![format!("{face} face"), url.into()]);
    }
    if !http.is_empty() {
        rows.push(vec!["mcp face".into(), format!("{http}/mcp")]);
        rows.push(vec![
            "a2a face".into(),
            format!("{http}/.well-known/agent-card.json"),
        ]);
    }
    let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    rows.extend([
        vec!["wallet".into(), text(&v["payments"]["walletAddress"])],
        vec!["embedder".into(), text(&v["memory"]["embedder"])],
        vec![
            "connected nodes".into(),
            v["connected"].as_array().map_or(0, Vec::len).to_string(),
        ],
        vec!["local peers".into(), agh["local_peers"].to_string()],
        vec!["remote peers".into(), agh["remote_peers"].to_string()],
        vec!["interactions".into(), agh["interactions"].to_string()],
        vec![
            "envelopes".into(),
            format!(
                "{} sent, {} received, {} rejected",
                agh["sent"], agh["received"], agh["rejected"]
            ),
        ],
    ]);
    table(&["FIELD", "VALUE"], &rows);
    Ok(())
}

pub(crate) async fn peers(opts: ClientOpts, channel: Option<String>) -> Outcome {
    let path = match &channel {
        Some(c) => format!(
            "/agh/v0/peers?channel={}",
            form_urlencoded::byte_serialize(c.as_bytes()).collect::<String>()
        ),
        None => "/agh/v0/peers".to_owned(),
    };
    let v = get_ok(&opts, &path).await?;
    if opts.json {
        print_json(&v);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = v["peers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            vec![
                p["channel"].as_str().unwrap_or_default().to_owned(),
                p["peer_id"].as_str().unwrap_or_default().to_owned(),
                p["presence"].as_str().unwrap_or_default().to_owned(),
                p["expires_in"]
                    .as_i64()
                    .map_or_else(|| "-".into(), |s| format!("{s}s")),
                strings(&p["peer_card"]["capabilities"]),
            ]
        })
        .collect();
    table(
        &["CHANNEL", "PEER", "PRESENCE", "EXPIRES", "CAPABILITIES"],
        &rows,
    );
    Ok(())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    let _ = getrandom::fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A short-lived agent on the node's AGH face.
struct Session {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    peer_id: String,
    channel: String,
    seq: u32,
}

impl Session {
    async fn open(opts: &ClientOpts, peer: Option<String>, channel: &str) -> Result<Self, Failure> {
        if !agora_agh::grammar::is_channel(channel) {
            return Err(usage(format!("{channel:?} is not a channel name")));
        }
        let peer_id = peer.unwrap_or_else(|| format!("agora-cli.{}", random_hex(4)));
        if !agora_agh::grammar::is_peer_id(&peer_id) {
            return Err(usage(format!("{peer_id:?} is not a Peer ID")));
        }
        let status = get_ok(opts, "/status").await?;
        let url = status["faces"]["agh"]
            .as_str()
            .ok_or_else(|| refused("the node does not serve the AGH face"))?
            .to_owned();
        let mut upgrade = url
            .as_str()
            .into_client_request()
            .map_err(|e| usage(format!("cannot open {url}: {e}")))?;
        if let Some(key) = &opts.api_key {
            let value = format!("Bearer {}", key.trim())
                .parse()
                .map_err(|_| usage("the API key cannot be sent in an HTTP header"))?;
            upgrade.headers_mut().insert("Authorization", value);
        }
        let (ws, _) = tokio_tungstenite::connect_async(upgrade)
            .await
            .map_err(|e| usage(format!("cannot open {url}: {e}")))?;
        let mut s = Self {
            ws,
            peer_id,
            channel: channel.to_owned(),
            seq: 0,
        };
        let card = json!({
            "peer_id": s.peer_id,
            "profiles_supported": ["agh-network/v0"],
            "capabilities": [],
            "artifacts_supported": ["capability"],
            "trust_modes_supported": [],
        });
        let greet = s.envelope("greet", None, json!({ "peer_card": card }));
        s.send(&greet).await?;
        Ok(s)
    }

    #[allow(clippy::needless_pass_by_value)] // bodies are built in place by the callers
    fn envelope(&mut self, kind: &str, to: Option<&str>, body: Value) -> Value {
        self.seq += 1;
        json!({
            "protocol": "agh-network/v0",
            "id": format!("{}-{}-{}", self.peer_id, random_hex(6), self.seq),
            "kind": kind,
            "channel": self.channel,
            "from": self.peer_id,
            "to": to,
            "ts": unix_now(),
            "body": body,
            "proof": null,
        })
    }

    async fn send(&mut self, env: &Value) -> Outcome {
        self.ws
            .send(Message::Text(env.to_string().into()))
            .await
            .map_err(|e| usage(format!("sending to the node: {e}")))
    }

    /// The next frame within `deadline`; `None` at the deadline or when the node closes.
    async fn next(&mut self, deadline: tokio::time::Instant) -> Option<Value> {
        loop {
            let msg = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .ok()??
                .ok()?;
            if let Message::Text(t) = msg
                && let Ok(v) = serde_json::from_str::<Value>(t.as_str())
            {
                return Some(v);
            }
        }
    }

    async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}

fn check_error_frame(v: &Value) -> Outcome {
    match v.get("error") {
        Some(e) => Err(refused(format!(
            "the node refused the envelope: {} ({})",
            e["reason"].as_str().unwrap_or("?"),
            e["detail"].as_str().unwrap_or("")
        ))),
        None => Ok(()),
    }
}

/// `agora whois`.
#[derive(Debug, Args)]
pub(crate) struct WhoisArgs {
    /// Channel.
    #[arg(long, default_value = "default")]
    channel: String,
    /// Query: a Peer ID, display name, capability, profile, artifact type or trust mode (empty
    /// matches every peer).
    query: Option<String>,
    /// Ask for each peer's full capability catalog (rich discovery).
    #[arg(long)]
    catalog: bool,
    /// Ask one peer only (a directed whois).
    #[arg(long, value_name = "PEER_ID")]
    to: Option<String>,
    /// Seconds to collect answers.
    #[arg(long, default_value_t = 2.0)]
    wait: f64,
    /// Peer ID to ask as.
    #[arg(long = "as", value_name = "PEER_ID")]
    peer: Option<String>,
}

pub(crate) async fn whois(opts: ClientOpts, args: WhoisArgs) -> Outcome {
    let mut s = Session::open(&opts, args.peer, &args.channel).await?;
    let mut body = json!({ "type": "request" });
    if let Some(q) = &args.query {
        body["query"] = json!(q);
    }
    let mut req = s.envelope("whois", args.to.as_deref(), body);
    if args.catalog {
        req["ext"] = json!({ "agh.include": ["capability_catalog"] });
    }
    s.send(&req).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(args.wait.max(0.0));
    let mut answers = Vec::new();
    while let Some(v) = s.next(deadline).await {
        check_error_frame(&v)?;
        if v["kind"] == "whois" && v["reply_to"] == req["id"] {
            answers.push(v);
            if args.to.is_some() {
                break;
            }
        }
    }
    s.close().await;
    if opts.json {
        print_json(&json!({ "answers": answers }));
    } else {
        let rows: Vec<Vec<String>> = answers
            .iter()
            .map(|a| {
                let card = &a["body"]["peer_card"];
                let catalog = a["ext"]["agh.capability_catalog"]["capabilities"]
                    .as_array()
                    .map(|c| {
                        c.iter()
                            .map(|e| {
                                format!(
                                    "{}: {}",
                                    e["id"].as_str().unwrap_or(""),
                                    e["summary"].as_str().unwrap_or("")
                                )
                            })
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                    .unwrap_or_default();
                vec![
                    card["peer_id"].as_str().unwrap_or_default().to_owned(),
                    card["display_name"].as_str().unwrap_or("").to_owned(),
                    strings(&card["capabilities"]),
                    catalog,
                ]
            })
            .collect();
        table(&["PEER", "NAME", "CAPABILITIES", "CATALOG"], &rows);
    }
    if answers.is_empty() {
        return Err(refused("no peer answered"));
    }
    Ok(())
}

/// `agora say`.
#[derive(Debug, Args)]
pub(crate) struct SayArgs {
    /// Channel.
    #[arg(long, default_value = "default")]
    channel: String,
    /// Peer ID to speak as.
    #[arg(long = "as", value_name = "PEER_ID")]
    peer: Option<String>,
    /// The message.
    text: String,
}

pub(crate) async fn say(opts: ClientOpts, args: SayArgs) -> Outcome {
    if !agora_agh::grammar::is_channel(&args.channel) {
        return Err(usage(format!("{:?} is not a channel name", args.channel)));
    }
    let peer = args
        .peer
        .unwrap_or_else(|| format!("agora-cli.{}", random_hex(4)));
    let id = format!("{peer}-{}", random_hex(8));
    let card = json!({"peer_id": peer, "profiles_supported": ["agh-network/v0"], "capabilities": [],
                      "artifacts_supported": ["capability"], "trust_modes_supported": []});
    let base = |kind: &str, id: String, body: Value| {
        json!({"protocol": "agh-network/v0", "id": id, "kind": kind, "channel": args.channel,
               "from": peer, "to": null, "ts": unix_now(), "body": body, "proof": null})
    };
    let greet = base("greet", format!("{id}-g"), json!({ "peer_card": card }));
    let say = base("say", id.clone(), json!({ "text": args.text }));
    let body = format!("{greet}\n{say}\n");
    let r = request(&opts, "POST", "/agh/v0/envelopes", Some(&body)).await?;
    let verdict = &r.body["results"][1];
    if opts.json {
        print_json(verdict);
    }
    if verdict["ok"] == true {
        if !opts.json {
            println!("sent {id}");
        }
        Ok(())
    } else if r.body["results"].is_array() {
        let v = if r.body["results"][0]["ok"] == false {
            &r.body["results"][0]
        } else {
            verdict
        };
        Err(refused(format!(
            "the node refused the message: {} ({})",
            v["reason"].as_str().unwrap_or("?"),
            v["detail"].as_str().unwrap_or("")
        )))
    } else {
        Err(refused(api_error(&r)))
    }
}

/// `agora send`.
#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// Channel.
    #[arg(long, default_value = "default")]
    channel: String,
    /// Target Peer ID.
    #[arg(long, value_name = "PEER_ID")]
    to: String,
    /// Interaction id (opens the interaction, or continues it).
    #[arg(long, value_name = "ID")]
    interaction: String,
    /// Peer ID to send as.
    #[arg(long = "as", value_name = "PEER_ID")]
    peer: Option<String>,
    /// Seconds to wait for receipts and traces (until the interaction finishes).
    #[arg(long, default_value_t = 10.0)]
    wait: f64,
    /// The request text.
    text: String,
}

pub(crate) async fn send(opts: ClientOpts, args: SendArgs) -> Outcome {
    let mut s = Session::open(&opts, args.peer, &args.channel).await?;
    let mut env = s.envelope("direct", Some(&args.to), json!({ "text": args.text }));
    env["interaction_id"] = json!(args.interaction);
    s.send(&env).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(args.wait.max(0.0));
    let mut events = Vec::new();
    let mut finished = false;
    while let Some(v) = s.next(deadline).await {
        check_error_frame(&v)?;
        if v["interaction_id"] != json!(args.interaction) {
            continue;
        }
        let kind = v["kind"].as_str().unwrap_or_default().to_owned();
        let (state, note) = match kind.as_str() {
            "receipt" => (
                v["body"]["status"].as_str().unwrap_or("").to_owned(),
                v["body"]["reason_code"].as_str().unwrap_or("").to_owned(),
            ),
            "trace" => (
                v["body"]["state"].as_str().unwrap_or("").to_owned(),
                v["body"]["message"].as_str().unwrap_or("").to_owned(),
            ),
            _ => (
                String::new(),
                v["body"]["text"].as_str().unwrap_or("").to_owned(),
            ),
        };
        finished = matches!(
            state.as_str(),
            "completed"
                | "failed"
                | "canceled"
                | "rejected"
                | "expired"
                | "duplicate"
                | "unsupported"
        );
        if opts.json {
            println!("{v}");
        } else {
            println!("{kind:<8} {state:<12} {note}");
        }
        events.push(v);
        if finished {
            break;
        }
    }
    s.close().await;
    if events.is_empty() {
        return Err(refused(format!(
            "no answer from {} within {} s",
            args.to, args.wait
        )));
    }
    if !finished && !opts.json {
        println!("(the interaction is still open after {} s)", args.wait);
    }
    Ok(())
}

pub(crate) async fn capability(cmd: CapabilityCommand) -> Outcome {
    let CapabilityCommand::Publish { file, peer, opts } = cmd;
    let text = if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| usage(format!("reading standard input: {e}")))?;
        s
    } else {
        std::fs::read_to_string(&file).map_err(|e| usage(format!("{}: {e}", file.display())))?
    };
    let doc: Value =
        serde_json::from_str(&text).map_err(|e| usage(format!("{}: {e}", file.display())))?;
    let peer = peer
        .or_else(|| doc["peer_id"].as_str().map(str::to_owned))
        .ok_or_else(|| {
            usage("say whose catalog this is: --as PEER_ID, or \"peer_id\" in the file")
        })?;
    let catalog = if doc.is_object() && doc.get("peer_id").is_some() {
        json!({ "capabilities": doc["capabilities"] }).to_string()
    } else {
        text
    };
    let r = request(
        &opts,
        "PUT",
        &format!("/agh/v0/catalogs/{peer}"),
        Some(&catalog),
    )
    .await?;
    if r.status != 200 {
        return Err(refused(api_error(&r)));
    }
    if opts.json {
        print_json(&r.body);
    } else {
        println!(
            "published {} capabilities for {peer}: {}",
            r.body["capabilities"].as_array().map_or(0, Vec::len),
            strings(&r.body["capabilities"])
        );
    }
    Ok(())
}
