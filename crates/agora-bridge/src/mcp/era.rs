//! MCP eras (the MCP specification's `basic/versioning`; `../shared/notes/bridges.md` §1.1): the
//! stateless "modern" revision 2026-07-28 (no `initialize`, `server/discover`) and the "legacy"
//! revisions up to 2025-11-25 (`initialize` and sessions). The client decides the era by its
//! lifecycle (`server/discover` probe, then `initialize`); this module only names the outcome.

use serde::Serialize;

/// The first revision without `initialize`.
pub const FIRST_MODERN: &str = "2026-07-28";

/// The era of a negotiated MCP protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Era {
    /// 2026-07-28 and later.
    Modern,
    /// Up to 2025-11-25.
    Legacy,
}

impl Era {
    /// The era of `protocol_version` (`YYYY-MM-DD`, which sort as text).
    #[must_use]
    pub fn of(protocol_version: &str) -> Self {
        if protocol_version >= FIRST_MODERN {
            Self::Modern
        } else {
            Self::Legacy
        }
    }

    /// `"modern"` or `"legacy"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Modern => "modern",
            Self::Legacy => "legacy",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_into_eras() {
        assert_eq!(Era::of("2026-07-28"), Era::Modern);
        assert_eq!(Era::of("2025-11-25"), Era::Legacy);
        assert_eq!(Era::of("2024-11-05"), Era::Legacy);
    }
}
