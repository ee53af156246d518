//! The ANS index (discovery draft §4.1–4.4): every registered agent with its lifecycle state and
//! availability, and an inverted index over the Active ones for the capability match.
//!
//! Only Active agents are searchable: a transition out of Active removes the agent's postings
//! at once, so deregistration takes effect before the next DISCOVER (§4.3). The BM25 statistics
//! (document count, total length, document frequencies) are integers kept up to date on every
//! change, so a search depends only on the set of indexed documents, never on the order they
//! arrived in. [`Index::digest`] is an order-independent fingerprint of that set.
//!
//! A search ([`Index::search_with`]) goes through the slots a block at a time, small blocks
//! first. The postings of each query term (sorted by slot; rarest term first) mark the agents
//! they touch. What filtering and ranking need about an agent is kept by slot as plain numbers:
//! tier and DESCRIBE domains in one byte, bounds of the behavioural trust in 128ths and the
//! zone id in others, the exact trust score and the interned zone and organisation ids in
//! further columns. Filters are resolved once per query to integer comparisons on those, so
//! the loop over the postings touches no string and no hash map. Every touched agent the
//! filters admit is counted; its term contributions are kept only when an upper bound of its
//! score (from its tier, its trust bound and the idf of the terms it can still contain) reaches
//! the worst score kept so far, and they are then summed in query-term order, exactly as a
//! plain term-at-a-time sum would. The top `limit` are decided on the exact `rank_score` and
//! canonical id; an agent is skipped only when its bound is strictly below a kept score. The
//! results are the same to the bit as an exhaustive search, whatever the slot layout. The
//! working memory is a [`Scratch`] the caller can keep and reuse.

use std::cmp::Ordering;
use std::collections::HashMap;

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

/// A searchable document.
#[derive(Debug)]
struct Doc {
    id: String,
    /// Where the entry is in [`Index::entries`].
    entry: u32,
    len: u32,
    /// (term, tf), term ids ascending.
    terms: Vec<(u32, u32)>,
}

/// A term's occurrence in a document (postings are sorted by slot).
#[derive(Clone, Copy, Debug)]
struct Posting {
    slot: u32,
    /// The term frequency and document length as a saturation memo cell
    /// (`len · MEMO_TF + tf − 1`), or [`RARE`] (then see [`Index::rare`]).
    cell: u32,
}

/// [`Posting::cell`] of a term frequency or document length beyond the memo.
const RARE: u32 = u32::MAX;

impl Posting {
    fn new(slot: u32, tf: u32, len: u32) -> Self {
        let (t, l) = (tf as usize, len as usize);
        let cell = if (1..=MEMO_TF).contains(&t) && l < MEMO_LEN {
            (l * MEMO_TF + t - 1) as u32
        } else {
            RARE
        };
        Self { slot, cell }
    }
}

/// The DESCRIBE capability domains [`Manifest::declares_domain`] knows (lowercase); bit `i` of
/// a domain mask stands for entry `i`.
const DESCRIBE_DOMAINS: [&str; 6] = [
    "methods",
    "tools",
    "modalities",
    "zones",
    "version",
    "budget",
];

fn domain_bit(domain: &str) -> Option<u8> {
    let lower = domain.to_ascii_lowercase();
    DESCRIBE_DOMAINS
        .iter()
        .position(|d| *d == lower)
        .map(|i| 1 << i)
}

fn domain_mask(m: &Manifest) -> u8 {
    DESCRIBE_DOMAINS
        .iter()
        .enumerate()
        .filter(|(_, d)| m.declares_domain(d) == Some(true))
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

/// The tier code of a slot no search admits: free, or Tier 3 (or above).
const NO_TIER: u8 = 3;
/// The trust score bounds in [`Hot`] are in 1/128ths (exact in binary).
const BEHAVIORAL_STEPS: f64 = 128.0;
/// [`Hot::behavioral_max`] when the trust score is outside [0, 1] (no bounds known).
const NO_BOUND: u8 = u8::MAX;
/// [`Hot::zone`] for a zone id that does not fit in a byte (255 included).
const BIG_ZONE: u8 = u8::MAX;

/// [`Hot::zone`] for an interned zone id.
fn zone_byte(zone: u32) -> u8 {
    u8::try_from(zone).unwrap_or(BIG_ZONE)
}

/// The four bytes a search reads for every agent it touches.
#[derive(Clone, Copy, Debug)]
struct Hot {
    /// Tier code (bits 0–1: the tier, [`NO_TIER`] for 3 and above or a free slot) and the
    /// DESCRIBE domain mask (bits 2–7).
    flags: u8,
    /// `behavioral_trust_score ≤ behavioral_max / 128` ([`NO_BOUND`]: no bound known).
    behavioral_max: u8,
    /// `behavioral_trust_score ≥ behavioral_min / 128` (when `behavioral_max` is a bound).
    behavioral_min: u8,
    /// The interned zone id when below [`BIG_ZONE`] (else that).
    zone: u8,
}

impl Default for Hot {
    fn default() -> Self {
        Self {
            flags: NO_TIER,
            behavioral_max: NO_BOUND,
            behavioral_min: 0,
            zone: BIG_ZONE,
        }
    }
}

impl Hot {
    fn of(m: &Manifest, zone: u32) -> Self {
        let b = m.behavioral_trust_score;
        // b · 128 is exact, so ⌊b · 128⌋ / 128 ≤ b ≤ ⌈b · 128⌉ / 128.
        let (behavioral_min, behavioral_max) = if (0.0..=1.0).contains(&b) {
            let scaled = b * BEHAVIORAL_STEPS;
            (scaled.floor() as u8, scaled.ceil() as u8)
        } else {
            (0, NO_BOUND)
        };
        Self {
            flags: m.trust_tier.min(NO_TIER) | domain_mask(m) << 2,
            behavioral_max,
            behavioral_min,
            zone: zone_byte(zone),
        }
    }

    fn tier(self) -> u8 {
        self.flags & 3
    }

    /// Where [`TopK`]'s bound tables have this agent's static part.
    fn bound_index(self) -> usize {
        (usize::from(self.tier()) << 8 | usize::from(self.behavioral_max)) % (4 * 256)
    }

    fn domains(self) -> u8 {
        self.flags >> 2
    }
}

/// What filtering and ranking need about each slot's agent, by slot.
#[derive(Debug, Default)]
struct Columns {
    /// Padded by at least a block.
    hot: Vec<Hot>,
    behavioral: Vec<f64>,
    /// Interned governance zone.
    zone: Vec<u32>,
    /// Interned organisation domain (ASCII-lowercased).
    org: Vec<u32>,
}

impl Columns {
    /// Adds a slot; [`Columns::hot`] grows a block at a time (its padding admits nothing).
    fn push(&mut self) {
        self.behavioral.push(0.0);
        let want = self.behavioral.len() + BLOCK;
        if self.hot.len() < want {
            self.hot
                .resize(want.next_multiple_of(BLOCK), Hot::default());
        }
        self.zone.push(0);
        self.org.push(0);
    }
}

/// Reference-counted string ids (zones, organisations); an id is reused once unreferenced.
#[derive(Debug, Default)]
struct Interner {
    ids: HashMap<String, u32>,
    names: Vec<String>,
    refs: Vec<u32>,
    free: Vec<u32>,
}

impl Interner {
    fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    fn acquire(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            self.refs[id as usize] += 1;
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.names[id as usize] = name.to_owned();
                self.refs[id as usize] = 1;
                id
            }
            None => {
                self.names.push(name.to_owned());
                self.refs.push(1);
                (self.names.len() - 1) as u32
            }
        };
        self.ids.insert(name.to_owned(), id);
        id
    }

    fn release(&mut self, id: u32) {
        let Some(refs) = self.refs.get_mut(id as usize) else {
            return;
        };
        *refs = refs.saturating_sub(1);
        if *refs == 0 {
            let name = std::mem::take(&mut self.names[id as usize]);
            self.ids.remove(&name);
            self.free.push(id);
        }
    }
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
}

