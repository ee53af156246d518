//! Anti-entropy and the sync topic (`hyperspace/crdt/sync/memory`, spec §2.1 and §4.4):
//! heartbeats and deletes gossiped as signed envelopes, version lists exchanged with each
//! replica peer, re-replication when the ring changes.

use super::*;

impl Shared {
    pub(super) async fn publish(&self, message: &SyncMessage) {
        let Ok(d) = serde_json::to_string(message) else {
            return;
        };
        match agora_hyperspace::envelope::sign(&self.key, SYNC_TOPIC, now_ms(), &random_hex(16), &d)
        {
            Ok(env) => {
                let _ = self
                    .mesh
                    .send(mesh::Command::Publish {
                        topic: SYNC_TOPIC.to_owned(),
                        data: env.into_bytes(),
                    })
                    .await;
            }
            Err(e) => tracing::warn!(error = %e, "cannot sign a memory sync message"),
        }
    }

    /// The (id, version) of held entries whose owners, in this node's view, include both this
    /// node and `peer`, sorted by id (the set an anti-entropy exchange with `peer` compares);
    /// `None` when the scan did not finish within its budget.
    pub(super) async fn pair_versions(self: &Arc<Self>, peer: &str) -> Option<Arc<Versions>> {
        let lists = self.version_lists().await?;
        Some(lists.pairs.get(peer).cloned().unwrap_or_default())
    }

    /// Anti-entropy's lists for the current shard and view: cached; else, on the background
    /// pool, the cached lists updated by the entries written since (same view), or made anew in
    /// one scan (a new view: one owner lookup per held entry for every list at once).
    pub(super) async fn version_lists(self: &Arc<Self>) -> Option<Arc<SyncLists>> {
        let _scan = self.versions_scan.lock().await;
        let generation = self.shard.generation();
        let (ring, members) = {
            let m = self.lock_members();
            let ring = m.ring().clone();
            let members: Vec<String> = ring.members().map(str::to_owned).collect();
            (ring, members)
        };
        let previous = match lock_cache(&self.versions_cache).as_ref() {
            Some(c) if c.members == members && c.generation == generation => {
                return Some(Arc::clone(&c.lists));
            }
            Some(c) if c.members == members => Some((c.snapshot.clone(), Arc::clone(&c.lists))),
            _ => None,
        };
        // Taken after the generation was read: it may hold later writes too, which the next
        // call's difference then finds again (placing an entry twice changes nothing).
        let snapshot = self.shard.snapshot();
        let me = self.me.clone();
        let held = snapshot.clone();
        let deadline = Instant::now() + SCAN_BUDGET;
        let made = self
            .sync_pool
            .run("memory.sync", deadline, move || {
                Ok(match previous {
                    Some((before, lists)) => lists.update(&before, &held, &ring, &me),
                    None => SyncLists::build(&held, &ring, &me),
                })
            })
            .await;
        match made {
            Ok(lists) => {
                let lists = Arc::new(lists);
                *lock_cache(&self.versions_cache) = Some(CachedVersions {
                    generation,
                    members,
                    snapshot,
                    lists: Arc::clone(&lists),
                });
                Some(lists)
            }
            Err(e) => {
                tracing::warn!(error = %e.message, "memory: the anti-entropy scan did not finish; this round is skipped");
                None
            }
        }
    }

