//! `agora discover` and `agora ans …`: the Agent Name Service (draft-hood-agtp-discovery-00)
//! from the command line, over AGTP/1.0 (a stable contract: flags, output lines and exit codes
//! are relied upon).
//!
//! What this module owns:
//!
//! - **`discover`**: one DISCOVER, answered with a signed result. The result is only shown once
//!   its `ans_signature` verifies, against the key pinned with `--ans-key` or, without one,
//!   against the `ans_keys` the ANS publishes in its own manifest (a DESCRIBE on the same
//!   connection, so as trustworthy as the transport). An unsigned result, an unknown `key_id` or
//!   a signature that does not verify is refused: nothing on standard output, exit 1.
//! - **`ans keygen`**: a new ES256 governance key, the private JWK (mode 0600) and the public JWK
//!   beside it (`<FILE without .json>.pub.json`), the public JWK printed.
//! - **`ans activate` / `ans lifecycle`**: governance-signed ACTIVATE, DEACTIVATE, REINSTATE,
//!   REVOKE and DEPRECATE (`agora_agtp::governance::signed_body`, a fresh nonce and the current
//!   time).
//! - **Transport**: plain AGTP to a loopback host, TLS 1.3 otherwise; `--tls` forces TLS,
//!   `--insecure` forces plain; `--ca` trusts the given PEM certificates instead of the web PKI
//!   roots.
//!
//! Exit codes: 0 success; 1 the ANS refused, could not be reached, or its answer was refused;
//! 2 usage or configuration errors (bad flags, unreadable files, bad keys).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agora_agtp::codec::{Request, Response};
use agora_agtp::governance;
use agora_agtp::manifest::Transition;
use agora_agtp::signature::{AnsSignature, AnsVerifyingKey, verify_result_with};
use agora_node::ans;
use agora_node::faces::agtp::client::{ClientError, Connection, Transport, split_host_port};
use agora_node::faces::agtp::tls::Roots;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Map, Value, json};

use crate::client::{self, Failure};

type Outcome = Result<(), Failure>;

fn usage(msg: impl Into<String>) -> Failure {
    Failure(2, msg.into())
}

fn failed(msg: impl Into<String>) -> Failure {
    Failure(1, msg.into())
}

/// How to reach the ANS and who is asking: shared by every command that talks to it.
// The field docs are clap's help text, where `[::1]` is an IPv6 address, not a link.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Args)]
pub(crate) struct AnsOpts {
    /// The Agent Name Service's AGTP address (IPv6 as [::1]:4480).
    #[arg(long, value_name = "HOST:PORT")]
    ans: String,
    /// Speak TLS even to a loopback address.
    #[arg(long, conflicts_with = "insecure")]
    tls: bool,
    /// Speak plain AGTP (no TLS) even beyond loopback.
    #[arg(long)]
    insecure: bool,
    /// PEM certificate(s) to trust for TLS, e.g. the ANS's agtp-cert.pem (default: the web PKI
    /// roots).
    #[arg(long, value_name = "PEM_FILE", conflicts_with = "insecure")]
    ca: Option<PathBuf>,
    /// Agent-ID sent with every request.
    #[arg(
        long = "agent-id",
        value_name = "ID",
        env = "AGORA_AGENT_ID",
        default_value = "agora-cli"
    )]
    agent_id: String,
    /// Deadline for connecting, and for each answer, in milliseconds.
    #[arg(long = "timeout-ms", value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout_ms: u64,
    /// Print the ANS's response body as one line of JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl AnsOpts {
    fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

