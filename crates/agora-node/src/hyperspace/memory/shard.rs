//! The memories this node holds as a replica: durable rows in redb (table `hs_memories`, sealed
//! by [`super::vault`]), an in-memory table of the entries (vectors stripped) and one vector index
//! per embedder (`agora_vindex`), rebuilt from the rows at start (one parallel graph build per
//! embedder, not an insert per memory).
//!
//! The graphs grow by incremental inserts from the first vector (`eager_graph`). A write does
//! not wait for its graph insert (a few milliseconds at 100,000 vectors, more on busy cores):
//! it *stages* the vector (`agora_vindex`'s staged inserts: searchable at once by an exact scan
//! of the staged keys) and the shard's indexer thread moves staged vectors into the graph right
//! after, one per hold of the write lock so that searches interleave. Deletes and
//! replaced vectors leave tombstones in a graph; past a fifth of its nodes the graph is rebuilt
//! on a thread of its own from a copy of the vectors while searches use the old one, and the
//! writes made meanwhile are replayed into the new graph before it is swapped in
//! ([`Shard::apply`] starts it; a rebuild of 100,000 vectors takes about 40 s on two cores and
//! holds a second copy of the vectors, about 150 MB, meanwhile).
//!
//! Writes go through [`Shard::apply`]: the incoming entry is merged with the held one by
//! last-writer-wins ([`record::merge`]); a winner is written durably *before* the in-memory
//! table and index change, so a replica acknowledges only what survives a crash. Writes of one id
//! are serialised (striped async locks), so the row on disk is always the newest version.
//!
//! Bounded: at most `max_entries` entries (live and tombstones); a write of a new id beyond it
//! is refused ([`ShardError::Full`]), which the writer sees as a missing replica (−32007).
//!
//! Searches ([`Shard::search`]) are CPU work: callers run them on the memory worker pool, never on
//! an async task.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use agora_hyperspace::memory::record::{self, Entry, MemoryRecord, Resolution, Tier, Version};
use agora_hyperspace::memory::search::SearchHit;
use agora_vindex::{IndexConfig, VectorIndex};

use super::vault::{Vault, VaultError};
use crate::store::{Store, StoreError};

/// The vector index settings of every embedder: the graph grows with every insert, so that
/// the write that crosses `exact_below` does not stall for a bulk build (replicas would time
/// out, −32007).
fn index_config() -> IndexConfig {
    IndexConfig {
        eager_graph: true,
        background_rebuild: true,
        ..IndexConfig::default()
    }
}

/// Vectors put aside while loading, by embedder, to build each index once.
type Pending = HashMap<String, Vec<(u64, Vec<f32>)>>;

/// Striped locks serialising the writes of one id.
const STRIPES: usize = 64;

/// A replica write slower than this is logged with its stages.
const SLOW_APPLY: std::time::Duration = std::time::Duration::from_millis(20);

/// The indexer thread: on each wake-up, moves every staged vector into its graph, one per
/// hold of the write lock; ends when the shard is dropped.
fn run_indexer(state: &std::sync::Weak<RwLock<State>>, wake: &std::sync::mpsc::Receiver<()>) {
    while wake.recv().is_ok() {
        loop {
            let Some(state) = state.upgrade() else {
                return;
            };
            let moved: usize = state
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .indexes
                .values_mut()
                .map(|ix| ix.index_staged(1))
                .sum();
            if moved == 0 {
                break;
            }
        }
    }
}

