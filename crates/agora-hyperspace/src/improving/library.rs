//! The trajectory library of one task type (spec §5.2) and contributor reputation (§9.4), after
//! arXiv 2505.00234's curation, SiriuS's critique and Agent0's difficulty bands.
//!
//! **Admission** ([`Library::admit`]): deduplicated by content hash; a shared trajectory below
//! the node's `minReward` is not admitted; the library holds at most `max` trajectories, and a
//! new one that would not outrank the lowest ([`Library::eviction_key`]) is refused, else the
//! lowest goes.
//!
//! **Utility** ([`utility`]): `((successesWhenRetrieved + max(reward, 0)) / (timesRetrieved +
//! 1)) × (0.5 + 0.5 × w)`, `w` the contributor's reputation weight, rounded to 4 decimals so that
//! every node computes the same. `timesRetrieved` and `successesWhenRetrieved` grow when a later
//! recorded trajectory lists the exemplar in `metadata.exemplarIds` ([`Library::credit`]).
//!
//! **Reputation** ([`Reputation`]): per contributor, uses of its exemplars and the successes of
//! the runs that used them; weight `(successes + 1) / (uses + 2)` (0.5 for a stranger).
//!
//! **Participation** ([`Trust`], §9.4 "Sybil resistance", [`crate::pulse`]): the node's pulse
//! weight of each contributor (`FLOOR` for an identity that passed no round, at most 1)
//! multiplies its trajectories' exemplar scores and eviction utility, so a thousand fresh keys
//! do not outrank or crowd out contributors that keep doing the round's work. Without pulse
//! data every contributor weighs 1.
//!
//! **Exemplars** ([`Library::exemplars`]): candidates are `SUCCESS` and `AUGMENTED` trajectories
//! with `reward ≥ minReward`; the strategy scores them: ACCUMULATE by reward, EXEMPLAR_LEVEL by
//! utility, DATABASE_LEVEL by the contributor's weight (each contributor's trajectories being
//! one "database"; reward breaks ties), HYBRID by the mean of utility and weight, each times
//! the contributor's pulse weight ([`Trust`]). The best
//! `max(10 × limit, 100)` by score (ties: reward, older, id) then go through maximal marginal
//! relevance (λ = 0.7) against the Jaccard similarity of their step sets (`action`, `tool`,
//! and consecutive pairs), so the exemplars returned differ from each other. Each returned
//! exemplar's `usageCount` goes up.
//!
//! **Curation** ([`Library::curate`]): ACCUMULATE keeps everything; EXEMPLAR_LEVEL prunes
//! trajectories retrieved at least 5 times with utility < 0.3; DATABASE_LEVEL prunes those of
//! contributors whose exemplars were used at least 5 times with weight < 0.3; HYBRID both.
//!
//! **Difficulty** ([`difficulty`]): `p̂` from `samples` (rewards: the share ≥ 0.5; answers: the
//! majority's share, Agent0) or, without them, from the 10 past rewarded runs of the task type
//! whose inputs are most alike (Jaccard of their words). TOO_EASY `p̂ > 0.8`, FRONTIER
//! `0.3 ≤ p̂ ≤ 0.8`, TOO_HARD `p̂ < 0.3`; fewer than 3 runs: FRONTIER with `confidence: low`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::trajectory::{Trajectory, TrajectoryState};

/// Retrievals before a trajectory's utility can prune it.
pub const MIN_RETRIEVALS: u64 = 5;
/// Utility (or contributor weight) below which curation prunes.
pub const PRUNE_UTILITY: f64 = 0.3;
/// MMR's weight of relevance against novelty.
pub const MMR_LAMBDA: f64 = 0.7;
/// Past runs `assessDifficulty` looks at without samples.
pub const DIFFICULTY_RUNS: usize = 10;

/// `CurationStrategy` (spec §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Strategy {
    /// Keep everything; exemplars by reward.
    Accumulate,
    /// Contributors as databases.
    DatabaseLevel,
    /// Each trajectory by its utility.
    #[default]
    ExemplarLevel,
    /// Both.
    Hybrid,
}

impl Strategy {
    /// The strategy named `name`.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        serde_json::from_value(Value::String(name.to_owned())).ok()
    }
}

