//! Search hits and the merge of partial results (spec §4.4 `memory.search` → `{memories[],
//! searchTime}`, each `{id, content, similarity, metadata, peerId, createdAt}`).
//!
//! A search asks several members; each answers its best hits from the memories it holds. The
//! merge cuts below `threshold`, keeps one hit per id (the highest similarity: replicas hold the
//! same memory), orders by similarity descending then id ascending (a total order, so the answer
//! does not depend on which member answered first) and keeps `limit`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::record::{MemoryRecord, Tier};

/// One result of `memory.search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    /// Memory id.
    pub id: String,
    /// Its text.
    pub content: String,
    /// Cosine similarity with the query, in the embedder's space.
    pub similarity: f32,
    /// Its metadata.
    pub metadata: Value,
    /// Its primary owner.
    pub peer_id: String,
    /// Creation time (RFC 3339 on the wire).
    #[serde(with = "super::record::rfc3339")]
    pub created_at: u64,
    /// Its session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Its tier.
    pub tier: Tier,
    /// The embedder of its vector.
    pub embedder: String,
}

impl SearchHit {
    /// The hit for `record` at `similarity`.
    #[must_use]
    pub fn from_record(record: &MemoryRecord, similarity: f32) -> Self {
        Self {
            id: record.id.clone(),
            content: record.content.clone(),
            similarity,
            metadata: record.metadata.clone(),
            peer_id: record.peer_id.clone(),
            created_at: record.created_at,
            session_id: record.session_id.clone(),
            tier: record.tier,
            embedder: record.embedder.clone(),
        }
    }
}

/// Merges partial results: threshold cut, one hit per id (the most similar), similarity
/// descending then id ascending, at most `limit`. NaN similarities are dropped.
#[must_use]
pub fn merge_hits(
    partials: impl IntoIterator<Item = Vec<SearchHit>>,
    limit: usize,
    threshold: f32,
) -> Vec<SearchHit> {
    let mut best: HashMap<String, SearchHit> = HashMap::new();
    for hit in partials.into_iter().flatten() {
        if hit.similarity.is_nan() || hit.similarity < threshold {
            continue;
        }
        match best.get(&hit.id) {
            Some(held) if held.similarity >= hit.similarity => {}
            _ => {
                best.insert(hit.id.clone(), hit);
            }
        }
    }
    let mut out: Vec<SearchHit> = best.into_values().collect();
    out.sort_by(|a, b| {
        b.similarity
            .total_cmp(&a.similarity)
            .then_with(|| a.id.cmp(&b.id))
    });
    out.truncate(limit);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hit(id: &str, sim: f32) -> SearchHit {
        SearchHit {
            id: id.into(),
            content: String::new(),
            similarity: sim,
            metadata: Value::Null,
            peer_id: "p".into(),
            created_at: 0,
            session_id: None,
            tier: Tier::Working,
            embedder: "lexical-v1".into(),
        }
    }

    #[test]
    fn dedupes_cuts_and_orders() {
        let merged = merge_hits(
            vec![
                vec![hit("b", 0.5), hit("a", 0.9), hit("c", 0.1)],
                vec![hit("a", 0.9), hit("d", 0.5), hit("e", f32::NAN)],
            ],
            3,
            0.2,
        );
        let ids: Vec<&str> = merged.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, vec!["a", "b", "d"]);
    }

    proptest! {
        #[test]
        fn the_order_of_partials_does_not_matter(
            parts in proptest::collection::vec(
                proptest::collection::vec((0u8..20, 0u8..10), 0..10), 0..5),
            limit in 1usize..15,
        ) {
            let make = |p: &Vec<(u8, u8)>| -> Vec<SearchHit> {
                p.iter().map(|(id, s)| hit(&format!("m{id}"), f32::from(*s) / 10.0)).collect()
            };
            let a = merge_hits(parts.iter().map(make), limit, 0.15);
            let b = merge_hits(parts.iter().rev().map(make), limit, 0.15);
            prop_assert_eq!(&a, &b);
            prop_assert!(a.len() <= limit);
            for w in a.windows(2) {
                prop_assert!(w[0].similarity > w[1].similarity
                    || (w[0].similarity == w[1].similarity && w[0].id < w[1].id));
            }
            prop_assert!(a.iter().all(|h| h.similarity >= 0.15));
        }
    }
}
