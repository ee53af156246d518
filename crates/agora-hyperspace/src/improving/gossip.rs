//! What the Self-Improving primitive puts on gossip (spec §2.1, §7.3, §9.3, §9.4;
//! `docs/hyperspace-wire.md` "Trajectories and reputation"): the `d` of the v2 envelopes on
//! `hyperspace/trajectories/{taskType}` and `hyperspace/reputation/{peerId}`, how a node makes
//! them (redaction first) and how it reads them (every check of a recorded trajectory, plus
//! attribution to the envelope's signer).
//!
//! | topic | `d` | sent |
//! |---|---|---|
//! | `hyperspace/trajectories/{taskType}` | one [`Trajectory`] in camelCase, redacted | by `improving.recordTrajectory` when sharing is on and the run has a reward |
//! | `hyperspace/reputation/{peerId}` | a [`ReputationView`]: `{peerId, ts, contributors: [{peerId, uses, successes, weight}]}`, at most [`MAX_VIEW_ENTRIES`] | by `{peerId}` itself, when its view changed |

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::library::Reputation;
use super::trajectory::{Trajectory, TrajectoryLimits, rejected};
use crate::guard::{SafetyFlag, redact_value};
use crate::jsonrpc::RpcError;

/// Prefix of the trajectory topics.
pub const TRAJECTORIES_PREFIX: &str = "hyperspace/trajectories/";
/// Prefix of the reputation topics.
pub const REPUTATION_PREFIX: &str = "hyperspace/reputation/";
/// Most contributors in a published reputation view (the most used first).
pub const MAX_VIEW_ENTRIES: usize = 100;
/// Largest `d` of a reputation view, bytes.
pub const MAX_VIEW_BYTES: usize = 32 * 1024;

/// The topic of trajectories of `task_type`.
#[must_use]
pub fn trajectory_topic(task_type: &str) -> String {
    format!("{TRAJECTORIES_PREFIX}{task_type}")
}

/// The topic of `peer_id`'s reputation view.
#[must_use]
pub fn reputation_topic(peer_id: &str) -> String {
    format!("{REPUTATION_PREFIX}{peer_id}")
}

/// `t` as it may leave the node: every string and number of its input, output, steps and
/// metadata passed through the `guard.checkSafety` detectors, findings replaced by
/// `[REDACTED:{flag}]` (spec §9.3). Returns the flags found.
#[must_use]
pub fn redacted(t: &Trajectory) -> (Trajectory, BTreeSet<SafetyFlag>) {
    let mut flags = BTreeSet::new();
    let out = Trajectory {
        input: redact_value(&t.input, &mut flags),
        output: redact_value(&t.output, &mut flags),
        steps: t
            .steps
            .iter()
            .map(|s| redact_value(s, &mut flags))
            .collect(),
        metadata: redact_value(&t.metadata, &mut flags),
        ..t.clone()
    };
    (out, flags)
}

/// Reads the `d` of a trajectory envelope signed by `from`, received on the topic of
/// `topic_task_type`: it must parse, pass [`Trajectory::check_received`], name that task type,
/// and be attributed to its signer (`peerId == from`). Refusals are −32008 naming the field.
pub fn decode_shared(
    d_json: &str,
    from: &str,
    topic_task_type: &str,
    limits: &TrajectoryLimits,
) -> Result<Trajectory, RpcError> {
    if d_json.len() > limits.max_bytes + 1024 {
        return Err(rejected("trajectory", format!("{} bytes", d_json.len())));
    }
    let t: Trajectory = serde_json::from_str(d_json)
        .map_err(|e| rejected("trajectory", format!("not a trajectory: {e}")))?;
    t.check_received(limits)?;
    if t.task_type != topic_task_type {
        return Err(rejected(
            "taskType",
            format!("{:?} on the topic of {topic_task_type:?}", t.task_type),
        ));
    }
    if t.peer_id != from {
        return Err(rejected("peerId", "not the envelope's signer"));
    }
    Ok(t)
}

/// One contributor in a reputation view.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ViewEntry {
    /// The contributor.
    pub peer_id: String,
    /// Runs that used its exemplars.
    pub uses: u64,
    /// Those that succeeded.
    pub successes: u64,
    /// `(successes + 1) / (uses + 2)`, 4 decimals.
    pub weight: f64,
}

/// A node's view of its contributors' reputation, as published on its reputation topic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReputationView {
    /// The node whose view it is (the topic's owner and the envelope's signer).
    pub peer_id: String,
    /// Unix milliseconds.
    pub ts: u64,
    /// The most used contributors, most first (ties by PeerId).
    pub contributors: Vec<ViewEntry>,
}

impl ReputationView {
    /// `peer_id`'s view of `rep` at `now_ms`: the [`MAX_VIEW_ENTRIES`] most used contributors.
    #[must_use]
    pub fn of(peer_id: &str, rep: &Reputation, now_ms: u64) -> Self {
        let mut contributors: Vec<ViewEntry> = rep
            .peers
            .iter()
            .map(|(p, s)| ViewEntry {
                peer_id: p.clone(),
                uses: s.uses,
                successes: s.successes,
                weight: (s.weight() * 10_000.0).round() / 10_000.0,
            })
            .collect();
        contributors.sort_by(|a, b| b.uses.cmp(&a.uses).then(a.peer_id.cmp(&b.peer_id)));
        contributors.truncate(MAX_VIEW_ENTRIES);
        Self {
            peer_id: peer_id.to_owned(),
            ts: now_ms,
            contributors,
        }
    }

