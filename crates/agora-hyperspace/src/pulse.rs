//! Pulse rounds: Sybil resistance by proof of work participation (spec §9.4;
//! `docs/hyperspace-wire.md` "Pulse rounds (§9.4)").
//!
//! A fresh Ed25519 key costs nothing, so a node's say in other nodes' curation is tied to work
//! it keeps doing: once per round every node computes a bounded, verifiable piece of work bound
//! to the round and to its own PeerId, commits to it with a Merkle root, and publishes the root
//! with the openings the round's challenge asks for. Every node that receives the proof checks
//! it; each round an identity passes raises its [`Participation`] weight, which scales what its
//! trajectories and reputation views count for (capped at 1 per identity).
//!
//! | part | rule | where |
//! |---|---|---|
//! | round | `⌊now_ms / round_ms⌋`, `round_ms` 90 s by default: the settlement rounds | [`round_of`] |
//! | seed | `SHA256("agora/pulse/1" ‖ 0x00 ‖ round_ms u64 BE ‖ round u64 BE)`, derived by every node alike | [`seed`] |
//! | work | [`LEAVES`] leaves; leaf `i` = `SHA256^ITERATIONS(SHA256("agora/pulse/1 leaf" ‖ seed ‖ prover ‖ i u32 BE))`, a sequential hash chain | [`leaf`] |
//! | commitment | binary SHA-256 Merkle root over the leaves (`0x00 ‖ leaf` at the bottom, `0x01 ‖ left ‖ right` above) | [`merkle_root`] |
//! | challenger | the round's public coin: the indices to open are `SHA256("agora/pulse/1 challenge" ‖ seed ‖ prover ‖ root ‖ k u8)` mod [`LEAVES`] for `k < OPENINGS` (Fiat–Shamir), fixed only once the root is | [`challenge`] |
//! | proof | `{round, peerId, root, openings: [{index, leaf, path}]}`, signed in a v2 envelope on [`TOPIC`] | [`Proof`] |
//! | verification | round current or previous, `peerId` the signer, the challenged indices in order, every leaf recomputed, every path up to the root | [`Proof::verify`] |
//! | weight | `clamp(passed / ESTABLISHED_ROUNDS, FLOOR, 1)`, one pass per identity and round, back to the floor after [`STALE_ROUNDS`] without a pass | [`Participation`] |
//!
//! Skipping work does not pay: a prover that computed a share `f` of the leaves passes with
//! probability `f^OPENINGS` per root, and each new root costs a Merkle tree of [`LEAVES`]
//! leaves, so short cuts cost more than the work. A proof is bound to its round (the seed), to
//! its prover (the leaves hash the PeerId) and to its root (the challenge), so it can be
//! neither reused in another round, nor by another identity, nor opened at chosen indices.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The gossip topic of pulse proofs (one topic; the round is in the proof).
pub const TOPIC: &str = "hyperspace/pulse/proofs";
/// Domain tag of every hash of the pulse.
pub const DOMAIN: &[u8] = b"agora/pulse/1";
/// The default round length: the settlement rounds' 90 s.
pub const DEFAULT_ROUND_MS: u64 = crate::payments::settlement::ROUND_MS;
/// Leaves of the work tree (a power of two).
pub const LEAVES: u32 = 4096;
/// Depth of the work tree: `log2(LEAVES)`, the length of every Merkle path.
pub const DEPTH: usize = 12;
/// Hashes chained per leaf.
pub const ITERATIONS: u32 = 512;
/// Leaves opened per proof.
pub const OPENINGS: usize = 12;
/// Rounds passed at which an identity's weight reaches the cap.
pub const ESTABLISHED_ROUNDS: u64 = 10;
/// The weight of an identity that passed no round (its trajectories and views count for this
/// little).
pub const FLOOR: f64 = 0.01;
/// The most weight one identity has, however many rounds it passed.
pub const CAP: f64 = 1.0;
/// Rounds without a pass after which an identity is fresh again (a day of 90-s rounds).
pub const STALE_ROUNDS: u64 = 960;
/// Largest `d` of a proof, bytes (a valid one is about 12 KiB).
pub const MAX_PROOF_BYTES: usize = 24 * 1024;

