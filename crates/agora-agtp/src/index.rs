//! The ANS index (discovery draft §4.1–4.4): every registered agent with its lifecycle state and
//! availability, and an inverted index over the Active ones for the capability match.
//!
//! Only Active agents are searchable: a transition out of Active removes the agent's postings
//! at once, so deregistration takes effect before the next DISCOVER (§4.3). The BM25 statistics
//! (document count, total length, document frequencies) are integers kept up to date on every
//! change, so a search depends only on the set of indexed documents, never on the order they
//! arrived in. [`Index::digest`] is an order-independent fingerprint of that set.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use sha2::{Digest, Sha256};

use crate::manifest::{Lifecycle, Manifest};
use crate::rank::{self, Weights};

/// Why an agent is not a good target right now (beyond its lifecycle state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Answering.
    Available,
    /// The last `n` refresh DESCRIBEs failed (the agent is removed at 3).
    RefreshFailing(u32),
    /// The agent answered 429 to us; it is rate-limited until this time (ms).
    RateLimited {
        /// Until when.
        until_ms: u64,
    },
}

/// A registered agent.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The manifest as last registered or refreshed.
    pub manifest: Manifest,
    /// Lifecycle state in the registry.
    pub state: Lifecycle,
    /// Availability signal.
    pub availability: Availability,
    /// When it was registered (ms since the epoch).
    pub registered_ms: u64,
    /// When it last changed (ms since the epoch).
    pub updated_ms: u64,
}

impl Entry {
    /// Whether the agent can be recommended at `now_ms` (Active and available).
    pub fn is_available(&self, now_ms: u64) -> bool {
        self.state == Lifecycle::Active
            && match self.availability {
                Availability::Available => true,
                Availability::RefreshFailing(_) => false,
                Availability::RateLimited { until_ms } => now_ms >= until_ms,
            }
    }
}

#[derive(Debug)]
struct Doc {
    id: String,
    len: u32,
    /// (term, tf), term ids ascending.
    terms: Vec<(u32, u32)>,
}

/// Which agents a search may return.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    /// Keep tiers numerically ≤ this (1 keeps only Tier 1); Tier 3 is never returned.
    pub trust_tier_min: Option<u8>,
    /// Minimum behavioural trust score.
    pub behavioral_trust_min: Option<f64>,
    /// Exact governance zone.
    pub governance_zone: Option<String>,
    /// Organisation domain (case-insensitive).
    pub org_domain: Option<String>,
    /// DESCRIBE domains (`methods`, `tools`, …) the agent must declare something in.
    pub domains: Vec<String>,
    /// Leave this agent out (dynamic routing looks for an alternative to it).
    pub exclude: Option<String>,
}

impl Filters {
    /// The governance thresholds on an agent's published fields: Tier 3 never, tier, trust,
    /// zone and organisation. Federation applies the same rule to a peer's results.
    pub fn admits_published(&self, tier: u8, behavioral: f64, zone: &str, org: &str) -> bool {
        tier < 3
            && self.trust_tier_min.is_none_or(|t| tier <= t)
            && self.behavioral_trust_min.is_none_or(|b| behavioral >= b)
            && self.governance_zone.as_ref().is_none_or(|z| zone == z)
            && self
                .org_domain
                .as_ref()
                .is_none_or(|d| org.eq_ignore_ascii_case(d))
    }

    fn admits(&self, m: &Manifest) -> bool {
        self.admits_published(
            m.trust_tier,
            m.behavioral_trust_score,
            &m.governance_zone,
            &m.org_domain,
        ) && self
            .domains
            .iter()
            .all(|d| m.declares_domain(d).unwrap_or(true))
            && self.exclude.as_ref().is_none_or(|x| m.canonical_id != *x)
    }
}

/// A ranked search.
#[derive(Clone, Debug)]
pub struct Search<'q> {
    /// Query terms (see [`rank::tokens`]); empty: every admitted agent matches with score 0.
    pub terms: &'q [String],
    /// Filters.
    pub filters: &'q Filters,
    /// How many hits to return.
    pub limit: usize,
    /// Ranking weights.
    pub weights: Weights,
}

