//! Relevance metrics for the labelled set (`tests/vectors/directory/`, issue 33 item 3):
//! nDCG@k with graded gains and recall@k.
//!
//! nDCG@k = DCG@k / ideal DCG@k with DCG = Σ (2^grade − 1) / log2(rank + 1) over the first k
//! results; recall@k = relevant records (grade ≥ 1) among the first k / relevant records.

use std::collections::HashMap;

/// nDCG@`k` of `ranked` ids against `grades` (unlisted ids grade 0); 0 when nothing is relevant.
#[must_use]
pub fn ndcg_at(k: usize, ranked: &[&str], grades: &HashMap<String, u8>) -> f64 {
    let gain = |g: u8| f64::from((1u32 << g) - 1);
    let discount = |i: usize| 1.0 / ((i + 2) as f64).log2();
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, id)| gain(grades.get(*id).copied().unwrap_or(0)) * discount(i))
        .sum();
    let mut ideal: Vec<u8> = grades.values().copied().filter(|&g| g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, &g)| gain(g) * discount(i))
        .sum();
    if idcg == 0.0 { 0.0 } else { dcg / idcg }
}

/// recall@`k` of `ranked` ids against `grades`; 0 when nothing is relevant.
#[must_use]
pub fn recall_at(k: usize, ranked: &[&str], grades: &HashMap<String, u8>) -> f64 {
    let relevant = grades.values().filter(|&&g| g > 0).count();
    if relevant == 0 {
        return 0.0;
    }
    let found = ranked
        .iter()
        .take(k)
        .filter(|id| grades.get(**id).is_some_and(|&g| g > 0))
        .count();
    found as f64 / relevant as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grades(pairs: &[(&str, u8)]) -> HashMap<String, u8> {
        pairs.iter().map(|(k, g)| ((*k).to_owned(), *g)).collect()
    }

    #[test]
    fn perfect_and_reversed() {
        let g = grades(&[("a", 3), ("b", 1)]);
        assert!((ndcg_at(10, &["a", "b"], &g) - 1.0).abs() < 1e-12);
        // Reversed: DCG = 1/1 + 7/log2(3); ideal = 7 + 1/log2(3).
        let expected = (1.0 + 7.0 / 3f64.log2()) / (7.0 + 1.0 / 3f64.log2());
        assert!((ndcg_at(10, &["b", "a"], &g) - expected).abs() < 1e-12);
        assert!((recall_at(1, &["b", "a"], &g) - 0.5).abs() < 1e-12);
        assert_eq!(ndcg_at(10, &["x"], &g), 0.0);
        assert_eq!(recall_at(10, &[], &grades(&[])), 0.0);
    }
}
