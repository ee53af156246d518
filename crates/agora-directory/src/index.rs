//! The directory index (issue 33 items 1, 3, 4): every record from every feed, searched by
//! keywords and by meaning, ranked with the live first, each result explaining its score.
//!
//! ## Feeds and liveness
//! A feed is one source service's view (`agh`, `ans`, `hyperspace` — the last also carries the
//! bridged MCP and A2A tools). [`Directory::apply_feed`] takes a feed's whole current list: a
//! listed record is kept with the source's word on whether it is reachable now
//! ([`FeedItem::online`]) and when it was last seen; a record the feed stops listing is
//! **offline** from that moment and **gone** [`Record::ttl_ms`] later ([`Directory::expire`]
//! drops it, and no search returns it after that instant even before the sweep). So an agent
//! that disconnects is shown offline, then disappears within its TTL; nothing lingers.
//!
//! ## Ranking
//! Candidates are the best [`Config::candidates`] records the filters keep by BM25 and the best
//! as many by cosine similarity to the query's embedding. Each candidate's relevance is
//! `w · keyword + (1 − w) · meaning`, where `keyword` is its BM25 score over the best BM25 score
//! among the candidates (0 to 1), `meaning` the cosine similarity (negative read as 0) and `w`
//! [`Fusion::Hybrid`]'s keyword weight. Its score is `relevance × live × trust`: `live` is 1
//! when reachable now and [`Config::offline_factor`] otherwise; `trust` is 1 for verified,
//! 0.95 for signed (times `0.9 + 0.1 · reputation` when the signer's reputation is known) and
//! 0.9 for claimed. Ties go to the record id. Records linked as one agent are shown once, the
//! best first, with the others under `alsoAs`.
//!
//! BM25 is `keywords.rs`: the `bm25` crate's tokenizer and term weights (English
//! stemming, stop words, Unicode folding; `k1` 1.2, `b` 0.75, average length [`AVGDL`]: the
//! crate bakes the average length into each document's weights, so it is a constant here rather
//! than refitted as records come and go) over postings kept here. The vectors are
//! `agora_vindex`'s: an exact SIMD scan below 20,000, an HNSW graph above, grown by staged
//! inserts ([`Directory::index_staged`]) and, after a bulk load or when removals pile up, built
//! apart by the owner ([`Directory::graph_build`]), so an update never stalls on a graph.
//!
//! ## Linking
//! Records of different sources are the same agent when they share an identity string
//! ([`Record::identities`]): `agent:<id>` (an AGH peer id and an ANS agent id that are equal),
//! `url:<endpoint>` (an A2A card URL, an MCP server URL, an ANS endpoint) or `key:<public key>`.
//! Names never link.

use std::collections::HashMap;

use agora_vindex::{BuiltGraph, GraphBuild, IndexConfig, VectorIndex};
use sha2::{Digest, Sha256};

pub use crate::hit::{Explain, Hit};
use crate::keywords::Postings;
use crate::query::{Filter, Query};
use crate::record::{Record, TrustLevel};

pub use crate::keywords::AVGDL;

/// More new vectors than this in one apply are loaded at once, their graph built apart.
pub const BULK: usize = 1024;

/// How the two rankers' scores are combined.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fusion {
    /// BM25 alone.
    Keyword,
    /// Embeddings alone.
    Meaning,
    /// `w · keyword + (1 − w) · meaning`.
    Hybrid {
        /// The keyword weight `w`, 0 to 1.
        keyword_weight: f64,
    },
    /// Reciprocal rank fusion: `1/(k + keyword rank) + 1/(k + meaning rank)`, scaled to 0–1.
    Rrf {
        /// `k` (60 in the literature).
        k: f64,
    },
}

impl Fusion {
    /// The name shown in explanations.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keyword => "keyword",
            Self::Meaning => "meaning",
            Self::Hybrid { .. } => "hybrid",
            Self::Rrf { .. } => "rrf",
        }
    }
}