/// [`Filters`] resolved against an index to comparisons on a slot's columns, mostly on its
/// [`Hot`] bytes.
#[derive(Clone, Debug)]
struct Admit {
    /// By [`Hot::flags`]: the tier (never Tier 3) and DESCRIBE domain filters pass.
    flags: [bool; 256],
    /// The zone byte required, and which of its bits must match (0: any zone).
    zone: u8,
    zone_mask: u8,
    /// The minimum trust score in 128ths, rounded up: an agent with `behavioral_max` below
    /// fails, one with `behavioral_min` at or above passes (0 without minimum).
    behavioral_steps: u8,
    /// The slot to leave out (`usize::MAX`: none).
    exclude: usize,
    /// Every agent the hot bytes admit needs a look at the cold columns (organisation filter,
    /// or a zone id beyond a byte).
    cold: bool,
    behavioral_min: Option<f64>,
    /// The zone id when it does not fit in [`Hot::zone`].
    big_zone: Option<u32>,
    org: Option<u32>,
}

impl Admit {
    /// `None` when no agent can pass (a zone or an organisation no searchable agent has, or a
    /// NaN trust minimum).
    fn new(index: &Index, f: &Filters) -> Option<Self> {
        let zone = match &f.governance_zone {
            Some(z) => Some(index.zones.get(z)?),
            None => None,
        };
        let org = match &f.org_domain {
            Some(o) => Some(index.orgs.get(&o.to_ascii_lowercase())?),
            None => None,
        };
        let behavioral_steps = match f.behavioral_trust_min {
            Some(b) if b.is_nan() => return None,
            // k / 128 ≥ b ⟺ k ≥ ⌈b · 128⌉ (exact); 129 fails every bounded agent.
            Some(b) => (b * BEHAVIORAL_STEPS).ceil().clamp(0.0, 129.0) as u8,
            None => 0,
        };
        let small_zone = zone.map(zone_byte);
        let big_zone = zone.filter(|_| small_zone == Some(BIG_ZONE));
        let tier_max = f.trust_tier_min.map_or(2, |t| t.min(2));
        // An entry that is not a DESCRIBE domain does not constrain.
        let domains = f
            .domains
            .iter()
            .filter_map(|d| domain_bit(d))
            .fold(0, |mask, bit| mask | bit);
        let mut flags = [false; 256];
        for (byte, ok) in (0u8..=u8::MAX).zip(flags.iter_mut()) {
            let hot = Hot {
                flags: byte,
                ..Hot::default()
            };
            *ok = hot.tier() <= tier_max && hot.domains() & domains == domains;
        }
        Some(Self {
            flags,
            zone: small_zone.unwrap_or(0),
            zone_mask: if zone.is_some() { u8::MAX } else { 0 },
            behavioral_steps,
            exclude: f
                .exclude
                .as_ref()
                .and_then(|x| index.slot_of.get(x.as_str()))
                .map_or(usize::MAX, |&s| s as usize),
            cold: big_zone.is_some() || org.is_some(),
            behavioral_min: f.behavioral_trust_min,
            big_zone,
            org,
        })
    }

    /// Whether the agent in `slot` passes.
    #[inline]
    fn admits(&self, c: &Columns, slot: usize, hot: Hot) -> bool {
        self.admits_hot(hot)
            && (!(self.needs_cold(hot) || slot == self.exclude) || self.admits_cold(c, slot))
    }

    /// The filters the hot bytes decide: an agent that passes them is admitted unless it
    /// [`Admit::needs_cold`] or is the excluded one, and then [`Admit::admits_cold`] decides.
    #[inline]
    fn admits_hot(&self, hot: Hot) -> bool {
        self.flags[usize::from(hot.flags)]
            & ((hot.zone ^ self.zone) & self.zone_mask == 0)
            & (hot.behavioral_max >= self.behavioral_steps)
    }

    /// Whether the hot bytes leave a filter undecided.
    #[inline]
    fn needs_cold(&self, hot: Hot) -> bool {
        self.cold
            | (self.behavioral_min.is_some()
                & !((hot.behavioral_max != NO_BOUND)
                    & (hot.behavioral_min >= self.behavioral_steps)))
    }

    /// The filters on the cold columns.
    fn admits_cold(&self, c: &Columns, slot: usize) -> bool {
        slot != self.exclude
            && self.big_zone.is_none_or(|z| c.zone[slot] == z)
            && self.org.is_none_or(|o| c.org[slot] == o)
            && self.behavioral_min.is_none_or(|b| c.behavioral[slot] >= b)
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

/// Saturations are memoised for document lengths below this…
const MEMO_LEN: usize = 256;
/// … and term frequencies up to this.
const MEMO_TF: usize = 4;
/// Slots searched at a time, at most.
const BLOCK: usize = 4096;
/// Slots in the first block (then twice as many each time, up to [`BLOCK`]).
const FIRST_BLOCK: usize = 512;

/// Most query terms whose contributions are kept apart (beyond, they are summed as they come).
const MAX_SPLIT_TERMS: usize = 16;

/// A query term's place in its posting list.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    term: u32,
    /// Its position in the query.
    at: usize,
    pos: usize,
    idf: f64,
    /// `match_weight · min(m, 1)` for a bound `m` of the match of an agent first touched by
    /// this term.
    match_part: f64,
    /// See [`need`], for the threshold (bits) `need_for`.
    need: u32,
    need_for: Option<u64>,
}

/// Reusable working memory for [`Index::search_with`] (some 100 KiB, more for queries with
/// many terms): for a block of slots, the marks of the slots touched, the candidates and their
/// term contributions; the query's posting cursors; memoised saturations; the kept hits. Keep
/// one per searching thread and pass it to every search. It may be used with any index; it
/// carries no result from one search to the next.
#[derive(Debug, Default)]
pub struct Scratch {
    /// By slot in the block: 0 untouched, 1 touched, 2 touched and promising, 3 the same
    /// with a row of contributions; all zero between blocks.
    seen: Vec<u8>,
    /// By slot in the block: the row of a promising agent's contributions.
    rows: Vec<u16>,
    /// Rows of contributions, one per query term, in query order.
    contributions: Vec<f64>,
    /// By slot in the block: the running sum (when the query has too many terms for rows);
    /// all zero between blocks.
    acc: Vec<f64>,
    /// The block's candidates (offsets in the block).
    candidates: Vec<u16>,
    /// Where in a term's postings the block's promising agents are.
    found: Vec<u32>,
    /// A search stopped (unwound) before resetting `seen` and `acc`.
    dirty: bool,
    cursors: Vec<Cursor>,
    /// The average document length the memo is for (its bits).
    memo_avg: Option<u64>,
    /// `rank::saturation(tf, len, avg)` at `len · MEMO_TF + tf − 1`; NaN until computed.
    memo: Vec<f64>,
    /// The query's score bound table (see [`TopK`]).
    bounds: Vec<f64>,
    /// The kept hits.
    heap: Vec<Ranked>,
}

impl Scratch {
    /// Empty working memory (allocated on first use).
    pub fn new() -> Self {
        Self::default()
    }

