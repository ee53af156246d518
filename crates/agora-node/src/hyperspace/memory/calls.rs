//! The Memory JSON-RPC methods (`memory.*`, spec §4.4: store, search, get, list, delete,
//! archive): embedding, replication to the key's owners (3×, −32007 of §8 when fewer hold
//! it), finding a memory, searches merged from the owners' partial results.

use super::*;

impl Shared {
    /// Embeds `text` with the default embedder on the worker pool.
    pub(super) async fn embed(
        &self,
        method: &str,
        text: String,
    ) -> Result<(String, Vec<f32>), RpcError> {
        let embedder = self.embedders.default_embedder();
        let deadline = Instant::now() + self.settings.budget;
        self.pool
            .run(method, deadline, move || {
                let mut v = embedder
                    .embed(&[text.as_str()])
                    .map_err(|e| internal(format!("embedding failed: {e}")))?;
                let vector = v.pop().ok_or_else(|| internal("embedding failed"))?;
                Ok((embedder.id().to_owned(), vector))
            })
            .await
    }

    pub(super) async fn call(
        self: &Arc<Self>,
        principal: &Principal,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Value, RpcError> {
        let null = Value::Null;
        let p = params.unwrap_or(&null);
        let limits = &self.settings.limits;
        match method {
            methods::STORE => self.store(principal, StoreParams::parse(p, limits)?).await,
            methods::SEARCH => {
                self.search(principal, SearchParams::parse(p, limits)?)
                    .await
            }
            methods::GET => {
                let params = GetParams::parse(p, limits)?;
                match self.find(&params.id, true).await {
                    Some(Entry::Live(r)) if visible(principal, &r) => Ok(record_json(&r)),
                    _ => Err(not_found(&params.id)),
                }
            }
            methods::LIST => self.list(principal, ListParams::parse(p, limits)?).await,
            methods::DELETE => {
                self.delete(principal, DeleteParams::parse(p, limits)?)
                    .await
            }
            methods::ARCHIVE => {
                self.archive(principal, ArchiveParams::parse(p, limits)?)
                    .await
            }
            methods::REEMBED => self.reembed(principal, reembed_limit(p)?).await,
            _ => Err(RpcError::method_not_found()
                .with_data(Value::String(format!("unknown method {method:?}")))),
        }
    }

    pub(super) async fn store(
        self: &Arc<Self>,
        principal: &Principal,
        params: StoreParams,
    ) -> Result<Value, RpcError> {
        let session_id = scope(principal, params.session_id.as_deref())?;
        let (embedder, vector) = self.embed("memory.store", params.content.clone()).await?;
        let mut random = [0u8; 12];
        getrandom::fill(&mut random).map_err(|_| internal("no system randomness"))?;
        let id = new_memory_id(random);
        let owners = self.owners(&id);
        let Some(primary) = owners.first().cloned() else {
            return Err(replication_failed(1, 0));
        };
        let now = now_ms();
        let record = MemoryRecord {
            id: id.clone(),
            content: params.content,
            session_id,
            metadata: params.metadata,
            tier: params.tier,
            created_at: now,
            embedder,
            vector,
            peer_id: primary.clone(),
            version: Version {
                timestamp_ms: now,
                peer_id: self.me.clone(),
            },
        };
        let entry = Entry::Live(record);
        let acked = self.replicate(&entry, &owners).await;
        let required = self.required();
        if acked.len() >= required {
            self.count("stored");
            return Ok(json!({ "id": id, "peerId": primary, "replicas": acked.len() }));
        }
        // Undo: a newer tombstone to every owner that took it, so nothing is half visible.
        let undo = Entry::Tombstone(Tombstone {
            id: id.clone(),
            deleted_at: now_ms(),
            version: Version {
                timestamp_ms: now.saturating_add(1).max(now_ms()),
                peer_id: self.me.clone(),
            },
        });
        self.replicate(&undo, &acked).await;
        self.count("store_failed");
        Err(replication_failed(required, acked.len()))
    }

    /// Replicas a write needs now: `min(3, members)`, at least 1.
    pub(super) fn required(&self) -> usize {
        self.lock_members().len().clamp(1, REPLICAS)
    }

    /// Members that together own every key (this node first when it serves): whom a search or
    /// a list asks.
    pub(super) fn cover(&self) -> Vec<String> {
        let members = self.lock_members();
        let first = if members.serves() {
            self.me.as_str()
        } else {
            ""
        };
        members
            .ring()
            .cover(first)
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// The owners of `id` in this node's view, primary first.
    pub(super) fn owners(&self, id: &str) -> Vec<String> {
        self.lock_members()
            .ring()
            .owners(id)
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// Sends `entry` to `targets` (this node applies it itself) and returns those that hold it
    /// durably.
    pub(super) async fn replicate(
        self: &Arc<Self>,
        entry: &Entry,
        targets: &[String],
    ) -> Vec<String> {
        let timeout = self.settings.replicate_timeout;
        let sends = targets.iter().map(|t| async move {
            let ok = if *t == self.me {
                match self.shard.apply(entry).await {
                    Ok(_) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot hold a memory");
                        false
                    }
                }
            } else {
                let put = MemoryRequest::Put {
                    entry: entry.clone(),
                };
                matches!(
                    self.request(t, &put, timeout).await,
                    Ok(MemoryResponse::Ack { durable: true })
                )
            };
            ok.then(|| t.clone())
        });
        join_all(sends).await.into_iter().flatten().collect()
    }

    /// The newest entry of `id` among its owners (then a few other members), with its vector
    /// when `full`.
    pub(super) async fn find(self: &Arc<Self>, id: &str, full: bool) -> Option<Entry> {
        let owners = self.owners(id);
        let mut asked: Vec<String> = owners.clone();
        let others: Vec<String> = self.lock_members().others();
        asked.extend(
            others
                .into_iter()
                .filter(|m| !owners.contains(m))
                .take(FALLBACK_ASKS),
        );
        let mut best: Option<Entry> = self.local(id, full);
        let timeout = self.settings.gather_timeout;
        let asks = asked.iter().filter(|m| **m != self.me).map(|m| async move {
            match self
                .request(m, &MemoryRequest::Get { id: id.to_owned() }, timeout)
                .await
            {
                Ok(MemoryResponse::Found { entry }) if entry.id() == id => Some(entry),
                _ => None,
            }
        });
        for entry in join_all(asks).await.into_iter().flatten() {
            let newer = best.as_ref().is_none_or(|b| {
                agora_hyperspace::memory::record::merge(Some(b), &entry)
                    == agora_hyperspace::memory::record::Resolution::Replace
            });
            if newer {
                best = Some(entry);
            }
        }
        best
    }

    pub(super) fn local(&self, id: &str, full: bool) -> Option<Entry> {
        if full {
            self.shard.get_full(id)
        } else {
            self.shard.get(id)
        }
    }

    pub(super) async fn search(
        self: &Arc<Self>,
        principal: &Principal,
        params: SearchParams,
    ) -> Result<Value, RpcError> {
        let started = Instant::now();
        let session_id = scope(principal, params.session_id.as_deref())?;
        let (embedder, vector) = self.embed("memory.search", params.query.clone()).await?;
        let embedded = started.elapsed();
        let request = MemoryRequest::Search {
            query: params.query.clone(),
            vector,
            embedder: embedder.clone(),
            session_id,
            tier: params.tier,
            limit: u32::try_from(params.limit).unwrap_or(u32::MAX),
            threshold: params.threshold,
        };
        let cover = self.cover();
        let timeout = self.settings.gather_timeout;
        let asks = cover.iter().map(|m| {
            let request = &request;
            async move {
                if *m == self.me {
                    self.local_search(request.clone()).await.ok()
                } else {
                    match self.request(m, request, timeout).await {
                        Ok(MemoryResponse::Hits { hits, skipped }) => Some((hits, skipped)),
                        _ => None,
                    }
                }
            }
        });
        let answers = join_all(asks).await;
        let answered = answers.iter().filter(|a| a.is_some()).count();
        let mut skipped: Vec<String> = Vec::new();
        let mut partials = Vec::new();
        for (hits, s) in answers.into_iter().flatten() {
            partials.push(hits);
            skipped.extend(s);
        }
        skipped.sort();
        skipped.dedup();
        let hits = merge_hits(partials, params.limit, params.threshold);
        let took = started.elapsed();
        if took >= SLOW_SEARCH {
            tracing::info!(
                ms = took.as_secs_f64() * 1e3,
                embed_ms = embedded.as_secs_f64() * 1e3,
                gather_ms = (took - embedded).as_secs_f64() * 1e3,
                asked = cover.len(),
                answered,
                "memory.search was slow"
            );
        }
        let memories: Vec<Value> = hits.iter().map(hit_json).collect();
        let mut out = json!({
            "memories": memories,
            "searchTime": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "embedder": embedder,
        });
        if let Some(o) = out.as_object_mut() {
            if !skipped.is_empty() {
                o.insert("skippedEmbedders".into(), json!(skipped));
            }
            if answered < cover.len() {
                o.insert(
                    "partial".into(),
                    json!({ "asked": cover.len(), "answered": answered }),
                );
            }
        }
        Ok(out)
    }

    /// This node's part of a search, on the worker pool: the memories of the query's embedder
    /// with its vector; those of another embedder this node has, with the query re-embedded;
    /// the rest skipped.
    pub(super) async fn local_search(
        self: &Arc<Self>,
        request: MemoryRequest,
    ) -> Result<(Vec<SearchHit>, Vec<String>), RpcError> {
        let MemoryRequest::Search {
            query,
            vector,
            embedder,
            session_id,
            tier,
            limit,
            threshold,
        } = request
        else {
            return Err(internal("not a search"));
        };
        let s = Arc::clone(self);
        let deadline = Instant::now() + self.settings.budget;
        self.pool
            .run("memory.search", deadline, move || {
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                let mut partials = Vec::new();
                let mut skipped = Vec::new();
                for held in s.shard.embedders() {
                    let q = if held == embedder {
                        vector.clone()
                    } else if let Some(e) = s.embedders.get(&held) {
                        match e.embed(&[query.as_str()]) {
                            Ok(mut v) => v.pop().unwrap_or_default(),
                            Err(_) => {
                                skipped.push(held);
                                continue;
                            }
                        }
                    } else {
                        skipped.push(held);
                        continue;
                    };
                    partials.push(s.shard.search(
                        &held,
                        &q,
                        tier,
                        session_id.as_deref(),
                        limit,
                        threshold,
                    ));
                }
                Ok((merge_hits(partials, limit, threshold), skipped))
            })
            .await
    }

    pub(super) async fn list(
        self: &Arc<Self>,
        principal: &Principal,
        params: ListParams,
    ) -> Result<Value, RpcError> {
        let session = scope(principal, Some(&params.session_id))?
            .unwrap_or_else(|| params.session_id.clone());
        let want = params.offset.saturating_add(params.limit);
        let request = MemoryRequest::List {
            session_id: session.clone(),
            limit: u32::try_from(want).unwrap_or(u32::MAX),
            offset: 0,
        };
        let cover = self.cover();
        let timeout = self.settings.gather_timeout;
        let asks = cover.iter().map(|m| {
            let request = &request;
            let session = &session;
            async move {
                if *m == self.me {
                    Some(self.shard.list(session, want))
                } else {
                    match self.request(m, request, timeout).await {
                        Ok(MemoryResponse::Listed { entries, total }) => Some((entries, total)),
                        _ => None,
                    }
                }
            }
        });
        let mut newest: HashMap<String, MemoryRecord> = HashMap::new();
        let mut most = 0u64;
        let mut complete = true;
        for (entries, total) in join_all(asks).await.into_iter().flatten() {
            most = most.max(total);
            complete &= total <= entries.len() as u64;
            for e in entries {
                if let Entry::Live(r) = e {
                    let keep = newest
                        .get(&r.id)
                        .is_none_or(|held| held.version < r.version);
                    if keep {
                        newest.insert(r.id.clone(), r);
                    }
                }
            }
        }
        let mut all: Vec<MemoryRecord> = newest.into_values().collect();
        all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        let total = if complete {
            all.len() as u64
        } else {
            most.max(all.len() as u64)
        };
        let memories: Vec<Value> = all
            .iter()
            .skip(params.offset)
            .take(params.limit)
            .map(record_json)
            .collect();
        Ok(json!({ "memories": memories, "total": total }))
    }

    pub(super) async fn delete(
        self: &Arc<Self>,
        principal: &Principal,
        params: DeleteParams,
    ) -> Result<Value, RpcError> {
        let existed = match self.find(&params.id, false).await {
            Some(Entry::Live(r)) if visible(principal, &r) => true,
            Some(Entry::Live(_)) => return Err(not_found(&params.id)),
            _ => false,
        };
        if !existed {
            return Ok(json!({ "deleted": false }));
        }
        let now = now_ms();
        let tombstone = Tombstone {
            id: params.id.clone(),
            deleted_at: now,
            version: Version {
                timestamp_ms: now,
                peer_id: self.me.clone(),
            },
        };
        let owners = self.owners(&params.id);
        let acked = self
            .replicate(&Entry::Tombstone(tombstone.clone()), &owners)
            .await;
        self.publish(&SyncMessage::Delete { tombstone }).await;
        let required = self.required();
        if acked.len() < required {
            return Err(replication_failed(required, acked.len()));
        }
        self.count("deleted");
        Ok(json!({ "deleted": true }))
    }

    pub(super) async fn archive(
        self: &Arc<Self>,
        principal: &Principal,
        params: ArchiveParams,
    ) -> Result<Value, RpcError> {
        let Some(Entry::Live(mut record)) = self.find(&params.id, true).await else {
            return Err(not_found(&params.id));
        };
        if !visible(principal, &record) {
            return Err(not_found(&params.id));
        }
        let now = now_ms();
        let version = Version {
            timestamp_ms: now.max(record.version.timestamp_ms.saturating_add(1)),
            peer_id: self.me.clone(),
        };
        record.tier = Tier::Archival;
        record.version = version.clone();
        let owners = self.owners(&params.id);
        let acked = self.replicate(&Entry::Live(record), &owners).await;
        self.publish(&SyncMessage::Tier {
            id: params.id.clone(),
            tier: Tier::Archival,
            version,
        })
        .await;
        let required = self.required();
        if acked.len() < required {
            return Err(replication_failed(required, acked.len()));
        }
        Ok(json!({ "archived": true, "tier": "archival" }))
    }

    /// `memory.reembed {limit?}`: moves up to `limit` of the memories this node holds from the
    /// lexical fallback (`lexical-v1`) to the default embedder, each as a new version sent to
    /// its owners, as an archive is. Only lexical memories move, so nodes with different
    /// embedders never undo each other; a memory changed meanwhile is left for the next call.
    /// `{reembedded, failed, remaining, from, to}` (and a `note` when the node's embedder is the
    /// lexical fallback itself: nothing moves); the operator (`agora memory reembed`) calls it
    /// until nothing remains.
    pub(super) async fn reembed(
        self: &Arc<Self>,
        principal: &Principal,
        limit: usize,
    ) -> Result<Value, RpcError> {
        const FROM: &str = agora_embed::Lexical::ID;
        if matches!(principal, Principal::Session(_)) {
            return Err(RpcError::invalid_request()
                .with_message("memory.reembed needs the API key, not a session token"));
        }
        let embedder = self.embedders.default_embedder();
        let to = embedder.id().to_owned();
        let (records, total) = self.shard.of_embedder(FROM, limit);
        if to == FROM {
            // Nothing to move to: said, with what to do (`agora memory reembed` prints it).
            return Ok(json!({
                "reembedded": 0, "failed": 0, "remaining": total, "from": FROM, "to": to,
                "note": "the node's embedder is the lexical fallback: install a model (agora \
                         memory install-model) and restart the node, then reembed",
            }));
        }
        let (mut reembedded, mut failed) = (0usize, 0usize);
        for batch in records.chunks(REEMBED_BATCH) {
            let texts: Vec<String> = batch.iter().map(|r| r.content.clone()).collect();
            let model = Arc::clone(&embedder);
            let deadline = Instant::now() + self.settings.budget;
            let vectors = self
                .pool
                .run(methods::REEMBED, deadline, move || {
                    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                    model
                        .embed(&refs)
                        .map_err(|e| internal(format!("embedding failed: {e}")))
                })
                .await?;
            let writes = batch.iter().zip(vectors).filter_map(|(held, vector)| {
                // Left for the next call when it changed since it was read.
                let same = matches!(self.shard.get(&held.id),
                    Some(Entry::Live(now)) if now.version == held.version);
                same.then(|| {
                    let mut record = held.clone();
                    record.embedder.clone_from(&to);
                    record.vector = vector;
                    record.version = Version {
                        timestamp_ms: now_ms().max(held.version.timestamp_ms.saturating_add(1)),
                        peer_id: self.me.clone(),
                    };
                    let owners = self.owners(&record.id);
                    async move { self.replicate(&Entry::Live(record), &owners).await }
                })
            });
            for acked in join_all(writes).await {
                if acked.is_empty() {
                    failed += 1;
                } else {
                    reembedded += 1;
                }
            }
        }
        self.count("reembedded");
        Ok(json!({
            "reembedded": reembedded,
            "failed": failed,
            "remaining": total.saturating_sub(reembedded),
            "from": FROM,
            "to": to,
        }))
    }
}

/// Memories embedded in one worker call by `memory.reembed`: MiniLM takes a few milliseconds per
/// text, so a batch stays well inside the worker budget.
const REEMBED_BATCH: usize = 16;

/// `memory.reembed`'s `limit` (default [`DEFAULT_REEMBED`], 1 to [`MAX_REEMBED`]).
fn reembed_limit(p: &Value) -> Result<usize, RpcError> {
    use agora_hyperspace::memory::params::{DEFAULT_REEMBED, MAX_REEMBED};
    match p.get("limit") {
        None | Some(Value::Null) => Ok(DEFAULT_REEMBED),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_REEMBED).contains(n))
            .ok_or_else(|| {
                RpcError::invalid_params()
                    .with_message(format!("limit: an integer from 1 to {MAX_REEMBED}"))
                    .with_data(json!({ "field": "limit" }))
            }),
    }
}