/// One ranked hit.
#[derive(Clone, Debug)]
pub struct Hit<'a> {
    /// The agent.
    pub entry: &'a Entry,
    /// Capability match in [0, 1].
    pub capability_match_score: f64,
    /// Composite score.
    pub rank_score: f64,
}

/// Hits in rank order plus the number of matches before the limit.
#[derive(Clone, Debug)]
pub struct Hits<'a> {
    /// Agents admitted by the filters with a capability match > 0 (or all admitted ones when
    /// the query has no terms).
    pub total_matches: usize,
    /// The best `limit`, best first; ties broken by `canonical_id` ascending.
    pub hits: Vec<Hit<'a>>,
}

/// A scored hit; ordered worst first ("greater" = worse), so a max-heap keeps the worst kept
/// hit on top: lower score is worse, and on equal scores the larger canonical id.
struct Ranked<'a> {
    score: f64,
    cms: f64,
    entry: &'a Entry,
}

#[derive(Debug, Default)]
pub struct Index {
    entries: HashMap<String, Entry>,
    slots: Vec<Option<Doc>>,
    free: Vec<u32>,
    slot_of: HashMap<String, u32>,
    vocabulary: HashMap<String, u32>,
    postings: Vec<Vec<(u32, u32)>>,
    total_len: u64,
    searchable: u64,
    digest: [u8; 32],
}

fn entry_hash(e: &Entry) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(e.manifest.canonical_id.as_bytes());
    h.update([0]);
    h.update(e.state.as_str().as_bytes());
    h.update([0]);
    // serde_json objects are key-sorted maps, so equal documents serialise equally.
    h.update(serde_json::to_vec(&e.manifest.raw).unwrap_or_default());
    h.finalize().into()
}

fn xor(into: &mut [u8; 32], other: &[u8; 32]) {
    for (a, b) in into.iter_mut().zip(other) {
        *a ^= b;
    }
}

impl Index {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registered agents, in any state.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No agent registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Searchable (Active) agents.
    pub fn searchable(&self) -> usize {
        self.searchable as usize
    }

    /// An order-independent fingerprint of the registered agents and their states.
    pub fn digest(&self) -> [u8; 32] {
        self.digest
    }