/// Index settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Records held; a new record beyond it is refused (counted in [`Applied::refused`]),
    /// records already held still update. Default 200,000.
    pub max_records: usize,
    /// Candidates taken from each ranker. Default 200.
    pub candidates: usize,
    /// How scores combine. Default hybrid with keyword weight 0.1, the best hybrid with MiniLM
    /// on the labelled set (`docs/performance.md` "Directory"); [`Config::for_embedder`] gives
    /// the lexical fallback 0.5, its best.
    pub fusion: Fusion,
    /// The factor of a record not reachable now. Default 0.5.
    pub offline_factor: f64,
}

impl Config {
    /// The settings for records embedded by `embedder_id`: the lexical fallback knows words,
    /// not meaning, so BM25 weighs half (its best on the labelled set); a model (MiniLM, an
    /// OpenAI-compatible one) gets the default 0.1.
    #[must_use]
    pub fn for_embedder(embedder_id: &str) -> Self {
        let keyword_weight = if embedder_id.starts_with("lexical") {
            0.5
        } else {
            0.1
        };
        Self {
            fusion: Fusion::Hybrid { keyword_weight },
            ..Self::default()
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_records: 200_000,
            candidates: 200,
            fusion: Fusion::Hybrid {
                keyword_weight: 0.1,
            },
            offline_factor: 0.5,
        }
    }
}

/// One record as a feed lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedItem {
    /// The record.
    pub record: Record,
    /// Whether the source can reach it now (presence, a card heartbeat within its TTL, the
    /// bridged server answering).
    pub online: bool,
    /// When the source last heard from it (ms since the epoch).
    pub last_seen_ms: u64,
    /// Its embedding, when [`Directory::needs_vector`] asked for one.
    pub vector: Option<Vec<f32>>,
}

/// What one [`Directory::apply_feed`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// New records.
    pub added: usize,
    /// Records whose content changed.
    pub updated: usize,
    /// Records the feed no longer lists (now offline until their TTL ends).
    pub unlisted: usize,
    /// New records refused because the directory is full.
    pub refused: usize,
}

#[derive(Debug)]
struct Entry {
    record: Record,
    feed: &'static str,
    listed: bool,
    online: bool,
    last_seen_ms: u64,
    /// Set when unlisted: when the record is gone.
    expires_ms: Option<u64>,
    text_hash: [u8; 16],
    has_vector: bool,
}

impl Entry {
    fn live_at(&self, now_ms: u64) -> bool {
        self.expires_ms.is_none_or(|t| now_ms < t)
    }
}

/// The directory: records, their BM25 postings, their vectors and their links.
pub struct Directory {
    config: Config,
    slots: Vec<Option<Entry>>,
    free: Vec<u32>,
    by_id: HashMap<String, u32>,
    keywords: Postings,
    vectors: Option<VectorIndex>,
    /// Vectors of the apply in progress, stored at its end (staged, or loaded in bulk).
    incoming: Vec<(u64, Vec<f32>)>,
    /// A graph build the owner is to run apart, and the generation of the latest one started
    /// (a finished build of an older generation is dropped).
    build: Option<GraphBuild>,
    generation: u64,
    identities: HashMap<String, Vec<u32>>,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("config", &self.config)
            .field("records", &self.by_id.len())
            .field("identities", &self.identities.len())
            .finish_non_exhaustive()
    }
}