/// `agora discover`.
#[derive(Debug, Args)]
pub(crate) struct DiscoverArgs {
    /// What the agent should do, in words (ranked by capability match).
    #[arg(long, value_name = "TEXT")]
    intent: String,
    /// Most results (1-100; the ANS's default is 10).
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
    /// Only trust tiers up to N (1 is the most trusted).
    #[arg(long = "trust-tier-min", value_name = "N")]
    trust_tier_min: Option<u64>,
    /// Only agents with a behavioural trust score of at least X (0.0-1.0).
    #[arg(long = "behavioral-trust-min", value_name = "X")]
    behavioral_trust_min: Option<f64>,
    /// Only agents in this governance zone.
    #[arg(long, value_name = "ZONE")]
    zone: Option<String>,
    /// Only agents of this organisation domain.
    #[arg(long, value_name = "DOMAIN")]
    org: Option<String>,
    /// A capability domain or term the agent must cover (repeatable).
    #[arg(long = "capability-domain", value_name = "DOMAIN")]
    capability_domain: Vec<String>,
    /// The agent you would rather reach: an equivalent one is proposed if it is unavailable.
    #[arg(long = "preferred-agent", value_name = "ID")]
    preferred_agent: Option<String>,
    /// Ask for each agent's required Authority-Scope.
    #[arg(long = "scope-negotiate")]
    scope_negotiate: bool,
    /// Ask for each result's score components.
    #[arg(long)]
    explain: bool,
    /// The ANS's public signing key (JWK file) to verify against, instead of the keys it
    /// publishes.
    #[arg(long = "ans-key", value_name = "JWK_FILE")]
    ans_key: Option<PathBuf>,
    /// Authority-Scope sent.
    #[arg(long, value_name = "S", default_value = "discovery:query")]
    scope: String,
    #[command(flatten)]
    opts: AnsOpts,
}

/// Options of the governance-signed lifecycle commands.
#[derive(Debug, Args)]
pub(crate) struct GovernanceArgs {
    /// The governance platform's private signing key (JWK file, from `agora ans keygen`).
    #[arg(long, value_name = "GOV_JWK")]
    key: PathBuf,
    /// Why (recorded in the ANS's audit log; required for revoke).
    #[arg(long, value_name = "R")]
    reason: Option<String>,
    /// Authority-Scope sent.
    #[arg(long, value_name = "S", default_value = "discovery:register")]
    scope: String,
    #[command(flatten)]
    opts: AnsOpts,
}

/// A lifecycle change of a registered agent.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Action {
    /// Active → Suspended (not searchable).
    Deactivate,
    /// Suspended → Active.
    Reinstate,
    /// Permanently removed (needs --reason).
    Revoke,
    /// Marked Deprecated (not searchable).
    Deprecate,
}

impl Action {
    const fn transition(self) -> Transition {
        match self {
            Self::Deactivate => Transition::Deactivate,
            Self::Reinstate => Transition::Reinstate,
            Self::Revoke => Transition::Revoke,
            Self::Deprecate => Transition::Deprecate,
        }
    }
}

/// `agora ans …`.
#[derive(Debug, Subcommand)]
pub(crate) enum AnsCommand {
    /// Create an ES256 governance key (private and public JWK files).
    ///
    /// The private JWK goes to FILE (mode 0600), the public JWK to <FILE without .json>.pub.json
    /// (for the ANS's `agtp.governance_keys`); the public JWK is also printed on one line.
    Keygen {
        /// Where to write the private JWK.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Key id (default: derived from the public key).
        #[arg(long, value_name = "KID")]
        kid: Option<String>,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
    /// Register an agent: a governance-signed ACTIVATE with its manifest.
    Activate {
        /// The Agent Manifest Document (JSON with canonical_id or agent_id).
        manifest: PathBuf,
        #[command(flatten)]
        gov: GovernanceArgs,
    },
    /// Change a registered agent's lifecycle state (governance-signed).
    Lifecycle {
        /// What to do.
        action: Action,
        /// The agent's canonical_id.
        canonical_id: String,
        #[command(flatten)]
        gov: GovernanceArgs,
    },
}

pub(crate) fn ans(cmd: AnsCommand) -> ExitCode {
    match cmd {
        AnsCommand::Keygen { out, kid, force } => client::exit(keygen(&out, kid.as_deref(), force)),
        AnsCommand::Activate { manifest, gov } => match read_manifest(&manifest) {
            Ok((id, doc)) => {
                client::block_on(governed(Transition::Activate, &id, Some(&doc), &gov))
            }
            Err(e) => client::exit(Err(e)),
        },
        AnsCommand::Lifecycle {
            action,
            canonical_id,
            gov,
        } => client::block_on(governed(action.transition(), &canonical_id, None, &gov)),
    }
}

// ------------------------------------------------------------------------------------------------
// Shared: transport, sending, errors

/// `value` as a header value: non-empty, no control characters.
fn header_value<'a>(flag: &str, value: &'a str) -> Result<&'a str, Failure> {
    if value.trim().is_empty() || value.chars().any(char::is_control) {
        return Err(usage(format!(
            "{flag} must be non-empty without control characters, got {value:?}"
        )));
    }
    Ok(value)
}

