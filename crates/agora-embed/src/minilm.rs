//! `minilm-l6-v2`: all-MiniLM-L6-v2 on candle's CPU backend.
//!
//! # Threads
//!
//! candle 0.11's CPU backend parallelises a forward pass three ways, each sized from the
//! environment of the process:
//!
//! - **Matrix products** (`gemm`): split into `RAYON_NUM_THREADS` parts (else one per physical
//!   core, or per CPU of `CANDLE_CPU_MASK`), read at every product; with 1 the product runs on
//!   the calling thread, otherwise on the current rayon pool (rayon's global pool unless the
//!   call runs inside another pool).
//! - **Row operations** of candle-nn (softmax, layer norm): rayon's current pool (the global
//!   one is sized by `RAYON_NUM_THREADS`, else one thread per logical CPU).
//! - **Element-wise operations on large tensors** (64 Ki elements or more, e.g. GELU at batch
//!   16): candle's own process-wide barrier pool of `CANDLE_NUM_THREADS - 1` spinning workers
//!   (else `RAYON_NUM_THREADS - 1`, else physical cores - 1) plus the caller, created at the
//!   first such operation and never resized. Concurrent callers take turns on it.
//!
//! [`Threads::One`] runs each [`Embedder::embed`] call inside a one-thread rayon pool that the
//! call has to itself (the `MiniLm` keeps one per concurrent caller and reuses them): the
//! products and row operations then run on that single thread, whatever the environment. Only
//! the barrier pool is beyond reach of a library; start the process with
//! `CANDLE_NUM_THREADS=1` (or `RAYON_NUM_THREADS=1`) and it has no worker, so that each call
//! computes on exactly one thread. [`candle_threads`] reports what the environment gives.
//!
//! Measured on two cores (`docs/performance.md`): a second thread does not speed up one short
//! sentence (products that small are not split), and with the barrier pool left at two
//! threads a batch of 16 ran slower than on one. A caller with its own bounded pool should use
//! [`Threads::One`] and start the process with `CANDLE_NUM_THREADS=1`.

use std::fs;
use std::path::Path;
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::install::pinned_sha256;
use crate::{DIM, EmbedError, Embedder, check_texts, normalize};

/// The model's `max_seq_length` (sentence-transformers): longer texts are cut to this many
/// tokens, `[CLS]` and `[SEP]` included.
pub(crate) const MAX_TOKENS: usize = 256;

/// Tokens (padding included) in one forward pass: texts are sorted by length and cut into
/// passes of at most this many padded tokens (and at most [`MAX_BATCH`] texts), which bounds
/// the attention buffers at about 25 MB.
const TOKENS_PER_PASS: usize = 2048;
/// Texts in one forward pass.
const MAX_BATCH: usize = 64;

/// How an [`Embedder::embed`] call of [`MiniLm`] uses threads (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Threads {
    /// candle's defaults: products and row operations on rayon's global pool, element-wise
    /// operations on candle's barrier pool.
    #[default]
    Candle,
    /// Each call computes on one thread of its own (plus candle's barrier pool, which
    /// `CANDLE_NUM_THREADS=1` empties). For callers that run embeddings on their own bounded
    /// pool of threads.
    One,
}

/// Thread counts candle's CPU backend takes from the environment (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CandleThreads {
    /// Parts a matrix product is split into (`RAYON_NUM_THREADS`, else physical cores).
    pub matmul: usize,
    /// Threads of the barrier pool for element-wise operations, the caller included
    /// (`CANDLE_NUM_THREADS`, else `matmul`). 1: element-wise operations run on the caller.
    pub elementwise: usize,
}

/// What candle's CPU backend will use, read from the environment as candle reads it. The
/// barrier pool keeps the size it had at its first use.
pub fn candle_threads() -> CandleThreads {
    let matmul = candle_core::utils::get_num_threads();
    let elementwise = std::env::var("CANDLE_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(matmul);
    CandleThreads {
        matmul,
        elementwise,
    }
}

/// all-MiniLM-L6-v2 (id `minilm-l6-v2`, 384 dimensions) on the CPU.
pub struct MiniLm {
    model: BertModel,
    tokenizer: Tokenizer,
    threads: Threads,
    /// One-thread pools for [`Threads::One`], one per caller at once.
    pools: Mutex<Vec<rayon::ThreadPool>>,
}

impl std::fmt::Debug for MiniLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLm")
            .field("id", &Self::ID)
            .field("dim", &DIM)
            .field("max_tokens", &MAX_TOKENS)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>, EmbedError> {
    let path = dir.join(name);
    fs::read(&path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            EmbedError::MissingFile { path }
        } else {
            EmbedError::Io { path, source }
        }
    })
}

