//! Node-to-node memory requests on `/agora/memory/1.0.0` (spec §4.4 replication and
//! routing): asking another node, answering one.

use super::*;

impl Shared {
    pub(super) async fn respond(
        &self,
        channel: ResponseChannel<Vec<u8>>,
        response: &MemoryResponse,
    ) {
        self.link.respond(channel, response.encode()).await;
    }

    /// Sends `request` to `peer`; a peer that cannot be reached is suspected (it leaves the view
    /// until its next heartbeat).
    pub(super) async fn request(
        &self,
        peer: &str,
        request: &MemoryRequest,
        timeout: Duration,
    ) -> Result<MemoryResponse, String> {
        let target: PeerId = peer.parse().map_err(|_| format!("bad peer id {peer}"))?;
        let outcome = match self.link.request(target, request.encode(), timeout).await {
            Ok(bytes) => MemoryResponse::decode(&bytes, &self.settings.limits)
                .map_err(|e| format!("bad answer: {e}")),
            Err(e @ Unanswered::ShuttingDown) => return Err(e.to_string()),
            Err(Unanswered::Failed(why)) => Err(why),
        };
        if outcome.is_err() {
            self.count("requests_failed");
            if self.lock_members().suspect(peer, now_ms()) {
                self.mark_ring_change();
            }
        }
        outcome
    }

    /// Answers a node-to-node request.
    pub(super) async fn peer_request(
        self: &Arc<Self>,
        peer: &PeerId,
        data: &[u8],
    ) -> MemoryResponse {
        let request = match MemoryRequest::decode(data, &self.settings.limits) {
            Ok(r) => r,
            Err(e) => {
                self.count("peer_requests_refused");
                tracing::debug!(%peer, error = %e, "refused a memory request");
                return MemoryResponse::Error {
                    code: RpcCode::INVALID_PARAMS.0,
                    message: e.to_string(),
                };
            }
        };
        match request {
            MemoryRequest::Put { entry } => {
                if !self.settings.serve {
                    return MemoryResponse::Error {
                        code: RpcCode::REPLICATION_FAILED.0,
                        message: "this node does not serve memory".into(),
                    };
                }
                match self.shard.apply(&entry).await {
                    Ok(_) => MemoryResponse::Ack { durable: true },
                    Err(e) => MemoryResponse::Error {
                        code: RpcCode::REPLICATION_FAILED.0,
                        message: e.to_string(),
                    },
                }
            }
            MemoryRequest::Get { id } => match self.shard.get_full(&id) {
                Some(entry) => MemoryResponse::Found { entry },
                None => MemoryResponse::NotHere,
            },
            search @ MemoryRequest::Search { .. } => match self.local_search(search).await {
                Ok((hits, skipped)) => MemoryResponse::Hits { hits, skipped },
                Err(e) => MemoryResponse::Error {
                    code: e.code.0,
                    message: e.message,
                },
            },
            MemoryRequest::List {
                session_id, limit, ..
            } => {
                let (entries, total) = self
                    .shard
                    .list(&session_id, usize::try_from(limit).unwrap_or(usize::MAX));
                MemoryResponse::Listed { entries, total }
            }
            MemoryRequest::Digest {
                peer: from,
                digest: theirs,
                ..
            } => {
                let mine = self.pair_versions(&from).await;
                if mine.is_some_and(|m| m.digest == theirs) {
                    MemoryResponse::DigestMatch
                } else {
                    MemoryResponse::DigestMismatch
                }
            }
            MemoryRequest::Versions {
                peer: from,
                after,
                limit,
            } => {
                let Some(versions) = self.pair_versions(&from).await else {
                    return MemoryResponse::Error {
                        code: RpcCode::RATE_LIMITED.0,
                        message: "Rate Limited: this node's version scan is busy".into(),
                    };
                };
                let limit = usize::try_from(limit.min(VERSIONS_PAGE)).unwrap_or(1);
                let (items, next) = versions.page(after.as_deref(), limit);
                MemoryResponse::VersionList { items, next }
            }
            MemoryRequest::Pull { ids } => MemoryResponse::Entries {
                entries: ids
                    .iter()
                    .filter_map(|id| self.shard.get_full(id))
                    .collect(),
            },
        }
    }
}