    /// Reads a view signed by `from`: it must parse, be `from`'s own, hold at most
    /// [`MAX_VIEW_ENTRIES`] entries with `successes ≤ uses`.
    pub fn decode(d_json: &str, from: &str) -> Result<Self, String> {
        if d_json.len() > MAX_VIEW_BYTES {
            return Err(format!("{} bytes, at most {MAX_VIEW_BYTES}", d_json.len()));
        }
        let v: Self = serde_json::from_str(d_json).map_err(|e| e.to_string())?;
        if v.peer_id != from {
            return Err("the view is not its signer's".into());
        }
        if v.contributors.len() > MAX_VIEW_ENTRIES {
            return Err(format!("more than {MAX_VIEW_ENTRIES} contributors"));
        }
        if v.contributors.iter().any(|c| c.successes > c.uses) {
            return Err("more successes than uses".into());
        }
        Ok(v)
    }
}

/// Uses of a contributor's exemplars after which its reputation counts in full toward its
/// gossip score.
pub const SCORE_CONFIDENCE_USES: u64 = 10;
/// Application score of a contributor whose weight is 0 or 1 with full confidence.
pub const SCORE_SCALE: f64 = 200.0;
/// Share of the score that other nodes' reputation views (hearsay) add to this node's own.
pub const HEARSAY_SHARE: f64 = 0.5;
/// The weight of this node's own silence in the mean of views: views of viewers whose pulse
/// weights sum to less than this move the hearsay part proportionally less.
pub const HEARSAY_PRIOR: f64 = 1.0;
/// Application score of an identity at the pulse cap (weight 1), in proportion below.
pub const PULSE_SCORE: f64 = 20.0;

fn standing_score(uses: u64, successes: u64) -> f64 {
    let s = super::library::Standing { uses, successes };
    let confidence = uses.min(SCORE_CONFIDENCE_USES) as f64 / SCORE_CONFIDENCE_USES as f64;
    SCORE_SCALE * (s.weight() - 0.5) * confidence
}