fn random_hex(bytes: usize) -> Result<String, Failure> {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).map_err(|e| failed(format!("no randomness: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn task_id() -> Result<String, Failure> {
    Ok(format!("cli-{}", random_hex(8)?))
}

/// The transport for `opts` (plain to loopback, TLS otherwise, as overridden by the flags) and a
/// connection over it.
async fn connect(opts: &AnsOpts) -> Result<Connection, Failure> {
    header_value("--agent-id", &opts.agent_id)?;
    let (host, _) = split_host_port(&opts.ans).map_err(|e| usage(e.to_string()))?;
    let roots = match &opts.ca {
        Some(path) => Roots::Pem(
            std::fs::read(path).map_err(|e| usage(format!("--ca {}: {e}", path.display())))?,
        ),
        None => Roots::WebPki,
    };
    let transport = Transport::for_host(&host, opts.tls, opts.insecure, &roots).map_err(|e| {
        let what = opts
            .ca
            .as_ref()
            .map_or_else(String::new, |p| format!("--ca {}: ", p.display()));
        usage(format!("{what}{e}"))
    })?;
    Connection::connect(&opts.ans, &transport, opts.timeout())
        .await
        .map_err(|e| {
            let hint = if matches!(&e, ClientError::Tls(m) if m.contains("certificate"))
                && opts.ca.is_none()
            {
                " (to trust the ANS's own certificate, give it with --ca PEM_FILE)"
            } else {
                ""
            };
            failed(format!("{e}{hint}"))
        })
}

/// `text` with control characters (terminal escapes from a remote party) replaced.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect()
}

/// A received body as JSON, parsed exactly (signed bodies must round-trip their numbers).
fn parse_body(body: &[u8]) -> Option<Value> {
    agora_agtp::jcs::parse(std::str::from_utf8(body).ok()?).ok()
}

/// The line for a non-200 answer: `the ANS answered <code> <reason>: <message> (…)`.
fn answer_error(response: &Response, body: Option<&Value>) -> Failure {
    let reason = if response.reason.is_empty() {
        response.status.reason()
    } else {
        response.reason.as_str()
    };
    let mut line = format!(
        "the ANS answered {} {}",
        response.status.0,
        printable(reason)
    );
    let error = body.and_then(|b| b.get("error"));
    if let Some(message) = error.and_then(|e| e.get("message")).and_then(Value::as_str) {
        line.push_str(": ");
        line.push_str(&printable(message));
    }
    let extras: Vec<String> = ["parameter", "retry_after_ms", "required_scope"]
        .iter()
        .filter_map(|k| {
            let v = error?.get(*k)?;
            Some(match v {
                Value::String(s) => format!("{k}: {}", printable(s)),
                other => format!("{k}: {other}"),
            })
        })
        .collect();
    if !extras.is_empty() {
        line.push_str(&format!(" ({})", extras.join(", ")));
    }
    failed(line)
}

/// Sends `request` and returns the body of a 200 answer; any other answer is a failure with the
/// ANS's error line.
async fn send(conn: &mut Connection, opts: &AnsOpts, request: &Request) -> Result<Value, Failure> {
    let response = conn
        .send(request, opts.timeout())
        .await
        .map_err(|e| failed(format!("{} {}: {e}", request.method, opts.ans)))?;
    let body = parse_body(&response.body);
    if response.status.0 != 200 {
        return Err(answer_error(&response, body.as_ref()));
    }
    body.filter(Value::is_object).ok_or_else(|| {
        failed(format!(
            "the ANS answered {} with a body that is not a JSON object",
            request.method
        ))
    })
}

fn print_line(v: &Value) {
    println!("{}", serde_json::to_string(v).unwrap_or_default());
}

// ------------------------------------------------------------------------------------------------
// discover

/// The pinned key of `--ans-key`.
fn pinned_key(path: &Path) -> Result<AnsVerifyingKey, Failure> {
    ans::verifying_key_from_file(path).map_err(|e| usage(format!("--ans-key {e}")))
}

/// What the ANS publishes about itself (DESCRIBE without a target): its signing keys and its
/// ranking weights.
struct Published {
    keys: Vec<AnsVerifyingKey>,
    /// `[trust_tier, behavioral_trust, capability_match]`.
    weights: Option<[f64; 3]>,
}

/// DESCRIBEs the ANS and takes its `ans_keys` (by key id) and `ranking.weights`.
async fn describe_ans(conn: &mut Connection, opts: &AnsOpts) -> Result<Published, Failure> {
    // No Agent-ID: to the name server (as to the reference server) a DESCRIBE whose Agent-ID
    // is a registered agent describes that agent, and the caller may be one.
    let request = Request::new("DESCRIBE").with_header("Task-ID", task_id()?);
    let body = send(conn, opts, &request).await?;
    let manifest = &body["result"];
    let keys: Vec<AnsVerifyingKey> = manifest["ans_keys"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(id, jwk)| {
            let key = AnsVerifyingKey::from_jwk(jwk).ok()?;
            if key.key_id() == id {
                Some(key)
            } else {
                AnsVerifyingKey::from_sec1(&key.to_sec1_uncompressed(), id.as_str()).ok()
            }
        })
        .collect();
    if keys.is_empty() {
        return Err(failed(
            "the ANS publishes no usable signing key (ans_keys in its DESCRIBE manifest); pin one with --ans-key",
        ));
    }
    let w = &manifest["ranking"]["weights"];
    let weights = match (
        w["trust_tier"].as_f64(),
        w["behavioral_trust"].as_f64(),
        w["capability_match"].as_f64(),
    ) {
        (Some(t), Some(b), Some(c)) => Some([t, b, c]),
        _ => None,
    };
    Ok(Published { keys, weights })
}

fn discover_parameters(args: &DiscoverArgs) -> Value {
    let mut p = Map::new();
    p.insert("intent".into(), json!(args.intent));
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            p.insert(k.into(), v);
        }
    };
    put("limit", args.limit.map(|v| json!(v)));
    put("trust_tier_min", args.trust_tier_min.map(|v| json!(v)));
    put(
        "behavioral_trust_min",
        args.behavioral_trust_min.map(|v| json!(v)),
    );
    put("governance_zone", args.zone.as_ref().map(|v| json!(v)));
    put("org_domain", args.org.as_ref().map(|v| json!(v)));
    put(
        "capability_domains",
        (!args.capability_domain.is_empty()).then(|| json!(args.capability_domain)),
    );
    put(
        "preferred_agent",
        args.preferred_agent.as_ref().map(|v| json!(v)),
    );
    put(
        "scope_negotiate",
        args.scope_negotiate.then_some(json!(true)),
    );
    put("explain", args.explain.then_some(json!(true)));
    json!({"method": "DISCOVER", "parameters": p})
}

