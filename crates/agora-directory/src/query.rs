//! `directory.search(query, filters?)` (issue 33 item 2): its params, their checks and the
//! compiled [`Query`] the index runs.
//!
//! Filters: `source` (one or several of `agh`, `ans`, `hyperspace`, `mcp`, `a2a`), `trust` (the
//! lowest level accepted), `capability` (a capability or tag the record must list, compared
//! without case), `kind` (`agent` or `tool`), `online` (only what is reachable now), `maxPrice`
//! (a decimal USDC amount, or `maxPriceAtomic` in atomic units; a record without a price costs
//! nothing) and `maxLatencyMs` (a record without a measured latency passes).

use agora_hyperspace::jsonrpc::RpcError;
use agora_hyperspace::params::{Problem, problems_error};
use agora_hyperspace::payments::decimal::parse_decimal;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::{Kind, Record, Source, TrustLevel};

/// Results when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 10;
/// Most results one search returns.
pub const MAX_LIMIT: usize = 100;
/// Longest query, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// Decimals of USDC, the unit of `maxPrice`.
pub const USDC_DECIMALS: u32 = 6;

/// One value or several.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    /// One.
    One(T),
    /// Several.
    Many(Vec<T>),
}

impl<T: Clone> OneOrMany<T> {
    fn to_vec(&self) -> Vec<T> {
        match self {
            Self::One(x) => vec![x.clone()],
            Self::Many(xs) => xs.clone(),
        }
    }
}

/// Where a search looks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This node's directory only.
    Local,
    /// This node, then the DHT, then a gossip ask to the mesh, within a deadline (the default).
    #[default]
    Mesh,
}

/// The filters of a search; all given must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Filters {
    /// Only these sources: `agh`, `ans`, `hyperspace`, `mcp`, `a2a` (one or a list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<OneOrMany<Source>>,
    /// The lowest trust level accepted: `claimed` (all), `signed` or `verified`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<TrustLevel>,
    /// A capability or tag the record must list (case ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    /// Only agents or only tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    /// Only what is reachable now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub online: Option<bool>,
    /// The highest price per call, in USDC (`"0.01"` or `0.01`); unpriced records pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub max_price: Option<Value>,
    /// The highest price per call in atomic USDC units (6 decimals); instead of `maxPrice`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price_atomic: Option<u64>,
    /// The highest measured mean latency, in milliseconds; records never measured pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_latency_ms: Option<u64>,
}

/// Params of `directory.search(query, filters?, limit?, scope?)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchParams {
    /// What is wanted, in words (may be empty when filters are given: everything they keep,
    /// the live and trusted first).
    pub query: String,
    /// Filters; all given must hold.
    #[serde(default)]
    pub filters: Filters,
    /// Most results (1–100, default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// `mesh` (default) or `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

/// A checked search.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// The words.
    pub text: String,
    /// The filters, resolved.
    pub filter: Filter,
    /// Most results.
    pub limit: usize,
    /// Where to look.
    pub scope: Scope,
}

/// Filters resolved to cheap comparisons.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    /// Sources kept (empty: all).
    pub sources: Vec<Source>,
    /// Lowest trust.
    pub min_trust: Option<TrustLevel>,
    /// Capability, lowercased.
    pub capability: Option<String>,
    /// Kind.
    pub kind: Option<Kind>,
    /// Only online.
    pub online_only: bool,
    /// Highest price, atomic USDC.
    pub max_price_atomic: Option<u128>,
    /// Highest latency.
    pub max_latency_ms: Option<u64>,
}

impl Filter {
    /// Whether `record` (online or not) passes.
    #[must_use]
    pub fn keeps(&self, record: &Record, online: bool) -> bool {
        (self.sources.is_empty() || self.sources.contains(&record.source))
            && self.min_trust.is_none_or(|t| record.trust.level >= t)
            && self.kind.is_none_or(|k| record.kind == k)
            && (!self.online_only || online)
            && self
                .max_price_atomic
                .is_none_or(|max| record.price_atomic.is_none_or(|p| u128::from(p) <= max))
            && self
                .max_latency_ms
                .is_none_or(|max| record.latency_ms.is_none_or(|l| l <= max))
            && self.capability.as_deref().is_none_or(|wanted| {
                record
                    .capabilities
                    .iter()
                    .any(|c| c.eq_ignore_ascii_case(wanted))
            })
    }

    /// Whether no filter is set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Why a search was refused (each is −32602 naming its field).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The query is longer than [`MAX_QUERY_BYTES`].
    #[error("query is {0} bytes; at most {MAX_QUERY_BYTES}")]
    TooLong(usize),
    /// An empty query without a filter would list everything.
    #[error("query is empty: say what you are looking for, or give a filter")]
    Empty,
    /// `limit` is out of range.
    #[error("limit must be 1 to {MAX_LIMIT}, not {0}")]
    Limit(u64),
    /// `maxPrice` is not a decimal USDC amount.
    #[error("{0}")]
    Price(String),
    /// `maxPrice` and `maxPriceAtomic` both given.
    #[error("give maxPrice or maxPriceAtomic, not both")]
    TwoPrices,
    /// `capability` is empty.
    #[error("capability is empty")]
    EmptyCapability,
}

impl QueryError {
    /// The field the error is about.
    #[must_use]
    pub fn field(&self) -> &'static str {
        match self {
            Self::TooLong(_) | Self::Empty => "query",
            Self::Limit(_) => "limit",
            Self::Price(_) => "filters.maxPrice",
            Self::TwoPrices => "filters.maxPriceAtomic",
            Self::EmptyCapability => "filters.capability",
        }
    }

    /// The −32602 on the wire.
    #[must_use]
    pub fn to_rpc(&self) -> RpcError {
        problems_error(&[Problem {
            field: self.field().to_owned(),
            reason: self.to_string(),
            allowed: None,
        }])
    }
}