/// A write could not be applied.
#[derive(Debug, thiserror::Error)]
pub(super) enum ShardError {
    /// The shard holds its maximum of entries.
    #[error("this replica holds its maximum of {0} memories")]
    Full(usize),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Sealing failed.
    #[error(transparent)]
    Vault(#[from] VaultError),
    /// The entry does not serialise, or its vector does not fit its embedder's index.
    #[error("bad entry: {0}")]
    Bad(String),
}

#[derive(Debug)]
struct Held {
    /// The entry, its vector stripped (the vector lives in the index and the row).
    entry: Entry,
    /// Its key in its embedder's index, when live.
    key: Option<u64>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<String, Held>,
    /// Index key → memory id.
    ids: HashMap<u64, String>,
    /// Embedder id → its index.
    indexes: HashMap<String, VectorIndex>,
    next_key: u64,
    /// Every held id's version, sorted by id, in a persistent map: anti-entropy takes a
    /// snapshot of it in O(1) under the read lock and walks it without the lock (a copy of
    /// 100,000 versions under the lock stalled replica writes for tens of milliseconds).
    versions: imbl::OrdMap<String, Version>,
}

/// This node's replica of the memories it owns.
#[derive(Debug)]
pub(super) struct Shard {
    store: Store,
    vault: Vault,
    state: Arc<RwLock<State>>,
    stripes: Vec<tokio::sync::Mutex<()>>,
    max_entries: usize,
    /// Goes up on every change of the held entries (anti-entropy caches its scans by it).
    generation: std::sync::atomic::AtomicU64,
    /// Wakes the indexer thread (capacity 1: wake-ups coalesce).
    indexer: std::sync::mpsc::SyncSender<()>,
}

fn stripped(entry: &Entry) -> Entry {
    match entry {
        Entry::Live(r) => Entry::Live(MemoryRecord {
            vector: Vec::new(),
            ..r.clone()
        }),
        Entry::Tombstone(t) => Entry::Tombstone(t.clone()),
    }
}

impl State {
    fn put(&mut self, entry: &Entry) -> Result<(), ShardError> {
        self.put_with(entry, None)
    }

    /// [`put`](Self::put); with `pending`, a live entry's vector is checked and put aside for
    /// one bulk build instead of being inserted.
    fn put_with(&mut self, entry: &Entry, pending: Option<&mut Pending>) -> Result<(), ShardError> {
        let id = entry.id().to_owned();
        if let Some(old) = self.entries.remove(&id) {
            self.unindex(&old);
        }
        let key = match entry {
            Entry::Live(r) => {
                let key = self.next_key;
                self.next_key += 1;
                let index = self
                    .indexes
                    .entry(r.embedder.clone())
                    .or_insert_with(|| VectorIndex::new(r.vector.len(), index_config()));
                match pending {
                    Some(p) => {
                        index
                            .check(&r.vector)
                            .map_err(|e| ShardError::Bad(e.to_string()))?;
                        p.entry(r.embedder.clone())
                            .or_default()
                            .push((key, r.vector.clone()));
                    }
                    None => index
                        .stage(key, &r.vector)
                        .map_err(|e| ShardError::Bad(e.to_string()))?,
                }
                self.ids.insert(key, id.clone());
                Some(key)
            }
            Entry::Tombstone(_) => None,
        };
        self.versions.insert(id.clone(), entry.version().clone());
        self.entries.insert(
            id,
            Held {
                entry: stripped(entry),
                key,
            },
        );
        Ok(())
    }