pub(crate) async fn discover(args: &DiscoverArgs) -> Outcome {
    let opts = &args.opts;
    let scope = header_value("--scope", &args.scope)?;
    if let Some(x) = args.behavioral_trust_min
        && !x.is_finite()
    {
        return Err(usage("--behavioral-trust-min must be a number"));
    }
    let pinned = args.ans_key.as_deref().map(pinned_key).transpose()?;
    let mut conn = connect(opts).await?;
    let published = match pinned {
        Some(key) => Published {
            keys: vec![key],
            weights: None,
        },
        None => describe_ans(&mut conn, opts).await?,
    };
    let request = Request::new("DISCOVER")
        .with_header("Agent-ID", &opts.agent_id)
        .with_header("Authority-Scope", scope)
        .with_header("Task-ID", task_id()?)
        .with_json_body(&discover_parameters(args));
    let body = send(&mut conn, opts, &request).await?;
    let result = body.get("result").unwrap_or(&Value::Null);
    verify_result_with(&published.keys, result)
        .map_err(|e| failed(format!("refusing the ANS's answer: {e}")))?;
    if opts.json {
        print_line(&body);
    } else {
        print_result(result, args.explain, published.weights);
    }
    Ok(())
}

/// A string member for display (empty when absent).
fn text(v: &Value, k: &str) -> String {
    printable(v.get(k).and_then(Value::as_str).unwrap_or(""))
}