/// A 32-byte digest.
pub type Hash = [u8; 32];

/// The round of time `now_ms` for rounds of `round_ms`.
#[must_use]
pub fn round_of(now_ms: u64, round_ms: u64) -> u64 {
    now_ms / round_ms.max(1)
}

/// The seed of `round` (rounds of `round_ms`): every node derives the same.
#[must_use]
pub fn seed(round: u64, round_ms: u64) -> Hash {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update([0]);
    h.update(round_ms.to_be_bytes());
    h.update(round.to_be_bytes());
    h.finalize().into()
}

/// Leaf `i` of `prover`'s work in the round of `seed`: a chain of [`ITERATIONS`] hashes.
#[must_use]
pub fn leaf(seed: &Hash, prover: &str, i: u32) -> Hash {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update(b" leaf");
    h.update(seed);
    h.update(prover.as_bytes());
    h.update(i.to_be_bytes());
    let mut x: Hash = h.finalize().into();
    for _ in 1..ITERATIONS {
        x = sha256_32(&x);
    }
    x
}

/// SHA-256's initial state (FIPS 180-4 §5.3.3).
const IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// `SHA256(x)` of 32 bytes, as one padded block through `sha2`'s compression function: the
/// same digest as `Sha256::digest`, without the buffering (the hash chains' inner loop, which
/// an unoptimised build would otherwise run 4× slower).
fn sha256_32(x: &Hash) -> Hash {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(x);
    block[32] = 0x80;
    // The message length, 256 bits, big-endian in the last 8 bytes.
    block[62] = 0x01;
    let mut state = IV;
    sha2::block_api::compress256(&mut state, &[block]);
    let mut out = [0u8; 32];
    for (o, w) in out.chunks_exact_mut(4).zip(state) {
        o.copy_from_slice(&w.to_be_bytes());
    }
    out
}

fn leaf_node(leaf: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([0]);
    h.update(leaf);
    h.finalize().into()
}

fn parent(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// Every level of the Merkle tree over `leaves` (a power of two of them), bottom first; the
/// last level is the root alone.
fn levels(leaves: &[Hash]) -> Vec<Vec<Hash>> {
    let mut out = vec![leaves.iter().map(leaf_node).collect::<Vec<_>>()];
    while out.last().is_some_and(|l| l.len() > 1) {
        let next = out
            .last()
            .map(|l| l.chunks(2).map(|p| parent(&p[0], &p[1])).collect())
            .unwrap_or_default();
        out.push(next);
    }
    out
}

/// The Merkle root over `leaves` (a power of two of them).
#[must_use]
pub fn merkle_root(leaves: &[Hash]) -> Hash {
    levels(leaves)
        .last()
        .and_then(|l| l.first().copied())
        .unwrap_or_default()
}

/// The indices `prover` must open for `root` in the round of `seed`, in order (repeats
/// allowed).
#[must_use]
pub fn challenge(seed: &Hash, prover: &str, root: &Hash) -> [u32; OPENINGS] {
    let mut out = [0u32; OPENINGS];
    for (k, slot) in out.iter_mut().enumerate() {
        let mut h = Sha256::new();
        h.update(DOMAIN);
        h.update(b" challenge");
        h.update(seed);
        h.update(prover.as_bytes());
        h.update(root);
        h.update([k as u8]);
        let d = h.finalize();
        *slot = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) % LEAVES;
    }
    out
}

/// One opened leaf.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Opening {
    /// The leaf's index.
    pub index: u32,
    /// The leaf, 64 lowercase hex.
    pub leaf: String,
    /// The sibling of each level from the bottom up, [`DEPTH`] of them, 64 lowercase hex each.
    pub path: Vec<String>,
}

