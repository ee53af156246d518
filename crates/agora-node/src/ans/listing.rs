//! The Agent Name Service's feed of the directory (issue 33): its Active agents as directory
//! records. The ANS's own trust rule holds: only Active manifests are listed (they were
//! registered through a governance-signed lifecycle, so they are `verified`), and an agent
//! leaving Active leaves the directory at once. An Active agent whose refreshes fail or that
//! rate-limits us is listed offline.

use agora_agtp::index::Entry;
use agora_agtp::manifest::Lifecycle;
use agora_directory::FeedItem;
use agora_directory::record::{Call, Kind, Provenance, Record, Source, Trust, TrustLevel};

/// One registered agent, when it is Active.
pub(super) fn item(entry: &Entry, node: &str, key_id: &str, now_ms: u64) -> Option<FeedItem> {
    if entry.state != Lifecycle::Active {
        return None;
    }
    let m = &entry.manifest;
    let mut identities = vec![format!("agent:{}", m.canonical_id)];
    if let Some(endpoint) = &m.endpoint {
        identities.push(format!("url:{endpoint}"));
    }
    let mut capabilities = m.capabilities.clone();
    for extra in m.modalities.iter().chain(&m.authority_scope_categories) {
        if !capabilities.contains(extra) {
            capabilities.push(extra.clone());
        }
    }
    let record = Record {
        id: Record::make_id(Source::Ans, node, &m.canonical_id),
        kind: Kind::Agent,
        source: Source::Ans,
        name: m.agent_label.clone(),
        description: m.job_description.clone(),
        capabilities,
        provenance: Provenance {
            face: "agtp".into(),
            node: node.to_owned(),
            signer: Some(format!("ans:{key_id}")),
        },
        trust: Trust {
            lifecycle: Some(entry.state.to_string()),
            ..Trust::at(
                TrustLevel::Verified,
                format!(
                    "registered through a governance-signed lifecycle in the name server of node {node} (trust tier {}, {})",
                    m.trust_tier, m.org_domain
                ),
            )
        },
        call: Call {
            face: "agtp".into(),
            method: Some("DESCRIBE".into()),
            target: Some(m.canonical_id.clone()),
            address: m.endpoint.clone(),
        },
        identities,
        price_atomic: None,
        latency_ms: None,
        ttl_ms: 0,
    };
    Some(FeedItem {
        record,
        online: entry.is_available(now_ms),
        last_seen_ms: entry.updated_ms,
        vector: None,
    })
}