    /// Ready for a search with average document length `avg`.
    fn prepare(&mut self, avg: f64) {
        if self.dirty || self.seen.len() != BLOCK {
            self.seen.clear();
            self.seen.resize(BLOCK, 0);
            self.acc.clear();
            self.acc.resize(BLOCK, 0.0);
            self.rows.resize(BLOCK, 0);
            self.candidates.resize(BLOCK, 0);
            self.found.resize(BLOCK, 0);
            self.dirty = false;
        }
        if self.memo_avg != Some(avg.to_bits()) {
            self.memo_avg = Some(avg.to_bits());
            self.memo.clear();
            self.memo.resize(MEMO_LEN * MEMO_TF, f64::NAN);
        }
        self.cursors.clear();
    }
}

/// The parts of a [`Scratch`] a block works on.
struct Work<'s> {
    rows: &'s mut [u16],
    /// Rows used in the block.
    row_count: usize,
    /// Where in a term's postings the promising agents are.
    found: &'s mut [u32],
    contributions: &'s mut Vec<f64>,
    acc: &'s mut [f64],
    memo: &'s mut [f64],
}

/// Marks the postings of `list` in the block of slots from `start` (see [`Index::block`]):
/// updates `seen`, the count of admitted agents and the `candidates` (both in `counts`), and
/// notes in `found` where the postings of promising agents are; an agent is promising when
/// the hot bytes admit it and its `behavioral_max` reaches byte `tier` of `need`. Returns how
/// many postings were in the block and how many were noted.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn mark<const ZONE: bool, const FULL: bool>(
    list: &[Posting],
    start: usize,
    len: usize,
    hot: &[Hot],
    seen: &mut [u8],
    candidates: &mut [u16],
    found: &mut [u32],
    admit: &Admit,
    exclude: usize,
    need: u32,
    counts: &mut (usize, usize),
) -> (usize, usize) {
    let end = start + len.min(BLOCK);
    let (hot, seen) = (&hot[..BLOCK], &mut seen[..BLOCK]);
    let (candidates, found) = (&mut candidates[..BLOCK], &mut found[..BLOCK]);
    let (mut admitted, mut kept) = *counts;
    let mut noted = 0;
    let mut done = list.len();
    for (i, p) in list.iter().enumerate() {
        let slot = p.slot as usize;
        if slot >= end {
            done = i;
            break;
        }
        let b = (slot - start) % BLOCK;
        let state = seen[b];
        let h = hot[b];
        let (passes, undecided) = if FULL {
            (admit.admits_hot(h), admit.needs_cold(h) | (b == exclude))
        } else if ZONE {
            (
                admit.flags[usize::from(h.flags)] & (h.zone == admit.zone),
                false,
            )
        } else {
            (admit.flags[usize::from(h.flags)], false)
        };
        let first = state == 0;
        admitted += usize::from(first & passes & !undecided);
        let promising = passes & (u32::from(h.behavioral_max) >= need >> (8 * h.tier()) & 0xff);
        let state = if first {
            1 + u8::from(promising)
        } else {
            state
        };
        seen[b] = state;
        if state >= 2 || (FULL && first && passes && undecided) {
            if state >= 2 {
                found[noted % BLOCK] = i as u32;
                noted += 1;
            }
            if first {
                candidates[kept % BLOCK] = b as u16;
                kept += 1;
            }
        }
    }
    *counts = (admitted, kept);
    (done, noted)
}

/// Byte `t` (tier code `t` < 3): the smallest `behavioral_max` whose score bound, with the
/// match part `match_part`, is not below `threshold` (129: none; only agents without a trust
/// bound remain); byte 3: 255. The bound grows with `behavioral_max`.
fn need(static_bound: &[f64], match_part: f64, threshold: f64) -> u32 {
    let mut need = 0xff << 24;
    for tier in 0..3 {
        let row = &static_bound[tier * 256..tier * 256 + 129];
        let k = row.partition_point(|s| s + match_part < threshold) as u32;
        need |= k << (8 * tier);
    }
    need
}

/// A scored hit.
#[derive(Clone, Copy, Debug)]
struct Ranked {
    score: f64,
    cms: f64,
    slot: usize,
    /// The match before clamping and rounding, for the differential tests.
    #[cfg(test)]
    x: f64,
}

/// Rank order: higher score first, then the smaller canonical id (read only to break a tie).
fn rank_order(index: &Index, a: &Ranked, b: &Ranked) -> Ordering {
    b.score
        .total_cmp(&a.score)
        .then_with(|| index.id_of(a.slot).cmp(index.id_of(b.slot)))
}

/// The best `limit` admitted agents by `rank_score`, then canonical id, in a binary heap
/// with the worst kept hit on top.
///
/// Candidates are screened with an upper bound of their score: `round6` moves a value by at
/// most 5e-7, so the published match is at most `min(x + 1e-6, 1)` (and a product by the
/// correctly rounded `1 / total_idf` is within a few ulps of the quotient); the trust score is
/// at most [`Hot::behavioral_max`]` / 128`; with the score non-decreasing in both (finite,
/// non-negative weights), the bound computed in the same order as `rank_score` is at least the
/// score. An agent whose bound is strictly below the worst kept score cannot get in.
struct TopK<'a, 's> {
    index: &'a Index,
    heap: &'s mut Vec<Ranked>,
    limit: usize,
    /// `trust_tier_weight · normalized_trust_tier(tier)` by tier code.
    tier_part: [f64; 4],
    /// `tier_part[t] + behavioral_trust_weight · k / 128` at `t · 256 + k` for a tier code `t`
    /// and a [`Hot::behavioral_max`] `k` (+∞ without bound).
    static_bound: &'s [f64],
    behavioral_weight: f64,
    match_weight: f64,
    /// `rank_score` is non-decreasing in the match (its weight is finite and ≥ 0)…
    by_match: bool,
    /// … and in the behavioural trust too.
    by_behavioral: bool,
    /// The worst kept score once `limit` hits are kept (−∞ before).
    worst: f64,
    /// A candidate whose [`TopK::bound`] is below this cannot get in.
    threshold: f64,
}

