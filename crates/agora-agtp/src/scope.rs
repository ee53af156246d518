//! Authority-Scope lists and wildcard matching.
//!
//! This module owns the parsing of the `Authority-Scope` header value into [`Scopes`] and the
//! decision whether a held scope list grants a required scope (e.g. `discovery:query` for
//! DISCOVER, discovery draft §3.1).
//!
//! # Grammar
//!
//! The base drafts disagree on the list separator (CORE-02/06 use spaces, CORE-09 an RFC 9110
//! comma list with optional whitespace; the discovery draft's examples use spaces), so both are
//! accepted, freely mixed: tokens are separated by any run of spaces, tabs and commas, and empty
//! list elements are ignored. An empty or whitespace-only value is an empty list.
//!
//! ```text
//! scope-token   = scope-segment 1*( ":" scope-segment )
//! scope-segment = 1*( ALPHA / DIGIT / "-" / "_" / "." ) / "*"
//! ```
//!
//! Tokens are normalised to lowercase. A token that does not match is a 400
//! ([`BadRequest::Header`], naming the token).
//!
//! # Matching
//!
//! Neither draft specifies the wildcard algorithm; these are the rules implemented by
//! [`Scopes::grants`] and [`Scope::covers`]. A held token covers a required (concrete) scope when:
//!
//! - segments are compared pairwise, ASCII case-insensitively;
//! - a `*` segment matches exactly one segment, whatever it is (`*:query` covers
//!   `discovery:query`, but not `a:b:query`);
//! - except that a `*` in the **last** position of the held token matches one *or more* remaining
//!   segments (`audit:*` covers `audit:read`, and `mcp:*` covers `mcp:tools:execute`);
//! - otherwise the segment counts must be equal (`audit:read` does not cover `audit:read:all`).
//!
//! So `*:*` covers every scope of two or more segments. A required scope that is not itself a
//! well-formed token (fewer than two segments, empty or invalid segments) is never granted. A `*`
//! inside a required scope is compared literally: only a held `*` matches it.
//!
//! # Claims
//!
//! Base draft -09 makes `Authority-Scope` a *claim*: a subset of the scopes the caller's Agent
//! Identity Document declares, all of them when the header is absent, and a claim outside the
//! declared set is 262 `scope-claim-invalid` (the reference server checks this). [`effective`]
//! applies that rule when the name server holds the caller's registered document; for a caller
//! it holds no document for, [`UnregisteredClaims`] decides (the discovery draft takes the
//! header as asserted).

use std::fmt;
use std::str::FromStr;

use crate::error::{AgtpError, BadRequest};

/// One normalised (lowercase) scope token, e.g. `discovery:query` or `audit:*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope(String);

impl Scope {
    /// Parses and normalises one token.
    pub fn parse(token: &str) -> Result<Self, BadRequest> {
        if valid_token(token) {
            Ok(Self(token.to_ascii_lowercase()))
        } else {
            Err(BadRequest::Header(format!(
                "Authority-Scope token {:?} is not segment:segment[:…] (segments of \
                 letters, digits, '-', '_', '.', or a single '*')",
                clip(token, 64)
            )))
        }
    }

