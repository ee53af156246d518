//! What nodes say to each other to search each other's directories (issue 33 item 5).
//!
//! A search with `scope: "mesh"` fans out the way `tool.discover` does:
//!
//! 1. **this node** — its own index;
//! 2. **the DHT** — the nodes providing [`provider_key`] of the query's words (every node
//!    provides the words of the capabilities of what it hosts, at most [`MAX_PROVIDED`]) are
//!    sent a [`Request::Search`] on [`PROTOCOL`] and answer with a [`Response::Hits`];
//! 3. **a gossip ask** — an [`Ask`] on [`ASK_TOPIC`]; a node whose own directory has hits for
//!    it sends them to the asker (the gossip message's authenticated source) as a
//!    [`Request::Answer`], acknowledged with [`Response::Ack`].
//!
//! Answers are merged by [`crate::merge::merge`] within the asker's deadline. A node answers
//! only from what it hosts or holds itself (a `scope: "local"` search), so an ask never
//! travels further than one gossip flood, and every message is bounded ([`MAX_MESSAGE_BYTES`],
//! [`crate::merge::MAX_REMOTE_HITS`]).

use serde::{Deserialize, Serialize};

use crate::hit::Hit;
use crate::query::{Scope, SearchParams};

/// The gossip topic of asks.
pub const ASK_TOPIC: &str = "agora/directory/v1/ask";
/// The request-response protocol of searches and answers.
pub const PROTOCOL: &str = "/agora/directory/1.0.0";
/// Largest ask, request or response, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 512 * 1024;
/// Most words of one query looked up in the DHT.
pub const MAX_LOOKUP_WORDS: usize = 4;
/// Most DHT keys one node provides for its directory.
pub const MAX_PROVIDED: usize = 64;
/// Longest ask id, in bytes.
pub const MAX_ASK_ID_BYTES: usize = 64;

/// A search asked of the mesh by gossip.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ask {
    /// The asker's id for this search (answers carry it back).
    pub ask_id: String,
    /// The search (its scope is ignored: answers come from the answerer's own directory).
    pub params: SearchParams,
}

/// A request on [`PROTOCOL`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Request {
    /// Search your own directory (the DHT tier).
    Search {
        /// The search.
        params: SearchParams,
    },
    /// Hits for an ask of ours (the gossip tier).
    #[serde(rename_all = "camelCase")]
    Answer {
        /// The ask answered.
        ask_id: String,
        /// The answering node's hits.
        hits: Vec<Hit>,
    },
}

/// A response on [`PROTOCOL`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Response {
    /// Hits of a [`Request::Search`].
    Hits {
        /// The hits.
        hits: Vec<Hit>,
    },
    /// An answer was received.
    Ack,
    /// The request was refused.
    Refused {
        /// Why.
        reason: String,
    },
}

/// Why a message was not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// Longer than [`MAX_MESSAGE_BYTES`].
    #[error("message of {0} bytes; at most {MAX_MESSAGE_BYTES}")]
    TooLarge(usize),
    /// Not the shape.
    #[error("not a directory message: {0}")]
    Malformed(String),
    /// An ask id that is empty or too long.
    #[error("ask id must be 1 to {MAX_ASK_ID_BYTES} bytes")]
    AskId,
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, AskError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(AskError::TooLarge(bytes.len()));
    }
    serde_json::from_slice(bytes).map_err(|e| AskError::Malformed(e.to_string()))
}

fn check_id(id: &str) -> Result<(), AskError> {
    if id.is_empty() || id.len() > MAX_ASK_ID_BYTES {
        return Err(AskError::AskId);
    }
    Ok(())
}

impl Ask {
    /// Reads an ask; its search is made local.
    ///
    /// # Errors
    ///
    /// [`AskError`].
    pub fn decode(bytes: &[u8]) -> Result<Self, AskError> {
        let mut ask: Self = decode(bytes)?;
        check_id(&ask.ask_id)?;
        ask.params.scope = Some(Scope::Local);
        Ok(ask)
    }
}

impl Request {
    /// Reads a request; a search is made local, an answer keeps at most
    /// [`crate::merge::MAX_REMOTE_HITS`] hits.
    ///
    /// # Errors
    ///
    /// [`AskError`].
    pub fn decode(bytes: &[u8]) -> Result<Self, AskError> {
        let mut r: Self = decode(bytes)?;
        match &mut r {
            Self::Search { params } => params.scope = Some(Scope::Local),
            Self::Answer { ask_id, hits } => {
                check_id(ask_id)?;
                hits.truncate(crate::merge::MAX_REMOTE_HITS);
            }
        }
        Ok(r)
    }
}

impl Response {
    /// Reads a response; at most [`crate::merge::MAX_REMOTE_HITS`] hits are kept.
    ///
    /// # Errors
    ///
    /// [`AskError`].
    pub fn decode(bytes: &[u8]) -> Result<Self, AskError> {
        let mut r: Self = decode(bytes)?;
        if let Self::Hits { hits } = &mut r {
            hits.truncate(crate::merge::MAX_REMOTE_HITS);
        }
        Ok(r)
    }
}

/// Encodes any message (they are all plain JSON).
#[must_use]
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    serde_json::to_vec(message).unwrap_or_default()
}

/// The DHT key a node provides for one word of its records' capabilities.
#[must_use]
pub fn provider_key(word: &str) -> Vec<u8> {
    format!("agora/directory/v1/word/{}", word.to_lowercase()).into_bytes()
}

/// The words of `text` worth a DHT lookup or a provider record: lowercase, at least three
/// letters or digits, in order, without repeats.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut seen: Vec<String> = Vec::new();
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .filter(move |w| {
            if seen.contains(w) {
                false
            } else {
                seen.push(w.clone());
                true
            }
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn round_trips_and_bounds() {
        let params: SearchParams =
            serde_json::from_value(json!({"query": "pdf tables", "scope": "mesh"})).expect("ok");
        let ask = Ask {
            ask_id: "a1".into(),
            params,
        };
        let back = Ask::decode(&encode(&ask)).expect("decodes");
        assert_eq!(back.params.scope, Some(Scope::Local), "answers are local");
        let r = Request::decode(br#"{"type":"answer","askId":"a1","hits":[]}"#).expect("ok");
        assert_eq!(
            r,
            Request::Answer {
                ask_id: "a1".into(),
                hits: vec![]
            }
        );
        assert_eq!(
            Response::decode(&encode(&Response::Ack)).expect("ok"),
            Response::Ack
        );
        assert!(matches!(
            Request::decode(br#"{"type":"answer","askId":"","hits":[]}"#),
            Err(AskError::AskId)
        ));
        assert!(matches!(
            Ask::decode(&vec![b' '; MAX_MESSAGE_BYTES + 1]),
            Err(AskError::TooLarge(_))
        ));
        assert!(matches!(
            Request::decode(b"{}"),
            Err(AskError::Malformed(_))
        ));
    }

    #[test]
    fn words_are_lowercase_unique_and_long_enough() {
        let w: Vec<String> = words("PDF-table of PDF tables, ok").collect();
        assert_eq!(w, ["pdf", "table", "tables"]);
        assert_eq!(provider_key("PDF"), b"agora/directory/v1/word/pdf".to_vec());
    }
}