    /// One anti-entropy round: with every other member, compare digests of the entries both
    /// should hold and exchange what differs; hand entries this node holds but does not own to
    /// their owners.
    pub(super) async fn anti_entropy(self: &Arc<Self>) {
        let others = self.lock_members().others();
        let mut lacking: HashSet<String> = HashSet::new();
        for peer in others {
            let Some(mine) = self.pair_versions(&peer).await else {
                return;
            };
            let ask = MemoryRequest::Digest {
                peer: self.me.clone(),
                digest: mine.digest,
                count: mine.map.len() as u64,
            };
            match self
                .request(&peer, &ask, self.settings.gather_timeout)
                .await
            {
                Ok(MemoryResponse::DigestMismatch) => {
                    lacking.extend(self.exchange(&peer, &mine.to_list()).await);
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(%peer, error = %e, "anti-entropy digest failed"),
            }
        }
        *lock_cache(&self.last_check) = Some((now_ms(), lacking.len()));
        self.hand_off().await;
        self.count("sync_rounds");
    }

    /// Pages through `peer`'s versions, pushes what it lacks and pulls what it has newer; returns
    /// the ids it lacked or held older (none when its versions could not be read).
    pub(super) async fn exchange(
        self: &Arc<Self>,
        peer: &str,
        mine: &[(String, Version)],
    ) -> Vec<String> {
        let mut theirs: Vec<(String, Version)> = Vec::new();
        let mut after = None;
        loop {
            let page = MemoryRequest::Versions {
                peer: self.me.clone(),
                after: after.clone(),
                limit: VERSIONS_PAGE,
            };
            match self
                .request(peer, &page, self.settings.gather_timeout)
                .await
            {
                Ok(MemoryResponse::VersionList { items, next }) => {
                    theirs.extend(items);
                    match next {
                        Some(n) => after = Some(n),
                        None => break,
                    }
                }
                _ => return Vec::new(),
            }
        }
        let d = diff(mine, &theirs);
        for chunk in d.push.chunks(SYNC_FANOUT) {
            let sends = chunk
                .iter()
                .filter_map(|id| self.shard.get_full(id))
                .map(|entry| {
                    let put = MemoryRequest::Put { entry };
                    async move {
                        let _ = self
                            .request(peer, &put, self.settings.replicate_timeout)
                            .await;
                    }
                });
            join_all(sends).await;
            self.count_n("sync_pushed", chunk.len());
        }
        for chunk in d.pull.chunks(64) {
            let pull = MemoryRequest::Pull {
                ids: chunk.to_vec(),
            };
            if let Ok(MemoryResponse::Entries { entries }) = self
                .request(peer, &pull, self.settings.gather_timeout)
                .await
            {
                for entry in entries {
                    if chunk.iter().any(|id| id == entry.id()) {
                        let _ = self.shard.apply(&entry).await;
                    }
                }
                self.count_n("sync_pulled", chunk.len());
            }
        }
        d.push
    }

    /// Entries held here whose owners (this node's view) do not include this node go to their
    /// owners (they stay here too: a later view may give them back).
    pub(super) async fn hand_off(self: &Arc<Self>) {
        if !self.settings.serve {
            return;
        }
        let Some(lists) = self.version_lists().await else {
            return;
        };
        for (id, _) in &lists.strays.map {
            if let Some(entry) = self.shard.get_full(id) {
                let owners = self.owners(id);
                self.replicate(&entry, &owners).await;
            }
        }
    }

    /// A verified envelope from the sync topic.
    pub(super) async fn gossip(self: &Arc<Self>, data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(env) = agora_hyperspace::envelope::Envelope::parse(text) else {
            return;
        };
        let Ok(message) = serde_json::from_str::<SyncMessage>(env.d_json) else {
            self.count("gossip_refused");
            return;
        };
        match message {
            SyncMessage::Member { held, .. } => {
                if self.lock_members().heard(env.from, now_ms(), held) {
                    self.mark_ring_change();
                }
            }
            SyncMessage::Delete { tombstone } => {
                if self.shard.get(&tombstone.id).is_some() {
                    let _ = self.shard.apply(&Entry::Tombstone(tombstone)).await;
                }
            }
            SyncMessage::Tier { id, tier, version } => {
                if let Some(Entry::Live(mut r)) = self.shard.get_full(&id)
                    && r.version < version
                {
                    r.tier = tier;
                    r.version = version;
                    let _ = self.shard.apply(&Entry::Live(r)).await;
                }
            }
        }
    }
}