    /// The normalised token.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The token's segments.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split(':')
    }

    /// Whether this held token covers the concrete `required` scope (see the module docs).
    pub fn covers(&self, required: &str) -> bool {
        if !valid_token(required) {
            return false;
        }
        let mut held = self.0.split(':').peekable();
        let mut req = required.split(':');
        while let Some(h) = held.next() {
            let Some(r) = req.next() else {
                return false;
            };
            if h == "*" {
                if held.peek().is_none() {
                    // A trailing `*` matches this segment and any that remain.
                    return true;
                }
            } else if !h.eq_ignore_ascii_case(r) {
                return false;
            }
        }
        req.next().is_none()
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Scope {
    type Err = BadRequest;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl AsRef<str> for Scope {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A parsed Authority-Scope list, in the order sent (duplicates kept).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Scopes(Vec<Scope>);

impl Scopes {
    /// An empty list (grants nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a header value (space- and/or comma-separated tokens; see the module docs).
    pub fn parse(value: &str) -> Result<Self, BadRequest> {
        let mut scopes = Vec::new();
        for token in value
            .split([' ', '\t', ','])
            .filter(|token| !token.is_empty())
        {
            scopes.push(Scope::parse(token)?);
        }
        Ok(Self(scopes))
    }

    /// From individual tokens (e.g. an identity document's JSON array of scopes). Each item must
    /// be exactly one token.
    pub fn from_tokens<I, S>(tokens: I) -> Result<Self, BadRequest>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        tokens
            .into_iter()
            .map(|t| Scope::parse(t.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    /// Whether any held token covers the concrete `required` scope (see the module docs).
    pub fn grants(&self, required: &str) -> bool {
        self.0.iter().any(|held| held.covers(required))
    }

    /// Appends a token.
    pub fn push(&mut self, scope: Scope) {
        self.0.push(scope);
    }

    /// Appends every token of `other` (e.g. from a second Authority-Scope header line).
    pub fn extend(&mut self, other: Self) {
        self.0.extend(other.0);
    }

    /// The tokens, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Scope> {
        self.0.iter()
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No tokens.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What happens to an Authority-Scope claimed by a caller the name server has no registered
/// document for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnregisteredClaims {
    /// The claim is taken as asserted (discovery draft -00; the default).
    #[default]
    Asserted,
    /// Any claim is refused with 262 `scope-claim-invalid`: only registered agents may claim
    /// scopes.
    Refused,
}

impl UnregisteredClaims {
    /// From its configuration name (`asserted`, `refused`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "asserted" => Some(Self::Asserted),
            "refused" => Some(Self::Refused),
            _ => None,
        }
    }
}

/// Most claimed tokens named in a `scope-claim-invalid` answer.
pub const MAX_REPORTED_CLAIMS: usize = 32;

/// The scopes in effect for a caller: its `claimed` Authority-Scope (if sent) checked against
/// the scopes its registered document `declared` (if the name server holds one), per the
/// module docs. `Ok(None)`: nothing claimed and nothing declared (no scope at all).
pub fn effective(
    claimed: Option<Scopes>,
    declared: Option<&Scopes>,
    unregistered: UnregisteredClaims,
) -> Result<Option<Scopes>, AgtpError> {
    match (claimed, declared) {
        (Some(claimed), Some(declared)) => {
            let not_declared: Vec<String> = claimed
                .iter()
                .filter(|c| !declared.grants(c.as_str()))
                .map(|c| c.as_str().to_owned())
                .take(MAX_REPORTED_CLAIMS)
                .collect();
            if not_declared.is_empty() {
                Ok(Some(claimed))
            } else {
                Err(AgtpError::ScopeClaimInvalid {
                    reason: format!(
                        "the caller's registered document does not declare {}",
                        not_declared.join(" ")
                    ),
                    not_declared,
                })
            }
        }
        (None, Some(declared)) => Ok(Some(declared.clone())),
        (Some(claimed), None) => match unregistered {
            UnregisteredClaims::Asserted => Ok(Some(claimed)),
            UnregisteredClaims::Refused => Err(AgtpError::ScopeClaimInvalid {
                not_declared: claimed
                    .iter()
                    .map(|c| c.as_str().to_owned())
                    .take(MAX_REPORTED_CLAIMS)
                    .collect(),
                reason: "the caller has no registered document here to check its claim against"
                    .into(),
            }),
        },
        (None, None) => Ok(None),
    }
}

impl fmt::Display for Scopes {
    /// Space-separated normalised tokens (the form the discovery draft's examples use).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, scope) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(&scope.0)?;
        }
        Ok(())
    }
}

impl FromStr for Scopes {
    type Err = BadRequest;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl<'a> IntoIterator for &'a Scopes {
    type Item = &'a Scope;
    type IntoIter = std::slice::Iter<'a, Scope>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl IntoIterator for Scopes {
    type Item = Scope;
    type IntoIter = std::vec::IntoIter<Scope>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

fn valid_segment(segment: &str) -> bool {
    segment == "*"
        || (!segment.is_empty()
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

fn valid_token(token: &str) -> bool {
    let mut count = 0usize;
    for segment in token.split(':') {
        if !valid_segment(segment) {
            return false;
        }
        count += 1;
    }
    count >= 2
}

/// At most `max` bytes of `s`, cut on a char boundary (keeps error messages short).
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    #[test]
    fn claims_are_checked_against_the_declared_scopes() {
        use super::{Scopes, UnregisteredClaims, effective};
        use crate::AgtpError;
        let declared = Scopes::parse("documents:query, audit:*").unwrap();
        let claim = |s: &str| Some(Scopes::parse(s).unwrap());
        // A subset (wildcards included) is the scope in effect.
        let ok = effective(
            claim("audit:read documents:query"),
            Some(&declared),
            UnregisteredClaims::Refused,
        )
        .unwrap()
        .unwrap();
        assert!(ok.grants("audit:read") && !ok.grants("discovery:query"));
        assert!(
            effective(
                claim("audit:*"),
                Some(&declared),
                UnregisteredClaims::Asserted
            )
            .is_ok()
        );
        // Anything more is 262 scope-claim-invalid naming what was not declared.
        let err = effective(
            claim("discovery:query documents:query *:query"),
            Some(&declared),
            UnregisteredClaims::Asserted,
        )
        .unwrap_err();
        assert!(
            matches!(&err, AgtpError::ScopeClaimInvalid { not_declared, .. }
                if not_declared == &["discovery:query", "*:query"]),
            "{err:?}"
        );
        // Absent: the declared scopes are inherited (base draft -09).
        let inherited = effective(None, Some(&declared), UnregisteredClaims::Refused)
            .unwrap()
            .unwrap();
        assert!(inherited.grants("documents:query"));
        // Unregistered callers: as configured.
        assert_eq!(
            effective(claim("discovery:query"), None, UnregisteredClaims::Asserted).unwrap(),
            claim("discovery:query")
        );
        assert!(matches!(
            effective(claim("discovery:query"), None, UnregisteredClaims::Refused),
            Err(AgtpError::ScopeClaimInvalid { .. })
        ));
        assert_eq!(
            effective(None, None, UnregisteredClaims::Refused).unwrap(),
            None
        );
        assert_eq!(
            UnregisteredClaims::from_name("refused"),
            Some(UnregisteredClaims::Refused)
        );
        assert_eq!(UnregisteredClaims::from_name("x"), None);
    }

    use proptest::prelude::*;

    use super::*;

    fn scopes(s: &str) -> Scopes {
        s.parse().expect("valid scopes")
    }

    #[test]
    fn parses_spaces_commas_and_mixtures() {
        for value in [
            "discovery:query agents:delegate audit:*",
            "discovery:query,agents:delegate,audit:*",
            "discovery:query , agents:delegate,\taudit:*",
            "  Discovery:QUERY  agents:delegate, ,AUDIT:* ",
        ] {
            let s = scopes(value);
            assert_eq!(s.len(), 3, "{value}");
            assert_eq!(s.to_string(), "discovery:query agents:delegate audit:*");
        }
        assert!(scopes("").is_empty());
        assert!(scopes("  \t ").is_empty());
        assert!(scopes(" , ,").is_empty());
        assert_eq!(scopes("mcp:tools:execute").iter().count(), 1);
        assert_eq!(
            scopes("zone:a.b-c_d").iter().next().map(Scope::as_str),
            Some("zone:a.b-c_d")
        );
    }

    #[test]
    fn rejects_bad_tokens_naming_them() {
        for bad in [
            "discovery",
            "discovery:",
            ":query",
            "a::b",
            "audit:re*d",
            "audit:**",
            "audit;read",
            "audit:read/x",
            "é:x",
            "*",
        ] {
            let err = Scopes::parse(&format!("discovery:query {bad}")).expect_err(bad);
            assert_eq!(err.code(), "malformed-header");
            assert!(err.to_string().contains(bad), "{err} should name {bad}");
        }
        let long = "x".repeat(1000);
        let err = Scopes::parse(&long).expect_err("one segment");
        assert!(err.to_string().len() < 300);
    }

    #[test]
    fn wildcard_rules() {
        let held = scopes("discovery:query agents:delegate audit:*");
        assert!(held.grants("discovery:query"));
        assert!(held.grants("DISCOVERY:Query"));
        assert!(held.grants("audit:read"));
        assert!(held.grants("audit:read:all"));
        assert!(!held.grants("audit"));
        assert!(!held.grants("discovery:register"));
        assert!(!held.grants("agents:delegate:all"));

        assert!(scopes("*:query").grants("discovery:query"));
        assert!(!scopes("*:query").grants("a:b:query"));
        assert!(!scopes("*:query").grants("discovery:register"));
        assert!(scopes("mcp:*").grants("mcp:tools:execute"));
        assert!(scopes("mcp:*:execute").grants("mcp:tools:execute"));
        assert!(!scopes("mcp:*:execute").grants("mcp:tools:read"));
        assert!(!scopes("mcp:*:execute").grants("mcp:execute"));
        assert!(scopes("*:*").grants("a:b"));
        assert!(scopes("*:*").grants("a:b:c:d"));
        assert!(!scopes("*:*").grants("a"));
        assert!(!scopes("*:*").grants(""));
        assert!(!scopes("*:*").grants("a:"));
        assert!(!scopes("*:*").grants("a b:c"));
        assert!(!Scopes::new().grants("discovery:query"));
        // A `*` in the required scope is literal.
        assert!(scopes("audit:*").grants("audit:*"));
        assert!(!scopes("audit:read").grants("audit:*"));
    }

    #[test]
    fn from_tokens_and_accessors() {
        let s = Scopes::from_tokens(["Discovery:Query", "audit:*"]).expect("valid");
        assert_eq!(s.to_string(), "discovery:query audit:*");
        assert_eq!(
            s.iter().map(|t| t.segments().count()).collect::<Vec<_>>(),
            [2, 2]
        );
        assert!(Scopes::from_tokens(["discovery:query audit:*"]).is_err());
        let mut t = Scopes::new();
        t.push(Scope::parse("a:b").expect("valid"));
        t.extend(s);
        assert_eq!(t.len(), 3);
        assert_eq!((&t).into_iter().count(), 3);
        assert_eq!(
            t.into_iter().map(|s| s.to_string()).next_back().as_deref(),
            Some("audit:*")
        );
    }

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![Just("*".to_owned()), "[A-Za-z0-9._-]{1,6}"]
    }

    fn token() -> impl Strategy<Value = String> {
        proptest::collection::vec(segment(), 2..5).prop_map(|s| s.join(":"))
    }

    proptest! {
        #[test]
        fn display_parses_back(tokens in proptest::collection::vec(token(), 0..6), comma in any::<bool>()) {
            let value = tokens.join(if comma { ", " } else { " " });
            let s: Scopes = value.parse().expect("generated tokens are valid");
            prop_assert_eq!(s.len(), tokens.len());
            let again: Scopes = s.to_string().parse().expect("display parses");
            prop_assert_eq!(again, s);
        }

        #[test]
        fn every_token_covers_itself_and_star_star_covers_all(t in token()) {
            let held = Scope::parse(&t).expect("valid");
            prop_assert!(held.covers(&t));
            prop_assert!(held.covers(&t.to_ascii_uppercase()));
            prop_assert!(scopes("*:*").grants(&t));
        }

        #[test]
        fn parsing_never_panics(s in "\\PC*") {
            let _ = Scopes::parse(&s);
            let _ = scopes("*:* a:*").grants(&s);
        }
    }
}
