//! `agora agh`: validate, digest, route-token.
//!
//! Output contract (scripts depend on it):
//! - `validate` prints one JSON verdict per input line, `{"line":N,"ok":true,"id":"…","kind":"…"}`
//!   or `{"line":N,"ok":false,"reason":"<reason_code>","detail":"…"}`; exit 0 when every line is
//!   ok, 1 when any was rejected, 2 on a usage or IO error.
//! - `digest` prints one `sha256:<hex>` per input line (an empty line, plus a message on stderr,
//!   for a line that is not a valid capability document; exit 1 then).
//! - `route-token` prints the 32-hex-digit token (exit 1 for an invalid Peer ID).

use std::io::{self, Write};
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
    let mut dedup = DedupWindow::with_capacity(VALIDATE_DEDUP_CAPACITY);
    let progress = input::file_progress(args.file.as_ref());
    let done = input::map_lines(args.file.as_ref(), |n, line, verdict| {
        if let Some(p) = &progress {
            p.inc(line.len() as u64 + 1);
        }
        let result = validate(line, now, &policy).and_then(|v| {
            let env = &v.envelope;
            let deadline = dedup_deadline(env.ts, env.expires_at, policy.replay_age);
            dedup.insert(&env.id, deadline, now)?;
            Ok((env.id.clone(), env.kind))
        });
        let ok = result.is_ok();
        match result {
            Ok((id, kind)) => {
                write!(verdict, "{{\"line\":{n},\"ok\":true,\"id\":")?;
                serde_json::to_writer(&mut *verdict, &*id)?;
                write!(verdict, ",\"kind\":\"{kind}\"}}")?;
            }
            Err(e) => write_rejection(verdict, n, &e)?,
        }
        verdict.push(b'\n');
        Ok(ok)
    });
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    done
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
    input::map_lines(file, |n, line, out| {
        let doc = std::str::from_utf8(line)
            .map_err(|_| Rejection::Malformed("line is not valid UTF-8".into()))
            .and_then(|text| CapabilityDoc::from_json(text, DocRules::Authoring));
        match doc {
            Ok(doc) => {
                writeln!(out, "{}", doc.digest.as_deref().unwrap_or_default())?;
                Ok(true)
            }
            Err(e) => {
                eprintln!("agora: line {n}: {}", e.detail());
                writeln!(out)?;
                Ok(false)
            }
        }
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