/// `bytes` must be the pinned file `name`.
fn check_hash(name: &str, bytes: &[u8]) -> Result<(), EmbedError> {
    let expected =
        pinned_sha256(name).ok_or_else(|| EmbedError::BadModel(format!("{name} is not pinned")))?;
    let actual = hex::encode(Sha256::digest(bytes));
    if actual != expected {
        return Err(EmbedError::BadModel(format!(
            "{name} has SHA-256 {actual}, not all-MiniLM-L6-v2's {expected}"
        )));
    }
    Ok(())
}

#[allow(clippy::needless_pass_by_value)] // the shape `map_err` wants
fn inference(e: candle_core::Error) -> EmbedError {
    EmbedError::Inference(e.to_string())
}

impl MiniLm {
    /// The id of this embedder's vectors.
    pub const ID: &'static str = "minilm-l6-v2";

    /// Loads the model from `dir` (as [`crate::install_from_wheel`] leaves it):
    /// `model.safetensors`, `tokenizer.json` and `config.json`, each checked against its pinned
    /// SHA-256 (vectors labelled `minilm-l6-v2` come from exactly this model), plus
    /// `1_Pooling/config.json` when present, which must ask for mean pooling. Reads about
    /// 90 MB and takes a fraction of a second; the model then holds about 90 MB of memory.
    /// Threads: [`Threads::Candle`] (see [`MiniLm::with_threads`]).
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let config_bytes = read(dir, "config.json")?;
        check_hash("config.json", &config_bytes)?;
        let tokenizer_bytes = read(dir, "tokenizer.json")?;
        check_hash("tokenizer.json", &tokenizer_bytes)?;
        let weights = read(dir, "model.safetensors")?;
        check_hash("model.safetensors", &weights)?;
        let pooling = dir.join("1_Pooling/config.json");
        if pooling.exists() {
            let p = read(dir, "1_Pooling/config.json")?;
            let p: serde_json::Value = serde_json::from_slice(&p)
                .map_err(|e| EmbedError::BadModel(format!("1_Pooling/config.json: {e}")))?;
            if p.get("pooling_mode_mean_tokens") != Some(&serde_json::Value::Bool(true)) {
                return Err(EmbedError::BadModel(
                    "1_Pooling/config.json does not ask for mean pooling".into(),
                ));
            }
        }

