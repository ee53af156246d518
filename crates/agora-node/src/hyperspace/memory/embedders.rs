//! The embedders of the memory service (`[memory] embedder`, `docs/node.md` "Memory").
//!
//! - `minilm`: all-MiniLM-L6-v2 (`agora_embed::MiniLm`, 384 dimensions), from the files that
//!   `agora memory install-model` puts in `<data>/models/all-minilm-l6-v2`; the node does not
//!   start when they are missing or broken.
//! - `lexical`: the built-in `lexical-v1` (`agora_embed::Lexical`): hashed words and character
//!   n-grams, always available, far weaker at meaning.
//! - `auto` (the default): `minilm` when the model is installed, else `lexical`, said at start-up,
//!   in `/status` and in every search result (`embedder`).
//!
//! Every memory records the embedder that made its vector; vectors of different embedders are
//! never compared. The lexical embedder is always loaded, so a node can also search memories
//! that another node embedded lexically.

use std::path::Path;
use std::sync::Arc;

use agora_embed::{Embedder, Lexical, MiniLm};

/// Which embedder embeds new memories and queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbedderChoice {
    /// MiniLM when installed, else lexical.
    #[default]
    Auto,
    /// MiniLM; the node does not start without it.
    MiniLm,
    /// The built-in lexical embedder.
    Lexical,
}

impl std::str::FromStr for EmbedderChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "minilm" => Ok(Self::MiniLm),
            "lexical" => Ok(Self::Lexical),
            other => Err(format!(
                "{other:?} is not an embedder (auto, minilm or lexical)"
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
}

impl Embedders {
    /// Loads what `choice` needs from `model_dir`.
    pub fn load(choice: &EmbedderChoice, model_dir: &Path) -> Result<Self, String> {
        let lexical: Arc<dyn Embedder> = Arc::new(Lexical::new());
        let installed = model_dir.join("model.safetensors").exists();
        let minilm: Option<Arc<dyn Embedder>> = match choice {
            EmbedderChoice::Lexical => None,
            EmbedderChoice::Auto if !installed => None,
            EmbedderChoice::Auto | EmbedderChoice::MiniLm => Some(Arc::new(
                MiniLm::load(model_dir).map_err(|e| {
                    format!(
                        "memory embedder minilm ({}): {e}; install it with `agora memory install-model`",
                        model_dir.display()
                    )
                })?,
            )),
        };
        let default = minilm.clone().unwrap_or_else(|| Arc::clone(&lexical));
        Ok(Self {
            default,
            lexical,
            minilm,
        })
    }

    /// The embedder of new memories and queries.
    pub fn default_embedder(&self) -> Arc<dyn Embedder> {
        Arc::clone(&self.default)
    }

    /// Its id (`minilm-l6-v2` or `lexical-v1`).
    pub fn default_id(&self) -> &str {
        self.default.id()
    }

    /// The loaded embedder with id `id`.
    pub fn get(&self, id: &str) -> Option<Arc<dyn Embedder>> {
        [Some(&self.lexical), self.minilm.as_ref()]
            .into_iter()
            .flatten()
            .find(|e| e.id() == id)
            .cloned()
    }

    /// Ids of the loaded embedders.
    pub fn ids(&self) -> Vec<String> {
        [Some(&self.lexical), self.minilm.as_ref()]
            .into_iter()
            .flatten()
            .map(|e| e.id().to_owned())
            .collect()
    }
}
