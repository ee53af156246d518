//! Ranking (discovery draft §3.5): the deterministic capability match and `rank_score`.
//!
//! `rank_score = w_tier · normalized_trust_tier + w_behavioral · behavioral_trust_score
//!              + w_match · capability_match_score`, default weights 0.3 / 0.4 / 0.3, with
//! `normalized_trust_tier = (3 − tier) / 2` (Tier 1 → 1.0, Tier 2 → 0.5, Tier 3 → 0.0).
//!
//! `capability_match_score` is our own BM25 variant, normalised to [0, 1]: for each distinct
//! query term `t` with BM25 inverse document frequency `idf(t)`, the BM25 term-frequency part
//! `tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))` is capped at 1 (a term present about as often as
//! in an average document counts fully; in a long document, less), and the score is the
//! idf-weighted mean of those parts over the query's terms. A manifest that contains every
//! important query term scores near 1; one that contains none scores 0. k1 = 1.2, b = 0.75.
//! Only integer statistics and a fixed summation order go in, so identical inputs give
//! identical scores whatever order the index was built in.
//!
//! Tokens: lowercase ASCII letters and digits (other characters separate tokens), at least two
//! characters, a short English stop list removed, and a light plural stemmer
//! (`-ies` → `-y`, `-sses` → `-ss`, `-xes`/`-ches`/`-shes` lose `-es`, other `-s` dropped unless
//! `-ss`/`-us`/`-is`).

use serde::{Deserialize, Serialize};

/// BM25 saturation parameter.
pub const K1: f64 = 1.2;
/// BM25 length normalisation parameter.
pub const B: f64 = 0.75;

/// The three ranking weights (published in the ANS's own manifest).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    /// Weight of the normalised trust tier.
    pub trust_tier_weight: f64,
    /// Weight of the behavioural trust score.
    pub behavioral_trust_weight: f64,
    /// Weight of the capability match.
    pub capability_match_weight: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Self {
            trust_tier_weight: 0.3,
            behavioral_trust_weight: 0.4,
            capability_match_weight: 0.3,
        }
    }
}

impl Weights {
    /// Checks that every weight is finite and non-negative and that they sum to 1 (± 1e-9).
    pub fn validate(&self) -> Result<(), String> {
        let w = [
            self.trust_tier_weight,
            self.behavioral_trust_weight,
            self.capability_match_weight,
        ];
        if w.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return Err("ranking weights must be finite and non-negative".into());
        }
        if (w.iter().sum::<f64>() - 1.0).abs() > 1e-9 {
            return Err("ranking weights must sum to 1".into());
        }
        Ok(())
    }

    /// The composite score.
    pub fn rank_score(&self, trust_tier: u8, behavioral: f64, capability_match: f64) -> f64 {
        self.trust_tier_weight * normalized_trust_tier(trust_tier)
            + self.behavioral_trust_weight * behavioral
            + self.capability_match_weight * capability_match
    }
}

/// `(3 − tier) / 2`, clamped to [0, 1].
pub fn normalized_trust_tier(tier: u8) -> f64 {
    (f64::from(3u8.saturating_sub(tier)) / 2.0).clamp(0.0, 1.0)
}

const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "for", "from", "in", "into", "is",
    "it", "its", "of", "on", "or", "that", "the", "this", "to", "with", "which", "who", "will",
];

fn stem(word: &mut String) {
    let n = word.len();
    if n > 4 && word.ends_with("ies") {
        word.truncate(n - 3);
        word.push('y');
    } else if n > 4
        && ["sses", "xes", "ches", "shes"]
            .iter()
            .any(|suffix| word.ends_with(suffix))
    {
        word.truncate(n - 2);
    } else if n > 3
        && word.ends_with('s')
        && !(word.ends_with("ss") || word.ends_with("us") || word.ends_with("is"))
    {
        word.truncate(n - 1);
    }
}

/// Calls `f` with each token of `text`, in order.
pub fn for_each_token(text: &str, mut f: impl FnMut(&str)) {
    let mut word = String::with_capacity(32);
    let mut flush = |word: &mut String| {
        if word.len() >= 2 && !STOP.contains(&word.as_str()) {
            stem(word);
            f(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            if word.len() < 64 {
                word.push(c.to_ascii_lowercase());
            }
        } else {
            flush(&mut word);
        }
    }
    flush(&mut word);
}

/// The tokens of `text`.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_token(text, |t| out.push(t.to_owned()));
    out
}

/// BM25 inverse document frequency, `ln(1 + (N − df + 0.5) / (df + 0.5))`.
pub fn idf(docs: u64, df: u64) -> f64 {
    let (n, df) = (docs as f64, df.min(docs) as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// The BM25 term-frequency part, capped at 1.
pub fn saturation(tf: u32, doc_len: u32, avg_len: f64) -> f64 {
    if tf == 0 {
        return 0.0;
    }
    let tf = f64::from(tf);
    let norm = 1.0 - B + B * f64::from(doc_len) / avg_len.max(1.0);
    (tf * (K1 + 1.0) / (tf + K1 * norm)).min(1.0)
}

/// Rounds a score to 6 decimal places, as published (keeps responses short and stable).
pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_lowercased_stemmed_and_filtered() {
        assert_eq!(
            tokens("Audit Solidity smart-contracts for the vulnerabilities, A1!"),
            vec![
                "audit",
                "solidity",
                "smart",
                "contract",
                "vulnerability",
                "a1"
            ]
        );
        assert_eq!(
            tokens("classes boxes status"),
            vec!["class", "box", "status"]
        );
    }

    #[test]
    fn weights_and_tiers() {
        let w = Weights::default();
        assert!(w.validate().is_ok());
        assert_eq!(normalized_trust_tier(1), 1.0);
        assert_eq!(normalized_trust_tier(2), 0.5);
        assert_eq!(normalized_trust_tier(3), 0.0);
        let s = w.rank_score(1, 0.97, 0.96);
        assert!((s - (0.3 + 0.388 + 0.288)).abs() < 1e-12);
        let bad = Weights {
            trust_tier_weight: 0.5,
            ..Weights::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn saturation_is_capped_and_length_normalised() {
        assert_eq!(saturation(0, 10, 10.0), 0.0);
        assert_eq!(saturation(1, 10, 10.0), 1.0);
        assert!(saturation(1, 40, 10.0) < 1.0);
        assert!(saturation(1, 40, 10.0) < saturation(2, 40, 10.0));
        assert!(idf(100, 1) > idf(100, 50));
        assert!(idf(100, 100) > 0.0);
    }
}