impl SearchParams {
    /// Checks the params and resolves the filters.
    ///
    /// # Errors
    ///
    /// Every [`QueryError`].
    pub fn compile(&self) -> Result<Query, QueryError> {
        let text = self.query.trim();
        if text.len() > MAX_QUERY_BYTES {
            return Err(QueryError::TooLong(text.len()));
        }
        let f = &self.filters;
        let max_price_atomic = match (&f.max_price, f.max_price_atomic) {
            (Some(_), Some(_)) => return Err(QueryError::TwoPrices),
            (Some(v), None) => Some(
                parse_decimal("filters.maxPrice", v, USDC_DECIMALS)
                    .map_err(|e| QueryError::Price(e.to_string()))?,
            ),
            (None, Some(atomic)) => Some(u128::from(atomic)),
            (None, None) => None,
        };
        let capability = match &f.capability {
            Some(c) if c.trim().is_empty() => return Err(QueryError::EmptyCapability),
            Some(c) => Some(c.trim().to_ascii_lowercase()),
            None => None,
        };
        let mut sources = f.source.as_ref().map(OneOrMany::to_vec).unwrap_or_default();
        sources.sort();
        sources.dedup();
        let filter = Filter {
            sources,
            min_trust: f.trust,
            capability,
            kind: f.kind,
            online_only: f.online.unwrap_or(false),
            max_price_atomic,
            max_latency_ms: f.max_latency_ms,
        };
        if text.is_empty() && filter.is_empty() {
            return Err(QueryError::Empty);
        }
        let limit = match self.limit {
            None => DEFAULT_LIMIT,
            Some(n) if (1..=MAX_LIMIT as u64).contains(&n) => {
                usize::try_from(n).unwrap_or(MAX_LIMIT)
            }
            Some(n) => return Err(QueryError::Limit(n)),
        };
        Ok(Query {
            text: text.to_owned(),
            filter,
            limit,
            scope: self.scope.unwrap_or_default(),
        })
    }
}

impl Query {
    /// A local search for `text` with no filter and the default limit.
    #[must_use]
    pub fn words(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            filter: Filter::default(),
            limit: DEFAULT_LIMIT,
            scope: Scope::Local,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::record::tests::tool;

    fn params(v: Value) -> SearchParams {
        serde_json::from_value(v).expect("params decode")
    }

    #[test]
    fn compiles_filters() {
        let q = params(json!({
            "query": "  speech to text ",
            "filters": {"source": "mcp", "trust": "signed", "capability": "ASR",
                        "online": true, "maxPrice": "0.01", "maxLatencyMs": 500},
            "limit": 5, "scope": "local"
        }))
        .compile()
        .expect("compiles");
        assert_eq!(q.text, "speech to text");
        assert_eq!(q.filter.sources, vec![Source::Mcp]);
        assert_eq!(q.filter.min_trust, Some(TrustLevel::Signed));
        assert_eq!(q.filter.capability.as_deref(), Some("asr"));
        assert_eq!(q.filter.max_price_atomic, Some(10_000));
        assert_eq!(q.limit, 5);
        assert_eq!(q.scope, Scope::Local);
        let many = params(json!({"query": "x", "filters": {"source": ["ans", "agh", "ans"]}}))
            .compile()
            .expect("compiles");
        assert_eq!(many.filter.sources, vec![Source::Agh, Source::Ans]);
    }

    #[test]
    fn refuses_bad_params_naming_the_field() {
        let cases = [
            (json!({"query": ""}), "query"),
            (json!({"query": "x".repeat(MAX_QUERY_BYTES + 1)}), "query"),
            (json!({"query": "x", "limit": 0}), "limit"),
            (json!({"query": "x", "limit": 101}), "limit"),
            (
                json!({"query": "x", "filters": {"maxPrice": "0.0000001"}}),
                "filters.maxPrice",
            ),
            (
                json!({"query": "x", "filters": {"maxPrice": "1", "maxPriceAtomic": 5}}),
                "filters.maxPriceAtomic",
            ),
            (
                json!({"query": "x", "filters": {"capability": " "}}),
                "filters.capability",
            ),
        ];
        for (v, field) in cases {
            let e = params(v.clone()).compile().expect_err("refused");
            assert_eq!(e.field(), field, "{v}");
            let rpc = e.to_rpc();
            assert_eq!(rpc.code.0, -32602);
        }
        // An empty query with a filter lists what the filter keeps.
        assert!(
            params(json!({"query": "", "filters": {"online": true}}))
                .compile()
                .is_ok()
        );
    }

    #[test]
    fn filter_keeps() {
        let mut r = tool("t", "Scribe", "", &["ASR"]);
        r.price_atomic = Some(20_000);
        r.latency_ms = Some(300);
        let keep = |v: Value, online: bool| {
            params(json!({"query": "x", "filters": v}))
                .compile()
                .expect("compiles")
                .filter
                .keeps(&r, online)
        };
        assert!(keep(json!({}), false));
        assert!(keep(json!({"capability": "asr"}), true));
        assert!(!keep(json!({"capability": "ocr"}), true));
        assert!(!keep(json!({"online": true}), false));
        assert!(!keep(json!({"maxPrice": 0.01}), true));
        assert!(keep(json!({"maxPrice": "0.02"}), true));
        assert!(!keep(json!({"maxLatencyMs": 299}), true));
        assert!(!keep(json!({"trust": "verified"}), true));
        assert!(keep(json!({"trust": "signed", "kind": "tool"}), true));
        assert!(!keep(json!({"source": ["agh", "ans"]}), true));
    }
}
