//! `agora hyperspace`: sign and verify v2 envelopes (a stable contract for vector work).
//!
//! - `sign --key HEX32 --topic T [--ts MS] [--nonce HEX] [FILE|-]`: each input line is one JSON
//!   value `d`; prints one envelope per line (ts defaults to now, nonce to 16 random bytes).
//! - `verify --topic T [--now MS] [FILE|-]`: each input line is one envelope; prints
//!   `{"ok":true}` or `{"ok":false,"error":"<reason>"}` per line, with one replay window across
//!   lines; exit 1 if any failed, 2 on a usage or IO error.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use agora_hyperspace::{ReplayWindow, envelope::is_nonce, sign, verify};
use clap::Subcommand;
use ed25519_dalek::SigningKey;

use crate::input;

#[derive(Debug, Subcommand)]
pub(crate) enum HyperspaceCommand {
    /// Sign payloads (one JSON value per line) into v2 envelopes for a topic.
    Sign {
        /// Ed25519 secret key (seed), 64 hex characters.
        #[arg(long, value_name = "HEX32")]
        key: String,
        /// Gossip topic, e.g. hyperspace/tasks/web-research.
        #[arg(long, value_name = "TOPIC")]
        topic: String,
        /// Timestamp in Unix milliseconds (default: now).
        #[arg(long, value_name = "MS")]
        ts: Option<u64>,
        /// Nonce, 32 lowercase hex characters (default: random for each line).
        #[arg(long, value_name = "HEX")]
        nonce: Option<String>,
        /// Input file; `-` or absent reads standard input.
        file: Option<PathBuf>,
    },
    /// Verify v2 envelopes (one per line) received on a topic.
    Verify {
        /// Gossip topic the envelopes were received on.
        #[arg(long, value_name = "TOPIC")]
        topic: String,
        /// Receiver clock in Unix milliseconds (default: now).
        #[arg(long, value_name = "MS")]
        now: Option<u64>,
        /// Input file; `-` or absent reads standard input.
        file: Option<PathBuf>,
    },
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn parse_key(hex: &str) -> Option<SigningKey> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut seed = [0u8; 32];
    for (i, b) in seed.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(SigningKey::from_bytes(&seed))
}

fn random_nonce() -> String {
    let mut b = [0u8; 16];
    let _ = getrandom::fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn run(cmd: HyperspaceCommand) -> ExitCode {
    let result = match cmd {
        HyperspaceCommand::Sign {
            key,
            topic,
            ts,
            nonce,
            file,
        } => sign_cmd(&key, &topic, ts, nonce.as_deref(), file.as_ref()),
        HyperspaceCommand::Verify { topic, now, file } => verify_cmd(&topic, now, file.as_ref()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("agora: {e}");
            ExitCode::from(2)
        }
    }
}

fn sign_cmd(
    key: &str,
    topic: &str,
    ts: Option<u64>,
    nonce: Option<&str>,
    file: Option<&PathBuf>,
) -> io::Result<ExitCode> {
    let key = parse_key(key).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "--key must be 64 hex characters",
        )
    })?;
    if let Some(n) = nonce
        && !is_nonce(n)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--nonce must be 32 lowercase hex characters",
        ));
    }
    input::map_lines(file, |n, line, out| {
        let d = String::from_utf8_lossy(line);
        let nonce = nonce.map_or_else(random_nonce, str::to_owned);
        match sign(&key, topic, ts.unwrap_or_else(now_ms), &nonce, d.trim()) {
            Ok(env) => {
                writeln!(out, "{env}")?;
                Ok(true)
            }
            Err(e) => {
                eprintln!("agora: line {n}: {e}");
                writeln!(out)?;
                Ok(false)
            }
        }
    })
}

fn verify_cmd(topic: &str, now: Option<u64>, file: Option<&PathBuf>) -> io::Result<ExitCode> {
    let now = now.unwrap_or_else(now_ms);
    let mut window = ReplayWindow::default();
    input::map_lines(file, |_, line, out| {
        let text = String::from_utf8_lossy(line);
        match verify(&text, topic, now, &mut window) {
            Ok(_) => {
                writeln!(out, "{{\"ok\":true}}")?;
                Ok(true)
            }
            Err(e) => {
                writeln!(out, "{{\"ok\":false,\"error\":\"{}\"}}", e.reason())?;
                Ok(false)
            }
        }
    })
}
