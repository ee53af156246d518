//! Playbooks and their bullets (spec §5.1 "Concepts"), after ACE's grow-and-refine
//! (Agentic Context Engineering).
//!
//! - A bullet is `{id, section, content, helpfulCount, harmfulCount, createdAt, updatedAt,
//!   source}` ([`Bullet`]); its id is `<section>-<seq>` with `seq` zero-padded to 5 digits
//!   (`str-00042`), one counter per playbook across sections, never reused (ACE's ids are global
//!   and monotonic); past 99,999 the number simply grows a digit.
//! - Grow: a new bullet is appended unless it repeats one of its section: the same normalised
//!   text ([`normalise`]: lowercase, runs of letters and digits joined by one space), the same
//!   *key* (what a reflector's bullet asserts, e.g. a tool sequence), or, when both have vectors
//!   of the same embedder, cosine ≥ [`NEAR_DUPLICATE`] (ACE's 0.90). A repeat increments the
//!   existing bullet's `helpfulCount` instead (ACE: counters updated in place).
//! - Refine: [`Playbook::refine`] merges near-duplicates already in the playbook (the later into
//!   the earlier, counters summed) and [`Playbook::prune`] drops bullets that executions keep
//!   contradicting: `harmfulCount ≥ 3` and `harmfulCount > 2 × helpfulCount`.
//! - Curate: [`Playbook::curate`] refines, prunes, then drops the lowest-value bullets until the
//!   playbook fits `maxTokens`. Value order, best first: `helpful − harmful` descending, then
//!   `updatedAt` descending, then id ascending (by number).
//! - `tokenCount` is the sum over bullets of the tokens of the line `[{id}] {content}\n` (the
//!   playbook as an agent puts it in its context), counted by an injected [`TokenCounter`] (the
//!   node uses cl100k BPE).
//! - `version` increases by one on every call that changes a bullet.
//!
//! Bounded: at most [`PlaybookLimits::max_bullets`] bullets; a new bullet beyond it first evicts
//! the lowest-value one (reported as pruned). Running averages of step durations (for the
//! reflector's `cal` bullets) are kept for at most [`MAX_TOOLS`] tools; others are not tracked.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Cosine at or above which two bullets of one section are the same insight (ACE's default).
pub const NEAR_DUPLICATE: f32 = 0.90;
/// Tools whose step durations a playbook averages.
pub const MAX_TOOLS: usize = 1_000;
/// A bullet is pruned when it has at least this many harmful votes …
pub const PRUNE_MIN_HARMFUL: u32 = 3;
/// … and more than this many times as many harmful as helpful votes.
pub const PRUNE_RATIO: u32 = 2;

/// Counts tokens the way the agent's model will (cl100k BPE in the node).
pub trait TokenCounter {
    /// Tokens of `text`.
    fn count(&self, text: &str) -> usize;
}

impl<F: Fn(&str) -> usize> TokenCounter for F {
    fn count(&self, text: &str) -> usize {
        self(text)
    }
}

/// Bounds of one playbook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaybookLimits {
    /// Most bullets.
    pub max_bullets: usize,
    /// Longest bullet content, in bytes.
    pub max_content_bytes: usize,
    /// Default `maxTokens` of `learning.curate` (ACE's playbook budget).
    pub default_max_tokens: usize,
}

impl Default for PlaybookLimits {
    fn default() -> Self {
        Self {
            max_bullets: 5_000,
            max_content_bytes: 2_000,
            default_max_tokens: 80_000,
        }
    }
}

/// The four sections of a playbook (spec §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Section {
    /// Strategy: what worked.
    Str,
    /// Calculation: costs, durations, numbers.
    Cal,
    /// Mistake: what failed.
    Mis,
    /// Feedback: what the agent was told.
    Fbk,
}

impl Section {
    /// Every section, in the spec's order.
    pub const ALL: [Self; 4] = [Self::Str, Self::Cal, Self::Mis, Self::Fbk];

    /// The wire name (`str`, `cal`, `mis`, `fbk`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Str => "str",
            Self::Cal => "cal",
            Self::Mis => "mis",
            Self::Fbk => "fbk",
        }
    }

    /// The section named `name`.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// One bullet, in the spec's shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bullet {
    /// `<section>-<seq>` (`str-00042`).
    pub id: String,
    /// Its section.
    pub section: Section,
    /// The insight.
    pub content: String,
    /// Times it helped.
    pub helpful_count: u32,
    /// Times it hurt.
    pub harmful_count: u32,
    /// Unix milliseconds.
    pub created_at: u64,
    /// Unix milliseconds of the last change.
    pub updated_at: u64,
    /// Who made it: `reflector`, `llm-reflector`, `addBullet`.
    pub source: String,
}

