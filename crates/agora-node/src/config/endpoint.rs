//! An OpenAI-compatible endpoint (`base_url`, `model`, `api_key`), as `[memory]`, `[learning]` and
//! `[improving]` each name one; environment variables `AGORA_<SECTION>_BASE_URL`, `_MODEL`,
//! `_API_KEY`.

use super::{ConfigError, invalid};

/// Checks a section's `base_url`, `model` and `api_key` and trims them; an empty key is none.
pub(super) fn settle(
    section: &str,
    base_url: &mut Option<String>,
    model: &mut Option<String>,
    api_key: &mut Option<String>,
) -> Result<(), ConfigError> {
    if let Some(u) = base_url {
        *u = u.trim().to_owned();
        if !(u.starts_with("http://") || u.starts_with("https://")) || u.len() < 10 {
            return Err(invalid(
                &format!("{section}.base_url"),
                &format!("{u:?} is not an http:// or https:// URL"),
            ));
        }
    }
    if let Some(m) = model {
        *m = m.trim().to_owned();
        if m.is_empty() || m.len() > 120 || m.chars().any(char::is_control) {
            return Err(invalid(
                &format!("{section}.model"),
                "must be 1..120 printable characters",
            ));
        }
    }
    *api_key = api_key
        .take()
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty());
    Ok(())
}

/// The checks when the endpoint of `[section]` is used (`user` names the setting that uses it):
/// `base_url` and `model` are required, and a key is never sent in the clear beyond loopback.
pub(super) fn validate(
    section: &str,
    user: &str,
    base_url: Option<&str>,
    model: Option<&str>,
    api_key: Option<&str>,
) -> Result<(), ConfigError> {
    let Some(url) = base_url else {
        return Err(invalid(
            &format!("{section}.base_url"),
            &format!("required by {user} (e.g. http://127.0.0.1:11434/v1)"),
        ));
    };
    if model.is_none() {
        return Err(invalid(
            &format!("{section}.model"),
            &format!("required by {user}"),
        ));
    }
    if api_key.is_some() && url.starts_with("http://") && !is_loopback_url(url) {
        return Err(invalid(
            &format!("{section}.base_url"),
            &format!("must be https:// when {section}.api_key is set and the host is not loopback"),
        ));
    }
    Ok(())
}

/// Does an `http://` URL name a loopback host (`127.0.0.0/8`, `[::1]` or `localhost`)?
pub(super) fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