impl<'a, 's> TopK<'a, 's> {
    /// The weights' [`TopK::tier_part`] and [`TopK::static_bound`] (into `static_bound`).
    fn tables(w: &Weights, static_bound: &mut Vec<f64>) -> [f64; 4] {
        let tier_part =
            [0u8, 1, 2, 3].map(|t| w.trust_tier_weight * rank::normalized_trust_tier(t));
        static_bound.clear();
        static_bound.extend((0..4 * 256).map(|i| match i % 256 {
            k @ 0..=128 => {
                tier_part[i / 256] + w.behavioral_trust_weight * (k as f64 / BEHAVIORAL_STEPS)
            }
            _ => f64::INFINITY,
        }));
        tier_part
    }

    fn new(
        index: &'a Index,
        heap: &'s mut Vec<Ranked>,
        static_bound: &'s [f64],
        tier_part: [f64; 4],
        limit: usize,
        w: &Weights,
    ) -> Self {
        let monotone = |x: f64| x.is_finite() && x >= 0.0;
        let by_match = monotone(w.capability_match_weight);
        heap.clear();
        Self {
            index,
            heap,
            limit,
            tier_part,
            static_bound,
            behavioral_weight: w.behavioral_trust_weight,
            match_weight: w.capability_match_weight,
            by_match,
            by_behavioral: by_match && monotone(w.behavioral_trust_weight),
            worst: f64::NEG_INFINITY,
            threshold: if limit == 0 {
                f64::INFINITY
            } else {
                f64::NEG_INFINITY
            },
        }
    }

    /// An upper bound of the score of an agent with these hot bytes and a match of at most
    /// `match_max` (meaningful only when `by_behavioral`).
    #[inline]
    fn bound(&self, hot: Hot, match_max: f64) -> f64 {
        self.static_bound[hot.bound_index()] + self.match_weight * match_max.min(1.0)
    }

    /// Offers an admitted agent whose capability match is `x` before clamping and rounding.
    fn offer(&mut self, c: &Columns, slot: usize, hot: Hot, x: f64) {
        if self.limit == 0 {
            return;
        }
        let full = self.heap.len() >= self.limit;
        // `Weights::rank_score`, in the same order.
        let base =
            self.tier_part[usize::from(hot.tier())] + self.behavioral_weight * c.behavioral[slot];
        if full && self.by_match && base + self.match_weight * (x + 1e-6).min(1.0) < self.worst {
            return;
        }
        let cms = rank::round6(x.clamp(0.0, 1.0));
        let item = Ranked {
            score: base + self.match_weight * cms,
            cms,
            slot,
            #[cfg(test)]
            x,
        };
        let (index, heap) = (self.index, &mut *self.heap);
        if !full {
            // Sift up: the worst hit stays on top.
            heap.push(item);
            let mut i = heap.len() - 1;
            while i > 0 {
                let parent = (i - 1) / 2;
                if rank_order(index, &heap[i], &heap[parent]) != Ordering::Greater {
                    break;
                }
                heap.swap(i, parent);
                i = parent;
            }
        } else if heap
            .first()
            .is_some_and(|worst| rank_order(index, &item, worst) == Ordering::Less)
        {
            // Replace the worst hit and sift down.
            heap[0] = item;
            let mut i = 0;
            loop {
                let mut worst = i;
                for child in [2 * i + 1, 2 * i + 2] {
                    if child < heap.len()
                        && rank_order(index, &heap[child], &heap[worst]) == Ordering::Greater
                    {
                        worst = child;
                    }
                }
                if worst == i {
                    break;
                }
                heap.swap(i, worst);
                i = worst;
            }
        } else {
            return;
        }
        if heap.len() >= self.limit
            && let Some(worst) = heap.first()
        {
            self.worst = worst.score;
            if self.by_behavioral {
                self.threshold = worst.score;
            }
        }
    }

    /// The kept hits, best first.
    fn into_sorted(self) -> &'s [Ranked] {
        let index = self.index;
        self.heap.sort_unstable_by(|a, b| rank_order(index, a, b));
        self.heap
    }
}

