//! `agora agh`: validate, digest, route-token.
//!
//! Output contract (scripts depend on it):
//! - `validate` prints one JSON verdict per input line, `{"line":N,"ok":true,"id":"…","kind":"…"}`
//!   or `{"line":N,"ok":false,"reason":"<reason_code>","detail":"…"}`; exit 0 when every line is
//!   ok, 1 when any was rejected, 2 on a usage or IO error.
//! - `digest` prints one `sha256:<hex>` per input line (an empty line, plus a message on stderr,
//!   for a line that is not a valid capability document; exit 1 then).
//! - `route-token` prints the 32-hex-digit token (exit 1 for an invalid Peer ID).

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use agora_agh::capability::DocRules;
use agora_agh::validate::dedup_deadline;
use agora_agh::{CapabilityDoc, DedupWindow, Rejection, ValidationPolicy, route_token, validate};
use clap::{Args, Subcommand};

use crate::input;

/// Ids the `validate` command remembers across lines; its memory grows with the input up to this.
const VALIDATE_DEDUP_CAPACITY: usize = 1 << 24;

#[derive(Debug, Subcommand)]
pub(crate) enum AghCommand {
    /// Validate NDJSON envelopes (one per line) as a receiver would, deduplicating across lines.
    Validate(ValidateArgs),
    /// Compute the canonical digest of capability documents (one JSON object per line).
    Digest {
        /// Input file; `-` or absent reads standard input.
        file: Option<PathBuf>,
    },
    /// Print the route token of a Peer ID.
    RouteToken {
        /// The Peer ID.
        peer_id: String,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// Receiver clock, Unix seconds (default: the system clock).
    #[arg(long, value_name = "UNIX", allow_negative_numbers = true)]
    now: Option<i64>,
    /// Replay age in seconds, used when an envelope has no `expires_at`.
    #[arg(long, value_name = "SECS", default_value_t = agora_agh::validate::DEFAULT_REPLAY_AGE,
          value_parser = clap::value_parser!(i64).range(1..))]
    replay_age: i64,
    /// Also apply the AGH runtime's own admission rules (raw-secret scan, `task.write` proof).
    #[arg(long)]
    reference_admission: bool,
    /// Input file; `-` or absent reads standard input.
    file: Option<PathBuf>,
}

pub(crate) fn run(cmd: AghCommand) -> ExitCode {
    let result = match cmd {
        AghCommand::Validate(args) => validate_cmd(&args),
        AghCommand::Digest { file } => digest_cmd(file.as_ref()),
        AghCommand::RouteToken { peer_id } => Ok(route_token_cmd(&peer_id)),
    };
    match result {
        Ok(code) => code,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(2),
        Err(e) => {
            eprintln!("agora: {e}");
            ExitCode::from(2)
        }
    }
}

fn system_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn validate_cmd(args: &ValidateArgs) -> io::Result<ExitCode> {
    let now = args.now.unwrap_or_else(system_now);
    let policy = ValidationPolicy {
        replay_age: args.replay_age,
        reference_admission: args.reference_admission,
    };
    let mut reader = input::open(args.file.as_ref())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot read input: {e}")))?;
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut dedup = DedupWindow::with_capacity(VALIDATE_DEDUP_CAPACITY);
    let mut rejected = false;
    let mut verdict = Vec::with_capacity(256);
    input::for_each_line(&mut *reader, |n, line| {
        verdict.clear();
        let result = validate(line, now, &policy).and_then(|v| {
            let env = &v.envelope;
            let deadline = dedup_deadline(env.ts, env.expires_at, policy.replay_age);
            dedup.insert(&env.id, deadline, now)?;
            Ok((env.id.clone(), env.kind))
        });
        match result {
            Ok((id, kind)) => {
                write!(verdict, "{{\"line\":{n},\"ok\":true,\"id\":")?;
                serde_json::to_writer(&mut verdict, &*id)?;
                write!(verdict, ",\"kind\":\"{kind}\"}}")?;
            }
            Err(e) => {
                rejected = true;
                write_rejection(&mut verdict, n, &e)?;
            }
        }
        verdict.push(b'\n');
        out.write_all(&verdict)
    })?;
    out.flush()?;
    Ok(if rejected {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn write_rejection(out: &mut Vec<u8>, n: u64, e: &Rejection) -> io::Result<()> {
    write!(
        out,
        "{{\"line\":{n},\"ok\":false,\"reason\":\"{}\",\"detail\":",
        e.reason()
    )?;
    serde_json::to_writer(&mut *out, e.detail())?;
    out.push(b'}');
    Ok(())
}

fn digest_cmd(file: Option<&PathBuf>) -> io::Result<ExitCode> {
    let mut reader = input::open(file)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot read input: {e}")))?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failed = false;
    input::for_each_line(&mut *reader, |n, line| {
        let doc = std::str::from_utf8(line)
            .map_err(|_| Rejection::Malformed("line is not valid UTF-8".into()))
            .and_then(|text| CapabilityDoc::from_json(text, DocRules::Authoring));
        match doc {
            Ok(doc) => writeln!(out, "{}", doc.digest.as_deref().unwrap_or_default()),
            Err(e) => {
                failed = true;
                eprintln!("agora: line {n}: {}", e.detail());
                writeln!(out)
            }
        }
    })?;
    out.flush()?;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn route_token_cmd(peer_id: &str) -> ExitCode {
    match route_token(peer_id) {
        Ok(token) => {
            println!("{token}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("agora: {e}");
            ExitCode::from(1)
        }
    }
}