    fn unindex(&mut self, held: &Held) {
        if let (Some(key), Entry::Live(r)) = (held.key, &held.entry) {
            if let Some(index) = self.indexes.get_mut(&r.embedder) {
                index.remove(key);
            }
            self.ids.remove(&key);
        }
    }
}

/// Builds `job`'s graph on a thread of its own at a lowered priority and installs it in
/// `embedder`'s index (which answers meanwhile, from its old graph or exactly); logs `done`.
fn spawn_build(
    state: &Arc<RwLock<State>>,
    embedder: &str,
    job: agora_vindex::GraphBuild,
    done: &'static str,
) {
    let shared = Arc::clone(state);
    let name = embedder.to_owned();
    let started = std::thread::Builder::new()
        .name("agora-vindex-build".into())
        .spawn(move || {
            super::super::guard::lower_priority();
            let n = job.len();
            let t = std::time::Instant::now();
            let built = job.run();
            let mut st = shared
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(ix) = st.indexes.get_mut(&name) {
                ix.finish_rebuild(built);
            }
            tracing::info!(
                embedder = name,
                vectors = n,
                secs = t.elapsed().as_secs_f64(),
                "{done}"
            );
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "memory: the graph build thread did not start");
        if let Some(ix) = state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .indexes
            .get_mut(embedder)
        {
            ix.abandon_rebuild();
        }
    }
}

/// Runs `f`, telling a multi-threaded Tokio runtime that this worker blocks meanwhile.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

impl Shard {
    /// Opens the shard: reads every row of `hs_memories` (a blocking read; call it off the
    /// runtime's workers) and rebuilds the table and the indexes. Rows that do not open are
    /// counted and skipped.
    pub(super) fn load(
        store: Store,
        vault: Vault,
        max_entries: usize,
    ) -> Result<(Self, usize), ShardError> {
        let rows = store.hs_memories()?;
        let mut state = State::default();
        let mut pending = Pending::new();
        let mut bad = 0;
        for (id, row) in rows {
            let entry = vault
                .open_row(&id, &row)
                .ok()
                .and_then(|plain| serde_json::from_slice::<Entry>(&plain).ok())
                .filter(|e| e.id() == id);
            match entry {
                Some(e) if state.put_with(&e, Some(&mut pending)).is_ok() => {}
                _ => bad += 1,
            }
        }
        // One graph build per embedder rather than an insert per memory, each on a thread of
        // its own after the shard opens: until it is installed searches scan exactly (a few
        // milliseconds at 100,000), so the node does not wait for its graphs (half a minute at
        // 100,000 vectors on two cores) before it serves.
        let mut builds = Vec::new();
        for (embedder, items) in pending {
            if let Some(index) = state.indexes.get_mut(&embedder) {
                let job = index
                    .extend_deferred(items.iter().map(|(k, v)| (*k, v.as_slice())))
                    .map_err(|e| ShardError::Bad(e.to_string()))?;
                builds.extend(job.map(|j| (embedder, j)));
            }
        }
        let state = Arc::new(RwLock::new(state));
        for (embedder, job) in builds {
            spawn_build(
                &state,
                &embedder,
                job,
                "memory: vector graph built from the store",
            );
        }
        let (indexer, wake) = std::sync::mpsc::sync_channel(1);
        let weak = Arc::downgrade(&state);
        std::thread::Builder::new()
            .name("agora-memory-indexer".into())
            .spawn(move || run_indexer(&weak, &wake))
            .map_err(|e| ShardError::Bad(format!("the indexer thread did not start: {e}")))?;
        Ok((
            Self {
                store,
                vault,
                state,
                indexer,
                stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
                generation: std::sync::atomic::AtomicU64::new(0),
                max_entries,
            },
            bad,
        ))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn stripe(&self, id: &str) -> &tokio::sync::Mutex<()> {
        let h = id
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let i = usize::try_from(h % STRIPES as u64).unwrap_or(0);
        &self.stripes[i]
    }

    /// Merges `incoming` into the shard; returns true when it replaced what was held (and is now
    /// durable), false when the held entry was as new or newer.
    pub(super) async fn apply(&self, incoming: &Entry) -> Result<bool, ShardError> {
        let _serial = self.stripe(incoming.id()).lock().await;
        {
            let state = self.read();
            let held = state.entries.get(incoming.id()).map(|h| &h.entry);
            if held.is_none() && state.entries.len() >= self.max_entries {
                return Err(ShardError::Full(self.max_entries));
            }
            if record::merge(held, incoming) == Resolution::Keep {
                return Ok(false);
            }
        }
        let started = std::time::Instant::now();
        let plain = serde_json::to_vec(incoming).map_err(|e| ShardError::Bad(e.to_string()))?;
        let row = self.vault.seal(incoming.id(), &plain)?;
        self.store.put_hs_memory(incoming.id(), &row).await?;
        let committed = started.elapsed();
        // The vector is staged (a copy), its graph insert left to the indexer thread; a
        // rebuild that became due is started apart, only its copy of the vectors taken here.
        blocking(|| self.write().put(incoming))?;
        blocking(|| self.start_rebuilds());
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        // Full means a wake-up is already pending.
        let _ = self.indexer.try_send(());
        let took = started.elapsed();
        if took > SLOW_APPLY {
            tracing::info!(
                id = incoming.id(),
                commit_ms = committed.as_secs_f64() * 1e3,
                total_ms = took.as_secs_f64() * 1e3,
                "memory: slow replica write"
            );
        }
        Ok(true)
    }

    /// The held entry of `id` (vector stripped).
    pub(super) fn get(&self, id: &str) -> Option<Entry> {
        self.read().entries.get(id).map(|h| h.entry.clone())
    }

    /// The held entry of `id` with its vector (read from the store: for replication).
    pub(super) fn get_full(&self, id: &str) -> Option<Entry> {
        if !self.read().entries.contains_key(id) {
            return None;
        }
        let row = self.store.hs_memory(id).ok()??;
        let plain = self.vault.open_row(id, &row).ok()?;
        serde_json::from_slice(&plain).ok()
    }

    /// Starts the tombstone rebuilds that are due, each on a thread of its own: the vectors are
    /// copied under the write lock (about 150 MB and a few tens of milliseconds at 100,000),
    /// the graph is built without any lock while searches use the old one, and the writes made
    /// meanwhile are replayed into it when it is installed (`agora_vindex`'s background rebuild).
    fn start_rebuilds(&self) {
        if !self.read().indexes.values().any(VectorIndex::needs_rebuild) {
            return;
        }
        let jobs: Vec<(String, agora_vindex::GraphBuild)> = self
            .write()
            .indexes
            .iter_mut()
            .filter(|(_, ix)| ix.needs_rebuild())
            .filter_map(|(e, ix)| Some((e.clone(), ix.begin_rebuild()?)))
            .collect();
        for (embedder, job) in jobs {
            spawn_build(
                &self.state,
                &embedder,
                job,
                "memory: vector graph rebuilt without its tombstones",
            );
        }
    }

    /// The generation of the held entries: it changes whenever they do.
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.read().entries.len()
    }