/// A pulse proof: the `d` of a v2 envelope on [`TOPIC`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Proof {
    /// The round proved.
    pub round: u64,
    /// The prover: the envelope's signer.
    pub peer_id: String,
    /// The Merkle root of the work, 64 lowercase hex.
    pub root: String,
    /// The challenged leaves, in challenge order.
    pub openings: Vec<Opening>,
}

/// Why a proof is refused. Each has a stable [`reason`](Self::reason) (the metric label).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PulseError {
    /// It does not decode, or a field has the wrong length or form.
    #[error("malformed pulse proof: {0}")]
    Malformed(String),
    /// `peerId` is not the envelope's signer.
    #[error("the proof's peerId is not its signer")]
    NotSigner,
    /// The round is neither the current nor the previous one.
    #[error("round {round} is not the current ({current}) or previous one")]
    WrongRound {
        /// The proof's round.
        round: u64,
        /// The receiver's current round.
        current: u64,
    },
    /// The openings are not the challenged indices.
    #[error("the openings are not the challenged indices")]
    WrongIndices,
    /// An opened leaf is not the work's.
    #[error("leaf {0} is not the work's")]
    BadLeaf(u32),
    /// A Merkle path does not lead to the root.
    #[error("the path of leaf {0} does not lead to the root")]
    BadPath(u32),
    /// The identity already passed this round or a later one.
    #[error("a proof of this identity for round {0} or later was already counted")]
    Replayed(u64),
}

impl PulseError {
    /// A stable label: `malformed`, `not_signer`, `wrong_round`, `wrong_indices`, `bad_leaf`,
    /// `bad_path`, `replayed`.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::NotSigner => "not_signer",
            Self::WrongRound { .. } => "wrong_round",
            Self::WrongIndices => "wrong_indices",
            Self::BadLeaf(_) => "bad_leaf",
            Self::BadPath(_) => "bad_path",
            Self::Replayed(_) => "replayed",
        }
    }

    /// Refusals that do not make the forwarder suspect (a late or repeated proof): gossip
    /// ignores them instead of rejecting.
    #[must_use]
    pub fn is_benign(&self) -> bool {
        matches!(self, Self::WrongRound { .. } | Self::Replayed(_))
    }
}

fn unhex(s: &str) -> Result<Hash, PulseError> {
    let bad = || PulseError::Malformed(format!("{s:?} is not 64 lowercase hex digits"));
    if s.len() != 64 || s.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).map_err(|_| bad())?;
    Ok(out)
}

impl Proof {
    /// Does the work of `round` (rounds of `round_ms`) for `prover`: [`LEAVES`] ×
    /// [`ITERATIONS`] hashes and the tree. CPU-bound (a fraction of a second): call it off any
    /// task that answers calls.
    #[must_use]
    pub fn prove(round: u64, round_ms: u64, prover: &str) -> Self {
        let seed = seed(round, round_ms);
        let leaves: Vec<Hash> = (0..LEAVES).map(|i| leaf(&seed, prover, i)).collect();
        let tree = levels(&leaves);
        let root = tree
            .last()
            .and_then(|l| l.first().copied())
            .unwrap_or_default();
        let openings = challenge(&seed, prover, &root)
            .iter()
            .map(|&index| {
                let mut at = index as usize;
                let path = tree[..DEPTH]
                    .iter()
                    .map(|level| {
                        let sibling = hex::encode(level[at ^ 1]);
                        at /= 2;
                        sibling
                    })
                    .collect();
                Opening {
                    index,
                    leaf: hex::encode(leaves[index as usize]),
                    path,
                }
            })
            .collect();
        Self {
            round,
            peer_id: prover.to_owned(),
            root: hex::encode(root),
            openings,
        }
    }

