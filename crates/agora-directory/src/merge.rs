//! One search's answers from several nodes, merged (issue 33 item 5).
//!
//! A search fans out — this node, then the DHT, then a gossip ask — and each answering node
//! sends its own best hits. [`merge`] keeps one hit per record id (the same agent reached
//! through the same source has the same id on every node: `{source}:{host}:{local}`), the one
//! with the best score, preferring this node's copy on a tie because its liveness is first-hand;
//! hits of records linked by a shared identity are folded under the best one's `alsoAs`. Every
//! hit keeps `answeredBy`: the node whose answer it came from (absent for this node).

use std::collections::HashMap;

use crate::hit::Hit;

/// Most hits one node's answer may carry.
pub const MAX_REMOTE_HITS: usize = 100;

/// Merges `local` hits with each node's answer (`(node, hits)`), best first, at most `limit`.
#[must_use]
pub fn merge(local: Vec<Hit>, remote: Vec<(String, Vec<Hit>)>, limit: usize) -> Vec<Hit> {
    let mut all: Vec<(Hit, bool)> = local.into_iter().map(|h| (h, true)).collect();
    for (node, hits) in remote {
        for mut h in hits.into_iter().take(MAX_REMOTE_HITS) {
            if !h.score.is_finite() {
                continue;
            }
            h.answered_by = Some(node.clone());
            all.push((h, false));
        }
    }
    all.sort_by(|(a, a_local), (b, b_local)| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| b_local.cmp(a_local))
            .then_with(|| a.record.id.cmp(&b.record.id))
    });
    let mut out: Vec<Hit> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut by_identity: HashMap<String, usize> = HashMap::new();
    for (h, _) in all {
        if by_id.contains_key(&h.record.id) {
            continue;
        }
        let linked = h
            .record
            .identities
            .iter()
            .find_map(|i| by_identity.get(i).copied());
        if let Some(at) = linked {
            if !out[at].also_as.contains(&h.record.id) {
                out[at].also_as.push(h.record.id.clone());
            }
            by_id.insert(h.record.id.clone(), at);
            continue;
        }
        if out.len() >= limit {
            continue;
        }
        let at = out.len();
        by_id.insert(h.record.id.clone(), at);
        for a in &h.also_as {
            by_id.insert(a.clone(), at);
        }
        for i in &h.record.identities {
            by_identity.insert(i.clone(), at);
        }
        out.push(h);
    }
    out
}

#[cfg(all(test, feature = "index"))]
mod tests {
    use super::*;
    use crate::index::{Directory, FeedItem};
    use crate::query::Query;
    use crate::record::tests::tool;

    fn hits(records: Vec<crate::Record>, q: &str) -> Vec<Hit> {
        let mut d = Directory::default();
        let items = records
            .into_iter()
            .map(|record| FeedItem {
                record,
                online: true,
                last_seen_ms: 1,
                vector: None,
            })
            .collect();
        d.apply_feed("hyperspace", items, 1);
        d.search(&Query::words(q), None, 2)
    }

    #[test]
    fn dedups_by_id_and_says_who_answered() {
        let local = hits(vec![tool("a", "Scribe", "transcribes audio", &[])], "audio");
        let remote = hits(
            vec![
                tool("a", "Scribe", "transcribes audio", &[]),
                tool("b", "Audio mixer", "mixes audio tracks", &[]),
            ],
            "audio",
        );
        let merged = merge(local, vec![("node-b".into(), remote)], 10);
        assert_eq!(merged.len(), 2);
        let a = merged
            .iter()
            .find(|h| h.record.id.ends_with(":a"))
            .expect("a");
        assert_eq!(a.answered_by, None, "this node's copy wins a tie");
        let b = merged
            .iter()
            .find(|h| h.record.id.ends_with(":b"))
            .expect("b");
        assert_eq!(b.answered_by.as_deref(), Some("node-b"));
    }

    #[test]
    fn folds_linked_and_limits() {
        let mut a = tool("a", "Fin", "quarterly reports", &[]);
        a.identities = vec!["agent:fin".into()];
        let mut b = tool("b", "Fin too", "quarterly reports", &[]);
        b.identities = vec!["agent:fin".into()];
        let local = hits(vec![a], "quarterly");
        let remote = hits(vec![b, tool("c", "Q", "quarterly", &[])], "quarterly");
        let merged = merge(local, vec![("node-b".into(), remote)], 1);
        assert_eq!(merged.len(), 1);
        assert!(
            merged[0]
                .also_as
                .iter()
                .any(|x| x.ends_with(":a") || x.ends_with(":b"))
        );
    }
}
