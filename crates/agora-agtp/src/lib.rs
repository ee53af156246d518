//! Sans-IO implementation of AGTP/1.0 and its Agent Name Service
//! (draft-hood-agtp-discovery-00, "AGTP Agent Discovery and Name Service").
//!
//! - [`codec`]: the AGTP/1.0 message framing (request and response lines, headers,
//!   `Content-Length` bodies, limits), incremental and allocation-light.
//! - [`scope`]: Authority-Scope lists, wildcard matching and claims checked against a caller's
//!   declared scopes.
//! - [`status`] and [`error`]: status codes and the errors that map onto them, with the newer
//!   base draft's error codes beside Agora's draft-era ones.
//! - [`manifest`]: Agent Manifest Documents (draft field names, newer Identity Document names
//!   accepted) and lifecycle states.
//! - [`jcs`] and [`signature`]: RFC 8785 canonical JSON and the ES256 `ans_signature`.
//! - [`governance`]: the governance-signed lifecycle requests that (de)register agents.
//! - [`rank`]: the deterministic BM25 capability match and `rank_score`.
//! - [`index`]: the in-memory ANS index.
//! - [`discover`]: DISCOVER paths (the draft's and the reference coordinator's `/population`),
//!   parameters, evaluation and the signed response in either shape.
//! - [`refresh`], [`federation`], [`routing`]: index freshness, cross-ANS federation and dynamic
//!   routing, as state machines driven by an injected clock (per-Agent-ID limits are the
//!   `agora-bucket` crate's token buckets).
//!
//! No sockets, no async, no global state: the node does the IO.

pub mod codec;
pub mod discover;
pub mod error;
pub mod federation;
pub mod governance;
pub mod index;
pub mod jcs;
pub mod manifest;
pub mod rank;
pub mod refresh;
pub mod routing;
pub mod scope;
pub mod signature;
pub mod status;

pub use error::{AgtpError, BadRequest};
pub use status::{ScopeViolationCode, Status};
