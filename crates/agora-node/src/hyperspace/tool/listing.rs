//! The Hyperspace service's feed of the directory (issue 33): every tool it knows — registered
//! here, advertised by a live capability card, or bridged from an MCP server or an A2A agent —
//! as a directory record.
//!
//! A tool on a live card is online (its card's heartbeat is within the card TTL) and leaves
//! the directory when the card expires: the card TTL was its grace. A tool served here that
//! leaves (its connection closed, its bridged server stopped answering) is offline for
//! [`LOCAL_TTL_MS`], then gone.

use agora_directory::FeedItem;
use agora_directory::record::{Call, Kind, Provenance, Record, Source, Trust, TrustLevel};
use agora_hyperspace::tool::ToolRegistry;
use agora_hyperspace::tool_record::{ToolRecord, ToolSource};

/// How long a tool served here stays listed, offline, after it left.
pub(crate) const LOCAL_TTL_MS: u64 = 60_000;

/// The directory's view of `tools` at `now_ms`.
pub(crate) fn feed(tools: &ToolRegistry, now_ms: u64) -> Vec<FeedItem> {
    tools
        .known_tools(now_ms)
        .into_iter()
        .map(|(tool, seen, local)| FeedItem {
            record: record(tool, local),
            online: true,
            last_seen_ms: seen,
            vector: None,
        })
        .collect()
}

fn record(tool: ToolRecord, local: bool) -> Record {
    let host = tool.peer_id.clone();
    let bridged = tool.source.as_ref().map(|s| s.bridge.as_str());
    let source = match bridged {
        Some(ToolSource::MCP) => Source::Mcp,
        Some(ToolSource::A2A) => Source::A2a,
        _ => Source::Hyperspace,
    };
    let trust = match &tool.source {
        None => Trust {
            reputation: Some(tool.reputation),
            ..Trust::at(
                TrustLevel::Signed,
                format!("in the capability card signed by node {host}"),
            )
        },
        Some(s) => {
            let mut t = match &s.verified {
                Some(what) => Trust {
                    verified: vec![what.clone()],
                    ..Trust::at(
                        TrustLevel::Signed,
                        format!(
                            "bridged by node {host} from {} {:?}, which verified it",
                            s.bridge, s.server
                        ),
                    )
                },
                None => Trust::claimed(format!(
                    "bridged by node {host} from {} {:?}: the server's own description, verified by no one",
                    s.bridge, s.server
                )),
            };
            t.reputation = Some(tool.reputation);
            t
        }
    };
    let face = match source {
        Source::Mcp => "mcp",
        Source::A2a => "a2a",
        _ => "rpc",
    };
    Record {
        id: Record::make_id(source, &host, &tool.id),
        kind: Kind::Tool,
        source,
        name: tool.name,
        description: tool.description,
        capabilities: tool.capabilities,
        provenance: Provenance {
            face: face.into(),
            node: host.clone(),
            signer: Some(host),
        },
        trust,
        call: Call {
            face: "rpc".into(),
            method: Some(agora_hyperspace::tool::INVOKE.into()),
            target: Some(tool.id),
            address: None,
        },
        identities: Vec::new(),
        price_atomic: tool
            .price
            .as_ref()
            .and_then(|p| p.usdc)
            .and_then(|a| u64::try_from(a).ok()),
        latency_ms: (tool.avg_latency > 0).then_some(tool.avg_latency),
        ttl_ms: if local { LOCAL_TTL_MS } else { 0 },
    }
}