/// A bullet with what the playbook keeps beside it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The bullet.
    pub bullet: Bullet,
    /// Its number (the digits of its id).
    pub seq: u64,
    /// What it asserts, when a reflector made it (`seq:a>b`, `step:action|tool`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// [`normalise`]`(content)`.
    pub norm: String,
    /// Tokens of its line.
    pub tokens: usize,
    /// Its vector, when the node had an embedder (unit length).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<Vec<f32>>,
}

impl Entry {
    fn score(&self) -> i64 {
        i64::from(self.bullet.helpful_count) - i64::from(self.bullet.harmful_count)
    }

    fn prunable(&self) -> bool {
        let b = &self.bullet;
        b.harmful_count >= PRUNE_MIN_HARMFUL
            && b.harmful_count > b.helpful_count.saturating_mul(PRUNE_RATIO)
    }
}

/// A bullet someone wants added.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Section.
    pub section: Section,
    /// Text (checked by the caller against [`PlaybookLimits::max_content_bytes`]).
    pub content: String,
    /// Who made it.
    pub source: String,
    /// What it asserts (reflector bullets).
    pub key: Option<String>,
    /// Its vector (unit length), when the node has an embedder.
    pub vector: Option<Vec<f32>>,
}

/// What adding a candidate did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Added {
    /// A new bullet; `evicted` made room for it.
    New {
        /// Its id.
        id: String,
        /// The lowest-value bullet dropped because the playbook was full.
        evicted: Option<String>,
    },
    /// It repeated this bullet, whose `helpfulCount` went up.
    Merged(String),
}

/// Running average of one tool's step durations.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolStat {
    /// Steps seen.
    pub runs: u64,
    /// Mean duration, ms.
    pub mean_ms: f64,
}

/// A playbook: versioned bullets and what the reflector learns about durations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Playbook {
    /// Its id.
    pub id: String,
    /// Increases on every change of a bullet.
    pub version: u64,
    /// Next bullet number.
    pub next_seq: u64,
    /// Unix milliseconds.
    pub created_at: u64,
    /// Bullets in the order they were added.
    pub entries: Vec<Entry>,
    /// Step durations by tool.
    pub tools: BTreeMap<String, ToolStat>,
    /// Near-duplicate merging and pruning wait for the next curation (offline training).
    #[serde(default)]
    pub refine_pending: bool,
    /// The embedder of the bullets' vectors; vectors of another embedder are never compared
    /// ([`Playbook::use_embedder`]).
    #[serde(default)]
    pub embedder: Option<String>,
}

/// Lowercase; runs of letters and digits joined by one space.
#[must_use]
pub fn normalise(text: &str) -> String {
    let lower = text.to_lowercase();
    let mut out = String::with_capacity(lower.len());
    for word in lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn near(a: Option<&Vec<f32>>, b: Option<&Vec<f32>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) if a.len() == b.len() => dot(a, b) >= NEAR_DUPLICATE,
        _ => false,
    }
}

/// Stats of a playbook (`learning.getStats`).
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    /// Bullets.
    pub total: usize,
    /// Bullets per section (every section present).
    pub by_section: BTreeMap<Section, usize>,
    /// Mean over bullets of `(helpful + 1) / (helpful + harmful + 2)`, 4 decimals; 0 when empty.
    pub avg_score: f64,
    /// Version.
    pub version: u64,
}

impl Playbook {
    /// An empty playbook.
    #[must_use]
    pub fn new(id: &str, now_ms: u64) -> Self {
        Self {
            id: id.to_owned(),
            version: 0,
            next_seq: 1,
            created_at: now_ms,
            entries: Vec::new(),
            tools: BTreeMap::new(),
            refine_pending: false,
            embedder: None,
        }
    }

    /// Vectors from now on come from `embedder` (`None`: no vectors); when that is another
    /// embedder than before, the vectors held are dropped (their bullets still merge by text and
    /// key).
    pub fn use_embedder(&mut self, embedder: Option<&str>) {
        if self.embedder.as_deref() != embedder {
            for e in &mut self.entries {
                e.vector = None;
            }
            self.embedder = embedder.map(str::to_owned);
        }
    }

    /// The bullets, oldest first.
    pub fn bullets(&self) -> impl Iterator<Item = &Bullet> {
        self.entries.iter().map(|e| &e.bullet)
    }

