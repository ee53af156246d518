//! Dynamic routing and failover (discovery draft §6): when a DISCOVER names a preferred agent
//! (`preferred_agent`) that is Suspended, failing its refresh DESCRIBEs or rate-limited, the ANS
//! returns an equivalent alternative, marked with `routing_reason` and `equivalent_confidence`.
//!
//! The alternative is searched with the preferred agent's own declared text (description,
//! capabilities, methods, label) as the query, under the caller's filters, among available
//! agents. `equivalent_confidence = 0.7 · capability match + 0.3 · Jaccard(supported_methods)`,
//! in [0, 1]; the most equivalent wins, ties by `rank_score`, then `canonical_id`.

use serde_json::{Value, json};

use crate::discover::{Params, ResultItem};
use crate::index::{Availability, Index, Search};
use crate::manifest::{Lifecycle, Manifest};
use crate::rank::{self, Weights};

/// How many candidates are compared.
const CANDIDATES: usize = 20;

/// Why the preferred agent was not returned.
pub fn unavailable_reason(index: &Index, id: &str, now_ms: u64) -> Option<&'static str> {
    let Some(e) = index.get(id) else {
        return Some("not-registered");
    };
    match e.state {
        Lifecycle::Suspended => return Some("suspended"),
        Lifecycle::Revoked => return Some("revoked"),
        Lifecycle::Deprecated => return Some("deprecated"),
        Lifecycle::Active => {}
    }
    match e.availability {
        Availability::Available => None,
        Availability::RefreshFailing(_) => Some("not-responding"),
        Availability::RateLimited { until_ms } if now_ms < until_ms => Some("rate-limited"),
        Availability::RateLimited { .. } => None,
    }
}

fn jaccard(a: &[String], b: &[String]) -> f64 {
    let a: std::collections::BTreeSet<String> = a.iter().map(|s| s.to_ascii_uppercase()).collect();
    let b: std::collections::BTreeSet<String> = b.iter().map(|s| s.to_ascii_uppercase()).collect();
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

fn distinct_terms(m: &Manifest) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for field in m.match_fields() {
        rank::for_each_token(field, |t| {
            if !out.iter().any(|x| x == t) {
                out.push(t.to_owned());
            }
        });
    }
    out
}

/// A routing decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Routed {
    /// The `routing` member of the result object.
    pub routing: Value,
    /// The alternative, marked, to put first in the results (none found: `None`).
    pub alternative: Option<ResultItem>,
}

/// Decides routing for `params.preferred_agent`; `None` when there is none or it is available.
pub fn route(index: &Index, params: &Params, weights: &Weights, now_ms: u64) -> Option<Routed> {
    let preferred = params.preferred_agent.as_deref()?;
    let reason = unavailable_reason(index, preferred, now_ms)?;
    let pref = index.get(preferred).map(|e| &e.manifest);
    let terms = match pref {
        Some(m) => distinct_terms(m),
        None => params.terms(),
    };
    let mut filters = params.filters();
    filters.exclude = Some(preferred.to_owned());
    let hits = index.search(&Search {
        terms: &terms,
        filters: &filters,
        limit: CANDIDATES,
        weights: *weights,
    });
    let best = hits
        .hits
        .iter()
        .filter(|h| h.entry.is_available(now_ms))
        .map(|h| {
            let methods = pref.map_or(0.0, |m| {
                jaccard(&m.supported_methods, &h.entry.manifest.supported_methods)
            });
            let confidence =
                rank::round6((0.7 * h.capability_match_score + 0.3 * methods).clamp(0.0, 1.0));
            (confidence, h)
        })
        .max_by(|(ca, a), (cb, b)| {
            ca.total_cmp(cb)
                .then(a.rank_score.total_cmp(&b.rank_score))
                .then_with(|| {
                    b.entry
                        .manifest
                        .canonical_id
                        .cmp(&a.entry.manifest.canonical_id)
                })
        });
    let (alternative, routing) = match best {
        Some((confidence, hit)) => {
            let mut item = ResultItem::from_hit(hit, params, weights);
            item.fields.insert("routing_reason".into(), json!(reason));
            item.fields
                .insert("equivalent_confidence".into(), json!(confidence));
            let routing = json!({
                "preferred_agent": preferred,
                "routing_reason": reason,
                "alternative": hit.entry.manifest.canonical_id,
                "equivalent_confidence": confidence,
            });
            (Some(item), routing)
        }
        None => (
            None,
            json!({
                "preferred_agent": preferred,
                "routing_reason": reason,
                "alternative": null,
                "equivalent_confidence": 0.0,
            }),
        ),
    };
    Some(Routed {
        routing,
        alternative,
    })
}