#[derive(Debug, Default)]
pub struct Index {
    /// The registered agents (`None`: a vacant place).
    entries: Vec<Option<Entry>>,
    vacant: Vec<u32>,
    /// Canonical id → place in `entries`.
    entry_of: HashMap<String, u32>,
    /// By slot: the searchable document, `None` for a free slot.
    slots: Vec<Option<Doc>>,
    /// By slot, in step with `slots`.
    columns: Columns,
    free: Vec<u32>,
    slot_of: HashMap<String, u32>,
    vocabulary: HashMap<String, u32>,
    /// By term, sorted by slot.
    postings: Vec<Vec<Posting>>,
    /// (term, slot) → (tf, document length) for the postings with a [`RARE`] cell.
    rare: HashMap<(u32, u32), (u32, u32)>,
    zones: Interner,
    /// Keyed by the ASCII-lowercased domain.
    orgs: Interner,
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
        self.entry_of.len()
    }

    /// No agent registered.
    pub fn is_empty(&self) -> bool {
        self.entry_of.is_empty()
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
        let at = *self.entry_of.get(id)?;
        self.entries[at as usize].as_ref()
    }

    /// Every registered agent, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().flatten()
    }

    /// Registers or replaces an agent; returns the previous entry.
    pub fn upsert(&mut self, entry: Entry) -> Option<Entry> {
        let id = entry.manifest.canonical_id.clone();
        let previous = self.remove(&id);
        xor(&mut self.digest, &entry_hash(&entry));
        let at = match self.vacant.pop() {
            Some(at) => at,
            None => {
                self.entries.push(None);
                (self.entries.len() - 1) as u32
            }
        };
        if entry.state == Lifecycle::Active {
            self.add_doc(&entry.manifest, at);
        }
        self.entries[at as usize] = Some(entry);
        self.entry_of.insert(id, at);
        previous
    }

    /// Removes an agent; returns it.
    pub fn remove(&mut self, id: &str) -> Option<Entry> {
        let at = self.entry_of.remove(id)?;
        let entry = self.entries.get_mut(at as usize).and_then(Option::take)?;
        self.vacant.push(at);
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
        let at = self.entry_of.get(id).map(|&at| at as usize);
        match at.and_then(|at| self.entries[at].as_mut()) {
            Some(e) => {
                e.availability = availability;
                true
            }
            None => false,
        }
    }

    fn add_doc(&mut self, m: &Manifest, entry: u32) {
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
                self.columns.push();
                (self.slots.len() - 1) as u32
            }
        };
        for &(term, tf) in &terms {
            let list = &mut self.postings[term as usize];
            let posting = Posting::new(slot, tf, len);
            if posting.cell == RARE {
                self.rare.insert((term, slot), (tf, len));
            }
            // Sorted by slot: a new slot is the largest and goes last; a reused one goes in.
            let at = match list.last() {
                Some(last) if last.slot > slot => list.partition_point(|p| p.slot < slot),
                _ => list.len(),
            };
            list.insert(at, posting);
        }
        self.total_len += u64::from(len);
        self.searchable += 1;
        self.slot_of.insert(m.canonical_id.clone(), slot);
        let s = slot as usize;
        let zone = self.zones.acquire(&m.governance_zone);
        self.columns.hot[s] = Hot::of(m, zone);
        self.columns.behavioral[s] = m.behavioral_trust_score;
        self.columns.zone[s] = zone;
        self.columns.org[s] = self.orgs.acquire(&m.org_domain.to_ascii_lowercase());
        self.slots[s] = Some(Doc {
            id: m.canonical_id.clone(),
            entry,
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
            if let Some(list) = self.postings.get_mut(term as usize)
                && let Ok(at) = list.binary_search_by_key(&slot, |p| p.slot)
                && list.remove(at).cell == RARE
            {
                self.rare.remove(&(term, slot));
            }
        }
        let s = slot as usize;
        self.columns.hot[s] = Hot::default();
        self.zones.release(self.columns.zone[s]);
        self.orgs.release(self.columns.org[s]);
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

    /// `rank::saturation(tf, len, avg)` for posting `p` of `term`, memoised in `memo` (see
    /// [`Scratch::memo`]).
    #[inline]
    fn saturation(&self, memo: &mut [f64], term: u32, p: Posting, avg: f64) -> f64 {
        let Some(cell) = memo.get_mut(p.cell as usize) else {
            let (tf, len) = self.rare.get(&(term, p.slot)).copied().unwrap_or_default();
            return rank::saturation(tf, len, avg);
        };
        if cell.is_nan() {
            let cell_index = p.cell as usize;
            let (tf, len) = (
                (cell_index % MEMO_TF + 1) as u32,
                (cell_index / MEMO_TF) as u32,
            );
            *cell = rank::saturation(tf, len, avg);
        }
        *cell
    }

    /// The canonical id of the agent in `slot`.
    fn id_of(&self, slot: usize) -> &str {
        self.slots[slot].as_ref().map_or("", |d| d.id.as_str())
    }

    /// The postings in the block of `len` slots from `start`, term by term in cursor order:
    /// marks each agent touched (`seen`), counts those the hot bytes admit and, on first touch,
    /// appends to `candidates` the admitted ones that are promising (their score bound, with
    /// the cursor's bound of the match, reaches `threshold`, the worst kept score when the
    /// block began) and those the hot bytes leave undecided. The term contributions of the
    /// promising ones are kept: in a row each when `split` > 0 (one entry per query term),
    /// else summed into `acc` (the cursors then in query order). Returns the count, the number
    /// of candidates, and whether any posting was in the block. Only the tier and domain
    /// filters apply unless `ZONE` (the zone byte) or `FULL` (everything) is set.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn block<const ZONE: bool, const FULL: bool>(
        &self,
        start: usize,
        len: usize,
        cursors: &mut [Cursor],
        split: usize,
        avg: f64,
        seen: &mut [u8],
        candidates: &mut [u16],
        work: &mut Work<'_>,
        admit: &Admit,
        exclude: usize,
        static_bound: &[f64],
        threshold: f64,
    ) -> (usize, usize, bool) {
        let hot = &self.columns.hot[start..start + BLOCK];
        let mut counts = (0, 0);
        let mut touched = false;
        for cursor in cursors {
            let list = &self.postings[cursor.term as usize][cursor.pos..];
            if cursor.need_for != Some(threshold.to_bits()) {
                cursor.need = need(static_bound, cursor.match_part, threshold);
                cursor.need_for = Some(threshold.to_bits());
            }
            let (done, found) = mark::<ZONE, FULL>(
                list,
                start,
                len,
                hot,
                seen,
                candidates,
                work.found,
                admit,
                exclude,
                cursor.need,
                &mut counts,
            );
            for &i in &work.found[..found] {
                let p = list[i as usize];
                let b = (p.slot as usize - start) % BLOCK;
                let c = cursor.idf * self.saturation(work.memo, cursor.term, p, avg);
                if split == 0 {
                    work.acc[b] += c;
                    continue;
                }
                if seen[b] == 2 {
                    // A row for its contributions, on its first one.
                    seen[b] = 3;
                    work.rows[b] = work.row_count as u16;
                    let needed = (work.row_count + 1) * split;
                    if work.contributions.len() < needed {
                        work.contributions.resize(needed, 0.0);
                    }
                    work.contributions[needed - split..needed].fill(0.0);
                    work.row_count += 1;
                }
                work.contributions[usize::from(work.rows[b]) * split + cursor.at] = c;
            }
            cursor.pos += done;
            touched |= done > 0;
        }
        let (admitted, kept) = counts;
        (admitted, kept, touched)
    }

    /// Runs a ranked search (with fresh working memory; see [`Index::search_with`]).
    pub fn search<'a>(&'a self, q: &Search<'_>) -> Hits<'a> {
        self.search_with(q, &mut Scratch::new())
    }

    /// Runs a ranked search with reusable working memory (see [`Scratch`]); the same result
    /// as [`Index::search`], without allocating beyond the hits once `scratch` has grown.
    pub fn search_with<'a>(&'a self, q: &Search<'_>, scratch: &mut Scratch) -> Hits<'a> {
        let Some(admit) = Admit::new(self, q.filters) else {
            return Hits {
                total_matches: 0,
                hits: Vec::new(),
            };
        };
        let c = &self.columns;
        let n = self.searchable;
        let avg = if n == 0 {
            1.0
        } else {
            self.total_len as f64 / n as f64
        };
        scratch.prepare(avg);
        let tier_part = TopK::tables(&q.weights, &mut scratch.bounds);
        let Scratch {
            seen,
            rows,
            contributions,
            acc,
            candidates,
            found,
            dirty,
            cursors,
            memo,
            bounds,
            heap,
            ..
        } = scratch;
        let mut top = TopK::new(self, heap, bounds, tier_part, q.limit, &q.weights);
        let mut total = 0usize;
        if q.terms.is_empty() {
            for (slot, &hot) in c.hot.iter().enumerate() {
                if admit.admits(c, slot, hot) {
                    total += 1;
                    top.offer(c, slot, hot, 0.0);
                }
            }
        } else {
            // The capability match of every agent containing a query term: the sum, over the
            // query's terms in order, of idf · saturation, divided by the total idf.
            let mut total_idf = 0.0;
            for (at, term) in q.terms.iter().enumerate() {
                let (id, df) = self.df(term);
                let idf = rank::idf(n, df);
                total_idf += idf;
                if let Some(term) = id {
                    cursors.push(Cursor {
                        term,
                        at,
                        pos: 0,
                        idf,
                        match_part: top.match_weight,
                        need: 0,
                        need_for: None,
                    });
                }
            }
            // Within a few ulps of x / total_idf (see `TopK`).
            let inverse = if total_idf > 0.0 {
                1.0 / total_idf
            } else {
                1.0
            };
            // With few terms, rarest first: an agent first touched by a term contains none of
            // the rarer ones, so its match is at most the idf still to come over the total
            // (`round6` and the rounding errors within 1e-6); its contributions are summed in
            // query order at the end.
            let split = if q.terms.len() <= MAX_SPLIT_TERMS {
                q.terms.len()
            } else {
                0
            };
            if split > 0 {
                cursors.sort_by(|a, b| b.idf.total_cmp(&a.idf).then(a.at.cmp(&b.at)));
                let mut rest = 0.0;
                for cursor in cursors.iter_mut().rev() {
                    rest += cursor.idf;
                    cursor.match_part = top.match_weight * (rest * inverse + 1e-6).min(1.0);
                }
            }
            *dirty = true;
            let mut work = Work {
                rows,
                row_count: 0,
                found,
                contributions,
                acc,
                memo,
            };
            let simple = !admit.cold && admit.behavioral_min.is_none();
            // Small blocks first, so that the worst kept score rises early.
            let (mut start, mut len) = (0, FIRST_BLOCK);
            while start < self.slots.len() {
                let exclude = admit.exclude.wrapping_sub(start);
                let block = match (simple && exclude >= len, admit.zone_mask) {
                    (true, 0) => Self::block::<false, false>,
                    (true, _) => Self::block::<true, false>,
                    _ => Self::block::<false, true>,
                };
                let (admitted, kept, touched) = block(
                    self,
                    start,
                    len,
                    cursors,
                    split,
                    avg,
                    seen,
                    candidates,
                    &mut work,
                    &admit,
                    exclude,
                    top.static_bound,
                    top.threshold,
                );
                total += admitted;
                for &b in &candidates[..kept] {
                    let b = usize::from(b);
                    let (h, slot) = (c.hot[start + b], start + b);
                    if admit.needs_cold(h) || slot == admit.exclude {
                        if !admit.admits_cold(c, slot) {
                            work.acc[b] = 0.0;
                            continue;
                        }
                        total += 1;
                    }
                    if seen[b] < 2 {
                        continue;
                    }
                    let sum = if split > 0 {
                        let row = usize::from(work.rows[b]) * split;
                        work.contributions[row..row + split]
                            .iter()
                            .fold(0.0, |sum, c| sum + c)
                    } else {
                        std::mem::take(&mut work.acc[b])
                    };
                    if top.bound(h, sum * inverse + 1e-6) < top.threshold {
                        continue;
                    }
                    let x = if total_idf > 0.0 {
                        sum / total_idf
                    } else {
                        sum
                    };
                    top.offer(c, slot, h, x);
                }
                if touched {
                    seen.fill(0);
                }
                work.row_count = 0;
                start += len;
                len = (2 * len).min(BLOCK);
            }
            *dirty = false;
        }
        let hits = top
            .into_sorted()
            .iter()
            .filter_map(|r| {
                let doc = self.slots[r.slot].as_ref()?;
                self.entries[doc.entry as usize].as_ref().map(|entry| Hit {
                    entry,
                    capability_match_score: r.cms,
                    rank_score: r.score,
                })
            })
            .collect();
        Hits {
            total_matches: total,
            hits,
        }
    }
}

