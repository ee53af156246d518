//! `[agtp]` and `[[agtp.peers]]`: the Agent Name Service and its listener (`AGORA_AGTP_*`,
//! `--agtp-tls`, `--insecure`).

use std::ops::Bound::{Excluded, Included};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use struct_patch::Patch;

use super::{ConfigError, check, de, invalid};

/// `[agtp]` settings: the Agent Name Service and its listener.
#[derive(Clone, Debug, PartialEq, Patch)]
#[patch(attribute(derive(Clone, Debug, Default, Deserialize)))]
#[patch(attribute(serde(default, deny_unknown_fields)))]
#[patch(attribute(
    doc = "`[agtp]` in one layer of settings (see [`ConfigPatch`](super::ConfigPatch))."
))]
pub struct AgtpConfig {
    /// The name server's name in `federation_path` and its own manifest (`name`; default: its
    /// key id).
    #[patch(skip_wrap)]
    pub name: Option<String>,
    /// Serve TLS even on loopback (`tls = true`, `--agtp-tls`).
    pub tls: bool,
    /// Serve plain AGTP beyond loopback (`insecure = true`, `--insecure`).
    pub insecure: bool,
    /// Certificate chain (PEM, `cert`); generated into the data directory when absent.
    #[patch(skip_wrap)]
    pub cert: Option<PathBuf>,
    /// Private key (PEM, `key`) of `cert`.
    #[patch(skip_wrap)]
    pub key: Option<PathBuf>,
    /// Extra names (DNS names or IP literals) for the generated certificate (`tls_names`).
    pub tls_names: Vec<String>,
    /// Status code for a missing `discovery:query` scope (`scope_violation_code`): 451
    /// (default), 455 or 262.
    pub scope_violation_code: u16,
    /// `rank_score` weights: normalised trust tier, behavioural trust, capability match
    /// (`[agtp.weights]` `trust_tier`, `behavioral_trust`, `capability_match`).
    #[patch(attribute(serde(deserialize_with = "de::weights")))]
    pub weights: [f64; 3],
    /// DISCOVER requests per second per Agent-ID (`rate`).
    pub rate: f64,
    /// Burst of DISCOVER requests per Agent-ID (`burst`).
    pub burst: f64,
    /// Re-DESCRIBE interval of indexed agents (`refresh_interval`, seconds).
    #[patch(attribute(serde(deserialize_with = "de::secs")))]
    pub refresh_interval: Duration,
    /// Delay before retrying a failed re-DESCRIBE (`refresh_retry`, seconds).
    #[patch(attribute(serde(deserialize_with = "de::secs")))]
    pub refresh_retry: Duration,
    /// Deadline of a whole DESCRIBE during refresh (`refresh_timeout_ms`).
    #[patch(attribute(serde(rename = "refresh_timeout_ms", deserialize_with = "de::millis")))]
    pub refresh_timeout: Duration,
    /// Public JWK files of the governance keys allowed to (de)register agents
    /// (`governance_keys`).
    pub governance_keys: Vec<PathBuf>,
    /// Federation peers (`[[agtp.peers]]`).
    pub peers: Vec<PeerConfig>,
    /// How long a DISCOVER waits for federation peers (`federation_deadline_ms`).
    #[patch(attribute(serde(
        rename = "federation_deadline_ms",
        deserialize_with = "de::millis"
    )))]
    pub federation_deadline: Duration,
    /// What an Authority-Scope claimed by a caller the name server has no registered document
    /// for means (`unregistered_scope_claims`): taken as `asserted` (default) or `refused` with
    /// 262 `scope-claim-invalid`.
    #[patch(attribute(serde(deserialize_with = "de::scope_claims")))]
    pub unregistered_scope_claims: agora_agtp::scope::UnregisteredClaims,
    /// `DISCOVER /population` without an Authority-Scope is answered (`population_open`,
    /// default), as the reference coordinator does; `false` applies the draft's
    /// `discovery:query` rule there too.
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

impl AgtpConfig {
    /// Checks each `[agtp]` setting.
    pub(super) fn settle(&self) -> Result<(), ConfigError> {
        if let Some(name) = &self.name
            && (name.trim().is_empty() || name.len() > 256)
        {
            return Err(invalid("agtp.name", "must be 1 to 256 characters"));
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err(invalid("agtp.cert", "agtp.cert and agtp.key go together"));
        }
        if !matches!(self.scope_violation_code, 451 | 455 | 262) {
            return Err(invalid(
                "agtp.scope_violation_code",
                "must be 451, 455 or 262",
            ));
        }
        let sum: f64 = self.weights.iter().sum();
        if self.weights.iter().any(|x| !x.is_finite() || *x < 0.0) || (sum - 1.0).abs() > 1e-9 {
            return Err(invalid("agtp.weights", "must be non-negative and sum to 1"));
        }
        for (value, key) in [(self.rate, "agtp.rate"), (self.burst, "agtp.burst")] {
            check(
                key,
                value,
                (Excluded(0.0), Included(f64::MAX)),
                "must be a positive number",
            )?;
        }
        for (value, key) in [
            (self.refresh_interval, "agtp.refresh_interval"),
            (self.refresh_retry, "agtp.refresh_retry"),
            (self.refresh_timeout, "agtp.refresh_timeout_ms"),
            (self.federation_deadline, "agtp.federation_deadline_ms"),
        ] {
            check(key, value, Duration::from_millis(1).., "must be positive")?;
        }
        Ok(())
    }
}

impl AgtpConfigPatch {
    /// Takes relative paths from `base` (the directory of the file the layer comes from).
    pub(super) fn rebase(&mut self, base: &Path) {
        let rel = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        self.cert
            .iter_mut()
            .chain(self.key.iter_mut())
            .for_each(rel);
        self.governance_keys.iter_mut().flatten().for_each(rel);
        for peer in self.peers.iter_mut().flatten() {
            rel(&mut peer.key);
            peer.ca.iter_mut().for_each(rel);
        }
    }
}