fn text_hash(text: &str) -> [u8; 16] {
    let digest = Sha256::digest(text.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

impl Default for Directory {
    fn default() -> Self {
        Self::new(Config::default())
    }
}

impl Directory {
    /// An empty directory.
    #[must_use]
    pub fn new(config: Config) -> Self {
        Self {
            config,
            slots: Vec::new(),
            free: Vec::new(),
            by_id: HashMap::new(),
            keywords: Postings::new(),
            vectors: None,
            incoming: Vec::new(),
            build: None,
            generation: 0,
            identities: HashMap::new(),
        }
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Records held (listed or offline).
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no record is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Whether `record` needs an embedding: it is new, its text changed, or it has none.
    #[must_use]
    pub fn needs_vector(&self, record: &Record) -> bool {
        match self.entry(&record.id) {
            Some(e) => !e.has_vector || e.text_hash != text_hash(&record.search_text()),
            None => true,
        }
    }

    fn entry(&self, id: &str) -> Option<&Entry> {
        self.by_id
            .get(id)
            .and_then(|&s| self.slots.get(s as usize))
            .and_then(Option::as_ref)
    }

    /// Sets `feed`'s whole current list at `now_ms`: listed records are added or updated,
    /// records of `feed` it no longer lists become offline and expire after their TTL.
    pub fn apply_feed(&mut self, feed: &'static str, items: Vec<FeedItem>, now_ms: u64) -> Applied {
        let mut applied = Applied::default();
        let mut listed: Vec<u32> = Vec::with_capacity(items.len());
        for mut item in items {
            item.record.bound();
            match self.upsert(feed, item) {
                Upsert::Added(slot) => {
                    applied.added += 1;
                    listed.push(slot);
                }
                Upsert::Updated(slot) => {
                    applied.updated += 1;
                    listed.push(slot);
                }
                Upsert::Same(slot) => listed.push(slot),
                Upsert::Refused => applied.refused += 1,
            }
        }
        self.flush_vectors();
        listed.sort_unstable();
        for (slot, entry) in self.slots.iter_mut().enumerate() {
            let Some(e) = entry else { continue };
            let slot = u32::try_from(slot).unwrap_or(u32::MAX);
            if e.feed == feed && e.listed && listed.binary_search(&slot).is_err() {
                e.listed = false;
                e.online = false;
                e.expires_ms = Some(now_ms.saturating_add(e.record.ttl_ms));
                applied.unlisted += 1;
            }
        }
        applied
    }

    fn upsert(&mut self, feed: &'static str, item: FeedItem) -> Upsert {
        let text = item.record.search_text();
        let hash = text_hash(&text);
        if let Some(&slot) = self.by_id.get(&item.record.id) {
            let Some(Some(e)) = self.slots.get_mut(slot as usize) else {
                return Upsert::Refused;
            };
            let changed = e.record != item.record;
            let text_changed = e.text_hash != hash;
            e.feed = feed;
            e.listed = true;
            e.online = item.online;
            e.last_seen_ms = e.last_seen_ms.max(item.last_seen_ms);
            e.expires_ms = None;
            if !changed && item.vector.is_none() {
                return Upsert::Same(slot);
            }
            let old_identities = std::mem::take(&mut e.record.identities);
            e.record = item.record;
            e.text_hash = hash;
            let new_identities = e.record.identities.clone();
            self.unlink(slot, &old_identities);
            self.link(slot, &new_identities);
            if text_changed {
                self.keywords.upsert(slot, &text);
            }
            self.set_vector(slot, item.vector, text_changed);
            return Upsert::Updated(slot);
        }
        if self.by_id.len() >= self.config.max_records {
            return Upsert::Refused;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => match u32::try_from(self.slots.len()) {
                Ok(s) => {
                    self.slots.push(None);
                    s
                }
                Err(_) => return Upsert::Refused,
            },
        };
        self.keywords.upsert(slot, &text);
        self.by_id.insert(item.record.id.clone(), slot);
        let identities = item.record.identities.clone();
        self.slots[slot as usize] = Some(Entry {
            record: item.record,
            feed,
            listed: true,
            online: item.online,
            last_seen_ms: item.last_seen_ms,
            expires_ms: None,
            text_hash: hash,
            has_vector: false,
        });
        self.link(slot, &identities);
        self.set_vector(slot, item.vector, true);
        Upsert::Added(slot)
    }

    /// Stores `vector` for `slot` (at the end of the apply); without one, drops the old vector
    /// when the text changed.
    fn set_vector(&mut self, slot: u32, vector: Option<Vec<f32>>, text_changed: bool) {
        let key = u64::from(slot);
        match vector {
            Some(v) => {
                self.incoming.push((key, v));
                return;
            }
            None if text_changed => {
                if let Some(index) = &mut self.vectors {
                    index.remove(key);
                }
            }
            None => return,
        }
        if let Some(Some(e)) = self.slots.get_mut(slot as usize) {
            e.has_vector = false;
        }
    }

    /// Stores the apply's vectors: staged one by one (searchable at once, put into the graph
    /// by [`Directory::index_staged`]), or, beyond [`BULK`], loaded at once with the graph
    /// left to [`Directory::graph_build`] (searches scan exactly meanwhile).
    fn flush_vectors(&mut self) {
        let incoming = std::mem::take(&mut self.incoming);
        let Some(dim) = incoming.first().map(|(_, v)| v.len()) else {
            return;
        };
        let max_vectors = self.config.max_records.max(1);
        let index = self.vectors.get_or_insert_with(|| {
            VectorIndex::new(
                dim,
                IndexConfig {
                    max_vectors,
                    eager_graph: true,
                    background_rebuild: true,
                    ..IndexConfig::default()
                },
            )
        });
        let mut stored: Vec<u64> = Vec::with_capacity(incoming.len());
        if incoming.len() > BULK {
            let items = incoming.iter().map(|(k, v)| (*k, v.as_slice()));
            if let Ok(build) = index.extend_deferred(items) {
                self.generation += 1;
                self.build = build;
                stored.extend(incoming.iter().map(|(k, _)| *k));
            }
        } else {
            for (key, v) in &incoming {
                if index.stage(*key, v).is_ok() {
                    stored.push(*key);
                }
            }
        }
        for key in stored {
            if let Some(Some(e)) = usize::try_from(key)
                .ok()
                .and_then(|s| self.slots.get_mut(s))
            {
                e.has_vector = true;
            }
        }
    }

    /// A graph build due (after a bulk load, or when removed vectors passed the rebuild
    /// fraction), with its generation: run it apart ([`GraphBuild::run`], no lock held) and
    /// hand the result to [`Directory::finish_graph`]. Searches scan exactly or use the old
    /// graph meanwhile.
    pub fn graph_build(&mut self) -> Option<(u64, GraphBuild)> {
        if let Some(build) = self.build.take() {
            return Some((self.generation, build));
        }
        let index = self.vectors.as_mut()?;
        if !index.needs_rebuild() {
            return None;
        }
        let build = index.begin_rebuild()?;
        self.generation += 1;
        Some((self.generation, build))
    }

    /// Installs a graph built from [`Directory::graph_build`]; an older generation's is
    /// dropped.
    pub fn finish_graph(&mut self, generation: u64, built: BuiltGraph) {
        if generation == self.generation
            && let Some(index) = &mut self.vectors
        {
            index.finish_rebuild(built);
        }
    }

    /// Puts up to `max` staged vectors into the graph (a few milliseconds each at 100,000);
    /// returns how many.
    pub fn index_staged(&mut self, max: usize) -> usize {
        self.vectors.as_mut().map_or(0, |i| i.index_staged(max))
    }

    fn link(&mut self, slot: u32, identities: &[String]) {
        for id in identities {
            let slots = self.identities.entry(id.clone()).or_default();
            if !slots.contains(&slot) {
                slots.push(slot);
            }
        }
    }

    fn unlink(&mut self, slot: u32, identities: &[String]) {
        for id in identities {
            if let Some(slots) = self.identities.get_mut(id) {
                slots.retain(|&s| s != slot);
                if slots.is_empty() {
                    self.identities.remove(id);
                }
            }
        }
    }

    /// Drops every record whose TTL ended by `now_ms`; returns how many.
    pub fn expire(&mut self, now_ms: u64) -> usize {
        let gone: Vec<u32> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, e)| {
                let e = e.as_ref()?;
                (!e.live_at(now_ms)).then(|| u32::try_from(slot).ok())?
            })
            .collect();
        for &slot in &gone {
            self.remove_slot(slot);
        }
        gone.len()
    }

    fn remove_slot(&mut self, slot: u32) {
        let Some(e) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        self.by_id.remove(&e.record.id);
        self.keywords.remove(slot);
        if let Some(index) = &mut self.vectors {
            index.remove(u64::from(slot));
        }
        self.unlink(slot, &e.record.identities);
        self.free.push(slot);
    }

    /// The records held that are not gone at `now_ms`, each with whether it is online.
    pub fn records(&self, now_ms: u64) -> impl Iterator<Item = (&Record, bool)> {
        self.slots
            .iter()
            .flatten()
            .filter(move |e| e.live_at(now_ms))
            .map(|e| (&e.record, e.online))
    }

    /// The record `id`, as a hit with no query.
    #[must_use]
    pub fn get(&self, id: &str, now_ms: u64) -> Option<Hit> {
        let e = self.entry(id).filter(|e| e.live_at(now_ms))?;
        let explain = self.explain(e, 0.0, 0.0, None, 1.0, self.config.fusion);
        Some(self.hit(e, explain, now_ms))
    }

    fn keeps(&self, slot: u32, filter: &Filter, now_ms: u64) -> bool {
        self.slots
            .get(slot as usize)
            .and_then(Option::as_ref)
            .is_some_and(|e| e.live_at(now_ms) && filter.keeps(&e.record, e.online))
    }

    /// Searches with the configured fusion. `query_vector` is the query's embedding in the
    /// vector space of the records' (absent: keywords only).
    #[must_use]
    pub fn search(&self, query: &Query, query_vector: Option<&[f32]>, now_ms: u64) -> Vec<Hit> {
        self.search_with(query, query_vector, now_ms, self.config.fusion)
    }

    /// Searches with `fusion` (the relevance evaluation compares them on one index).
    #[must_use]
    pub fn search_with(
        &self,
        query: &Query,
        query_vector: Option<&[f32]>,
        now_ms: u64,
        fusion: Fusion,
    ) -> Vec<Hit> {
        let filter = &query.filter;
        let wanted = self.config.candidates.max(query.limit);
        // slot → (bm25, cosine)
        let mut candidates: HashMap<u32, Scores> = HashMap::new();
        let use_keywords = !matches!(fusion, Fusion::Meaning);
        let use_meaning = !matches!(fusion, Fusion::Keyword);
        if query.text.is_empty() {
            // No words: everything the filters keep is a candidate, with relevance 1.
            for (slot, e) in self.slots.iter().enumerate() {
                let Some(e) = e else { continue };
                let slot = u32::try_from(slot).unwrap_or(u32::MAX);
                if e.live_at(now_ms) && filter.keeps(&e.record, e.online) {
                    candidates.insert(slot, (0.0, None));
                }
            }
        } else {
            let scores = if use_keywords {
                let terms = self.keywords.terms(&query.text);
                self.keywords.scores(&terms, self.slots.len())
            } else {
                self.keywords.scores(&self.keywords.terms(""), 0)
            };
            if use_keywords {
                // The best `wanted` the filters keep (ties to the lower slot).
                let mut kept: Vec<u32> = scores
                    .touched
                    .iter()
                    .copied()
                    .filter(|&s| self.keeps(s, filter, now_ms))
                    .collect();
                let by_score =
                    |a: &u32, b: &u32| scores.of(*b).total_cmp(&scores.of(*a)).then(a.cmp(b));
                if kept.len() > wanted {
                    kept.select_nth_unstable_by(wanted, by_score);
                    kept.truncate(wanted);
                }
                for slot in kept {
                    candidates.insert(slot, (f64::from(scores.of(slot)), None));
                }
            }
            if use_meaning && let (Some(qv), Some(index)) = (query_vector, &self.vectors) {
                let keep = |key: u64| {
                    u32::try_from(key).is_ok_and(|slot| self.keeps(slot, filter, now_ms))
                };
                for (key, sim) in index.search(qv, wanted, Some(&keep)) {
                    let Ok(slot) = u32::try_from(key) else {
                        continue;
                    };
                    let bm25 = f64::from(scores.of(slot));
                    candidates.entry(slot).or_insert((bm25, None)).1 = Some(f64::from(sim));
                }
                // Keyword candidates the vector ranking did not reach get their similarity.
                for (&slot, (_, sim)) in &mut candidates {
                    if sim.is_none()
                        && let Some(v) = index.get(u64::from(slot))
                    {
                        *sim = Some(f64::from(dot(qv, v)));
                    }
                }
            }
        }
        let best_bm25 = candidates.values().map(|c| c.0).fold(0.0_f64, f64::max);
        let rank_of = |score: &dyn Fn(&Scores) -> f64| -> HashMap<u32, usize> {
            let mut v: Vec<(u32, f64)> = candidates.iter().map(|(s, c)| (*s, score(c))).collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            v.into_iter()
                .enumerate()
                .map(|(i, (s, _))| (s, i + 1))
                .collect()
        };
        let (kw_rank, mn_rank) = if matches!(fusion, Fusion::Rrf { .. }) {
            (rank_of(&|c| c.0), rank_of(&|c| c.1.unwrap_or(-1.0)))
        } else {
            (HashMap::new(), HashMap::new())
        };
        let mut hits: Vec<(f64, u32, Explain)> = candidates
            .into_iter()
            .filter_map(|(slot, (bm25, sim))| {
                let e = self.slots.get(slot as usize)?.as_ref()?;
                let keyword = if best_bm25 > 0.0 {
                    bm25 / best_bm25
                } else {
                    0.0
                };
                let meaning = sim.map(|s| s.max(0.0));
                let relevance = if query.text.is_empty() {
                    1.0
                } else {
                    match (fusion, meaning) {
                        (Fusion::Keyword, _) | (Fusion::Hybrid { .. }, None) => keyword,
                        (Fusion::Meaning, m) => m.unwrap_or(0.0),
                        (Fusion::Hybrid { keyword_weight: w }, Some(m)) => {
                            w * keyword + (1.0 - w) * m
                        }
                        (Fusion::Rrf { k }, _) => {
                            let r = |ranks: &HashMap<u32, usize>, has: bool| {
                                if has {
                                    ranks.get(&slot).map_or(0.0, |&r| 1.0 / (k + r as f64))
                                } else {
                                    0.0
                                }
                            };
                            (r(&kw_rank, bm25 > 0.0) + r(&mn_rank, sim.is_some())) * (k + 1.0) / 2.0
                        }
                    }
                };
                let explain = self.explain(e, bm25, keyword, sim, relevance, fusion);
                (explain.score > 0.0).then_some((explain.score, slot, explain))
            })
            .collect();
        hits.sort_by(|a, b| {
            b.0.total_cmp(&a.0).then_with(|| {
                let id = |s: u32| self.slots[s as usize].as_ref().map(|e| &e.record.id);
                id(a.1).cmp(&id(b.1))
            })
        });
        self.collapse_links(hits, query.limit, now_ms)
    }

    /// The best `limit` hits, each linked group shown once.
    fn collapse_links(
        &self,
        ranked: Vec<(f64, u32, Explain)>,
        limit: usize,
        now_ms: u64,
    ) -> Vec<Hit> {
        let mut out: Vec<Hit> = Vec::with_capacity(limit);
        let mut shown: HashMap<u32, usize> = HashMap::new();
        for (_, slot, explain) in ranked {
            let Some(e) = self.slots.get(slot as usize).and_then(Option::as_ref) else {
                continue;
            };
            let group = e
                .record
                .identities
                .iter()
                .filter_map(|id| self.identities.get(id))
                .flatten()
                .find_map(|s| shown.get(s).copied());
            if let Some(at) = group {
                out[at].also_as.push(e.record.id.clone());
                shown.insert(slot, at);
                continue;
            }
            if out.len() >= limit {
                continue;
            }
            shown.insert(slot, out.len());
            out.push(self.hit(e, explain, now_ms));
        }
        out
    }

    fn hit(&self, e: &Entry, explain: Explain, now_ms: u64) -> Hit {
        Hit {
            record: e.record.clone(),
            online: e.online,
            last_seen_ms: if e.listed && e.online {
                now_ms.max(e.last_seen_ms)
            } else {
                e.last_seen_ms
            },
            expires_ms: e.expires_ms,
            score: explain.score,
            explain,
            also_as: Vec::new(),
            answered_by: None,
        }
    }

    fn explain(
        &self,
        e: &Entry,
        bm25: f64,
        keyword: f64,
        meaning: Option<f64>,
        relevance: f64,
        fusion: Fusion,
    ) -> Explain {
        let live = if e.online {
            1.0
        } else {
            self.config.offline_factor
        };
        let trust = trust_factor(&e.record);
        let score = relevance * live * trust;
        let meaning_text =
            meaning.map_or_else(|| "no embedding".to_owned(), |m| format!("meaning {m:.3}"));
        let text = format!(
            "{} relevance {relevance:.3} (bm25 {bm25:.2} = {keyword:.3} of the best; {meaning_text}) × {} {live:.2} × {} {trust:.3} = {score:.3}",
            fusion.as_str(),
            if e.online { "online" } else { "offline" },
            e.record.trust.level.as_str(),
        );
        Explain {
            fusion: fusion.as_str().to_owned(),
            bm25: round(bm25),
            keyword: round(keyword),
            meaning: meaning.map(round),
            relevance: round(relevance),
            live,
            trust: round(trust),
            score: round(score),
            text,
        }
    }
}

/// A candidate's BM25 score and cosine similarity.
type Scores = (f64, Option<f64>);

enum Upsert {
    Added(u32),
    Updated(u32),
    Same(u32),
    Refused,
}

/// The trust factor of a record.
fn trust_factor(r: &Record) -> f64 {
    match r.trust.level {
        TrustLevel::Verified => 1.0,
        TrustLevel::Signed => {
            0.95 * r
                .trust
                .reputation
                .map_or(1.0, |rep| 0.9 + 0.1 * rep.clamp(0.0, 1.0))
        }
        TrustLevel::Claimed => 0.9,
    }
}

/// Six decimals: enough to explain, stable to print.
fn round(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::tests::tool;
    use crate::record::{Source, Trust};

    fn item(r: Record) -> FeedItem {
        FeedItem {
            record: r,
            online: true,
            last_seen_ms: 1_000,
            vector: None,
        }
    }

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    fn dir_with(records: Vec<FeedItem>) -> Directory {
        let mut d = Directory::default();
        d.apply_feed("hyperspace", records, 1_000);
        d
    }

    #[test]
    fn keyword_search_ranks_and_explains() {
        let d = dir_with(vec![
            item(tool(
                "a",
                "Scribe",
                "Transcribes audio recordings to text",
                &["asr"],
            )),
            item(tool("b", "Painter", "Draws pictures", &["images"])),
            item(tool("c", "Meeting notes", "Summarises meeting audio", &[])),
        ]);
        let hits = d.search(&Query::words("transcribe audio"), None, 2_000);
        let ids: Vec<&str> = hits.iter().map(|h| h.record.id.as_str()).collect();
        assert_eq!(ids, ["hyperspace:node-a:a", "hyperspace:node-a:c"]);
        assert!(hits[0].score > hits[1].score);
        assert_eq!(hits[0].explain.keyword, 1.0);
        assert!(
            hits[0].explain.text.contains("online"),
            "{}",
            hits[0].explain.text
        );
        assert!(hits[0].online);
        assert_eq!(hits[0].last_seen_ms, 2_000);
    }

    #[test]
    fn meaning_finds_what_words_miss_and_hybrid_combines() {
        let mut a = item(tool("a", "Scribe", "Transcribes recordings", &[]));
        a.vector = Some(unit(&[1.0, 0.1, 0.0]));
        let mut b = item(tool("b", "Painter", "Draws pictures", &[]));
        b.vector = Some(unit(&[0.0, 1.0, 0.0]));
        let d = dir_with(vec![a, b]);
        let q = Query::words("turn speech into words");
        let qv = unit(&[0.9, 0.2, 0.1]);
        assert!(
            d.search_with(&q, Some(&qv), 2_000, Fusion::Keyword)
                .is_empty()
        );
        let hits = d.search_with(&q, Some(&qv), 2_000, Fusion::Meaning);
        assert_eq!(hits[0].record.id, "hyperspace:node-a:a");
        let hybrid = d.search(&q, Some(&qv), 2_000);
        assert_eq!(hybrid[0].record.id, "hyperspace:node-a:a");
        assert!(hybrid[0].explain.meaning.is_some_and(|m| m > 0.9));
    }

    #[test]
    fn unlisted_goes_offline_then_gone() {
        let mut d = dir_with(vec![
            item(tool("a", "Scribe", "transcribes audio", &[])),
            item(tool("b", "Other scribe", "transcribes audio too", &[])),
        ]);
        let applied = d.apply_feed(
            "hyperspace",
            vec![item(tool(
                "b",
                "Other scribe",
                "transcribes audio too",
                &[],
            ))],
            5_000,
        );
        assert_eq!(applied.unlisted, 1);
        let hits = d.search(&Query::words("transcribes"), None, 6_000);
        assert_eq!(hits.len(), 2);
        // The live one ranks first although its text is longer.
        assert_eq!(hits[0].record.id, "hyperspace:node-a:b");
        let gone = hits
            .iter()
            .find(|h| h.record.id.ends_with(":a"))
            .expect("a");
        assert!(!gone.online);
        assert_eq!(gone.expires_ms, Some(65_000));
        assert_eq!(gone.last_seen_ms, 1_000);
        // Not returned after its TTL, even before the sweep; dropped by it.
        assert_eq!(
            d.search(&Query::words("transcribes"), None, 65_000).len(),
            1
        );
        assert_eq!(d.expire(65_000), 1);
        assert_eq!(d.len(), 1);
        // Another feed's records are not touched by this feed.
        d.apply_feed("agh", vec![], 70_000);
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn linked_records_show_once() {
        let mut a = tool("a", "Finance bot", "quarterly reports", &[]);
        a.identities = vec!["url:https://fin.example/agent".into()];
        let mut b = tool("b", "Finance bot", "quarterly reports", &[]);
        b.id = Record::make_id(Source::Ans, "node-a", "fin");
        b.source = Source::Ans;
        b.trust = Trust::at(TrustLevel::Verified, "governance-signed");
        b.identities = vec!["url:https://fin.example/agent".into()];
        // Same name, no shared identity: not linked.
        let c = tool("c", "Finance bot", "quarterly reports", &[]);
        let d = dir_with(vec![item(a), item(b), item(c)]);
        let hits = d.search(&Query::words("quarterly reports"), None, 2_000);
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].record.source, Source::Ans, "verified ranks first");
        assert_eq!(hits[0].also_as, vec!["hyperspace:node-a:a".to_owned()]);
        assert!(hits[1].also_as.is_empty());
    }

    #[test]
    fn full_directory_refuses_new_records_and_updates_old() {
        let mut d = Directory::new(Config {
            max_records: 1,
            ..Config::default()
        });
        let applied = d.apply_feed(
            "hyperspace",
            vec![
                item(tool("a", "A", "ledger", &[])),
                item(tool("b", "B", "ledger", &[])),
            ],
            1,
        );
        assert_eq!((applied.added, applied.refused), (1, 1));
        let applied = d.apply_feed("hyperspace", vec![item(tool("a", "A", "invoice", &[]))], 2);
        assert_eq!(applied.updated, 1);
        assert_eq!(d.search(&Query::words("invoice"), None, 3).len(), 1);
        assert!(d.search(&Query::words("ledger"), None, 3).is_empty());
    }

    #[test]
    fn empty_query_lists_what_filters_keep() {
        let d = dir_with(vec![
            item(tool("a", "A", "x", &["ocr"])),
            item(tool("b", "B", "x", &[])),
        ]);
        let mut q = Query::words("");
        q.filter.capability = Some("ocr".into());
        let hits = d.search(&q, None, 2);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].explain.relevance, 1.0);
    }

    #[test]
    fn needs_vector_tracks_text() {
        let mut d = Directory::default();
        let r = tool("a", "A", "x", &[]);
        assert!(d.needs_vector(&r));
        let mut it = item(r.clone());
        it.vector = Some(unit(&[1.0, 0.0]));
        d.apply_feed("hyperspace", vec![it], 1);
        assert!(!d.needs_vector(&r));
        let mut changed = r;
        changed.description = "y".into();
        assert!(d.needs_vector(&changed));
    }
}