    /// The bullet `id`.
    #[must_use]
    pub fn bullet(&self, id: &str) -> Option<&Bullet> {
        self.entries
            .iter()
            .find(|e| e.bullet.id == id)
            .map(|e| &e.bullet)
    }

    /// Tokens of the playbook as an agent reads it.
    #[must_use]
    pub fn token_count(&self) -> usize {
        self.entries.iter().map(|e| e.tokens).sum()
    }

    /// Increments the version (call once per changing call).
    pub fn bump(&mut self) {
        self.version += 1;
    }

    fn find_repeat(&self, c: &Candidate, norm: &str, semantic: bool) -> Option<usize> {
        self.entries.iter().position(|e| {
            e.bullet.section == c.section
                && (e.norm == norm
                    || (c.key.is_some() && e.key == c.key)
                    || (semantic && near(e.vector.as_ref(), c.vector.as_ref())))
        })
    }

    /// Index of the lowest-value entry: the last in value order.
    fn lowest(&self) -> Option<usize> {
        (0..self.entries.len()).max_by(|&a, &b| self.value_cmp(a, b))
    }

    /// Value order of entries `a` and `b` (`Less` = `a` is worth more).
    fn value_cmp(&self, a: usize, b: usize) -> std::cmp::Ordering {
        let (a, b) = (&self.entries[a], &self.entries[b]);
        b.score()
            .cmp(&a.score())
            .then(b.bullet.updated_at.cmp(&a.bullet.updated_at))
            .then(a.seq.cmp(&b.seq))
    }

