//! The AGH service's feed of the directory (issue 33): every peer present in a channel — the
//! local agents connected here and the remote ones whose greets reached us — as a directory
//! record built from its Peer Card and its capability catalog (each document's id, summary and
//! outcome). Everything in it is the agent's own claim: AGH greets are not verified, so every
//! record is `claimed`.
//!
//! A peer in presence is online; one that leaves (disconnects, or its greets stop and its
//! presence expires) is offline for [`TTL_MS`], then gone.

use agora_agh::{Catalog, PeerCard};
use agora_directory::FeedItem;
use agora_directory::record::{Call, Kind, Provenance, Record, Source, Trust};

/// How long a peer that left stays listed, offline.
pub(crate) const TTL_MS: u64 = 60_000;

/// One present peer, as the directory lists it.
pub(crate) fn item(
    channel: &str,
    card: &PeerCard<'_>,
    catalog: Option<&Catalog>,
    node: &str,
    last_seen_ms: u64,
) -> FeedItem {
    let peer_id = card.peer_id.to_string();
    let mut capabilities: Vec<String> = card.capabilities.iter().map(|c| c.to_string()).collect();
    let mut description = String::new();
    for doc in catalog.map(Catalog::docs).unwrap_or_default() {
        if !capabilities.contains(&doc.id) {
            capabilities.push(doc.id.clone());
        }
        if !description.is_empty() {
            description.push(' ');
        }
        description.push_str(doc.summary.trim_end_matches('.'));
        if !doc.outcome.is_empty() {
            description.push_str(": ");
            description.push_str(doc.outcome.trim_end_matches('.'));
        }
        description.push('.');
    }
    let record = Record {
        id: Record::make_id(Source::Agh, node, &peer_id),
        kind: Kind::Agent,
        source: Source::Agh,
        name: card
            .display_name
            .as_deref()
            .unwrap_or(peer_id.as_str())
            .to_owned(),
        description,
        capabilities,
        provenance: Provenance {
            face: "agh".into(),
            node: node.to_owned(),
            signer: None,
        },
        trust: Trust::claimed("claimed by the agent in its AGH greet; AGH greets are not verified"),
        call: Call {
            face: "agh".into(),
            method: Some("direct".into()),
            target: Some(peer_id.clone()),
            address: Some(format!("channel:{channel}")),
        },
        identities: vec![format!("agent:{peer_id}")],
        price_atomic: None,
        latency_ms: None,
        ttl_ms: TTL_MS,
    };
    FeedItem {
        record,
        online: true,
        last_seen_ms,
        vector: None,
    }
}