/// A trajectory in a library, with what the node counts about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Held {
    /// The trajectory.
    pub trajectory: Trajectory,
    /// Its state.
    pub state: TrajectoryState,
    /// Its content hash.
    pub hash: String,
    /// Unix milliseconds it entered this library.
    pub received_at: u64,
    /// Times `getExemplars` returned it.
    pub usage_count: u64,
    /// Runs that said they used it.
    pub times_retrieved: u64,
    /// Those that succeeded.
    pub successes_when_retrieved: u64,
    /// A critique attached by `augment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub critique: Option<String>,
}

impl Held {
    /// A trajectory entering a library at `now_ms`.
    #[must_use]
    pub fn new(trajectory: Trajectory, now_ms: u64) -> Self {
        Self {
            state: trajectory.base_state(),
            hash: trajectory.content_hash(),
            trajectory,
            received_at: now_ms,
            usage_count: 0,
            times_retrieved: 0,
            successes_when_retrieved: 0,
            critique: None,
        }
    }

    fn reward(&self) -> f64 {
        self.trajectory.reward.unwrap_or(0.0)
    }
}

/// A contributor's record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// Runs that used its exemplars.
    pub uses: u64,
    /// Those that succeeded.
    pub successes: u64,
}

impl Standing {
    /// `(successes + 1) / (uses + 2)`.
    #[must_use]
    pub fn weight(&self) -> f64 {
        (self.successes as f64 + 1.0) / (self.uses as f64 + 2.0)
    }
}

/// Pulse participation weights of identities (§9.4, [`crate::pulse::Participation`]), as the
/// node holds them when it ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct Trust {
    /// Identities that passed pulse rounds, by PeerId: their weight in `[FLOOR, 1]`.
    pub weights: BTreeMap<String, f64>,
    /// The weight of an identity not in `weights`: 1 without pulse data (everyone counts in
    /// full), the pulse `FLOOR` with it.
    pub default: f64,
}

impl Default for Trust {
    fn default() -> Self {
        Self {
            weights: BTreeMap::new(),
            default: 1.0,
        }
    }
}

impl Trust {
    /// The weight of `peer`.
    #[must_use]
    pub fn of(&self, peer: &str) -> f64 {
        self.weights.get(peer).copied().unwrap_or(self.default)
    }

    /// The weight `peer` earned by passing rounds (0 for an identity that passed none).
    #[must_use]
    pub fn earned(&self, peer: &str) -> f64 {
        self.weights.get(peer).copied().unwrap_or(0.0)
    }
}

/// Reputation of contributors, bounded: beyond `max` contributors, the one with the fewest uses
/// is forgotten.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reputation {
    /// By PeerId.
    pub peers: BTreeMap<String, Standing>,
    /// Most contributors tracked.
    pub max: usize,
    /// Pulse participation of contributors (not stored: the node sets it when it ranks).
    #[serde(skip)]
    pub trust: Trust,
}

impl Reputation {
    /// Empty, tracking at most `max` contributors.
    #[must_use]
    pub fn new(max: usize) -> Self {
        Self {
            peers: BTreeMap::new(),
            max,
            trust: Trust::default(),
        }
    }

    /// The weight of `peer` (0.5 for a stranger).
    #[must_use]
    pub fn weight(&self, peer: &str) -> f64 {
        self.peers.get(peer).copied().unwrap_or_default().weight()
    }

    /// A run that used an exemplar of `peer` succeeded or not.
    pub fn record(&mut self, peer: &str, success: bool) {
        if !self.peers.contains_key(peer) && self.peers.len() >= self.max.max(1) {
            let least = self
                .peers
                .iter()
                .min_by_key(|(_, s)| s.uses)
                .map(|(p, _)| p.clone());
            if let Some(p) = least {
                self.peers.remove(&p);
            }
        }
        let s = self.peers.entry(peer.to_owned()).or_default();
        s.uses += 1;
        s.successes += u64::from(success);
    }
}