    /// Adds `c` at `now_ms`, or merges it into a repeat (near-duplicates by vector only when
    /// `semantic`). Does not bump the version.
    pub fn add(
        &mut self,
        c: Candidate,
        now_ms: u64,
        semantic: bool,
        counter: &dyn TokenCounter,
        limits: &PlaybookLimits,
    ) -> Added {
        let norm = normalise(&c.content);
        if let Some(i) = self.find_repeat(&c, &norm, semantic) {
            let b = &mut self.entries[i].bullet;
            b.helpful_count = b.helpful_count.saturating_add(1);
            b.updated_at = now_ms;
            return Added::Merged(b.id.clone());
        }
        let mut evicted = None;
        if self.entries.len() >= limits.max_bullets.max(1)
            && let Some(i) = self.lowest()
        {
            evicted = Some(self.entries.remove(i).bullet.id);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let id = format!("{}-{seq:05}", c.section.as_str());
        let tokens = counter.count(&format!("[{id}] {}\n", c.content));
        self.entries.push(Entry {
            bullet: Bullet {
                id: id.clone(),
                section: c.section,
                content: c.content,
                helpful_count: 0,
                harmful_count: 0,
                created_at: now_ms,
                updated_at: now_ms,
                source: c.source,
            },
            seq,
            key: c.key,
            norm,
            tokens,
            vector: c.vector,
        });
        Added::New { id, evicted }
    }

    /// Records one vote on bullet `id`; its counts after, or `None` when there is no such bullet.
    /// Does not bump the version.
    pub fn vote(&mut self, id: &str, helpful: bool, now_ms: u64) -> Option<(u32, u32)> {
        let e = self.entries.iter_mut().find(|e| e.bullet.id == id)?;
        let b = &mut e.bullet;
        if helpful {
            b.helpful_count = b.helpful_count.saturating_add(1);
        } else {
            b.harmful_count = b.harmful_count.saturating_add(1);
        }
        b.updated_at = now_ms;
        Some((b.helpful_count, b.harmful_count))
    }

    /// Votes harmful on every bullet whose key is `key`; how many.
    pub fn contradict(&mut self, key: &str, now_ms: u64) -> usize {
        let mut n = 0;
        for e in &mut self.entries {
            if e.key.as_deref() == Some(key) {
                e.bullet.harmful_count = e.bullet.harmful_count.saturating_add(1);
                e.bullet.updated_at = now_ms;
                n += 1;
            }
        }
        n
    }

    /// Drops the bullets executions keep contradicting; their ids, oldest first.
    pub fn prune(&mut self) -> Vec<String> {
        let mut pruned = Vec::new();
        self.entries.retain(|e| {
            let drop = e.prunable();
            if drop {
                pruned.push(e.bullet.id.clone());
            }
            !drop
        });
        pruned
    }

    /// Merges near-duplicate bullets of one section (vectors with cosine ≥ [`NEAR_DUPLICATE`]):
    /// each into the oldest it repeats, counters summed. Returns the ids merged away.
    pub fn refine(&mut self, now_ms: u64) -> Vec<String> {
        let mut gone = vec![false; self.entries.len()];
        let mut merged = Vec::new();
        for i in 0..self.entries.len() {
            if gone[i] || self.entries[i].vector.is_none() {
                continue;
            }
            let (head, tail) = self.entries.split_at_mut(i + 1);
            let keep = &mut head[i];
            for (other, gone) in tail.iter().zip(gone[i + 1..].iter_mut()) {
                if *gone
                    || other.bullet.section != keep.bullet.section
                    || !near(keep.vector.as_ref(), other.vector.as_ref())
                {
                    continue;
                }
                *gone = true;
                let b = &mut keep.bullet;
                b.helpful_count = b.helpful_count.saturating_add(other.bullet.helpful_count);
                b.harmful_count = b.harmful_count.saturating_add(other.bullet.harmful_count);
                b.updated_at = now_ms;
                merged.push(other.bullet.id.clone());
            }
        }
        let mut k = 0;
        self.entries.retain(|_| {
            k += 1;
            !gone[k - 1]
        });
        merged
    }

    /// `learning.curate`: refine, prune, then drop the lowest-value bullets until the playbook
    /// holds at most `max_tokens`. The ids removed: merged and pruned ones first, then the
    /// budget's, lowest value first. Does not bump the version.
    pub fn curate(&mut self, max_tokens: usize, now_ms: u64) -> Vec<String> {
        let mut removed = self.refine(now_ms);
        removed.extend(self.prune());
        self.refine_pending = false;
        let mut order: Vec<usize> = (0..self.entries.len()).collect();
        order.sort_by(|&a, &b| self.value_cmp(a, b));
        let mut total = self.token_count();
        let mut drop = vec![false; self.entries.len()];
        for &i in order.iter().rev() {
            if total <= max_tokens {
                break;
            }
            total -= self.entries[i].tokens;
            drop[i] = true;
            removed.push(self.entries[i].bullet.id.clone());
        }
        let mut k = 0;
        self.entries.retain(|_| {
            k += 1;
            !drop[k - 1]
        });
        removed
    }

    /// Adds one step duration of `tool` to its running average (new tools beyond
    /// [`MAX_TOOLS`] are not tracked).
    pub fn observe_duration(&mut self, tool: &str, duration_ms: f64) {
        if !self.tools.contains_key(tool) && self.tools.len() >= MAX_TOOLS {
            return;
        }
        let s = self.tools.entry(tool.to_owned()).or_insert(ToolStat {
            runs: 0,
            mean_ms: 0.0,
        });
        s.runs += 1;
        s.mean_ms += (duration_ms - s.mean_ms) / s.runs as f64;
    }

    /// `learning.getStats`.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let mut by_section: BTreeMap<Section, usize> =
            Section::ALL.into_iter().map(|s| (s, 0)).collect();
        let mut sum = 0.0;
        for e in &self.entries {
            *by_section.entry(e.bullet.section).or_insert(0) += 1;
            let (h, m) = (
                f64::from(e.bullet.helpful_count),
                f64::from(e.bullet.harmful_count),
            );
            sum += (h + 1.0) / (h + m + 2.0);
        }
        let avg = if self.entries.is_empty() {
            0.0
        } else {
            sum / self.entries.len() as f64
        };
        Stats {
            total: self.entries.len(),
            by_section,
            avg_score: (avg * 10_000.0).round() / 10_000.0,
            version: self.version,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn words(text: &str) -> usize {
        text.split_whitespace().count()
    }

    fn cand(section: Section, content: &str) -> Candidate {
        Candidate {
            section,
            content: content.into(),
            source: "addBullet".into(),
            key: None,
            vector: None,
        }
    }

    fn add(p: &mut Playbook, c: Candidate, now: u64) -> Added {
        p.add(c, now, true, &words, &PlaybookLimits::default())
    }

    #[test]
    fn ids_are_per_playbook_numbers_with_the_section_prefix() {
        let mut p = Playbook::new("pb", 1);
        assert_eq!(
            add(&mut p, cand(Section::Str, "Search first."), 2),
            Added::New {
                id: "str-00001".into(),
                evicted: None
            }
        );
        assert_eq!(
            add(&mut p, cand(Section::Mis, "Do not retry on 400."), 3),
            Added::New {
                id: "mis-00002".into(),
                evicted: None
            }
        );
        p.next_seq = 100_000;
        let Added::New { id, .. } = add(&mut p, cand(Section::Cal, "x y"), 4) else {
            panic!()
        };
        assert_eq!(id, "cal-100000");
        // `[str-00001] Search first.\n` is 3 words; the others 6 and 3.
        assert_eq!(p.token_count(), 3 + 6 + 3);
    }

    #[test]
    fn repeats_bump_the_existing_bullet() {
        let mut p = Playbook::new("pb", 1);
        add(&mut p, cand(Section::Str, "Search  first!"), 2);
        assert_eq!(
            add(&mut p, cand(Section::Str, "search first"), 5),
            Added::Merged("str-00001".into())
        );
        // Another section is another bullet.
        assert!(matches!(
            add(&mut p, cand(Section::Fbk, "search first"), 6),
            Added::New { .. }
        ));
        let mut keyed = cand(Section::Str, "web-search > summarizer worked");
        keyed.key = Some("seq:web-search>summarizer".into());
        add(&mut p, keyed.clone(), 7);
        keyed.content = "different words, same sequence".into();
        assert_eq!(add(&mut p, keyed, 8), Added::Merged("str-00003".into()));
        let mut v1 = cand(Section::Mis, "Timeouts at the extractor");
        v1.vector = Some(vec![1.0, 0.0]);
        let mut v2 = cand(Section::Mis, "The extractor times out");
        v2.vector = Some(vec![0.95, 0.312_249_9]);
        add(&mut p, v1, 9);
        assert_eq!(
            p.add(v2.clone(), 10, false, &words, &PlaybookLimits::default()),
            Added::New {
                id: "mis-00005".into(),
                evicted: None
            },
            "not semantic: a new bullet"
        );
        // refine merges the later into the earlier.
        assert_eq!(p.refine(11), vec!["mis-00005".to_owned()]);
        assert_eq!(add(&mut p, v2, 12), Added::Merged("mis-00004".into()));
        let b = p.bullet("str-00001").unwrap();
        assert_eq!((b.helpful_count, b.updated_at), (1, 5));
    }

    #[test]
    fn pruning_and_curation_follow_the_value_order() {
        let mut p = Playbook::new("pb", 1);
        for (i, text) in ["a a a a", "b b b b", "c c c c", "d d d d"]
            .into_iter()
            .enumerate()
        {
            add(&mut p, cand(Section::Str, text), 10 + i as u64);
        }
        // b: 3 harmful, 1 helpful -> pruned; c: 2 harmful -> kept by prune (below 3).
        p.vote("str-00002", true, 20);
        for _ in 0..3 {
            p.vote("str-00002", false, 21);
        }
        p.vote("str-00003", false, 22);
        p.vote("str-00003", false, 22);
        p.vote("str-00004", true, 23);
        assert_eq!(p.prune(), vec!["str-00002".to_owned()]);
        // Each line is 5 words; 15 in all. A budget of 10 drops the lowest value: c (-2).
        assert_eq!(p.curate(10, 30), vec!["str-00003".to_owned()]);
        assert_eq!(p.token_count(), 10);
        // Then a (0) goes before d (+1).
        assert_eq!(p.curate(5, 31), vec!["str-00001".to_owned()]);
        assert_eq!(p.bullets().count(), 1);
    }

    #[test]
    fn a_full_playbook_evicts_its_lowest_value_bullet() {
        let limits = PlaybookLimits {
            max_bullets: 2,
            ..PlaybookLimits::default()
        };
        let mut p = Playbook::new("pb", 1);
        p.add(cand(Section::Str, "one"), 1, true, &words, &limits);
        p.add(cand(Section::Str, "two"), 2, true, &words, &limits);
        p.vote("str-00002", true, 3);
        assert_eq!(
            p.add(cand(Section::Str, "three"), 4, true, &words, &limits),
            Added::New {
                id: "str-00003".into(),
                evicted: Some("str-00001".into())
            }
        );
    }

    #[test]
    fn stats_cover_every_section() {
        let mut p = Playbook::new("pb", 1);
        assert_eq!(p.stats().avg_score, 0.0);
        add(&mut p, cand(Section::Str, "one"), 1);
        add(&mut p, cand(Section::Mis, "two"), 1);
        p.vote("str-00001", true, 2);
        p.bump();
        let s = p.stats();
        assert_eq!(s.total, 2);
        assert_eq!(s.by_section[&Section::Cal], 0);
        assert_eq!(s.by_section[&Section::Mis], 1);
        // (2/3 + 1/2) / 2
        assert_eq!(s.avg_score, 0.5833);
        assert_eq!(s.version, 1);
    }
}
