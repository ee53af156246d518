//! BM25 over the records' texts: tokenization and term weights are the `bm25` crate's
//! (`Embedder`: Unicode folding, English stop words and stemming, `k1` 1.2, `b` 0.75); the
//! postings and the scoring are kept here.
//!
//! Why not the crate's `Scorer`: its `matches` gathers every document holding any query term
//! into a hash set, scores each by a linear search of its terms and sorts them all. At 100,000
//! records that took p50 4.3 ms and p99 22.4 ms per query (`cargo bench -p agora-directory
//! --bench search`, the crate's own `SearchEngine` the same), more than the whole search's
//! budget. Here each term keeps its postings as `(slot, weight)` and a query adds
//! `idf × weight` term by term into a dense accumulator, touching each posting once (the
//! figures of both are in `docs/performance.md` "Directory").

use std::collections::HashMap;

use bm25::{DefaultTokenizer, Embedder, EmbedderBuilder};

/// The average document length BM25 assumes, in tokens after stop words (a record's name,
/// description and capabilities: 25 on the labelled set, `tests/vectors/directory/`).
pub const AVGDL: f32 = 25.0;

/// The postings of every indexed text.
pub(crate) struct Postings {
    embedder: Embedder<u32, DefaultTokenizer>,
    /// token → (slot, weight), one entry per document holding the token.
    postings: HashMap<u32, Vec<(u32, f32)>>,
    /// slot → its tokens (to remove it).
    docs: HashMap<u32, Vec<u32>>,
}

/// A query's terms: each token once, with its idf.
pub(crate) struct Terms(Vec<(u32, f32)>);

/// The BM25 score of every slot a query touched.
pub(crate) struct Scores {
    /// Score by slot (0 for slots not touched).
    pub(crate) by_slot: Vec<f32>,
    /// The slots with a score, in no order.
    pub(crate) touched: Vec<u32>,
}

impl Scores {
    /// The score of `slot`.
    pub(crate) fn of(&self, slot: u32) -> f32 {
        self.by_slot.get(slot as usize).copied().unwrap_or(0.0)
    }
}

impl Postings {
    pub(crate) fn new() -> Self {
        Self {
            embedder: EmbedderBuilder::<u32, DefaultTokenizer>::with_avgdl(AVGDL).build(),
            postings: HashMap::new(),
            docs: HashMap::new(),
        }
    }

    /// Indexes `text` as `slot`'s (replacing what `slot` had).
    pub(crate) fn upsert(&mut self, slot: u32, text: &str) {
        self.remove(slot);
        let mut tokens: Vec<u32> = Vec::new();
        for t in self.embedder.embed(text).iter() {
            if tokens.contains(&t.index) {
                continue;
            }
            tokens.push(t.index);
            self.postings
                .entry(t.index)
                .or_default()
                .push((slot, t.value));
        }
        self.docs.insert(slot, tokens);
    }

    /// Forgets `slot`.
    pub(crate) fn remove(&mut self, slot: u32) {
        let Some(tokens) = self.docs.remove(&slot) else {
            return;
        };
        for t in tokens {
            if let Some(list) = self.postings.get_mut(&t) {
                list.retain(|(s, _)| *s != slot);
                if list.is_empty() {
                    self.postings.remove(&t);
                }
            }
        }
    }

    /// The query's terms with their idf (`ln(1 + (N − df + ½) / (df + ½))`); terms no record
    /// holds are left out.
    pub(crate) fn terms(&self, text: &str) -> Terms {
        let n = self.docs.len() as f32;
        let mut out: Vec<(u32, f32)> = Vec::new();
        for t in self.embedder.embed(text).iter() {
            if out.iter().any(|(i, _)| *i == t.index) {
                continue;
            }
            if let Some(list) = self.postings.get(&t.index) {
                let df = list.len() as f32;
                out.push((t.index, (1.0 + (n - df + 0.5) / (df + 0.5)).ln()));
            }
        }
        Terms(out)
    }

    /// Every touched slot's score; `slots` bounds the slot numbers.
    pub(crate) fn scores(&self, terms: &Terms, slots: usize) -> Scores {
        let mut by_slot = vec![0.0_f32; slots];
        let mut touched = Vec::new();
        for (token, idf) in &terms.0 {
            for &(slot, weight) in self.postings.get(token).map_or(&[][..], Vec::as_slice) {
                let Some(acc) = by_slot.get_mut(slot as usize) else {
                    continue;
                };
                if *acc == 0.0 {
                    touched.push(slot);
                }
                *acc += idf * weight;
            }
        }
        Scores { by_slot, touched }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_crates_scorer() {
        let texts = [
            "Transcribes recorded meetings into text",
            "Extracts tables from scanned PDF invoices",
            "Meeting room booking for offices",
            "Text to speech in forty languages",
        ];
        let mut ours = Postings::new();
        let mut theirs = bm25::Scorer::<u32, u32>::new();
        let embedder = EmbedderBuilder::<u32, DefaultTokenizer>::with_avgdl(AVGDL).build();
        for (i, t) in texts.iter().enumerate() {
            let slot = u32::try_from(i).expect("small");
            ours.upsert(slot, t);
            theirs.upsert(&slot, embedder.embed(t));
        }
        for q in ["meeting text", "pdf tables", "speech", "nothing here"] {
            let scores = ours.scores(&ours.terms(q), texts.len());
            let expected = theirs.matches(&embedder.embed(q));
            assert_eq!(scores.touched.len(), expected.len(), "{q}");
            for m in expected {
                assert!((scores.of(m.id) - m.score).abs() < 1e-5, "{q}: {}", m.id);
            }
        }
        ours.remove(0);
        let scores = ours.scores(&ours.terms("transcribes"), texts.len());
        assert!(scores.touched.is_empty());
    }
}