/// Rounds to 4 decimals.
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// The utility of `h` with its contributor's weight `w`.
#[must_use]
pub fn utility(h: &Held, w: f64) -> f64 {
    let u = (h.successes_when_retrieved as f64 + h.reward().max(0.0))
        / (h.times_retrieved as f64 + 1.0);
    round4(u * (0.5 + 0.5 * w))
}

/// What happened to a trajectory offered to a library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Added; `evicted` made room.
    Added {
        /// The trajectory dropped.
        evicted: Option<String>,
    },
    /// The library holds it already (this id).
    Duplicate(String),
    /// Its reward is below the library's minimum.
    BelowMinReward,
    /// The library is full of better ones.
    Full,
}

/// The step set compared by MMR.
fn step_set(t: &Trajectory) -> BTreeSet<String> {
    let actions = t.actions();
    let mut set: BTreeSet<String> = actions.iter().map(|(a, t)| format!("{a}|{t}")).collect();
    for w in actions.windows(2) {
        set.insert(format!("{}|{}>{}|{}", w[0].0, w[0].1, w[1].0, w[1].1));
    }
    set
}

fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let inter = a.intersection(b).count();
    inter as f64 / (a.len() + b.len() - inter) as f64
}

/// The trajectories of one task type on this node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Library {
    /// In arrival order.
    pub items: Vec<Held>,
    /// Most held.
    pub max: usize,
}

/// Library statistics (`getLibraryStats`).
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    /// Trajectories.
    pub total: usize,
    /// By state (every state present).
    pub by_state: BTreeMap<TrajectoryState, usize>,
    /// Mean reward of the rewarded ones, 4 decimals (0 without any).
    pub avg_reward: f64,
    /// Contributors by trajectories held, most first (ties by PeerId), at most 5:
    /// `(peerId, trajectories, weight)`.
    pub top_contributors: Vec<(String, usize, f64)>,
}

impl Library {
    /// An empty library of at most `max` trajectories.
    #[must_use]
    pub fn new(max: usize) -> Self {
        Self {
            items: Vec::new(),
            max,
        }
    }

