//! How `agora.toml` writes the values whose Rust type is not a TOML type: durations as whole
//! seconds or milliseconds, addresses and multiaddrs as strings, lists that may be one string,
//! secrets as the files holding them. Each reads one field of a layer (an `Option`, `None` when
//! the key is absent); a value it refuses names itself, and [`parse`] puts the key in front.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libp2p::Multiaddr;
use serde::{Deserialize, Deserializer};

use super::{ConfigError, Secret};

/// Reads `text` (the file `path`) as `T`. A value refused by one of this module's readers is
/// `key: message (path line N)`; a TOML syntax error, an unknown key or a wrong type is toml's
/// own message, which shows the line.
pub(super) fn parse<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(toml::de::Deserializer::parse(text).map_err(|e| {
        ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    })?)
    .map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        match inner.message().strip_prefix(REFUSED) {
            Some(message) => {
                let line = inner
                    .span()
                    .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
                let at =
                    line.map_or_else(String::new, |l| format!(" ({} line {l})", path.display()));
                ConfigError::Invalid {
                    key,
                    message: format!("{message}{at}"),
                }
            }
            None => ConfigError::Parse {
                path: path.to_path_buf(),
                message: inner.to_string(),
            },
        }
    })
}

/// Marks the messages of this module's readers, so that [`parse`] tells them from toml's.
const REFUSED: &str = "\u{1}refused: ";

fn refused<E: serde::de::Error>(message: impl std::fmt::Display) -> E {
    E::custom(format!("{REFUSED}{message}"))
}

/// Whole seconds.
pub(super) fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    Ok(Some(Duration::from_secs(u64::deserialize(d)?)))
}

/// Whole milliseconds.
pub(super) fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    Ok(Some(Duration::from_millis(u64::deserialize(d)?)))
}

/// A string or a list of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// A string or a list of strings, as a list.
pub(super) fn one_or_many<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    Ok(Some(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    }))
}

/// A multiaddr or a list of them.
pub(super) fn multiaddrs<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<Multiaddr>>, D::Error> {
    one_or_many(d)?
        .unwrap_or_default()
        .iter()
        .map(|v| multiaddr(v).map_err(refused))
        .collect::<Result<_, _>>()
        .map(Some)
}

/// An `IP:port` address.
pub(super) fn socket_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let v = String::deserialize(d)?;
    socket(&v).map(Some).map_err(refused)
}

/// A secret in `agora.toml`: the file holding it.
pub(super) fn secret_file<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
    Ok(Some(Secret::File(PathBuf::deserialize(d)?)))
}

/// `[agtp] unregistered_scope_claims`: `asserted` or `refused`.
pub(super) fn scope_claims<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<agora_agtp::scope::UnregisteredClaims>, D::Error> {
    let v = String::deserialize(d)?;
    agora_agtp::scope::UnregisteredClaims::from_name(&v)
        .map(Some)
        .ok_or_else(|| refused("must be \"asserted\" or \"refused\""))
}

/// `[agtp.weights]`: the `rank_score` weights, a table of three.
pub(super) fn weights<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[f64; 3]>, D::Error> {
    /// The table as written.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Weights {
        trust_tier: f64,
        behavioral_trust: f64,
        capability_match: f64,
    }
    let w = Weights::deserialize(d)?;
    Ok(Some([w.trust_tier, w.behavioral_trust, w.capability_match]))
}

/// `[log] format`: `text` or `json`.
pub(super) fn log_format<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<super::LogFormat>, D::Error> {
    let v = String::deserialize(d)?;
    v.parse().map(Some).map_err(refused)
}

/// `v` as an `IP:port` address (surrounding spaces ignored).
pub(super) fn socket(v: &str) -> Result<SocketAddr, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{v:?} is not an IP:port address"))
}

/// `v` as a multiaddr (surrounding spaces ignored).
pub(super) fn multiaddr(v: &str) -> Result<Multiaddr, String> {
    v.trim()
        .parse()
        .map_err(|e| format!("{v:?} is not a multiaddr ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Probe {
        #[serde(deserialize_with = "socket_addr")]
        listen: Option<SocketAddr>,
        inner: Inner,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Inner {
        #[serde(deserialize_with = "secs")]
        wait: Option<Duration>,
    }

    #[test]
    fn a_refused_value_names_its_key_and_line() {
        let err = parse::<Probe>("\n\nlisten = \"localhost\"", Path::new("a.toml")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "listen: \"localhost\" is not an IP:port address (a.toml line 3)"
        );
        let p: Probe = parse(
            "listen = \"127.0.0.1:1\"\n[inner]\nwait = 3",
            Path::new("a.toml"),
        )
        .unwrap();
        assert_eq!(p.inner.wait, Some(Duration::from_secs(3)));
        assert_eq!(p.listen.map(|a| a.port()), Some(1));
        // toml's own errors keep their form, with the file.
        for text in ["[inner]\nwait = \"x\"", "nope = 1", "listen = "] {
            let err = parse::<Probe>(text, Path::new("a.toml")).unwrap_err();
            assert!(
                matches!(err, ConfigError::Parse { .. }) && err.to_string().starts_with("a.toml"),
                "{text}: {err}"
            );
        }
    }
}
