//! `[agtp]` and `[[agtp.peers]]`: the Agent Name Service and its listener (`AGORA_AGTP_*`,
//! `--agtp-tls`, `--insecure`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use std::ops::Bound::{Excluded, Included};

use super::{Config, ConfigError, in_range, invalid, set_in_range};

/// `[agtp]` settings: the Agent Name Service and its listener.
#[derive(Clone, Debug, PartialEq)]
pub struct AgtpConfig {
    /// The name server's name in `federation_path` and its own manifest (default: its key id).
    pub name: Option<String>,
    /// Serve TLS even on loopback (`tls = true`, `--agtp-tls`).
    pub tls: bool,
    /// Serve plain AGTP beyond loopback (`insecure = true`, `--insecure`).
    pub insecure: bool,
    /// Certificate chain (PEM); generated into the data directory when absent.
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of `cert`.
    pub key: Option<PathBuf>,
    /// Extra names (DNS names or IP literals) for the generated certificate.
    pub tls_names: Vec<String>,
    /// Status code for a missing `discovery:query` scope: 451 (default), 455 or 262.
    pub scope_violation_code: u16,
    /// `rank_score` weights: normalised trust tier, behavioural trust, capability match.
    pub weights: [f64; 3],
    /// DISCOVER requests per second per Agent-ID.
    pub rate: f64,
    /// Burst of DISCOVER requests per Agent-ID.
    pub burst: f64,
    /// Re-DESCRIBE interval of indexed agents.
    pub refresh_interval: Duration,
    /// Delay before retrying a failed re-DESCRIBE.
    pub refresh_retry: Duration,
    /// Deadline of a whole DESCRIBE during refresh.
    pub refresh_timeout: Duration,
    /// Public JWK files of the governance keys allowed to (de)register agents.
    pub governance_keys: Vec<PathBuf>,
    /// Federation peers.
    pub peers: Vec<PeerConfig>,
    /// How long a DISCOVER waits for federation peers.
    pub federation_deadline: Duration,
    /// What an Authority-Scope claimed by a caller the name server has no registered document
    /// for means: taken as asserted (default) or refused with 262 `scope-claim-invalid`.
    pub unregistered_scope_claims: agora_agtp::scope::UnregisteredClaims,
    /// `DISCOVER /population` without an Authority-Scope is answered (default), as the
    /// reference coordinator does; `false` applies the draft's `discovery:query` rule there too.
    pub population_open: bool,
}

impl Default for AgtpConfig {
    fn default() -> Self {
        Self {
            name: None,
            tls: false,
            insecure: false,
            cert: None,
            key: None,
            tls_names: Vec::new(),
            scope_violation_code: 451,
            weights: [0.3, 0.4, 0.3],
            rate: 20.0,
            burst: 40.0,
            refresh_interval: Duration::from_secs(24 * 3600),
            refresh_retry: Duration::from_secs(300),
            refresh_timeout: Duration::from_secs(10),
            governance_keys: Vec::new(),
            peers: Vec::new(),
            federation_deadline: Duration::from_millis(1500),
            unregistered_scope_claims: agora_agtp::scope::UnregisteredClaims::Asserted,
            population_open: true,
        }
    }
}

/// `[[agtp.peers]]`: a federated name server.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// Its name in `federation_path`.
    pub name: String,
    /// `host:port` of its AGTP face.
    pub endpoint: String,
    /// Its pinned public key (a JWK file).
    pub key: PathBuf,
    /// Certificate (PEM) to trust for its TLS; the web PKI roots otherwise.
    pub ca: Option<PathBuf>,
    /// Force TLS (`Some(true)`) or plain (`Some(false)`); by default plain on loopback only.
    pub tls: Option<bool>,
}