        let config: Config = serde_json::from_slice(&config_bytes)
            .map_err(|e| EmbedError::BadModel(format!("config.json: {e}")))?;
        if config.hidden_size != DIM {
            return Err(EmbedError::BadModel(format!(
                "hidden size {} instead of {DIM}",
                config.hidden_size
            )));
        }
        let device = Device::Cpu;
        let bad = |e: candle_core::Error| EmbedError::BadModel(format!("model.safetensors: {e}"));
        let mut tensors = candle_core::safetensors::load_buffer(&weights, &device).map_err(bad)?;
        drop(weights);
        // candle's Linear multiplies by `weight.t()`, a column-major view that gemm reads
        // slowly when few tokens pass (it dominated a short sentence: 3.4x slower at 3 tokens,
        // 1.3x at 20). Store each linear weight as the transposed view of its contiguous
        // transpose, so that `weight.t()` is contiguous row-major. Same numbers, same shape.
        for (name, t) in &mut tensors {
            if name.contains("encoder.layer.") && t.rank() == 2 {
                *t = t
                    .t()
                    .and_then(|x| x.contiguous())
                    .and_then(|x| x.t())
                    .map_err(bad)?;
            }
        }
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &device);
        let model = BertModel::load(vb, &config).map_err(bad)?;

        let mut tokenizer = Tokenizer::from_bytes(&tokenizer_bytes)
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        // The shipped tokenizer.json pads every input to 128 tokens and truncates at 128;
        // sentence-transformers overrides both (no fixed padding, truncation at 256). Padding
        // is done here per forward pass, to the longest text of the pass.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: MAX_TOKENS,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        Ok(Self {
            model,
            tokenizer,
            threads: Threads::Candle,
            pools: Mutex::new(Vec::new()),
        })
    }

    /// Sets how each call uses threads (see the module docs).
    #[must_use]
    pub fn with_threads(mut self, threads: Threads) -> Self {
        self.threads = threads;
        self
    }

    /// The thread setting.
    pub fn threads(&self) -> Threads {
        self.threads
    }

    /// Tokens the model reads of `text`, `[CLS]` and `[SEP]` included: at most
    /// [`MiniLm::MAX_TOKENS`] (the rest of a longer text is ignored).
    pub fn token_count(&self, text: &str) -> Result<usize, EmbedError> {
        Ok(self.encode(text)?.0.len())
    }

    /// Longest input the model reads, in tokens; beyond, text is cut.
    pub const MAX_TOKENS: usize = MAX_TOKENS;

    /// Token ids and token type ids of one text, truncated.
    fn encode(&self, text: &str) -> Result<(Vec<u32>, Vec<u32>), EmbedError> {
        let enc = self
            .tokenizer
            .encode_fast(text, true)
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        Ok((enc.get_ids().to_vec(), enc.get_type_ids().to_vec()))
    }

    /// One forward pass over texts of similar length, padded to the longest; mean pooling over
    /// the real tokens; L2 normalisation.
    fn pass(&self, batch: &[&(Vec<u32>, Vec<u32>)]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let n = batch.len();
        let len = batch.iter().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        let mut ids = vec![0u32; n * len];
        let mut types = vec![0u32; n * len];
        let mut mask = vec![0u32; n * len];
        for (row, (i, t)) in batch.iter().enumerate() {
            let at = row * len;
            ids[at..at + i.len()].copy_from_slice(i);
            types[at..at + t.len()].copy_from_slice(t);
            mask[at..at + i.len()].fill(1);
        }
        let device = &self.model.device;
        let ids = Tensor::from_vec(ids, (n, len), device).map_err(inference)?;
        let types = Tensor::from_vec(types, (n, len), device).map_err(inference)?;
        let mask_t = Tensor::from_vec(mask.clone(), (n, len), device).map_err(inference)?;
        let out = self
            .model
            .forward(&ids, &types, Some(&mask_t))
            .map_err(inference)?;
        let out: Vec<Vec<Vec<f32>>> = out.to_vec3().map_err(inference)?;
        let mut vectors = Vec::with_capacity(n);
        for (row, tokens) in out.iter().enumerate() {
            let mut v = vec![0.0f32; DIM];
            let mut count = 0.0f32;
            for (pos, h) in tokens.iter().enumerate() {
                if mask[row * len + pos] == 1 {
                    count += 1.0;
                    for (a, b) in v.iter_mut().zip(h) {
                        *a += b;
                    }
                }
            }
            v.iter_mut().for_each(|a| *a /= count.max(1.0));
            if !normalize(&mut v) {
                return Err(EmbedError::Inference("the model gave a zero vector".into()));
            }
            vectors.push(v);
        }
        Ok(vectors)
    }

    fn embed_all(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let encoded = texts
            .iter()
            .map(|t| self.encode(t))
            .collect::<Result<Vec<_>, _>>()?;
        // shortest first, so that each pass pads little
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| encoded[i].0.len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        let mut start = 0;
        while start < order.len() {
            let mut end = start + 1;
            while end < order.len()
                && end - start < MAX_BATCH
                && (end + 1 - start) * encoded[order[end]].0.len() <= TOKENS_PER_PASS
            {
                end += 1;
            }
            let batch: Vec<_> = order[start..end].iter().map(|&i| &encoded[i]).collect();
            for (&i, v) in order[start..end].iter().zip(self.pass(&batch)?) {
                out[i] = v;
            }
            start = end;
        }
        Ok(out)
    }

    /// Runs `f` on a one-thread pool of its own ([`Threads::One`]).
    fn on_one_thread<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R, EmbedError> {
        let pool = self.pools.lock().ok().and_then(|mut p| p.pop());
        let pool = match pool {
            Some(p) => p,
            None => rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .thread_name(|_| "agora-embed".into())
                .build()
                .map_err(|e| EmbedError::Inference(format!("cannot start a thread: {e}")))?,
        };
        let r = pool.install(f);
        if let Ok(mut p) = self.pools.lock() {
            p.push(pool);
        }
        Ok(r)
    }
}

impl Embedder for MiniLm {
    fn id(&self) -> &str {
        Self::ID
    }

    fn dim(&self) -> usize {
        DIM
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        check_texts(texts)?;
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        match self.threads {
            Threads::Candle => self.embed_all(texts),
            Threads::One => self.on_one_thread(|| self.embed_all(texts))?,
        }
    }
}