fn decimal(v: &Value) -> String {
    v.as_f64().map_or_else(|| "-".into(), |x| format!("{x:.3}"))
}

/// Markers of one result: routed alternative, required scope.
fn notes(item: &Value) -> String {
    let mut notes = Vec::new();
    if let Some(reason) = item.get("routing_reason").and_then(Value::as_str) {
        let mut n = format!("routed: {}", printable(reason));
        if let Some(c) = item.get("equivalent_confidence") {
            n.push_str(&format!(", equivalent_confidence {}", decimal(c)));
        }
        notes.push(n);
    }
    if let Some(scope) = item.get("required_scope").and_then(Value::as_str)
        && !scope.is_empty()
    {
        notes.push(format!("scope: {}", printable(scope)));
    }
    notes.join("; ")
}

/// `components #1 id: tier 1.000*0.300 + trust 0.900*0.400 + match 0.512*0.300 = 0.804`.
fn components(item: &Value) -> Option<String> {
    let c = item.get("score_components")?;
    let w = &c["weights"];
    Some(format!(
        "components #{} {}: tier {}*{} + trust {}*{} + match {}*{} = {}",
        item["rank"],
        text(item, "canonical_id"),
        decimal(&c["normalized_trust_tier"]),
        decimal(&w["trust_tier_weight"]),
        decimal(&c["behavioral_trust_score"]),
        decimal(&w["behavioral_trust_weight"]),
        decimal(&c["capability_match_score"]),
        decimal(&w["capability_match_weight"]),
        decimal(&c["rank_score"]),
    ))
}

/// An item's `rank_score`: published, in its score components, or computed from the published
/// fields with the weights the ANS publishes (DISC-00 §3.5).
fn rank_score(item: &Value, weights: Option<[f64; 3]>) -> Option<f64> {
    if let Some(s) = item
        .get("rank_score")
        .or_else(|| item.get("score_components")?.get("rank_score"))
        .and_then(Value::as_f64)
    {
        return Some(s);
    }
    let [t, b, c] = weights?;
    let tier = item.get("trust_tier")?.as_f64()?;
    let behavioral = item.get("behavioral_trust_score")?.as_f64()?;
    let cms = item.get("capability_match_score")?.as_f64()?;
    Some(t * (3.0 - tier) / 2.0 + b * behavioral + c * cms)
}

