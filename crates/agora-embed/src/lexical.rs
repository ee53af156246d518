//! `lexical-v1`: the built-in embedder used when no model is installed.
//!
//! The recipe (pinned by `tests/vectors/memory/lexical.json`; any change to it needs a new id):
//!
//! 1. Normalise: lowercase the text (`str::to_lowercase`), split it at Unicode whitespace and
//!    join the pieces with one space (`N`). No other Unicode normalisation (NFC and NFD spellings
//!    of a word differ).
//! 2. Word features: every maximal run of alphanumeric characters (`char::is_alphanumeric`) in
//!    `N`, as the bytes `"w:" + run`, weight 1.0 per occurrence.
//! 3. Character 3-gram features: every window of three consecutive characters (Unicode scalar
//!    values, punctuation and spaces included) of `" " + N + " "`, as the bytes `"c:" + window`,
//!    weight 0.5 per occurrence. Any text with a non-whitespace character has at least one.
//! 4. Signed hashing: `d = SHA-256(feature)`; bucket `u64::from_be_bytes(d[0..8]) % 384`; sign
//!    `+` when `d[8] < 0x80`, else `-`; `v[bucket] += sign * weight`.
//! 5. Divide by the L2 norm. Should every feature cancel out (norm 0, possible only through
//!    collisions), the vector is the one-hot of the first 3-gram's bucket with its sign.
//!
//! A text that is empty or only whitespace has no features: [`EmbedError::EmptyInput`], as for
//! every embedder. All arithmetic before step 5 is on multiples of 0.5, exact in f32, so the
//! output is the same on every platform (`to_lowercase` and `is_alphanumeric` follow the
//! Unicode tables of the Rust release).

use sha2::{Digest, Sha256};

use crate::{DIM, EmbedError, Embedder, check_texts, normalize};

/// Weight of one occurrence of a word.
const WORD_WEIGHT: f32 = 1.0;
/// Weight of one occurrence of a character 3-gram.
const TRIGRAM_WEIGHT: f32 = 0.5;

/// Signed feature hashing of words and character 3-grams (id `lexical-v1`, 384 dimensions).
/// It finds shared words and spellings, not meanings: a fallback for a node without a model.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lexical;

impl Lexical {
    /// The id of this embedder's vectors.
    pub const ID: &'static str = "lexical-v1";

    /// The embedder (it has no state).
    pub fn new() -> Self {
        Self
    }

    /// One text's vector; `None` when it has no feature (empty or only whitespace).
    fn embed_one(text: &str) -> Option<Vec<f32>> {
        let lower = text.to_lowercase();
        let norm = lower.split_whitespace().collect::<Vec<_>>().join(" ");
        if norm.is_empty() {
            return None;
        }
        let mut v = vec![0.0f32; DIM];
        let mut feature = Vec::with_capacity(64);
        for word in norm
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            feature.clear();
            feature.extend_from_slice(b"w:");
            feature.extend_from_slice(word.as_bytes());
            let (bucket, sign) = hash(&feature);
            v[bucket] += sign * WORD_WEIGHT;
        }
        let padded: Vec<char> = std::iter::once(' ')
            .chain(norm.chars())
            .chain(std::iter::once(' '))
            .collect();
        let mut first = None;
        let mut buf = [0u8; 4];
        for w in padded.windows(3) {
            feature.clear();
            feature.extend_from_slice(b"c:");
            for c in w {
                feature.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            let (bucket, sign) = hash(&feature);
            first.get_or_insert((bucket, sign));
            v[bucket] += sign * TRIGRAM_WEIGHT;
        }
        if !normalize(&mut v) {
            // every feature cancelled out; `first` is set: `padded` has at least 3 characters
            let (bucket, sign) = first?;
            v.iter_mut().for_each(|x| *x = 0.0);
            v[bucket] = sign;
        }
        Some(v)
    }
}

/// Bucket and sign of one feature.
fn hash(feature: &[u8]) -> (usize, f32) {
    let d = Sha256::digest(feature);
    let mut head = [0u8; 8];
    head.copy_from_slice(&d[..8]);
    let bucket = (u64::from_be_bytes(head) % DIM as u64) as usize;
    let sign = if d[8] < 0x80 { 1.0 } else { -1.0 };
    (bucket, sign)
}

impl Embedder for Lexical {
    fn id(&self) -> &str {
        Self::ID
    }

    fn dim(&self) -> usize {
        DIM
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        check_texts(texts)?;
        texts
            .iter()
            .enumerate()
            .map(|(index, t)| Self::embed_one(t).ok_or(EmbedError::EmptyInput { index }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosine;

    #[test]
    fn unit_length_and_deterministic() {
        let e = Lexical::new();
        let v = e
            .embed(&["Hello, world!", "hello   WORLD", "x", "🙂", "東京"])
            .unwrap();
        for x in &v {
            assert_eq!(x.len(), DIM);
            let n: f32 = x.iter().map(|a| a * a).sum::<f32>().sqrt();
            assert!((n - 1.0).abs() < 1e-5, "norm {n}");
        }
        // case and spacing do not matter; punctuation does a little
        let a = Lexical::embed_one("hello world").unwrap();
        assert_eq!(a, Lexical::embed_one("  Hello \t WORLD\n").unwrap());
        assert!(cosine(&a, &v[0]) > 0.8);
        assert_eq!(v[0], e.embed(&["Hello, world!"]).unwrap()[0]);
    }

    #[test]
    fn empty_text_is_an_error() {
        let e = Lexical::new();
        assert!(matches!(
            e.embed(&["ok", " \n\t"]),
            Err(EmbedError::EmptyInput { index: 1 })
        ));
        assert!(matches!(
            e.embed(&[""]),
            Err(EmbedError::EmptyInput { index: 0 })
        ));
        assert!(e.embed(&[]).unwrap().is_empty());
        assert!(Lexical::embed_one("   ").is_none());
    }

    #[test]
    fn shared_words_score_higher() {
        let q = Lexical::embed_one("rate limit errors").unwrap();
        let near = Lexical::embed_one("handling rate limit errors with retries").unwrap();
        let far = Lexical::embed_one("a recipe for tomato soup").unwrap();
        assert!(cosine(&q, &near) > cosine(&q, &far) + 0.3);
    }

    #[test]
    fn too_long_is_an_error() {
        let long = "a".repeat(crate::MAX_TEXT_BYTES + 1);
        assert!(matches!(
            Lexical::new().embed(&[&long]),
            Err(EmbedError::InputTooLong { index: 0, .. })
        ));
    }
}