    /// Reads the `d` of a proof envelope signed by `from` (shape only; [`Self::verify`] checks
    /// the work).
    pub fn decode(d_json: &str, from: &str) -> Result<Self, PulseError> {
        if d_json.len() > MAX_PROOF_BYTES {
            return Err(PulseError::Malformed(format!(
                "{} bytes, at most {MAX_PROOF_BYTES}",
                d_json.len()
            )));
        }
        let p: Self =
            serde_json::from_str(d_json).map_err(|e| PulseError::Malformed(e.to_string()))?;
        if p.peer_id != from {
            return Err(PulseError::NotSigner);
        }
        if p.openings.len() != OPENINGS || p.openings.iter().any(|o| o.path.len() != DEPTH) {
            return Err(PulseError::Malformed(format!(
                "{OPENINGS} openings of {DEPTH} siblings each"
            )));
        }
        Ok(p)
    }

    /// Its round is `current` or the one before (cheap: checked before anything else).
    pub fn check_round(&self, current: u64) -> Result<(), PulseError> {
        if self.round > current || self.round.saturating_add(1) < current {
            return Err(PulseError::WrongRound {
                round: self.round,
                current,
            });
        }
        Ok(())
    }

    /// Checks the proof at `current` round (rounds of `round_ms`): its round is `current` or
    /// the one before, the openings are the challenged indices, each leaf is recomputed and
    /// each path leads to the root. About [`OPENINGS`] × [`ITERATIONS`] hashes.
    pub fn verify(&self, current: u64, round_ms: u64) -> Result<(), PulseError> {
        self.check_round(current)?;
        let root = unhex(&self.root)?;
        let seed = seed(self.round, round_ms);
        let wanted = challenge(&seed, &self.peer_id, &root);
        if self.openings.len() != OPENINGS
            || self.openings.iter().zip(wanted).any(|(o, w)| o.index != w)
        {
            return Err(PulseError::WrongIndices);
        }
        for o in &self.openings {
            let claimed = unhex(&o.leaf)?;
            if o.path.len() != DEPTH {
                return Err(PulseError::BadPath(o.index));
            }
            let mut node = leaf_node(&claimed);
            let mut at = o.index;
            for sibling in &o.path {
                let s = unhex(sibling)?;
                node = if at % 2 == 0 {
                    parent(&node, &s)
                } else {
                    parent(&s, &node)
                };
                at /= 2;
            }
            if node != root {
                return Err(PulseError::BadPath(o.index));
            }
            if leaf(&seed, &self.peer_id, o.index) != claimed {
                return Err(PulseError::BadLeaf(o.index));
            }
        }
        Ok(())
    }
}

/// One identity's pulse record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Rounds passed.
    pub passed: u64,
    /// The last round passed.
    pub last_round: u64,
}

/// The rounds each identity passed, as this node saw them: bounded to `max` identities (when
/// full, the one with the fewest passes, then the oldest last pass, is forgotten).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Participation {
    /// By PeerId.
    pub peers: BTreeMap<String, Record>,
    /// Most identities kept.
    pub max: usize,
}

impl Participation {
    /// Empty, keeping at most `max` identities.
    #[must_use]
    pub fn new(max: usize) -> Self {
        Self {
            peers: BTreeMap::new(),
            max,
        }
    }

    /// Counts `peer`'s verified proof of `round`: refused ([`PulseError::Replayed`]) when that
    /// round or a later one was counted already, so one identity passes a round once.
    pub fn pass(&mut self, peer: &str, round: u64) -> Result<Record, PulseError> {
        if let Some(r) = self.peers.get(peer)
            && r.passed > 0
            && r.last_round >= round
        {
            return Err(PulseError::Replayed(round));
        }
        if !self.peers.contains_key(peer) && self.peers.len() >= self.max.max(1) {
            let least = self
                .peers
                .iter()
                .min_by_key(|(p, r)| (r.passed, r.last_round, (*p).clone()))
                .map(|(p, _)| p.clone());
            if let Some(p) = least {
                self.peers.remove(&p);
            }
        }
        let r = self.peers.entry(peer.to_owned()).or_default();
        r.passed += 1;
        r.last_round = round;
        Ok(*r)
    }