fn print_result(result: &Value, explain: bool, weights: Option<[f64; 3]>) {
    let items: &[Value] = result["results"].as_array().map_or(&[], Vec::as_slice);
    if items.is_empty() {
        println!("no agent matched");
    } else {
        let rows: Vec<Vec<String>> = items
            .iter()
            .map(|item| {
                vec![
                    item["rank"].to_string(),
                    text(item, "canonical_id"),
                    text(item, "agent_label"),
                    item["trust_tier"].to_string(),
                    decimal(&item["behavioral_trust_score"]),
                    decimal(&item["capability_match_score"]),
                    rank_score(item, weights).map_or_else(|| "-".into(), |x| format!("{x:.3}")),
                    notes(item),
                ]
            })
            .collect();
        client::table(
            &[
                "RANK",
                "CANONICAL_ID",
                "LABEL",
                "TIER",
                "TRUST",
                "MATCH",
                "SCORE",
                "NOTE",
            ],
            &rows,
        );
    }
    if explain {
        for line in items.iter().filter_map(components) {
            println!("{line}");
        }
    }
    println!("query_id {}", text(result, "query_id"));
    println!(
        "total_matches {}, returned {}",
        result["total_matches"], result["returned"]
    );
    if let Some(path) = result.get("federation_path").and_then(Value::as_array) {
        let names: Vec<String> = path
            .iter()
            .filter_map(Value::as_str)
            .map(printable)
            .collect();
        println!("federation_path {}", names.join(" -> "));
    }
    if let Some(r) = result.get("routing").filter(|r| r.is_object()) {
        let alternative = r["alternative"].as_str().map_or_else(
            || "no alternative".to_owned(),
            |a| format!("alternative {}", printable(a)),
        );
        println!(
            "routing: preferred {} is {}: {alternative} (equivalent_confidence {})",
            text(r, "preferred_agent"),
            text(r, "routing_reason"),
            decimal(&r["equivalent_confidence"]),
        );
    }
    if let Ok(sig) = AnsSignature::from_result(result) {
        println!("signature: {} {} verified", sig.algorithm, sig.key_id);
    }
}

// ------------------------------------------------------------------------------------------------
// ans keygen

/// `<FILE without a trailing .json>.pub.json`.
fn public_path(out: &Path) -> PathBuf {
    let mut name = match out.to_str().and_then(|s| s.strip_suffix(".json")) {
        Some(stem) => stem.into(),
        None => out.as_os_str().to_owned(),
    };
    name.push(".pub.json");
    PathBuf::from(name)
}

