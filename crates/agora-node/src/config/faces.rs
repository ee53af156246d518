//! The faces' top-level settings: the API key (`api_key`, `AGORA_API_KEY`; `[rpc] api_key`,
//! `AGORA_RPC_API_KEY`), connection limits (`max_connections`, `header_timeout`,
//! `request_timeout`, `ws_idle_timeout`), `allowed_origins`, `allowed_hosts` and `public_reads`
//! (fields of [`Config`]); the environment variables are `AGORA_` and the key in capitals
//! (`AGORA_ALLOWED_ORIGINS`, …). Also [`FaceLimits`], the connection limits the serving layer
//! (`faces/serve.rs`) takes, and [`split_port`], which it shares.

use std::time::Duration;

use super::{Config, ConfigError, ConfigPatch, check, invalid};

/// The API key has two names (`api_key`, and the older `[rpc] api_key`): a layer that gives
/// both must give the same key. The one given is checked and moved to `api_key`, which the
/// layer then sets.
pub(super) fn take_api_key(layer: &mut ConfigPatch) -> Result<(), ConfigError> {
    let older = layer.rpc.api_key.take();
    let (name, key) = match (layer.api_key.take(), older) {
        (Some(a), Some(r)) if a.trim() != r.trim() => {
            return Err(invalid(
                "api_key",
                "api_key and rpc.api_key (AGORA_API_KEY and AGORA_RPC_API_KEY) name the same \
                 setting and differ: set one",
            ));
        }
        (Some(k), _) => ("api_key", k),
        (None, Some(k)) => ("rpc.api_key", k),
        (None, None) => return Ok(()),
    };
    let key = key.trim();
    if key.chars().count() < 16 {
        return Err(invalid(name, "must be at least 16 characters"));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(
            name,
            "must be printable ASCII without spaces (it travels in an HTTP header)",
        ));
    }
    layer.api_key = Some(key.to_owned());
    Ok(())
}

impl Config {
    /// Checks the connection limits and normalises the origins and hosts.
    pub(super) fn settle_faces(&mut self) -> Result<(), ConfigError> {
        check(
            "max_connections",
            self.max_connections,
            1..=1_000_000,
            "must be 1 to 1000000",
        )?;
        for (value, key) in [
            (self.header_timeout, "header_timeout"),
            (self.request_timeout, "request_timeout"),
            (self.ws_idle_timeout, "ws_idle_timeout"),
        ] {
            check(
                key,
                value,
                Duration::from_secs(1)..=Duration::from_secs(86_400),
                "must be 1 to 86400 seconds",
            )?;
        }
        self.allowed_origins = self
            .allowed_origins
            .iter()
            .map(|v| parse_origin(v))
            .collect::<Result<_, _>>()?;
        self.allowed_hosts = self
            .allowed_hosts
            .iter()
            .map(|v| parse_host(v))
            .collect::<Result<_, _>>()?;
        Ok(())
    }
}

/// An origin as browsers send it, `scheme://host[:port]`, lowercased.
fn parse_origin(value: &str) -> Result<String, ConfigError> {
    let v = value.trim().trim_end_matches('/').to_ascii_lowercase();
    let bad = || {
        invalid(
            "allowed_origins",
            &format!("{value:?} is not an origin (http:// or https://, a host, an optional port)"),
        )
    };
    let authority = v
        .strip_prefix("http://")
        .or_else(|| v.strip_prefix("https://"))
        .ok_or_else(bad)?;
    parse_host(authority).map_err(|_| bad())?;
    Ok(v)
}

/// A host name or IP literal with an optional port, lowercased.
fn parse_host(value: &str) -> Result<String, ConfigError> {
    let v = value.trim().to_ascii_lowercase();
    let (name, port) = split_port(&v);
    let port_ok = port.is_some() || !v[name.len()..].starts_with(':');
    let literal = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .is_some_and(|n| n.parse::<std::net::Ipv6Addr>().is_ok());
    let dns = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if port_ok && (literal || dns) {
        Ok(v)
    } else {
        Err(invalid(
            "allowed_hosts",
            &format!("{value:?} is not a host name, IP address or name:port"),
        ))
    }
}

/// Connection limits of one face, as the serving layer takes them ([`Config::faces`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaceLimits {
    /// Connections served at once (each face has its own count). Default 1,024.
    pub max_connections: usize,
    /// Time for a request line and headers to arrive (also how long an HTTP connection may wait
    /// for its next request). Default 10 s.
    pub header_timeout: Duration,
    /// Time for a request body to arrive and the answer to be ready; also how long an HTTP
    /// connection may go without a byte either way. Default 60 s.
    pub request_timeout: Duration,
    /// How long a WebSocket may go without a byte either way. Default 300 s.
    pub ws_idle_timeout: Duration,
}

impl Default for FaceLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            ws_idle_timeout: Duration::from_secs(300),
        }
    }
}

/// Splits `name:port` (names may be bracketed IPv6 literals); a missing or unreadable port is
/// `None`.
pub(crate) fn split_port(host: &str) -> (&str, Option<u16>) {
    if host.starts_with('[') {
        return match host.split_once("]:") {
            Some((name, port)) => (&host[..=name.len()], port.parse().ok()),
            None => (host, None),
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => (name, port.parse().ok()),
        _ => (host, None),
    }
}
