//! The LLM reflector's client: an OpenAI-compatible `/v1/chat/completions` endpoint (Ollama,
//! vLLM, llama.cpp's server, …) configured with `[learning] reflector = "openai"`, `base_url`,
//! `model`, `api_key`, `timeout_ms`.
//!
//! One request per reflection: `POST {base_url}/chat/completions` with
//! `{"model", "temperature": 0, "messages": [system, user]}`, the user message being
//! `agora_hyperspace::learning::reflect::llm_prompt`; the first choice's `message.content` must
//! parse under `reflect::parse_llm_answer`'s strict schema. Any failure (connection, deadline,
//! status, shape) is an `Err` naming it, and the caller falls back to the built-in reflector.
//! Bounded like the embeddings client: one deadline per call, the answer read up to 1 MiB,
//! redirects not followed. Blocking: run it on a worker thread.

use std::time::Duration;

use serde::Deserialize;

/// Largest answer read, in bytes.
const MAX_ANSWER_BYTES: u64 = 1024 * 1024;

/// Where the chat endpoint is.
#[derive(Clone)]
pub struct ChatConfig {
    /// API root (`/chat/completions` is appended).
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// Bearer token.
    pub api_key: Option<String>,
    /// Deadline of one call.
    pub timeout: Duration,
}

impl std::fmt::Debug for ChatConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is never printed.
        f.debug_struct("ChatConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A chat-completions client.
#[derive(Clone, Debug)]
pub(crate) struct Chat {
    config: ChatConfig,
    url: String,
    agent: ureq::Agent,
}

#[derive(Deserialize)]
struct Answer {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
}

#[derive(Deserialize)]
struct Message {
    content: Option<String>,
}

impl Chat {
    /// A client for `config` (no request is made).
    #[must_use]
    pub(crate) fn new(config: ChatConfig) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(concat!("agora/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let url = format!(
            "{}/chat/completions",
            config.base_url.trim().trim_end_matches('/')
        );
        Self { config, url, agent }
    }

    /// The model's answer to `prompt` (the content of its first choice).
    pub(crate) fn complete(&self, system: &str, prompt: &str) -> Result<String, String> {
        let fail = |what: String| format!("{}: {what}", self.url);
        let body = serde_json::json!({
            "model": self.config.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": prompt},
            ],
        });
        let mut req = self
            .agent
            .post(&self.url)
            .header("content-type", "application/json");
        if let Some(key) = &self.config.api_key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        let mut resp = req
            .send(body.to_string().as_bytes())
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()
            .map_err(|e| fail(e.to_string()))?;
        if !status.is_success() {
            return Err(fail(format!(
                "HTTP {}: {}",
                status.as_u16(),
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            )));
        }
        let answer: Answer =
            serde_json::from_slice(&bytes).map_err(|e| fail(format!("bad answer: {e}")))?;
        answer
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .ok_or_else(|| fail("no choice with content".into()))
    }
}
