//! The embedders of the memory service (`[memory] embedder`, `docs/node.md` "Memory").
//!
//! - `minilm`: all-MiniLM-L6-v2 (`agora_embed::MiniLm`, 384 dimensions), from the files that
//!   `agora memory install-model` puts in `<data>/models/all-minilm-l6-v2`; the node does not
//!   start when they are missing or broken.
//! - `lexical`: the built-in `lexical-v1` (`agora_embed::Lexical`): hashed words and character
//!   n-grams, always available, far weaker at meaning.
//! - `openai`: an OpenAI-compatible `/v1/embeddings` endpoint (`agora_embed::OpenAi`: Ollama,
//!   vLLM, TEI, …) at `base_url`, asking for `model`; id `openai:{model}`. The node asks it once
//!   at start to learn the dimension and does not start when it cannot.
//! - `auto` (the default): `minilm` when the model is installed, else `lexical`, said at start-up,
//!   in `/status` and in every search result (`embedder`).
//!
//! Every memory records the embedder that made its vector; vectors of different embedders are
//! never compared. The lexical embedder is always loaded, so a node can also search memories
//! that another node embedded lexically.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agora_embed::{Embedder, Lexical, MiniLm, OpenAi, OpenAiConfig, Threads};

/// Deadline of one call to an `openai` endpoint: under the worker budget (5 s), so a hung
/// endpoint frees its worker before the call is answered with a timeout.
const OPENAI_TIMEOUT: Duration = Duration::from_secs(4);

/// Which embedder embeds new memories and queries.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum EmbedderChoice {
    /// MiniLM when installed, else lexical.
    #[default]
    Auto,
    /// MiniLM; the node does not start without it.
    MiniLm,
    /// The built-in lexical embedder.
    Lexical,
    /// An OpenAI-compatible endpoint.
    OpenAi {
        /// The API root (`/embeddings` is appended).
        base_url: String,
        /// The model asked for.
        model: String,
        /// Bearer token, if the endpoint needs one.
        api_key: Option<String>,
    },
}

impl std::fmt::Debug for EmbedderChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("Auto"),
            Self::MiniLm => f.write_str("MiniLm"),
            Self::Lexical => f.write_str("Lexical"),
            // The key is never printed.
            Self::OpenAi {
                base_url, model, ..
            } => f
                .debug_struct("OpenAi")
                .field("base_url", base_url)
                .field("model", model)
                .finish_non_exhaustive(),
        }
    }
}

impl EmbedderChoice {
    /// The choice named by `[memory] embedder`; `openai` takes its endpoint from `base_url`,
    /// `model` and `api_key`.
    pub fn from_config(
        name: &str,
        base_url: Option<&str>,
        model: Option<&str>,
        api_key: Option<&str>,
    ) -> Result<Self, String> {
        match name {
            "auto" => Ok(Self::Auto),
            "minilm" => Ok(Self::MiniLm),
            "lexical" => Ok(Self::Lexical),
            "openai" => match (base_url, model) {
                (Some(base_url), Some(model)) => Ok(Self::OpenAi {
                    base_url: base_url.to_owned(),
                    model: model.to_owned(),
                    api_key: api_key.map(str::to_owned),
                }),
                _ => Err("embedder openai needs base_url and model".to_owned()),
            },
            other => Err(format!(
                "{other:?} is not an embedder (auto, minilm, lexical or openai)"
            )),
        }
    }
}

/// The loaded embedders.
#[derive(Debug, Clone)]
pub struct Embedders {
    default: Arc<dyn Embedder>,
    lexical: Arc<dyn Embedder>,
    minilm: Option<Arc<dyn Embedder>>,
    openai: Option<Arc<dyn Embedder>>,
}

impl Embedders {
    /// Loads what `choice` needs from `model_dir`.
    pub fn load(choice: &EmbedderChoice, model_dir: &Path) -> Result<Self, String> {
        let lexical: Arc<dyn Embedder> = Arc::new(Lexical::new());
        let installed = model_dir.join("model.safetensors").exists();
        let minilm: Option<Arc<dyn Embedder>> = match choice {
            EmbedderChoice::Lexical | EmbedderChoice::OpenAi { .. } => None,
            EmbedderChoice::Auto if !installed => None,
            // Every embedding runs on a worker of a bounded pool (memory, learning, improving):
            // each computes on that one thread rather than on rayon's global pool, which would
            // let one embedding spread over the cores that other calls are using.
            EmbedderChoice::Auto | EmbedderChoice::MiniLm => Some(Arc::new(
                MiniLm::load(model_dir)
                    .map_err(|e| {
                        format!(
                            "memory embedder minilm ({}): {e}; install it with `agora memory install-model`",
                            model_dir.display()
                        )
                    })?
                    .with_threads(Threads::One),
            )),
        };
        let openai: Option<Arc<dyn Embedder>> = match choice {
            EmbedderChoice::OpenAi {
                base_url,
                model,
                api_key,
            } => Some(Arc::new(
                OpenAi::connect(OpenAiConfig {
                    base_url: base_url.clone(),
                    model: model.clone(),
                    api_key: api_key.clone(),
                    timeout: OPENAI_TIMEOUT,
                })
                .map_err(|e| format!("memory embedder openai: {e}"))?,
            )),
            _ => None,
        };
        let default = openai
            .clone()
            .or_else(|| minilm.clone())
            .unwrap_or_else(|| Arc::clone(&lexical));
        Ok(Self {
            default,
            lexical,
            minilm,
            openai,
        })
    }

    /// The embedder of new memories and queries.
    pub fn default_embedder(&self) -> Arc<dyn Embedder> {
        Arc::clone(&self.default)
    }

    /// Its id (`minilm-l6-v2`, `lexical-v1` or `openai:{model}`).
    pub fn default_id(&self) -> &str {
        self.default.id()
    }

    /// The loaded embedder with id `id`.
    pub fn get(&self, id: &str) -> Option<Arc<dyn Embedder>> {
        [
            Some(&self.lexical),
            self.minilm.as_ref(),
            self.openai.as_ref(),
        ]
        .into_iter()
        .flatten()
        .find(|e| e.id() == id)
        .cloned()
    }

    /// Ids of the loaded embedders.
    pub fn ids(&self) -> Vec<String> {
        [
            Some(&self.lexical),
            self.minilm.as_ref(),
            self.openai.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|e| e.id().to_owned())
        .collect()
    }
}
