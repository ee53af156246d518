//! A deterministic synthetic population of Agent Manifest Documents and DISCOVER intents for the
//! benchmarks (shared by `agora-agtp`'s `index` bench and `agora-node`'s `agtp` load bench).
//!
//! Job descriptions draw 12–30 words from a 3,000-word vocabulary with a Zipf-like skew (a few
//! words are very common, most are rare), so posting lists have realistic lengths: the most
//! common terms appear in a large share of all manifests. Tiers are 1/2/3 in 30/60/10 %, trust
//! scores uniform in [0.3, 1.0], 12 governance zones, 2,000 organisations.

#![allow(dead_code)]

use serde_json::{Value, json};

/// splitmix64: small, fast and good enough for synthetic data.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

const SYLLABLES: [&str; 24] = [
    "ka", "lo", "mi", "ran", "tes", "vor", "qui", "zel", "pra", "dun", "fis", "gor", "hal", "jem",
    "nox", "pel", "ros", "sul", "tav", "urb", "vin", "wex", "yar", "zon",
];

/// Vocabulary size.
pub(crate) const VOCABULARY: usize = 3000;

/// Word `i` of the vocabulary: distinct, lowercase, 4–9 letters.
pub(crate) fn word(i: usize) -> String {
    let mut w = String::new();
    let mut n = i + 24 * 24;
    while n > 0 {
        w.push_str(SYLLABLES[n % 24]);
        n /= 24;
    }
    w
}

/// A Zipf-like word index: P(i) ∝ 1 / (i + 30); the most common word is in about 14 % of
/// the manifests.
pub(crate) fn zipf_word(rng: &mut Rng) -> usize {
    // Inverse transform of the continuous approximation on [0, VOCABULARY).
    let lo = 30f64.ln();
    let hi = (VOCABULARY as f64 + 30.0).ln();
    let x = (lo + rng.unit() * (hi - lo)).exp() - 30.0;
    (x as usize).min(VOCABULARY - 1)
}

/// Manifest number `i`.
pub(crate) fn manifest(i: usize, rng: &mut Rng) -> Value {
    let words = 12 + rng.below(19) as usize;
    let text: Vec<String> = (0..words).map(|_| word(zipf_word(rng))).collect();
    let caps: Vec<String> = (0..3).map(|_| word(zipf_word(rng))).collect();
    let tier = match rng.below(10) {
        0..=2 => 1,
        3..=8 => 2,
        _ => 3,
    };
    let org = rng.below(2000);
    json!({
        "canonical_id": format!("{:016x}{:016x}", i as u64, rng.next_u64()),
        "manifest_uri": format!("agtp://agents.org{org}.example/agents/agent-{i}"),
        "agent_label": format!("agent-{i}"),
        "org_domain": format!("org{org}.example"),
        "governance_zone": format!("zone:{}", rng.below(12)),
        "trust_tier": tier,
        "behavioral_trust_score": ((0.3 + 0.7 * rng.unit()) * 1000.0).round() / 1000.0,
        "supported_methods": ["QUERY", "DESCRIBE", "ANALYZE"],
        "authority_scope_categories": ["documents:query"],
        "capabilities": caps,
        "job_description": text.join(" "),
    })
}

/// `n` manifests from seed `seed`.
pub(crate) fn manifests(n: usize, seed: u64) -> Vec<Value> {
    let mut rng = Rng::new(seed);
    (0..n).map(|i| manifest(i, &mut rng)).collect()
}

/// `n` intents of 2–5 words drawn like the job descriptions.
pub(crate) fn intents(n: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let k = 2 + rng.below(4) as usize;
            (0..k)
                .map(|_| word(zipf_word(&mut rng)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}