    /// Whether `peer`'s proof of `round` would be counted (not a replay).
    #[must_use]
    pub fn is_new(&self, peer: &str, round: u64) -> bool {
        self.peers
            .get(peer)
            .is_none_or(|r| r.passed == 0 || r.last_round < round)
    }

    /// `peer`'s weight at round `current`: `clamp(passed / ESTABLISHED_ROUNDS, FLOOR, CAP)`, the
    /// floor again after [`STALE_ROUNDS`] without a pass.
    #[must_use]
    pub fn weight(&self, peer: &str, current: u64) -> f64 {
        match self.peers.get(peer) {
            Some(r) if r.last_round + STALE_ROUNDS >= current => {
                (r.passed as f64 / ESTABLISHED_ROUNDS as f64).clamp(FLOOR, CAP)
            }
            _ => FLOOR,
        }
    }

    /// Every known identity's weight at round `current`.
    #[must_use]
    pub fn weights(&self, current: u64) -> BTreeMap<String, f64> {
        self.peers
            .keys()
            .map(|p| (p.clone(), self.weight(p, current)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const MS: u64 = 2_000;
    const P: &str = "12D3KooWProver";

    #[test]
    fn rounds_and_seeds() {
        assert_eq!(round_of(0, DEFAULT_ROUND_MS), 0);
        assert_eq!(round_of(90_000, DEFAULT_ROUND_MS), 1);
        assert_eq!(
            round_of(1_000_000, DEFAULT_ROUND_MS),
            crate::payments::settlement::round_of(1_000_000)
        );
        assert_ne!(seed(1, MS), seed(2, MS));
        assert_ne!(seed(1, MS), seed(1, MS + 1));
        assert_eq!(seed(7, MS), seed(7, MS));
        assert_eq!(1u32 << DEPTH, LEAVES);
    }

    #[test]
    fn the_chain_step_is_sha256() {
        let mut x: Hash = [0; 32];
        for i in 0..100u8 {
            let want: Hash = Sha256::digest(x).into();
            assert_eq!(sha256_32(&x), want);
            x = want;
            x[0] ^= i;
        }
    }

    #[test]
    fn an_honest_proof_verifies_and_round_trips() {
        let p = Proof::prove(10, MS, P);
        let d = serde_json::to_string(&p).unwrap();
        assert!(d.len() < MAX_PROOF_BYTES, "{}", d.len());
        let back = Proof::decode(&d, P).unwrap();
        assert_eq!(back, p);
        back.verify(10, MS).unwrap();
        back.verify(11, MS).unwrap();
    }

    #[test]
    fn forged_proofs_are_refused() {
        let p = Proof::prove(10, MS, P);
        let d = serde_json::to_string(&p).unwrap();
        // Signed by another identity.
        assert_eq!(
            Proof::decode(&d, "12D3KooWOther"),
            Err(PulseError::NotSigner)
        );
        // Another identity claiming the work: its leaves differ.
        let mut stolen = p.clone();
        stolen.peer_id = "12D3KooWThief".into();
        assert!(matches!(
            stolen.verify(10, MS),
            Err(PulseError::WrongIndices | PulseError::BadLeaf(_))
        ));
        // A wrong leaf whose path was recomputed for it: the leaf is not the work's.
        let mut wrong_leaf = p.clone();
        wrong_leaf.openings[0].leaf = hex::encode([9u8; 32]);
        assert!(matches!(
            wrong_leaf.verify(10, MS),
            Err(PulseError::BadPath(_))
        ));
        // A bad Merkle path.
        let mut bad_path = p.clone();
        bad_path.openings[3].path[5] = hex::encode([1u8; 32]);
        assert_eq!(
            bad_path.verify(10, MS),
            Err(PulseError::BadPath(p.openings[3].index))
        );
        // Openings at indices the prover chose.
        let mut chosen = p.clone();
        chosen.openings[0].index = (chosen.openings[0].index + 1) % LEAVES;
        assert_eq!(chosen.verify(10, MS), Err(PulseError::WrongIndices));
        // Another root: the challenge moves.
        let mut other_root = p.clone();
        other_root.root = hex::encode([2u8; 32]);
        assert_eq!(other_root.verify(10, MS), Err(PulseError::WrongIndices));
        // Malformed hex, counts.
        let mut upper = p.clone();
        upper.root = p.root.to_uppercase();
        assert!(matches!(
            upper.verify(10, MS),
            Err(PulseError::Malformed(_))
        ));
        let short = d.replacen(&p.openings[0].path[0], "00", 1);
        assert!(matches!(
            Proof::decode(&short, P).map(|p| p.verify(10, MS)),
            Ok(Err(PulseError::Malformed(_)))
        ));
        assert!(matches!(
            Proof::decode("{\"round\":1}", P),
            Err(PulseError::Malformed(_))
        ));
    }

    #[test]
    fn a_leaf_with_a_matching_path_but_not_the_work_is_a_bad_leaf() {
        // A prover that filled the tree with junk commits to it honestly: paths hold, leaves
        // do not.
        let s = seed(10, MS);
        let junk: Vec<Hash> = (0..LEAVES)
            .map(|i| Sha256::digest(i.to_be_bytes()).into())
            .collect();
        let tree = levels(&junk);
        let root = tree[DEPTH][0];
        let openings = challenge(&s, P, &root)
            .iter()
            .map(|&index| {
                let mut at = index as usize;
                Opening {
                    index,
                    leaf: hex::encode(junk[index as usize]),
                    path: tree[..DEPTH]
                        .iter()
                        .map(|l| {
                            let x = hex::encode(l[at ^ 1]);
                            at /= 2;
                            x
                        })
                        .collect(),
                }
            })
            .collect();
        let p = Proof {
            round: 10,
            peer_id: P.into(),
            root: hex::encode(root),
            openings,
        };
        assert!(matches!(p.verify(10, MS), Err(PulseError::BadLeaf(_))));
    }

    #[test]
    fn replayed_and_old_proofs_are_refused() {
        let p = Proof::prove(10, MS, P);
        // An old round: refused by any node whose round moved on (benign: late, not forged).
        let e = p.verify(12, MS).unwrap_err();
        assert_eq!(e.reason(), "wrong_round");
        assert!(e.is_benign());
        // A future round.
        assert!(p.verify(9, MS).is_err());
        // Proved for rounds of another length: the seed differs.
        assert!(p.verify(10, MS + 1).is_err());
        // The same round counted twice, or an older one after a newer one.
        let mut part = Participation::new(8);
        assert!(part.is_new(P, 10));
        part.pass(P, 10).unwrap();
        assert!(!part.is_new(P, 10));
        assert_eq!(part.pass(P, 10), Err(PulseError::Replayed(10)));
        assert_eq!(part.pass(P, 9), Err(PulseError::Replayed(9)));
        assert_eq!(part.pass(P, 11).unwrap().passed, 2);
    }

    #[test]
    fn weights_grow_with_rounds_passed_and_are_capped() {
        let mut part = Participation::new(3);
        assert!((part.weight("fresh", 0) - FLOOR).abs() < f64::EPSILON);
        for r in 1..=25 {
            part.pass("old", r).unwrap();
        }
        part.pass("new", 25).unwrap();
        assert!((part.weight("old", 25) - CAP).abs() < f64::EPSILON);
        assert!((part.weight("new", 25) - 0.1).abs() < 1e-9);
        // Stale: fresh again.
        assert!((part.weight("old", 25 + STALE_ROUNDS + 1) - FLOOR).abs() < f64::EPSILON);
        // Bounded: the fewest passes are forgotten first.
        part.pass("b", 25).unwrap();
        part.pass("c", 25).unwrap();
        assert_eq!(part.peers.len(), 3);
        assert!(part.peers.contains_key("old"));
        assert!(part.peers.contains_key("c"));
    }
}