fn keygen(out: &Path, kid: Option<&str>, force: bool) -> Outcome {
    if let Some(k) = kid {
        header_value("--kid", k)?;
    }
    let public = public_path(out);
    if !force {
        for p in [out, public.as_path()] {
            if p.exists() {
                return Err(usage(format!(
                    "{} exists (use --force to overwrite it)",
                    p.display()
                )));
            }
        }
    }
    let key = ans::generate_key(kid).map_err(failed)?;
    let jwk = key.verifying_key().to_jwk();
    agora_node::keys::write_private(out, ans::private_jwk(&key).to_string().as_bytes())
        .map_err(|e| usage(format!("{}: {e}", out.display())))?;
    std::fs::write(&public, format!("{jwk}\n"))
        .map_err(|e| usage(format!("{}: {e}", public.display())))?;
    print_line(&jwk);
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// ans activate / ans lifecycle

/// Sends one governance-signed lifecycle request and prints its outcome.
async fn governed(
    transition: Transition,
    canonical_id: &str,
    manifest: Option<&Value>,
    gov: &GovernanceArgs,
) -> Outcome {
    let opts = &gov.opts;
    let scope = header_value("--scope", &gov.scope)?;
    if canonical_id.is_empty() {
        return Err(usage("the canonical_id is empty"));
    }
    if transition == Transition::Revoke && gov.reason.is_none() {
        return Err(usage("revoke needs --reason (revocation is permanent)"));
    }
    let key_text = std::fs::read_to_string(&gov.key)
        .map_err(|e| usage(format!("--key {}: {e}", gov.key.display())))?;
    let key = ans::signing_key_from_jwk(&key_text)
        .map_err(|e| usage(format!("--key {}: {e}", gov.key.display())))?;
    let mut conn = connect(opts).await?;
    let task = task_id()?;
    let body = governance::signed_body(
        &key,
        transition,
        canonical_id,
        manifest,
        gov.reason.as_deref(),
        agora_node::clock::now_ms(),
        &random_hex(16)?,
        &task,
    );
    let request = Request::new(transition.method())
        .with_header("Agent-ID", &opts.agent_id)
        .with_header("Authority-Scope", scope)
        .with_header("Task-ID", &task)
        .with_json_body(&body);
    let answer = send(&mut conn, opts, &request).await?;
    if opts.json {
        print_line(&answer);
        return Ok(());
    }
    let r = &answer["result"];
    let mut line = format!(
        "{} {}: {} (was {})",
        transition.method(),
        r["canonical_id"].as_str().unwrap_or(canonical_id),
        text(r, "lifecycle_state"),
        r["previous_state"].as_str().unwrap_or("none"),
    );
    if r["noop"] == true {
        line.push_str(", no change");
    }
    if let Some(seq) = r.get("audit_seq").and_then(Value::as_u64) {
        line.push_str(&format!(", audit #{seq}"));
    }
    println!("{line}");
    Ok(())
}

/// Reads an Agent Manifest Document: its canonical_id (or agent_id) and the document.
fn read_manifest(path: &Path) -> Result<(String, Value), Failure> {
    let bad = |e: &dyn std::fmt::Display| usage(format!("{}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(&e))?;
    let doc = agora_agtp::jcs::parse(&text).map_err(|e| bad(&e))?;
    if !doc.is_object() {
        return Err(bad(&"the manifest must be a JSON object"));
    }
    let id = ["canonical_id", "agent_id"]
        .iter()
        .find_map(|k| doc.get(*k).and_then(Value::as_str))
        .filter(|id| !id.is_empty())
        .ok_or_else(|| bad(&"the manifest names no canonical_id (or agent_id)"))?
        .to_owned();
    Ok((id, doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_key_file_names() {
        for (private, public) in [
            ("gov.json", "gov.pub.json"),
            ("keys/gov", "keys/gov.pub.json"),
            ("gov.key", "gov.key.pub.json"),
            ("gov.json.json", "gov.json.pub.json"),
        ] {
            assert_eq!(
                public_path(Path::new(private)),
                Path::new(public),
                "{private}"
            );
        }
    }

    #[test]
    fn error_lines_name_the_status_and_the_details() {
        let body = json!({"status": 400, "error": {"code": "invalid-parameter",
            "message": "invalid parameter limit\u{1b}[2J", "parameter": "limit"}});
        let response = Response::new(agora_agtp::Status::BAD_REQUEST).with_json_body(&body);
        let Failure(code, line) = answer_error(&response, Some(&body));
        assert_eq!(code, 1);
        assert_eq!(
            line,
            "the ANS answered 400 Bad Request: invalid parameter limit\u{fffd}[2J (parameter: limit)"
        );
        let bare = Response::new(agora_agtp::Status(503)).with_reason("");
        let Failure(_, line) = answer_error(&bare, None);
        assert_eq!(line, "the ANS answered 503 Unavailable");
    }

    #[test]
    fn rank_scores_published_explained_or_computed() {
        let item =
            json!({"trust_tier": 1, "behavioral_trust_score": 0.5, "capability_match_score": 1.0});
        assert_eq!(rank_score(&item, None), None);
        let s = rank_score(&item, Some([0.3, 0.4, 0.3])).expect("computed");
        assert!((s - 0.8).abs() < 1e-12, "{s}");
        let explained = json!({"score_components": {"rank_score": 0.25}});
        assert_eq!(rank_score(&explained, Some([0.3, 0.4, 0.3])), Some(0.25));
    }
}