    /// The trajectory `id`.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<&Held> {
        self.items.iter().find(|h| h.trajectory.trajectory_id == id)
    }

    /// The trajectory `id`, to change it.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Held> {
        self.items
            .iter_mut()
            .find(|h| h.trajectory.trajectory_id == id)
    }

    /// Order of eviction, lowest first: utility times the contributor's pulse weight, then
    /// reward, then older, then id.
    #[must_use]
    pub fn eviction_key(h: &Held, rep: &Reputation) -> (f64, f64, u64, String) {
        let peer = &h.trajectory.peer_id;
        (
            utility(h, rep.weight(peer)) * rep.trust.of(peer),
            h.reward(),
            h.received_at,
            h.trajectory.trajectory_id.clone(),
        )
    }

    fn lowest(&self, rep: &Reputation) -> Option<usize> {
        let keys: Vec<_> = self
            .items
            .iter()
            .map(|h| Self::eviction_key(h, rep))
            .collect();
        (0..keys.len()).min_by(|&a, &b| {
            keys[a]
                .partial_cmp(&keys[b])
                .unwrap_or(std::cmp::Ordering::Equal)
        })
    }

    /// Offers `h`; `min_reward` applies to trajectories of other nodes (`None`: no minimum).
    pub fn admit(&mut self, h: Held, min_reward: Option<f64>, rep: &Reputation) -> Admit {
        if let Some(d) = self.items.iter().find(|x| x.hash == h.hash) {
            return Admit::Duplicate(d.trajectory.trajectory_id.clone());
        }
        if min_reward.is_some_and(|m| h.reward() < m) {
            return Admit::BelowMinReward;
        }
        let mut evicted = None;
        if self.items.len() >= self.max.max(1) {
            let Some(i) = self.lowest(rep) else {
                return Admit::Full;
            };
            let (new, low) = (
                Self::eviction_key(&h, rep),
                Self::eviction_key(&self.items[i], rep),
            );
            if new.partial_cmp(&low) != Some(std::cmp::Ordering::Greater) {
                return Admit::Full;
            }
            evicted = Some(self.items.remove(i).trajectory.trajectory_id);
        }
        self.items.push(h);
        Admit::Added { evicted }
    }

    /// A run that used exemplars `ids` succeeded or not: their retrieval counts, and the
    /// contributors credited (one entry per exemplar found).
    pub fn credit(&mut self, ids: &[String], success: bool) -> Vec<String> {
        let mut credited = Vec::new();
        for h in &mut self.items {
            if ids.contains(&h.trajectory.trajectory_id) {
                h.times_retrieved += 1;
                h.successes_when_retrieved += u64::from(success);
                credited.push(h.trajectory.peer_id.clone());
            }
        }
        credited
    }

    /// `getExemplars`: the indices of up to `limit` exemplars, best first; their usage counts
    /// go up.
    pub fn exemplars(
        &mut self,
        limit: usize,
        strategy: Strategy,
        min_reward: f64,
        rep: &Reputation,
    ) -> Vec<usize> {
        let mut scored: Vec<(usize, f64)> = self
            .items
            .iter()
            .enumerate()
            .filter(|(_, h)| {
                matches!(
                    h.state,
                    TrajectoryState::Success | TrajectoryState::Augmented
                ) && h.reward() >= min_reward
            })
            .map(|(i, h)| {
                let w = rep.weight(&h.trajectory.peer_id);
                let score = match strategy {
                    Strategy::Accumulate => h.reward(),
                    Strategy::ExemplarLevel => utility(h, w),
                    Strategy::DatabaseLevel => w + h.reward() * 1e-3,
                    Strategy::Hybrid => (utility(h, w) + w) / 2.0,
                };
                (i, score * rep.trust.of(&h.trajectory.peer_id))
            })
            .collect();
        let order = |items: &[Held], a: &(usize, f64), b: &(usize, f64)| {
            let (ha, hb) = (&items[a.0], &items[b.0]);
            b.1.partial_cmp(&a.1)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(
                    hb.reward()
                        .partial_cmp(&ha.reward())
                        .unwrap_or(std::cmp::Ordering::Equal),
                )
                .then(ha.received_at.cmp(&hb.received_at))
                .then(
                    ha.trajectory
                        .trajectory_id
                        .cmp(&hb.trajectory.trajectory_id),
                )
        };
        scored.sort_by(|a, b| order(&self.items, a, b));
        scored.truncate((limit * 10).max(100));
        let sets: HashMap<usize, BTreeSet<String>> = scored
            .iter()
            .map(|(i, _)| (*i, step_set(&self.items[*i].trajectory)))
            .collect();
        let top = scored.first().map_or(1.0, |s| s.1.abs()).max(1e-9);
        let mut picked: Vec<usize> = Vec::new();
        while picked.len() < limit && !scored.is_empty() {
            let mut best = 0;
            let mut best_value = f64::NEG_INFINITY;
            for (k, (i, score)) in scored.iter().enumerate() {
                let similar = picked
                    .iter()
                    .map(|p| jaccard(&sets[i], &sets[p]))
                    .fold(0.0, f64::max);
                let value = MMR_LAMBDA * (score / top) - (1.0 - MMR_LAMBDA) * similar;
                // Strictly greater: the earlier (better by the order above) wins ties.
                if value > best_value {
                    best_value = value;
                    best = k;
                }
            }
            picked.push(scored.remove(best).0);
        }
        for &i in &picked {
            self.items[i].usage_count += 1;
        }
        picked
    }

    /// `curate`: the trajectory ids pruned by `strategy`.
    pub fn curate(&mut self, strategy: Strategy, rep: &Reputation) -> Vec<String> {
        let by_utility = matches!(strategy, Strategy::ExemplarLevel | Strategy::Hybrid);
        let by_database = matches!(strategy, Strategy::DatabaseLevel | Strategy::Hybrid);
        let mut pruned = Vec::new();
        self.items.retain(|h| {
            let peer = &h.trajectory.peer_id;
            let drop = (by_utility
                && h.times_retrieved >= MIN_RETRIEVALS
                && utility(h, rep.weight(peer)) < PRUNE_UTILITY)
                || (by_database
                    && rep
                        .peers
                        .get(peer)
                        .is_some_and(|s| s.uses >= MIN_RETRIEVALS && s.weight() < PRUNE_UTILITY));
            if drop {
                pruned.push(h.trajectory.trajectory_id.clone());
            }
            !drop
        });
        while self.items.len() > self.max.max(1) {
            if let Some(i) = self.lowest(rep) {
                pruned.push(self.items.remove(i).trajectory.trajectory_id);
            }
        }
        pruned
    }

    /// `getLibraryStats` of this library.
    #[must_use]
    pub fn stats(&self, rep: &Reputation) -> Stats {
        let mut by_state: BTreeMap<TrajectoryState, usize> =
            TrajectoryState::ALL.into_iter().map(|s| (s, 0)).collect();
        let mut rewards = Vec::new();
        let mut contributors: BTreeMap<&str, usize> = BTreeMap::new();
        for h in &self.items {
            *by_state.entry(h.state).or_insert(0) += 1;
            if let Some(r) = h.trajectory.reward {
                rewards.push(r);
            }
            *contributors.entry(&h.trajectory.peer_id).or_insert(0) += 1;
        }
        let mut top: Vec<(String, usize, f64)> = contributors
            .into_iter()
            .map(|(p, n)| (p.to_owned(), n, round4(rep.weight(p))))
            .collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top.truncate(5);
        Stats {
            total: self.items.len(),
            by_state,
            avg_reward: if rewards.is_empty() {
                0.0
            } else {
                round4(rewards.iter().sum::<f64>() / rewards.len() as f64)
            },
            top_contributors: top,
        }
    }

    /// A critique of the failed trajectory `id` from this library's successful runs
    /// (`augment` FEEDBACK_ONLY, after SiriuS's feedback stage without a model): its first
    /// failing step, and where the best successful run went another way. `None` when there is
    /// no such trajectory.
    #[must_use]
    pub fn critique(&self, id: &str) -> Option<String> {
        let target = self.get(id)?;
        let steps = &target.trajectory.steps;
        let mut parts = Vec::new();
        let failing = steps
            .iter()
            .enumerate()
            .find(|(_, s)| s.get("error").is_some_and(|e| !e.is_null()));
        if let Some((i, s)) = failing {
            parts.push(format!(
                "Step {} '{}' ({}) failed: {}",
                i + 1,
                s["action"].as_str().unwrap_or_default(),
                s["tool"].as_str().unwrap_or("no tool"),
                match &s["error"] {
                    Value::String(e) => e.clone(),
                    other => other.to_string(),
                }
            ));
        }
        let best = self
            .items
            .iter()
            .filter(|h| h.state == TrajectoryState::Success && h.trajectory.trajectory_id != id)
            .max_by(|a, b| {
                a.reward()
                    .partial_cmp(&b.reward())
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(b.received_at.cmp(&a.received_at))
            });
        match best {
            Some(b) => {
                let theirs = b.trajectory.actions();
                let mine = target.trajectory.actions();
                let sequence: Vec<String> = theirs
                    .iter()
                    .map(|(a, t)| {
                        if t.is_empty() {
                            a.clone()
                        } else {
                            format!("{a} ({t})")
                        }
                    })
                    .collect();
                parts.push(format!(
                    "The best successful run ({}, reward {:.2}) did: {}",
                    b.trajectory.trajectory_id,
                    b.reward(),
                    sequence.join(" → ")
                ));
                if let Some(k) =
                    (0..theirs.len().max(mine.len())).find(|&k| theirs.get(k) != mine.get(k))
                {
                    parts.push(match (theirs.get(k), mine.get(k)) {
                        (Some((a, t)), Some((ma, mt))) => format!(
                            "At step {} it used '{a}' ({t}) where this run used '{ma}' ({mt})",
                            k + 1
                        ),
                        (Some((a, t)), None) => {
                            format!("It went on at step {} with '{a}' ({t})", k + 1)
                        }
                        (None, _) => format!("It stopped after step {k}"),
                    });
                }
            }
            None => parts.push("No successful run of this task type to compare with".into()),
        }
        Some(parts.join(". ") + ".")
    }
}

