//! The environment of a stdio MCP server (Hyperspace spec §10.1; MCP `basic/transports/stdio`:
//! a stdio server takes its credentials from its environment). The child never inherits the
//! node's environment: it gets the variables of [`ALLOWED`] the node has, then the spec's `env`
//! over them. The node's `AGORA_*` settings (API keys, wallet keys) and any other secret in its
//! environment therefore never reach a bridged program unless the operator names them in `env`.

use std::collections::BTreeMap;

/// The node's variables a child inherits (locale, paths, temporary directory, identity of the
/// user): what an interpreter (`node`, `python3`, `npx`) needs to start.
pub const ALLOWED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TMPDIR",
    "TEMP",
    "TMP",
    "TZ",
    "TERM",
    "SYSTEMROOT",
    "COMSPEC",
    "PATHEXT",
    "WINDIR",
    "APPDATA",
    "LOCALAPPDATA",
    "USERPROFILE",
    "PROGRAMFILES",
];

/// The child's whole environment: the node's variables named in [`ALLOWED`], then `extra` (the
/// spec's `env`) over them.
pub fn child_env(
    node: impl IntoIterator<Item = (String, String)>,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = node
        .into_iter()
        .filter(|(k, _)| ALLOWED.contains(&k.as_str()))
        .collect();
    env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_variables_and_the_specs_own_pass() {
        let node = [
            ("PATH", "/bin"),
            ("AGORA_API_KEY", "secret"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("LANG", "C.UTF-8"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let extra = BTreeMap::from([("TOKEN".to_owned(), "t".to_owned())]);
        let env = child_env(node, &extra);
        assert_eq!(
            env.keys().map(String::as_str).collect::<Vec<_>>(),
            ["LANG", "PATH", "TOKEN"]
        );
    }
}
