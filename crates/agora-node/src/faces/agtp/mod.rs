//! The AGTP face: the Agent Name Service ([`crate::ans`]) served over AGTP/1.0.
//!
//! | module | owns |
//! |---|---|
//! | [`listener`] | accepting connections (plain on loopback, TLS 1.3 elsewhere), sequential requests, idle timeout |
//! | [`client`] | outgoing AGTP requests (refresh, federation, the CLI) |
//! | [`tls`] | the listener's certificate (configured, or generated once and kept in the data directory) and rustls configurations |

pub mod client;
pub mod listener;
pub mod tls;

use std::sync::Arc;

use agora_agtp::ScopeViolationCode;
use agora_agtp::rank::Weights;
use agora_agtp::refresh::RefreshConfig;
use agora_bucket::RateConfig;

use crate::ans;
use crate::config::Config;
use crate::store::Store;

/// The AGTP face, ready to serve.
pub struct Face {
    /// The name server.
    pub ans: Arc<ans::Ans>,
    /// TLS, unless the face speaks plain AGTP.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for Face {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Face")
            .field("ans", &self.ans)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Starts the AGTP face's name server: [`prepare`] on a blocking thread.
pub async fn start(config: &Config, store: Store) -> Result<Face, String> {
    let c = config.clone();
    tokio::task::spawn_blocking(move || prepare(&c, store))
        .await
        .map_err(|e| e.to_string())?
}

/// Builds the name server from the configuration: its signing key (kept in the data
/// directory), the governance keys, the federation peers, the index read back from the store,
/// and the listener's TLS (plain on loopback unless `tls`; TLS 1.3 elsewhere unless `insecure`).
/// Blocking (file and store reads): call it at start-up.
pub fn prepare(config: &Config, store: Store) -> Result<Face, String> {
    let a = &config.agtp;
    let signer = ans::load_or_create_key(&config.data)?;
    let governance = a
        .governance_keys
        .iter()
        .map(|p| ans::verifying_key_from_file(p))
        .collect::<Result<Vec<_>, _>>()?;
    if governance.is_empty() {
        tracing::info!(
            "agtp: no governance keys configured (agtp.governance_keys): lifecycle methods will be refused"
        );
    }
    let mut peers = Vec::new();
    for p in &a.peers {
        let key = ans::verifying_key_from_file(&p.key)?;
        let host = client::split_host_port(&p.endpoint)
            .map_err(|e| format!("agtp.peers {}: {e}", p.name))?
            .0;
        let roots = match &p.ca {
            Some(ca) => tls::Roots::Pem(
                std::fs::read(ca)
                    .map_err(|e| format!("agtp.peers {}: {}: {e}", p.name, ca.display()))?,
            ),
            None => tls::Roots::WebPki,
        };
        let transport =
            client::Transport::for_host(&host, p.tls == Some(true), p.tls == Some(false), &roots)
                .map_err(|e| format!("agtp.peers {}: {e}", p.name))?;
        peers.push(ans::Peer {
            name: p.name.clone(),
            endpoint: p.endpoint.clone(),
            transport,
            key,
        });
    }
    let [trust_tier, behavioral_trust, capability_match] = a.weights;
    let settings = ans::Settings {
        name: a.name.clone().unwrap_or_else(|| signer.key_id().to_owned()),
        scope_code: ScopeViolationCode::from_code(a.scope_violation_code)
            .unwrap_or(ScopeViolationCode::Draft451),
        weights: Weights {
            trust_tier_weight: trust_tier,
            behavioral_trust_weight: behavioral_trust,
            capability_match_weight: capability_match,
        },
        rate: RateConfig {
            rate: a.rate,
            burst: a.burst,
            ..RateConfig::default()
        },
        refresh: RefreshConfig {
            interval_ms: millis(a.refresh_interval),
            retry_ms: millis(a.refresh_retry),
        },
        refresh_timeout: a.refresh_timeout,
        peers,
        federation_deadline: a.federation_deadline,
        unregistered_claims: a.unregistered_scope_claims,
        population_open: a.population_open,
    };
    let loopback = config.agtp_listen.ip().is_loopback();
    let use_tls = a.tls || (!loopback && !a.insecure);
    let tls = if use_tls {
        let server = match (&a.cert, &a.key) {
            (Some(c), Some(k)) => tls::load(c, k),
            _ => {
                let mut names = a.tls_names.clone();
                if !loopback && !config.agtp_listen.ip().is_unspecified() {
                    names.push(config.agtp_listen.ip().to_string());
                }
                tls::load_or_generate(&config.data, &names)
            }
        }
        .map_err(|e| e.to_string())?;
        Some(server.acceptor().map_err(|e| e.to_string())?)
    } else {
        if !loopback {
            tracing::warn!(
                addr = %config.agtp_listen,
                "agtp: serving plain AGTP beyond loopback (--insecure): traffic is not encrypted"
            );
        }
        None
    };
    let ans = ans::Ans::open(settings, signer, governance, store).map_err(|e| e.to_string())?;
    Ok(Face {
        ans: Arc::new(ans),
        tls,
    })
}