    /// Every held entry's version, sorted by id: a snapshot taken in O(1) under the read lock
    /// (anti-entropy walks it, or its difference to an earlier one, without the lock).
    pub(super) fn snapshot(&self) -> imbl::OrdMap<String, Version> {
        self.read().versions.clone()
    }

    /// Up to `limit` live memories whose vectors `embedder` made (vectors stripped), by id, and
    /// how many there are.
    pub(super) fn of_embedder(&self, embedder: &str, limit: usize) -> (Vec<MemoryRecord>, usize) {
        let state = self.read();
        let mut held: Vec<&MemoryRecord> = state
            .entries
            .values()
            .filter_map(|h| match &h.entry {
                Entry::Live(r) if r.embedder == embedder => Some(r),
                _ => None,
            })
            .collect();
        let total = held.len();
        held.sort_by(|a, b| a.id.cmp(&b.id));
        (held.into_iter().take(limit).cloned().collect(), total)
    }

    /// Live memories of `session`, oldest first (vectors stripped), and how many there are.
    pub(super) fn list(&self, session: &str, limit: usize) -> (Vec<Entry>, u64) {
        let state = self.read();
        let mut live: Vec<&MemoryRecord> = state
            .entries
            .values()
            .filter_map(|h| match &h.entry {
                Entry::Live(r) if r.session_id.as_deref() == Some(session) => Some(r),
                _ => None,
            })
            .collect();
        live.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        let total = live.len() as u64;
        let entries = live
            .into_iter()
            .take(limit)
            .map(|r| Entry::Live(r.clone()))
            .collect();
        (entries, total)
    }

    /// Each embedder's vector index: vectors, the engine answering searches, whether a graph
    /// is being built, staged inserts and tombstones waiting (for `/status`).
    pub(super) fn index_status(&self) -> serde_json::Value {
        let state = self.read();
        let mut out = serde_json::Map::new();
        for (embedder, ix) in &state.indexes {
            out.insert(
                embedder.clone(),
                serde_json::json!({
                    "vectors": ix.len(),
                    "engine": match ix.engine() {
                        agora_vindex::Engine::Exact => "exact",
                        agora_vindex::Engine::Hnsw => "hnsw",
                    },
                    "building": ix.building(),
                    "staged": ix.staged(),
                    "tombstones": ix.tombstones(),
                }),
            );
        }
        serde_json::Value::Object(out)
    }

    /// The embedders of the held live memories.
    pub(super) fn embedders(&self) -> Vec<String> {
        let mut v: Vec<String> = self.read().indexes.keys().cloned().collect();
        v.sort();
        v
    }

    /// Searches the memories of embedder `embedder` with `query` (a vector of that embedder):
    /// live, of `tier`, of `session` when given, similarity ≥ `threshold`, best `limit` first.
    pub(super) fn search(
        &self,
        embedder: &str,
        query: &[f32],
        tier: Tier,
        session: Option<&str>,
        limit: usize,
        threshold: f32,
    ) -> Vec<SearchHit> {
        let state = self.read();
        let Some(index) = state.indexes.get(embedder) else {
            return Vec::new();
        };
        let record_of = |key: u64| -> Option<&MemoryRecord> {
            match &state.entries.get(state.ids.get(&key)?)?.entry {
                Entry::Live(r) => Some(r),
                Entry::Tombstone(_) => None,
            }
        };
        let keep = |key: u64| {
            record_of(key).is_some_and(|r| {
                r.tier == tier && session.is_none_or(|s| r.session_id.as_deref() == Some(s))
            })
        };
        index
            .search(query, limit, Some(&keep))
            .into_iter()
            .filter(|(_, sim)| *sim >= threshold)
            .filter_map(|(key, sim)| record_of(key).map(|r| SearchHit::from_record(r, sim)))
            .collect()
    }
}