    /// The agent with this canonical id.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.get(id)
    }

    /// Every registered agent, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Registers or replaces an agent; returns the previous entry.
    pub fn upsert(&mut self, entry: Entry) -> Option<Entry> {
        let id = entry.manifest.canonical_id.clone();
        let previous = self.remove(&id);
        xor(&mut self.digest, &entry_hash(&entry));
        if entry.state == Lifecycle::Active {
            self.add_doc(&entry.manifest);
        }
        self.entries.insert(id, entry);
        previous
    }

    /// Removes an agent; returns it.
    pub fn remove(&mut self, id: &str) -> Option<Entry> {
        let entry = self.entries.remove(id)?;
        xor(&mut self.digest, &entry_hash(&entry));
        self.remove_doc(id);
        Some(entry)
    }

    /// Changes an agent's state (and its postings with it); returns the previous state.
    pub fn set_state(&mut self, id: &str, state: Lifecycle, now_ms: u64) -> Option<Lifecycle> {
        let mut entry = self.remove(id)?;
        let previous = entry.state;
        entry.state = state;
        entry.updated_ms = now_ms;
        self.upsert(entry);
        Some(previous)
    }

    /// Records an availability signal (does not change the digest or the postings).
    pub fn set_availability(&mut self, id: &str, availability: Availability) -> bool {
        match self.entries.get_mut(id) {
            Some(e) => {
                e.availability = availability;
                true
            }
            None => false,
        }
    }

    fn add_doc(&mut self, m: &Manifest) {
        let mut counts: HashMap<u32, u32> = HashMap::new();
        let mut len = 0u32;
        for field in m.match_fields() {
            rank::for_each_token(field, |t| {
                let next = self.vocabulary.len() as u32;
                let term = *self.vocabulary.entry(t.to_owned()).or_insert(next);
                if term as usize == self.postings.len() {
                    self.postings.push(Vec::new());
                }
                *counts.entry(term).or_default() += 1;
                len = len.saturating_add(1);
            });
        }
        let mut terms: Vec<(u32, u32)> = counts.into_iter().collect();
        terms.sort_unstable();
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        for &(term, tf) in &terms {
            self.postings[term as usize].push((slot, tf));
        }
        self.total_len += u64::from(len);
        self.searchable += 1;
        self.slot_of.insert(m.canonical_id.clone(), slot);
        self.slots[slot as usize] = Some(Doc {
            id: m.canonical_id.clone(),
            len,
            terms,
        });
    }

    fn remove_doc(&mut self, id: &str) {
        let Some(slot) = self.slot_of.remove(id) else {
            return;
        };
        let Some(doc) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        for (term, _) in doc.terms {
            if let Some(list) = self.postings.get_mut(term as usize) {
                list.retain(|&(s, _)| s != slot);
            }
        }
        self.total_len -= u64::from(doc.len);
        self.searchable -= 1;
        self.free.push(slot);
    }

    /// Document frequency of a term.
    fn df(&self, term: &str) -> (Option<u32>, u64) {
        match self.vocabulary.get(term) {
            Some(&t) => (Some(t), self.postings[t as usize].len() as u64),
            None => (None, 0),
        }
    }

    /// The capability match of every searchable agent containing a query term, as a dense
    /// vector by slot (0 for the others), plus the slots touched.
    fn matches(&self, terms: &[String]) -> (Vec<f64>, Vec<u32>) {
        let n = self.searchable;
        let avg = if n == 0 {
            1.0
        } else {
            self.total_len as f64 / n as f64
        };
        let mut acc = vec![0.0f64; self.slots.len()];
        let mut touched = Vec::new();
        let mut total_idf = 0.0;
        for term in terms {
            let (id, df) = self.df(term);
            let idf = rank::idf(n, df);
            total_idf += idf;
            let Some(id) = id else { continue };
            for &(slot, tf) in &self.postings[id as usize] {
                let len = self.slots[slot as usize].as_ref().map_or(0, |d| d.len);
                let a = &mut acc[slot as usize];
                if *a == 0.0 {
                    touched.push(slot);
                }
                *a += idf * rank::saturation(tf, len, avg);
            }
        }
        if total_idf > 0.0 {
            for &slot in &touched {
                acc[slot as usize] /= total_idf;
            }
        }
        (acc, touched)
    }

    /// Runs a ranked search at `now_ms`.
    pub fn search<'a>(&'a self, q: &Search<'_>) -> Hits<'a> {
        let mut heap: BinaryHeap<Ranked<'a>> = BinaryHeap::with_capacity(q.limit + 1);
        let mut total = 0usize;
        let mut consider = |slot: u32, cms: f64, heap: &mut BinaryHeap<Ranked<'a>>| {
            let Some(doc) = self.slots[slot as usize].as_ref() else {
                return;
            };
            let Some(entry) = self.entries.get(doc.id.as_str()) else {
                return;
            };
            if !q.filters.admits(&entry.manifest) {
                return;
            }
            total += 1;
            let cms = rank::round6(cms.clamp(0.0, 1.0));
            let score = q.weights.rank_score(
                entry.manifest.trust_tier,
                entry.manifest.behavioral_trust_score,
                cms,
            );
            let item = Ranked { score, cms, entry };
            if q.limit == 0 {
                return;
            }
            if heap.len() < q.limit {
                heap.push(item);
            } else if let Some(worst) = heap.peek()
                && item < *worst
            {
                heap.pop();
                heap.push(item);
            }
        };
        if q.terms.is_empty() {
            for (slot, doc) in self.slots.iter().enumerate() {
                if doc.is_some() {
                    consider(slot as u32, 0.0, &mut heap);
                }
            }
        } else {
            let (acc, touched) = self.matches(q.terms);
            for slot in touched {
                consider(slot, acc[slot as usize], &mut heap);
            }
        }
        let hits = heap
            .into_sorted_vec()
            .into_iter()
            .map(|r| Hit {
                entry: r.entry,
                capability_match_score: r.cms,
                rank_score: r.score,
            })
            .collect();
        Hits {
            total_matches: total,
            hits,
        }
    }
}

impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked<'_> {}

impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.score.total_cmp(&self.score).then_with(|| {
            self.entry
                .manifest
                .canonical_id
                .cmp(&other.entry.manifest.canonical_id)
        })
    }
}
