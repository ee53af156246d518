//! An OpenAI-compatible `/v1/embeddings` endpoint as an embedder (feature `openai`): Ollama,
//! vLLM, Hugging Face TEI, llama.cpp's server, or OpenAI itself.
//!
//! The request is `POST {base_url}/embeddings` with the JSON body `{"model", "input": [texts]}`
//! and, when a key is configured, `Authorization: Bearer {key}`; the answer's
//! `data[].embedding` arrays (put back in input order by `data[].index`) are checked (one per
//! text, all of the dimension learned at connect time, finite, not all zero) and L2-normalised,
//! since not every server normalises. The id is `openai:{model}`: two nodes that name the same
//! model share a vector space, whichever server they ask.
//!
//! Bounded: every call has one deadline (connect, send and read included; default 10 s), the
//! answer is read up to [`MAX_RESPONSE_BYTES`], redirects are not followed (a key is never sent
//! to a host that was not configured), and at most [`MAX_BATCH`] texts go in one request.
//!
//! The call blocks its thread: like every [`Embedder`], run it on a blocking pool.

use std::time::Duration;

use serde::Deserialize;

use crate::{EmbedError, Embedder, check_texts, normalize};

/// Largest answer read, in bytes.
pub const MAX_RESPONSE_BYTES: u64 = 32 * 1024 * 1024;
/// Most texts sent in one request (OpenAI's own limit is 2,048); longer slices are split.
pub const MAX_BATCH: usize = 256;
/// Largest dimension accepted from a server.
pub const MAX_DIM: usize = 4096;
/// The text embedded once at connect time to learn the dimension.
const PROBE_TEXT: &str = "dimension probe";

/// Where and how to reach the endpoint.
#[derive(Clone, Debug)]
pub struct OpenAiConfig {
    /// The API root, e.g. `http://127.0.0.1:11434/v1` (Ollama); `/embeddings` is appended.
    pub base_url: String,
    /// The model name the server knows, e.g. `nomic-embed-text`.
    pub model: String,
    /// Sent as a bearer token when set.
    pub api_key: Option<String>,
    /// Deadline of one call.
    pub timeout: Duration,
}

/// An OpenAI-compatible embeddings endpoint (id `openai:{model}`).
pub struct OpenAi {
    id: String,
    model: String,
    url: String,
    api_key: Option<String>,
    agent: ureq::Agent,
    dim: usize,
}

impl std::fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is never printed.
        f.debug_struct("OpenAi")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("dim", &self.dim)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: ErrorBody,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorBody {
    Object { message: String },
    Text(String),
}

impl OpenAi {
    /// The id of the vectors of `model`.
    pub fn id_for(model: &str) -> String {
        format!("openai:{model}")
    }

    /// Checks the settings and asks the endpoint once, to learn the dimension of its vectors.
    /// Fails with [`EmbedError::Remote`] when the endpoint cannot be reached or answers wrong.
    pub fn connect(config: OpenAiConfig) -> Result<Self, EmbedError> {
        let base = config.base_url.trim().trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(EmbedError::BadModel(format!(
                "base_url {base:?} is not an http:// or https:// URL"
            )));
        }
        let model = config.model.trim();
        if model.is_empty() {
            return Err(EmbedError::BadModel("no model named".into()));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(concat!("agora-embed/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let mut this = Self {
            id: Self::id_for(model),
            model: model.to_owned(),
            url: format!("{base}/embeddings"),
            api_key: config.api_key.filter(|k| !k.is_empty()),
            agent,
            dim: 0,
        };
        let probe = this.request(&[PROBE_TEXT])?;
        let dim = probe.first().map_or(0, Vec::len);
        if dim == 0 || dim > MAX_DIM {
            return Err(EmbedError::Remote(format!(
                "{}: vectors of {dim} dimensions (expected 1..={MAX_DIM})",
                this.url
            )));
        }
        this.dim = dim;
        Ok(this)
    }

    /// The URL asked.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// One request for `texts` (at most [`MAX_BATCH`]); vectors in input order, normalised.
    fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let remote = |what: String| EmbedError::Remote(format!("{}: {what}", self.url));
        let body = serde_json::to_vec(&serde_json::json!({ "model": self.model, "input": texts }))
            .map_err(|e| remote(e.to_string()))?;
        let mut req = self
            .agent
            .post(&self.url)
            .header("content-type", "application/json");
        if let Some(key) = &self.api_key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        let mut resp = req.send(&body[..]).map_err(|e| remote(e.to_string()))?;
        let status = resp.status();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| remote(e.to_string()))?;
        if !status.is_success() {
            let why = match serde_json::from_slice::<ErrorAnswer>(&bytes) {
                Ok(ErrorAnswer {
                    error: ErrorBody::Object { message } | ErrorBody::Text(message),
                }) => message,
                Err(_) => String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
            };
            return Err(remote(format!("HTTP {}: {why}", status.as_u16())));
        }
        let answer: Answer =
            serde_json::from_slice(&bytes).map_err(|e| remote(format!("bad answer: {e}")))?;
        if answer.data.len() != texts.len() {
            return Err(remote(format!(
                "{} vectors for {} texts",
                answer.data.len(),
                texts.len()
            )));
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for item in answer.data {
            let slot = out
                .get_mut(item.index)
                .ok_or_else(|| remote(format!("index {} out of range", item.index)))?;
            if slot.is_some() {
                return Err(remote(format!("index {} twice", item.index)));
            }
            let mut v = item.embedding;
            if self.dim != 0 && v.len() != self.dim {
                return Err(remote(format!(
                    "a vector of {} dimensions, not {}",
                    v.len(),
                    self.dim
                )));
            }
            if !normalize(&mut v) {
                return Err(remote(format!(
                    "vector {} is zero or not finite",
                    item.index
                )));
            }
            *slot = Some(v);
        }
        // Every slot is filled: as many items as texts, each index in range and seen once.
        Ok(out.into_iter().flatten().collect())
    }
}

impl Embedder for OpenAi {
    fn id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        check_texts(texts)?;
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(MAX_BATCH) {
            out.extend(self.request(chunk)?);
        }
        Ok(out)
    }
}