/// `TaskDifficulty`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Difficulty {
    /// `p̂ > 0.8`.
    TooEasy,
    /// `0.3 ≤ p̂ ≤ 0.8`.
    Frontier,
    /// `p̂ < 0.3`.
    TooHard,
}

/// An assessment.
#[derive(Clone, Debug, PartialEq)]
pub struct Assessment {
    /// The band.
    pub difficulty: Difficulty,
    /// `p̂`, 4 decimals.
    pub pass_rate: f64,
    /// What to do.
    pub recommendation: &'static str,
    /// Runs it rests on.
    pub runs: usize,
    /// `samples` or `library`.
    pub basis: &'static str,
    /// `high` with 3 runs or more, else `low`.
    pub confidence: &'static str,
}

fn words(v: &Value) -> BTreeSet<String> {
    let text = match v {
        Value::String(s) => s.to_lowercase(),
        other => other.to_string().to_lowercase(),
    };
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `assessDifficulty`: from `samples` (numbers: rewards; strings: answers) or from `library`'s
/// runs whose input is most like `input`.
#[must_use]
pub fn difficulty(
    library: Option<&Library>,
    input: &Value,
    samples: Option<&[Value]>,
) -> Assessment {
    let (p, runs, basis) = match samples {
        Some(s) if !s.is_empty() => {
            let n = s.len();
            let p = if s.iter().all(Value::is_number) {
                s.iter()
                    .filter(|v| {
                        v.as_f64()
                            .is_some_and(|r| r >= super::trajectory::SUCCESS_REWARD)
                    })
                    .count() as f64
                    / n as f64
            } else {
                let mut counts: BTreeMap<String, usize> = BTreeMap::new();
                for v in s {
                    let key = match v {
                        Value::String(t) => t.trim().to_lowercase(),
                        other => other.to_string(),
                    };
                    *counts.entry(key).or_insert(0) += 1;
                }
                counts.values().copied().max().unwrap_or(0) as f64 / n as f64
            };
            (p, n, "samples")
        }
        _ => {
            let mine = words(input);
            let mut past: Vec<(f64, u64, f64)> = library
                .map(|l| l.items.as_slice())
                .unwrap_or_default()
                .iter()
                .filter_map(|h| {
                    let r = h.trajectory.reward?;
                    let theirs = words(&h.trajectory.input);
                    let union = mine.union(&theirs).count();
                    let sim = if union == 0 {
                        1.0
                    } else {
                        mine.intersection(&theirs).count() as f64 / union as f64
                    };
                    Some((sim, h.received_at, r))
                })
                .collect();
            past.sort_by(|a, b| {
                b.0.partial_cmp(&a.0)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(b.1.cmp(&a.1))
            });
            past.truncate(DIFFICULTY_RUNS);
            let n = past.len();
            let p = if n == 0 {
                0.5
            } else {
                past.iter()
                    .filter(|(_, _, r)| *r >= super::trajectory::SUCCESS_REWARD)
                    .count() as f64
                    / n as f64
            };
            (p, n, "library")
        }
    };
    let confident = runs >= 3;
    let difficulty = if !confident {
        Difficulty::Frontier
    } else if p > 0.8 {
        Difficulty::TooEasy
    } else if p < 0.3 {
        Difficulty::TooHard
    } else {
        Difficulty::Frontier
    };
    Assessment {
        difficulty,
        pass_rate: round4(p),
        recommendation: match difficulty {
            Difficulty::TooEasy => {
                "skip as a training signal: runs already pass; keep it as a regression check"
            }
            Difficulty::Frontier => {
                "train on it: record the trajectory and use exemplars of this task type"
            }
            Difficulty::TooHard => {
                "decompose it or augment failed runs first: exemplars rarely pass yet"
            }
        },
        runs,
        basis,
        confidence: if confident { "high" } else { "low" },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn traj(id: u32, peer: &str, reward: f64, tools: &[&str], input: &str) -> Held {
        let steps = tools
            .iter()
            .map(|t| json!({"action": "do", "tool": t}))
            .collect();
        Held::new(
            Trajectory {
                trajectory_id: format!("traj-{id:08x}"),
                task_type: "web-research".into(),
                input: json!({ "query": input }),
                output: Value::Null,
                steps,
                reward: Some(reward),
                metadata: Value::Null,
                peer_id: peer.into(),
                created_at: u64::from(id),
            },
            u64::from(id),
        )
    }

    #[test]
    fn admission_dedupes_bounds_and_respects_min_reward() {
        let rep = Reputation::new(100);
        let mut lib = Library::new(2);
        assert_eq!(
            lib.admit(traj(1, "a", 0.9, &["s"], "q1"), None, &rep),
            Admit::Added { evicted: None }
        );
        let mut same = traj(2, "b", 0.9, &["s"], "q1");
        same.trajectory.metadata = json!({"other": true});
        assert_eq!(
            lib.admit(same, None, &rep),
            Admit::Duplicate("traj-00000001".into())
        );
        assert_eq!(
            lib.admit(traj(3, "b", 0.2, &["s"], "q3"), Some(0.5), &rep),
            Admit::BelowMinReward
        );
        lib.admit(traj(4, "b", 0.6, &["s"], "q4"), None, &rep);
        // Full: a better one evicts the lowest (utility 0.6 × 0.75), a worse one is refused.
        assert_eq!(
            lib.admit(traj(5, "c", 0.8, &["s"], "q5"), None, &rep),
            Admit::Added {
                evicted: Some("traj-00000004".into())
            }
        );
        assert_eq!(
            lib.admit(traj(6, "c", 0.1, &["s"], "q6"), None, &rep),
            Admit::Full
        );
    }

    #[test]
    fn utility_and_reputation_follow_use() {
        let mut rep = Reputation::new(2);
        let mut lib = Library::new(10);
        lib.admit(traj(1, "a", 0.8, &["s"], "q"), None, &rep);
        assert_eq!(utility(&lib.items[0], rep.weight("a")), 0.6);
        for success in [true, true, false] {
            for peer in lib.credit(&["traj-00000001".into()], success) {
                rep.record(&peer, success);
            }
        }
        // (2 + 0.8) / 4 = 0.7, × (0.5 + 0.5 × 3/5) = 0.56.
        assert_eq!(utility(&lib.items[0], rep.weight("a")), 0.56);
        rep.record("b", false);
        rep.record("c", true);
        assert_eq!(rep.peers.len(), 2, "bounded: the least used went");
        assert!(rep.peers.contains_key("a"));
    }

    #[test]
    fn exemplars_are_diverse_and_counted() {
        let rep = Reputation::new(10);
        let mut lib = Library::new(10);
        lib.admit(
            traj(1, "a", 0.95, &["search", "summarize"], "q1"),
            None,
            &rep,
        );
        lib.admit(
            traj(2, "a", 0.94, &["search", "summarize"], "q2"),
            None,
            &rep,
        );
        lib.admit(
            traj(3, "b", 0.80, &["lookup", "extract", "rank"], "q3"),
            None,
            &rep,
        );
        lib.admit(traj(4, "b", 0.30, &["other"], "q4"), None, &rep);
        let picked = lib.exemplars(2, Strategy::ExemplarLevel, 0.0, &rep);
        let ids: Vec<&str> = picked
            .iter()
            .map(|&i| lib.items[i].trajectory.trajectory_id.as_str())
            .collect();
        // The second-best repeats the best's steps: the different one comes second.
        assert_eq!(ids, vec!["traj-00000001", "traj-00000003"]);
        assert_eq!(lib.items[0].usage_count, 1);
        let acc = lib.exemplars(5, Strategy::Accumulate, 0.9, &rep);
        assert_eq!(acc.len(), 2, "minReward and FAILED filter");
    }

    #[test]
    fn fresh_identities_do_not_outrank_or_crowd_out_established_ones() {
        // Three established contributors and twenty fresh keys with better rewards.
        let mut rep = Reputation::new(100);
        rep.trust = Trust {
            weights: ["e0", "e1", "e2"].map(|p| (p.to_owned(), 1.0)).into(),
            default: crate::pulse::FLOOR,
        };
        let mut lib = Library::new(23);
        for i in 0..3u32 {
            let peer = format!("e{i}");
            let tool = format!("t{i}");
            lib.admit(traj(i, &peer, 0.7, &[&tool], &peer), None, &rep);
        }
        for i in 0..20u32 {
            let peer = format!("sybil{i}");
            let tool = format!("s{i}");
            lib.admit(traj(100 + i, &peer, 1.0, &[&tool], &peer), None, &rep);
        }
        for strategy in [
            Strategy::Accumulate,
            Strategy::ExemplarLevel,
            Strategy::DatabaseLevel,
            Strategy::Hybrid,
        ] {
            let picked = lib.exemplars(5, strategy, 0.0, &rep);
            let firsts: BTreeSet<&str> = picked[..3]
                .iter()
                .map(|&i| lib.items[i].trajectory.peer_id.as_str())
                .collect();
            assert_eq!(firsts, ["e0", "e1", "e2"].into(), "{strategy:?}");
        }
        // Full: a fresh key's trajectory does not evict an established one, and an established
        // one evicts a fresh one.
        assert_eq!(
            lib.admit(traj(200, "sybil-new", 1.0, &["x"], "x"), None, &rep),
            Admit::Added {
                evicted: Some("traj-00000064".into())
            }
        );
        assert!(
            lib.items
                .iter()
                .filter(|h| h.trajectory.peer_id.starts_with('e'))
                .count()
                == 3
        );
        assert!(matches!(
            lib.admit(traj(201, "e0", 0.6, &["y"], "y"), None, &rep),
            Admit::Added { evicted: Some(_) }
        ));
        assert_eq!(
            lib.items
                .iter()
                .filter(|h| h.trajectory.peer_id.starts_with('e'))
                .count(),
            4
        );
    }

    #[test]
    fn curation_prunes_what_keeps_failing() {
        let mut rep = Reputation::new(10);
        let mut lib = Library::new(10);
        lib.admit(traj(1, "a", 0.6, &["s"], "q1"), None, &rep);
        lib.admit(traj(2, "b", 0.9, &["t"], "q2"), None, &rep);
        for _ in 0..6 {
            for p in lib.credit(&["traj-00000001".into()], false) {
                rep.record(&p, false);
            }
        }
        assert!(lib.curate(Strategy::Accumulate, &rep).is_empty());
        assert_eq!(
            lib.curate(Strategy::ExemplarLevel, &rep),
            vec!["traj-00000001".to_owned()]
        );
        assert_eq!(lib.stats(&rep).total, 1);
    }

    #[test]
    fn difficulty_bands_and_critique() {
        let d = |s: Value| difficulty(None, &json!("x"), Some(s.as_array().unwrap()));
        assert_eq!(d(json!([1, 1, 1, 1, 0.9])).difficulty, Difficulty::TooEasy);
        assert_eq!(d(json!([1, 0, 0.6, 0.2])).pass_rate, 0.5);
        assert_eq!(d(json!([0, 0, 0.1])).difficulty, Difficulty::TooHard);
        let answers = d(json!(["42", "42 ", "41", "42", "7"]));
        assert_eq!(
            (answers.difficulty, answers.pass_rate),
            (Difficulty::Frontier, 0.6)
        );
        let low = d(json!([1, 1]));
        assert_eq!(
            (low.difficulty, low.confidence),
            (Difficulty::Frontier, "low")
        );
        let rep = Reputation::new(10);
        let mut lib = Library::new(10);
        lib.admit(
            traj(
                1,
                "a",
                0.9,
                &["search", "filter", "summarize"],
                "battery news",
            ),
            None,
            &rep,
        );
        let mut failed = traj(2, "a", 0.1, &["search", "summarize"], "battery news today");
        failed.trajectory.steps[1]["error"] = json!("context window exceeded");
        lib.admit(failed, None, &rep);
        let lib_based = difficulty(Some(&lib), &json!({"query": "battery news"}), None);
        assert_eq!((lib_based.runs, lib_based.basis), (2, "library"));
        assert_eq!(
            lib.critique("traj-00000002").unwrap(),
            "Step 2 'do' (summarize) failed: context window exceeded. The best successful run (traj-00000001, reward 0.90) did: do (search) → do (filter) → do (summarize). At step 2 it used 'do' (filter) where this run used 'do' (summarize)."
        );
        assert!(lib.critique("traj-00000009").is_none());
    }
}