/// Puts the routed alternative first and leaves the unavailable preferred agent out.
pub fn apply(items: &mut Vec<ResultItem>, routed: &Routed, preferred: &str) {
    items.retain(|i| i.canonical_id() != preferred);
    if let Some(alt) = &routed.alternative {
        items.retain(|i| i.canonical_id() != alt.canonical_id());
        items.insert(0, alt.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover;
    use crate::index::Entry;

    fn m(id: &str, methods: &[&str], text: &str) -> Entry {
        Entry {
            manifest: Manifest::from_value(json!({
                "canonical_id": id,
                "trust_tier": 1,
                "behavioral_trust_score": 0.9,
                "supported_methods": methods,
                "job_description": text,
            }))
            .unwrap_or_else(|e| panic!("{e}")),
            state: Lifecycle::Active,
            availability: Availability::Available,
            registered_ms: 0,
            updated_ms: 0,
        }
    }

    fn index() -> Index {
        let mut i = Index::new();
        i.upsert(m(
            "primary",
            &["QUERY", "ANALYZE"],
            "Audits solidity smart contracts",
        ));
        i.upsert(m(
            "twin",
            &["QUERY", "ANALYZE"],
            "Audits solidity smart contracts too",
        ));
        i.upsert(m(
            "cousin",
            &["REPORT"],
            "Writes reports on smart contracts",
        ));
        i.upsert(m("other", &["BOOK"], "Books hotels"));
        i
    }

    fn params(preferred: &str) -> Params {
        Params {
            intent: Some("smart contracts".into()),
            preferred_agent: Some(preferred.into()),
            ..Params::default()
        }
    }

    #[test]
    fn an_available_preferred_agent_needs_no_routing() {
        assert!(route(&index(), &params("primary"), &Weights::default(), 0).is_none());
    }

    #[test]
    fn suspended_failing_and_rate_limited_agents_are_routed_to_their_twin() {
        let w = Weights::default();
        for (setup, reason) in [(0, "suspended"), (1, "not-responding"), (2, "rate-limited")] {
            let mut i = index();
            match setup {
                0 => {
                    i.set_state("primary", Lifecycle::Suspended, 1);
                }
                1 => {
                    i.set_availability("primary", Availability::RefreshFailing(1));
                }
                _ => {
                    i.set_availability("primary", Availability::RateLimited { until_ms: 10 });
                }
            }
            let p = params("primary");
            let routed = route(&i, &p, &w, 5).unwrap_or_else(|| panic!("{reason}"));
            assert_eq!(routed.routing["routing_reason"], reason);
            assert_eq!(routed.routing["alternative"], "twin");
            let c = routed.routing["equivalent_confidence"]
                .as_f64()
                .unwrap_or(-1.0);
            assert!(c > 0.8 && c <= 1.0, "{c}");
            let mut items = discover::evaluate(&i, &p, &w).items;
            apply(&mut items, &routed, "primary");
            assert_eq!(items[0].canonical_id(), "twin");
            assert_eq!(items[0].fields["routing_reason"], reason);
            assert!(items.iter().all(|x| x.canonical_id() != "primary"));
        }
        // A rate limit that has expired needs no routing.
        let mut i = index();
        i.set_availability("primary", Availability::RateLimited { until_ms: 10 });
        assert!(route(&i, &params("primary"), &w, 10).is_none());
    }

    #[test]
    fn an_unknown_preferred_agent_is_routed_on_the_intent() {
        let routed =
            route(&index(), &params("ghost"), &Weights::default(), 0).unwrap_or_else(|| panic!());
        assert_eq!(routed.routing["routing_reason"], "not-registered");
        assert!(routed.alternative.is_some());
    }
}