/// The benchmark population, for the full differential test.
#[cfg(test)]
#[allow(dead_code, unreachable_pub, clippy::all)]
#[path = "../benches/support/corpus.rs"]
mod bench_corpus;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Differential tests: the index against a verbatim copy of the first (dense, string-
    //! filtering) search, which is the specification of the results: same `total_matches`, same
    //! hits in the same order, same scores to the bit.

    use serde_json::{Value, json};

    use super::*;

    /// The original implementation, kept as the reference the optimised search must match.
    mod reference {
        use std::cmp::Ordering;
        use std::collections::{BinaryHeap, HashMap};

        use crate::index::{Entry, Filters, Search};
        use crate::manifest::{Lifecycle, Manifest};
        use crate::rank;

        /// One result: canonical id, `capability_match_score`, `rank_score`, and the match
        /// before clamping and rounding.
        pub(super) type Row = (String, f64, f64, f64);

        fn admits(f: &Filters, m: &Manifest) -> bool {
            f.admits_published(
                m.trust_tier,
                m.behavioral_trust_score,
                &m.governance_zone,
                &m.org_domain,
            ) && f
                .domains
                .iter()
                .all(|d| m.declares_domain(d).unwrap_or(true))
                && f.exclude.as_ref().is_none_or(|x| m.canonical_id != *x)
        }

        #[derive(Debug)]
        struct Doc {
            id: String,
            len: u32,
            terms: Vec<(u32, u32)>,
        }

        struct Ranked<'a> {
            score: f64,
            cms: f64,
            raw: f64,
            entry: &'a Entry,
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

        #[derive(Debug, Default)]
        pub(super) struct Reference {
            entries: HashMap<String, Entry>,
            slots: Vec<Option<Doc>>,
            free: Vec<u32>,
            slot_of: HashMap<String, u32>,
            vocabulary: HashMap<String, u32>,
            postings: Vec<Vec<(u32, u32)>>,
            total_len: u64,
            searchable: u64,
        }

        impl Reference {
            pub(super) fn upsert(&mut self, entry: Entry) {
                let id = entry.manifest.canonical_id.clone();
                self.remove(&id);
                if entry.state == Lifecycle::Active {
                    self.add_doc(&entry.manifest);
                }
                self.entries.insert(id, entry);
            }

            pub(super) fn remove(&mut self, id: &str) {
                if self.entries.remove(id).is_some() {
                    self.remove_doc(id);
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

            fn df(&self, term: &str) -> (Option<u32>, u64) {
                match self.vocabulary.get(term) {
                    Some(&t) => (Some(t), self.postings[t as usize].len() as u64),
                    None => (None, 0),
                }
            }

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

            pub(super) fn search<'a>(&'a self, q: &Search<'_>) -> (usize, Vec<Row>) {
                let mut heap: BinaryHeap<Ranked<'a>> = BinaryHeap::with_capacity(q.limit + 1);
                let mut total = 0usize;
                let mut consider = |slot: u32, cms: f64, heap: &mut BinaryHeap<Ranked<'a>>| {
                    let Some(doc) = self.slots[slot as usize].as_ref() else {
                        return;
                    };
                    let Some(entry) = self.entries.get(doc.id.as_str()) else {
                        return;
                    };
                    if !admits(q.filters, &entry.manifest) {
                        return;
                    }
                    total += 1;
                    let raw = cms;
                    let cms = rank::round6(cms.clamp(0.0, 1.0));
                    let score = q.weights.rank_score(
                        entry.manifest.trust_tier,
                        entry.manifest.behavioral_trust_score,
                        cms,
                    );
                    let item = Ranked {
                        score,
                        cms,
                        raw,
                        entry,
                    };
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
                let rows = heap
                    .into_sorted_vec()
                    .into_iter()
                    .map(|r| (r.entry.manifest.canonical_id.clone(), r.cms, r.score, r.raw))
                    .collect();
                (total, rows)
            }
        }
    }

    use reference::{Reference, Row};

    /// splitmix64.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// Skewed towards small values (a few very common words, many rare ones).
        fn skewed(&mut self, n: u64) -> u64 {
            let a = self.below(n);
            self.below(a + 1)
        }

        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    const WORDS: usize = 80;

    fn word(i: u64) -> String {
        const SYLLABLES: [&str; 8] = ["ka", "lo", "mi", "ran", "tes", "vor", "qui", "zel"];
        let mut w = String::from("w");
        let mut n = i + 8;
        while n > 0 {
            w.push_str(SYLLABLES[(n % 8) as usize]);
            n /= 8;
        }
        w
    }

    fn entry_of(raw: Value, state: Lifecycle) -> Entry {
        Entry {
            manifest: Manifest::from_value(raw).expect("valid manifest"),
            state,
            availability: Availability::Available,
            registered_ms: 0,
            updated_ms: 0,
        }
    }

    /// A manifest with many ties: few words, few trust values, duplicated texts, long documents
    /// and repeated words now and then, optional DESCRIBE fields, organisations in mixed case.
    fn manifest(i: u64, zones: u64, rng: &mut Rng) -> Value {
        let words = if rng.chance(3) {
            300 + rng.below(200)
        } else {
            2 + rng.below(25)
        };
        let mut text: Vec<String> = (0..words).map(|_| word(rng.skewed(WORDS as u64))).collect();
        if rng.chance(10) {
            let w = text[0].clone();
            text.extend(std::iter::repeat_n(w, 1 + rng.below(8) as usize));
        }
        let text = if rng.chance(10) {
            format!("shared text {}", word(rng.below(3)))
        } else {
            text.join(" ")
        };
        let caps: Vec<String> = (0..rng.below(3)).map(|_| word(rng.below(20))).collect();
        let org = rng.below(7);
        let org = if rng.chance(50) {
            format!("Org{org}.Example")
        } else {
            format!("org{org}.example")
        };
        let label = if rng.chance(50) {
            "worker".to_owned()
        } else {
            format!("agent {i}")
        };
        let zone = format!("zone:{}", rng.below(zones));
        let tier = 1 + rng.below(3);
        let trust = if rng.chance(50) {
            [0.0, 0.5, 0.8, 0.9, 0.95, 1.0][rng.below(6) as usize]
        } else {
            rng.below(1001) as f64 / 1000.0
        };
        let methods = if rng.chance(20) {
            json!([])
        } else {
            json!(["QUERY", "DESCRIBE"])
        };
        let mut raw = json!({
            "canonical_id": format!("agent-{:04}", (i * 7919) % 10_007),
            "manifest_uri": format!("agtp://agents.example/agents/agent-{i}"),
            "agent_label": label,
            "org_domain": org,
            "governance_zone": zone,
            "trust_tier": tier,
            "behavioral_trust_score": trust,
            "supported_methods": methods,
            "authority_scope_categories": ["documents:query"],
            "capabilities": caps,
            "job_description": text,
        });
        let obj = raw.as_object_mut().expect("object");
        if rng.chance(30) {
            obj.insert("version".into(), json!("1.0"));
        }
        if rng.chance(30) {
            obj.insert("budget_units_accepted".into(), json!(["credits"]));
        }
        if rng.chance(30) {
            obj.insert("modalities".into(), json!(["text"]));
        }
        raw
    }

    /// Both indexes, built the same way, with churn: replacements, removals, state changes
    /// (slots freed and reused); now and then a manifest built by hand with a trust score
    /// outside [0, 1] or a tier outside 1–3.
    fn populations(n: u64, zones: u64, seed: u64) -> (Index, Reference) {
        let mut rng = Rng(seed);
        let (mut index, mut reference) = (Index::new(), Reference::default());
        let mut ids = Vec::new();
        for i in 0..n {
            let raw = manifest(i, zones, &mut rng);
            ids.push(raw["canonical_id"].as_str().expect("id").to_owned());
            let state = if rng.chance(5) {
                Lifecycle::Suspended
            } else {
                Lifecycle::Active
            };
            let mut entry = entry_of(raw, state);
            if rng.chance(2) {
                entry.manifest.behavioral_trust_score =
                    [1.25, -0.5, f64::NAN][rng.below(3) as usize];
            }
            if rng.chance(2) {
                entry.manifest.trust_tier = [0, 7][rng.below(2) as usize];
            }
            index.upsert(entry.clone());
            reference.upsert(entry);
            if rng.chance(20) {
                let id = &ids[rng.below(ids.len() as u64) as usize];
                match rng.below(3) {
                    0 => {
                        index.remove(id);
                        reference.remove(id);
                    }
                    1 => {
                        let state = if rng.chance(50) {
                            Lifecycle::Revoked
                        } else {
                            Lifecycle::Active
                        };
                        if let Some(mut e) = index.get(id).cloned() {
                            index.set_state(id, state, 1);
                            e.state = state;
                            e.updated_ms = 1;
                            reference.upsert(e);
                        }
                    }
                    _ => {
                        let mut raw = manifest(i, zones, &mut rng);
                        raw["canonical_id"] = json!(id);
                        index.upsert(entry_of(raw.clone(), Lifecycle::Active));
                        reference.upsert(entry_of(raw, Lifecycle::Active));
                    }
                }
            }
        }
        (index, reference)
    }

    /// The rows of `hits`, with the unrounded matches the search left in `scratch` (NaN
    /// without).
    fn rows(hits: &Hits<'_>, scratch: Option<&Scratch>) -> (usize, Vec<Row>) {
        let rows = hits
            .hits
            .iter()
            .enumerate()
            .map(|(i, h)| {
                (
                    h.entry.manifest.canonical_id.clone(),
                    h.capability_match_score,
                    h.rank_score,
                    scratch.map_or(f64::NAN, |s| s.heap[i].x),
                )
            })
            .collect();
        (hits.total_matches, rows)
    }

    /// The same to the bit (the unrounded matches too, when `got` has them).
    fn same(got: &(usize, Vec<Row>), want: &(usize, Vec<Row>)) -> bool {
        got.0 == want.0
            && got.1.len() == want.1.len()
            && got.1.iter().zip(&want.1).all(|(x, y)| {
                x.0 == y.0
                    && x.1.to_bits() == y.1.to_bits()
                    && x.2.to_bits() == y.2.to_bits()
                    && (x.3.is_nan() || x.3.to_bits() == y.3.to_bits())
            })
    }

    fn random_filters(rng: &mut Rng, zones: u64, ids: &[String]) -> Filters {
        let mut f = Filters::default();
        if rng.chance(25) {
            f.trust_tier_min = Some(rng.below(4) as u8);
        }
        if rng.chance(25) {
            let values = [0.0, 0.8, 0.9, 0.95, 1.0, 1.5, -1.0, f64::NAN];
            f.behavioral_trust_min = Some(if rng.chance(50) {
                values[rng.below(values.len() as u64) as usize]
            } else {
                rng.below(1001) as f64 / 1000.0
            });
        }
        if rng.chance(25) {
            f.governance_zone = Some(format!("zone:{}", rng.below(zones + 1)));
        }
        if rng.chance(20) {
            let o = rng.below(8);
            f.org_domain = Some(if rng.chance(50) {
                format!("ORG{o}.example")
            } else {
                format!("org{o}.example")
            });
        }
        if rng.chance(25) {
            let names = [
                "tools",
                "METHODS",
                "version",
                "budget",
                "modalities",
                "zones",
                "nope",
            ];
            f.domains = (0..1 + rng.below(2))
                .map(|_| names[rng.below(names.len() as u64) as usize].to_owned())
                .collect();
        }
        if rng.chance(15) && !ids.is_empty() {
            f.exclude = Some(if rng.chance(80) {
                ids[rng.below(ids.len() as u64) as usize].clone()
            } else {
                "nobody".to_owned()
            });
        }
        f
    }

    fn random_terms(rng: &mut Rng) -> Vec<String> {
        // Now and then more terms than are kept apart (`MAX_SPLIT_TERMS`).
        let n = if rng.chance(5) {
            17 + rng.below(10)
        } else {
            rng.below(7)
        };
        let mut terms: Vec<String> = (0..n).map(|_| word(rng.skewed(WORDS as u64))).collect();
        if rng.chance(10) {
            terms.push("unknownterm".to_owned());
        }
        if rng.chance(10) && !terms.is_empty() {
            terms.push(terms[0].clone());
        }
        if rng.chance(5) {
            terms.push("worker".to_owned());
        }
        terms
    }

    const WEIGHTS: [Weights; 7] = [
        Weights {
            trust_tier_weight: 0.3,
            behavioral_trust_weight: 0.4,
            capability_match_weight: 0.3,
        },
        Weights {
            trust_tier_weight: 0.0,
            behavioral_trust_weight: 0.0,
            capability_match_weight: 1.0,
        },
        Weights {
            trust_tier_weight: 0.5,
            behavioral_trust_weight: 0.5,
            capability_match_weight: 0.0,
        },
        Weights {
            trust_tier_weight: 0.1,
            behavioral_trust_weight: 0.2,
            capability_match_weight: 0.7,
        },
        // Not valid for DISCOVER, but `Search` takes any weights.
        Weights {
            trust_tier_weight: 0.6,
            behavioral_trust_weight: 0.9,
            capability_match_weight: -0.5,
        },
        Weights {
            trust_tier_weight: 0.3,
            behavioral_trust_weight: -0.4,
            capability_match_weight: f64::INFINITY,
        },
        Weights {
            trust_tier_weight: f64::NAN,
            behavioral_trust_weight: 0.4,
            capability_match_weight: 0.3,
        },
    ];

    /// Random queries (terms, filters, limits, weights) over populations built with churn,
    /// one of them over several blocks, one with more zones than fit in a byte; one working
    /// memory for all, and fresh ones now and then.
    #[test]
    fn search_matches_the_reference_implementation() {
        let mut scratch = Scratch::new();
        for (seed, agents, zones) in [(1, 1_500, 5), (2, 7_000, 5), (3, 1_500, 400)] {
            let (index, reference) = populations(agents, zones, seed);
            let ids: Vec<String> = index
                .iter()
                .map(|e| e.manifest.canonical_id.clone())
                .collect();
            let mut rng = Rng(seed ^ 0xabcd);
            for i in 0..400 {
                let terms = random_terms(&mut rng);
                let filters = random_filters(&mut rng, zones, &ids);
                let limit = [0, 1, 3, 10, 100, 5_000][rng.below(6) as usize];
                let weights = WEIGHTS[rng.below(WEIGHTS.len() as u64) as usize];
                let q = Search {
                    terms: &terms,
                    filters: &filters,
                    limit,
                    weights,
                };
                let want = reference.search(&q);
                let got = if i % 10 == 0 {
                    rows(&index.search(&q), None)
                } else {
                    let hits = index.search_with(&q, &mut scratch);
                    rows(&hits, Some(&scratch))
                };
                assert!(same(&got, &want), "{q:?}\n got {got:?}\nwant {want:?}");
            }
        }
    }

    use bench_corpus as corpus;

    /// The full differential check over the benchmark's 100,000 agents and 500 intents, with
    /// and without filters. Slow in a debug build:
    /// `cargo test --release -p agora-agtp --lib -- --ignored matches_the_reference_at_100k`.
    #[test]
    #[ignore = "slow: 100,000 agents; run in release"]
    fn matches_the_reference_at_100k() {
        let (mut index, mut reference) = (Index::new(), Reference::default());
        for raw in corpus::manifests(100_000, 1) {
            index.upsert(entry_of(raw.clone(), Lifecycle::Active));
            reference.upsert(entry_of(raw, Lifecycle::Active));
        }
        // Some churn, so that slots are reused.
        let ids: Vec<String> = index
            .iter()
            .map(|e| e.manifest.canonical_id.clone())
            .collect();
        let extra = corpus::manifests(500, 7);
        for (i, raw) in extra.into_iter().enumerate() {
            let id = &ids[(i * 197) % ids.len()];
            index.remove(id);
            reference.remove(id);
            index.upsert(entry_of(raw.clone(), Lifecycle::Active));
            reference.upsert(entry_of(raw, Lifecycle::Active));
        }
        let filters = [
            Filters::default(),
            Filters {
                governance_zone: Some("zone:3".into()),
                ..Filters::default()
            },
            Filters {
                org_domain: Some("ORG17.example".into()),
                ..Filters::default()
            },
            Filters {
                trust_tier_min: Some(1),
                ..Filters::default()
            },
            Filters {
                behavioral_trust_min: Some(0.8),
                ..Filters::default()
            },
            Filters {
                domains: vec!["tools".into(), "version".into()],
                ..Filters::default()
            },
            Filters {
                trust_tier_min: Some(2),
                behavioral_trust_min: Some(0.5),
                governance_zone: Some("zone:7".into()),
                domains: vec!["methods".into()],
                exclude: Some(ids[12_345].clone()),
                ..Filters::default()
            },
            Filters {
                governance_zone: Some("zone:unknown".into()),
                ..Filters::default()
            },
        ];
        let mut scratch = Scratch::default();
        let mut checked = 0usize;
        let intents = corpus::intents(500, 2);
        // No terms at all, and more terms than are kept apart.
        let mut queries = vec![String::new(), intents[..12].join(" ")];
        queries.extend(intents);
        for (n, intent) in queries.iter().enumerate() {
            let terms = rank::tokens(intent);
            for f in &filters {
                for limit in [10, 100] {
                    let q = Search {
                        terms: &terms,
                        filters: f,
                        limit,
                        weights: WEIGHTS[n % 4],
                    };
                    let want = reference.search(&q);
                    let hits = index.search_with(&q, &mut scratch);
                    let got = rows(&hits, Some(&scratch));
                    assert!(same(&got, &want), "{q:?}\n got {got:?}\nwant {want:?}");
                    checked += want.1.len();
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }
}