/// The gossipsub application score of `peer` (spec §9.4 fed into the mesh), from three parts:
///
/// - this node's own standing of it: `200 × (w − 0.5) × min(uses, 10) / 10`, so a stranger is
///   0, a contributor whose exemplars preceded 10 failures and no success is −83 (below
///   gossipsub's graylist threshold of −80 in Agora's settings), and one whose exemplars
///   always helped approaches +100;
/// - hearsay: [`HEARSAY_SHARE`] × the mean of the same formula over `views` of other nodes
///   (a peer's view of itself is not counted), each view weighted by its viewer's pulse weight
///   *earned* ([`Trust::earned`](super::library::Trust::earned): 0 for an identity that passed
///   no round), with [`HEARSAY_PRIOR`] of weight at 0 — so views of fresh identities move
///   nothing, and few low-weight viewers move little;
/// - participation: [`PULSE_SCORE`] × the pulse weight `peer` earned, unless the two parts
///   above are negative (work does not buy back a bad name).
///
/// A positive reputation counts in proportion to `peer`'s pulse weight
/// ([`Trust::of`](super::library::Trust::of)), so a fresh identity's good name counts for
/// little; a bad one counts in full. Without pulse data (weights all 1, none earned) this is
/// the node's own standing alone.
#[must_use]
pub fn app_score(rep: &Reputation, views: &BTreeMap<String, ReputationView>, peer: &str) -> f64 {
    let s = rep.peers.get(peer).copied().unwrap_or_default();
    let own = standing_score(s.uses, s.successes);
    let (mut sum, mut weight) = (0.0, 0.0);
    for (viewer, v) in views {
        let w = rep.trust.earned(viewer);
        if viewer == peer || w <= 0.0 {
            continue;
        }
        if let Some(e) = v.contributors.iter().find(|e| e.peer_id == peer) {
            sum += w * standing_score(e.uses, e.successes.min(e.uses));
            weight += w;
        }
    }
    let mut reputation = own + HEARSAY_SHARE * sum / (weight + HEARSAY_PRIOR);
    if reputation > 0.0 {
        reputation *= rep.trust.of(peer);
    }
    // Work does not buy back a bad name: a peer below 0 stays where its reputation puts it.
    let pulse = if reputation < 0.0 {
        0.0
    } else {
        PULSE_SCORE * rep.trust.earned(peer)
    };
    let score = reputation + pulse;
    (score * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::improving::trajectory::{RecordParams, tests::spec_params};

    fn spec_trajectory(peer: &str) -> Trajectory {
        let p = RecordParams::parse(&spec_params(), &TrajectoryLimits::default()).unwrap();
        Trajectory {
            trajectory_id: "traj-7e2f9a1b".into(),
            task_type: p.task_type,
            input: p.input,
            output: p.output,
            steps: p.steps,
            reward: p.reward,
            metadata: p.metadata,
            peer_id: peer.into(),
            created_at: 1,
        }
    }

    #[test]
    fn shared_trajectories_are_redacted_and_attributed() {
        let mut t = spec_trajectory("12D3KooWA");
        t.input = json!({"query": "mail ana@agents.localhost", "key": "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD"});
        let (clean, flags) = redacted(&t);
        let text = serde_json::to_string(&clean).unwrap();
        assert!(!text.contains("ana@agents.localhost"), "{text}");
        assert!(!text.contains("sk-abcdefghij"), "{text}");
        assert!(text.contains("[REDACTED:pii.email]"));
        assert_eq!(flags.len(), 2);
        let limits = TrajectoryLimits::default();
        let back = decode_shared(&text, "12D3KooWA", "web-research", &limits).unwrap();
        assert_eq!(back, clean);
        // Another signer, another topic, a pending run, garbage: −32008 naming the field.
        for (d, from, task, field) in [
            (text.clone(), "12D3KooWB", "web-research", "peerId"),
            (text.clone(), "12D3KooWA", "other", "taskType"),
            (
                text.replace("\"reward\":0.88", "\"reward\":null"),
                "12D3KooWA",
                "web-research",
                "reward",
            ),
            ("[1]".to_owned(), "12D3KooWA", "web-research", "trajectory"),
        ] {
            let e = decode_shared(&d, from, task, &limits).unwrap_err();
            assert_eq!(e.code.0, -32008);
            assert_eq!(e.data.unwrap()["field"], field);
        }
    }

    #[test]
    fn views_and_scores_follow_the_reputation() {
        let mut rep = Reputation::new(10);
        let none = BTreeMap::new();
        assert!(app_score(&rep, &none, "stranger").abs() < f64::EPSILON);
        for _ in 0..10 {
            rep.record("spammer", false);
        }
        for _ in 0..3 {
            rep.record("helper", true);
        }
        assert!(app_score(&rep, &none, "spammer") < -80.0);
        assert!(app_score(&rep, &none, "helper") > 0.0);
        let view = ReputationView::of("me", &rep, 5);
        assert_eq!(view.contributors[0].peer_id, "spammer");
        let d = serde_json::to_string(&view).unwrap();
        assert_eq!(ReputationView::decode(&d, "me").unwrap(), view);
        assert!(ReputationView::decode(&d, "other").is_err());
        let bad = d.replace("\"successes\":3", "\"successes\":9");
        assert!(ReputationView::decode(&bad, "me").is_err());
    }

    #[test]
    fn fresh_identities_views_and_names_count_for_little() {
        use crate::improving::library::Trust;
        // Three established nodes (pulse weight 1) and twenty fresh keys.
        let established = ["e0", "e1", "e2"];
        let sybils: Vec<String> = (0..20).map(|i| format!("sybil{i}")).collect();
        let mut rep = Reputation::new(100);
        rep.trust = Trust {
            weights: established.map(|p| (p.to_owned(), 1.0)).into(),
            default: crate::pulse::FLOOR,
        };
        // Every sybil says every other sybil is excellent and the established nodes are bad.
        let mut views = BTreeMap::new();
        for me in &sybils {
            let mut contributors: Vec<ViewEntry> = sybils
                .iter()
                .filter(|p| *p != me)
                .map(|p| ViewEntry {
                    peer_id: p.clone(),
                    uses: 100,
                    successes: 100,
                    weight: 1.0,
                })
                .collect();
            contributors.extend(established.iter().map(|p| ViewEntry {
                peer_id: (*p).to_owned(),
                uses: 100,
                successes: 0,
                weight: 0.0,
            }));
            views.insert(
                me.clone(),
                ReputationView {
                    peer_id: me.clone(),
                    ts: 1,
                    contributors,
                },
            );
        }
        // This node itself found each sybil's exemplars helpful a few times.
        for s in &sybils {
            for _ in 0..3 {
                rep.record(s, true);
            }
        }
        let fresh: Vec<f64> = sybils.iter().map(|s| app_score(&rep, &views, s)).collect();
        let old: Vec<f64> = established
            .iter()
            .map(|e| app_score(&rep, &views, e))
            .collect();
        let best_fresh = fresh.iter().copied().fold(f64::MIN, f64::max);
        let worst_old = old.iter().copied().fold(f64::MAX, f64::min);
        assert!(best_fresh < worst_old, "{fresh:?} {old:?}");
        assert!(fresh.iter().sum::<f64>() < old.iter().sum::<f64>());
        assert!(
            (worst_old - PULSE_SCORE).abs() < 1e-9,
            "sybil views move nothing"
        );
        // An established viewer's view does count.
        views.insert(
            "e0".into(),
            ReputationView {
                peer_id: "e0".into(),
                ts: 1,
                contributors: vec![ViewEntry {
                    peer_id: "e1".into(),
                    uses: 10,
                    successes: 10,
                    weight: 0.9167,
                }],
            },
        );
        assert!(app_score(&rep, &views, "e1") > PULSE_SCORE + 10.0);
    }
}
