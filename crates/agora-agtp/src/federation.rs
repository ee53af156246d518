//! Cross-ANS federation (discovery draft §5.2–5.3), the pure part: what is forwarded, how a
//! peer's (already signature-checked) result is admitted, and how results are merged.
//!
//! - A query is forwarded only when local results are fewer than `limit`; it carries the
//!   original Agent-ID and Authority-Scope and the caller's parameters unchanged (thresholds are
//!   never relaxed), marked with the [`FORWARDED_HEADER`] so that the peer never forwards it
//!   again (single hop, as the reference coordinator does).
//! - A peer's results are re-checked against the caller's filters (a peer cannot widen them:
//!   Tier 3, low trust, other zones are dropped) and re-scored with our weights.
//! - The merge dedupes by `canonical_id` (the local entry, else the higher score, wins),
//!   re-ranks, truncates to `limit`, and lists the contributing name servers in
//!   `federation_path` (ours first).

use serde_json::Value;

use crate::discover::{self, Outcome, Params, ResultItem};
use crate::index::Filters;
use crate::rank::Weights;

/// Header marking a forwarded DISCOVER; its value names the forwarding name server.
pub const FORWARDED_HEADER: &str = "Federation-Forwarded";

/// Whether to ask the peers.
pub fn should_forward(local_returned: usize, params: &Params, forwarded: bool) -> bool {
    !forwarded && local_returned < params.limit
}

/// The caller's thresholds, applied to a peer's published entry exactly as to our own agents.
fn admits(fields: &serde_json::Map<String, Value>, filters: &Filters) -> bool {
    let text = |k: &str| fields.get(k).and_then(Value::as_str).unwrap_or_default();
    let tier = fields
        .get("trust_tier")
        .and_then(Value::as_u64)
        .and_then(|t| u8::try_from(t).ok());
    let behavioral = fields.get("behavioral_trust_score").and_then(Value::as_f64);
    match (tier, behavioral) {
        (Some(tier), Some(behavioral)) => filters.admits_published(
            tier,
            behavioral,
            text("governance_zone"),
            text("org_domain"),
        ),
        _ => false,
    }
}

/// Reads a peer's verified `result` object into an outcome under the caller's parameters.
/// Entries that break the caller's filters or are malformed are dropped.
pub fn peer_outcome(result: &Value, params: &Params, weights: &Weights) -> Result<Outcome, String> {
    let results = result
        .get("results")
        .and_then(Value::as_array)
        .ok_or("the peer's result has no results array")?;
    let total = result
        .get("total_matches")
        .and_then(Value::as_u64)
        .ok_or("the peer's result has no total_matches")?;
    let filters = params.filters();
    let mut items = Vec::new();
    for r in results {
        let Some(obj) = r.as_object() else { continue };
        let mut fields = obj.clone();
        fields.remove("rank");
        if !params.scope_negotiate {
            fields.remove("required_scope");
        }
        if !admits(&fields, &filters) {
            continue;
        }
        if let Some(item) = ResultItem::rescore(fields, weights) {
            items.push(item);
        }
    }
    Ok(Outcome {
        total_matches: usize::try_from(total).unwrap_or(usize::MAX),
        items,
    })
}

/// The merged result.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    /// Sum of the contributors' totals minus the duplicates seen.
    pub total_matches: usize,
    /// Ranked, deduplicated, at most `limit`.
    pub items: Vec<ResultItem>,
    /// Name servers that contributed results, ours first.
    pub federation_path: Vec<String>,
}

/// Merges the local outcome with the peers' (name, outcome) pairs.
pub fn merge(
    local_name: &str,
    local: Outcome,
    peers: Vec<(String, Outcome)>,
    limit: usize,
) -> Merged {
    let mut total = local.total_matches;
    let mut items = local.items;
    let mut path = vec![local_name.to_owned()];
    for (name, outcome) in peers {
        total = total.saturating_add(outcome.total_matches);
        let mut contributed = false;
        for item in outcome.items {
            match items
                .iter_mut()
                .find(|i| i.canonical_id() == item.canonical_id())
            {
                Some(_) => total = total.saturating_sub(1),
                None => {
                    items.push(item);
                    contributed = true;
                }
            }
        }
        if contributed && !path.contains(&name) {
            path.push(name);
        }
    }
    discover::sort_items(&mut items);
    items.truncate(limit);
    Merged {
        total_matches: total.max(items.len()),
        items,
        federation_path: path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(id: &str, tier: u8, trust: f64, cms: f64) -> Value {
        json!({"rank": 1, "canonical_id": id, "trust_tier": tier, "behavioral_trust_score": trust,
               "capability_match_score": cms, "governance_zone": "zone:a", "org_domain": "o.tld",
               "required_scope": "x:y"})
    }

    #[test]
    fn peers_cannot_relax_the_filters_and_are_rescored() {
        let params = Params {
            trust_tier_min: Some(2),
            behavioral_trust_min: Some(0.8),
            ..Params::default()
        };
        let result = json!({"total_matches": 9, "results": [
            item("ok", 2, 0.9, 0.5), item("tier3", 3, 1.0, 1.0), item("low", 1, 0.5, 1.0),
            {"canonical_id": "broken"}
        ]});
        let out =
            peer_outcome(&result, &params, &Weights::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.items.len(), 1);
        assert_eq!(out.items[0].canonical_id(), "ok");
        assert!(!out.items[0].fields.contains_key("required_scope"));
        assert!((out.items[0].rank_score - (0.15 + 0.36 + 0.15)).abs() < 1e-9);
        assert!(peer_outcome(&json!({"results": 3}), &params, &Weights::default()).is_err());
    }

    #[test]
    fn merge_dedupes_reranks_and_lists_contributors() {
        let w = Weights::default();
        let p = Params::default();
        let local = peer_outcome(
            &json!({"total_matches": 1, "results": [item("a", 2, 0.5, 0.5)]}),
            &p,
            &w,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let peer1 = peer_outcome(
            &json!({"total_matches": 2, "results": [item("a", 2, 0.5, 0.5), item("b", 1, 0.9, 0.9)]}),
            &p,
            &w,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let peer2 = Outcome {
            total_matches: 0,
            items: Vec::new(),
        };
        let m = merge(
            "ans-local",
            local,
            vec![("ans-1".into(), peer1), ("ans-2".into(), peer2)],
            10,
        );
        let ids: Vec<&str> = m.items.iter().map(ResultItem::canonical_id).collect();
        assert_eq!(ids, vec!["b", "a"]);
        assert_eq!(m.total_matches, 2);
        assert_eq!(m.federation_path, vec!["ans-local", "ans-1"]);
        assert!(should_forward(1, &p, false));
        assert!(!should_forward(1, &p, true));
        assert!(!should_forward(10, &p, false));
    }
}