impl Config {
    /// Applies `[agtp]`; relative paths are taken from the configuration file's directory.
    pub(super) fn apply_agtp(&mut self, f: AgtpOverrides, base: &Path) -> Result<(), ConfigError> {
        let rel = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let a = &mut self.agtp;
        if let Some(name) = f.name {
            if name.trim().is_empty() || name.len() > 256 {
                return Err(invalid("agtp.name", "must be 1 to 256 characters"));
            }
            a.name = Some(name);
        }
        if f.cert.is_some() || f.key.is_some() {
            a.cert = f.cert.map(rel);
            a.key = f.key.map(rel);
            if a.cert.is_some() != a.key.is_some() {
                return Err(invalid("agtp.cert", "agtp.cert and agtp.key go together"));
            }
        }
        if let Some(names) = f.tls_names {
            a.tls_names = names;
        }
        if let Some(code) = f.scope_violation_code {
            if !matches!(code, 451 | 455 | 262) {
                return Err(invalid(
                    "agtp.scope_violation_code",
                    "must be 451, 455 or 262",
                ));
            }
            a.scope_violation_code = code;
        }
        if let Some(w) = f.weights {
            let weights = [w.trust_tier, w.behavioral_trust, w.capability_match];
            let sum: f64 = weights.iter().sum();
            if weights.iter().any(|x| !x.is_finite() || *x < 0.0) || (sum - 1.0).abs() > 1e-9 {
                return Err(invalid("agtp.weights", "must be non-negative and sum to 1"));
            }
            a.weights = weights;
        }
        for (value, slot, key) in [
            (f.rate, &mut a.rate, "agtp.rate"),
            (f.burst, &mut a.burst, "agtp.burst"),
        ] {
            set_in_range(
                slot,
                key,
                value,
                (Excluded(0.0), Included(f64::MAX)),
                "must be a positive number",
            )?;
        }
        for (value, slot, key, unit) in [
            (
                f.refresh_interval,
                &mut a.refresh_interval,
                "agtp.refresh_interval",
                1000,
            ),
            (
                f.refresh_retry,
                &mut a.refresh_retry,
                "agtp.refresh_retry",
                1000,
            ),
            (
                f.refresh_timeout_ms,
                &mut a.refresh_timeout,
                "agtp.refresh_timeout_ms",
                1,
            ),
            (
                f.federation_deadline_ms,
                &mut a.federation_deadline,
                "agtp.federation_deadline_ms",
                1,
            ),
        ] {
            if let Some(v) = value {
                *slot = Duration::from_millis(
                    in_range(key, v, 1.., "must be positive")?.saturating_mul(unit),
                );
            }
        }
        if let Some(keys) = f.governance_keys {
            a.governance_keys = keys.into_iter().map(rel).collect();
        }
        if let Some(name) = f.unregistered_scope_claims {
            a.unregistered_scope_claims = agora_agtp::scope::UnregisteredClaims::from_name(&name)
                .ok_or_else(|| {
                invalid(
                    "agtp.unregistered_scope_claims",
                    "must be \"asserted\" or \"refused\"",
                )
            })?;
        }
        if let Some(open) = f.population_open {
            a.population_open = open;
        }
        if let Some(peers) = f.peers {
            a.peers = peers
                .into_iter()
                .map(|p| PeerConfig {
                    key: rel(p.key),
                    ca: p.ca.map(rel),
                    ..p
                })
                .collect();
        }
        Ok(())
    }
}

/// `[agtp]` in one layer of settings (see [`Overrides`](super::Overrides)).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgtpOverrides {
    /// `name`.
    pub name: Option<String>,
    /// `tls`.
    pub tls: Option<bool>,
    /// `insecure`.
    pub insecure: Option<bool>,
    /// `cert`.
    pub cert: Option<PathBuf>,
    /// `key`.
    pub key: Option<PathBuf>,
    /// `tls_names`.
    pub tls_names: Option<Vec<String>>,
    /// `scope_violation_code`.
    pub scope_violation_code: Option<u16>,
    /// `weights`.
    pub weights: Option<Weights>,
    /// `rate`.
    pub rate: Option<f64>,
    /// `burst`.
    pub burst: Option<f64>,
    /// `refresh_interval`, seconds.
    pub refresh_interval: Option<u64>,
    /// `refresh_retry`, seconds.
    pub refresh_retry: Option<u64>,
    /// `refresh_timeout_ms`, milliseconds.
    pub refresh_timeout_ms: Option<u64>,
    /// `governance_keys`.
    pub governance_keys: Option<Vec<PathBuf>>,
    /// `peers`.
    pub peers: Option<Vec<PeerConfig>>,
    /// `federation_deadline_ms`, milliseconds.
    pub federation_deadline_ms: Option<u64>,
    /// `unregistered_scope_claims`, `asserted` or `refused`.
    pub unregistered_scope_claims: Option<String>,
    /// `population_open`.
    pub population_open: Option<bool>,
}

/// `[agtp.weights]`: the `rank_score` weights, summing to 1.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weights {
    /// Of the normalised trust tier.
    pub trust_tier: f64,
    /// Of behavioural trust.
    pub behavioral_trust: f64,
    /// Of the capability match.
    pub capability_match: f64,
}
