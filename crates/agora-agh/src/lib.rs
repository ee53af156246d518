//! # agora-agh — AGH Network v0, sans IO
//!
//! A complete implementation of the AGH Network v0 protocol (generation "G1", seven kinds) as
//! pure functions and state machines: no sockets, no async, no clock reads, no global state. Time
//! comes in as `now` (Unix seconds); envelope ids for generated messages come from an
//! [`IdSource`]. The Agora node drives it; the `agora agh` commands expose it to scripts.
//!
//! | concern | module | spec |
//! |---|---|---|
//! | envelope model, exact JSON form | [`envelope`] | Envelope: wire contract, fields |
//! | validation order, freshness | [`validate`](mod@validate) | Envelope: validation order, freshness rules |
//! | reason codes | [`reason`] | Message Kinds: reason codes |
//! | kind bodies | [`greet`], [`whois`], [`message`], [`body`], [`receipt`], [`trace`] | Message Kinds |
//! | Peer Cards, whois matching | [`peer_card`] | Peer Discovery |
//! | presence | [`presence`] | Peer Discovery: presence and expiry |
//! | capability documents, digest | [`capability`] | Capability Discovery: transfer; the Go reference's digest |
//! | catalogs, brief and rich projections | [`catalog`] | Capability Discovery |
//! | deduplication window | [`dedup`] | Delivery |
//! | interaction lifecycle | [`lifecycle`] | Interaction Lifecycle |
//! | route tokens, NATS subjects | [`route`] | Delivery, NATS |
//! | receive/send pipelines, automatic receipts | [`router`] | Envelope steps 5–7, Delivery |
//! | AGH runtime admission rules (opt-in) | [`admission`] | none: the Go reference runtime's own rules |
//!
//! ```
//! use agora_agh::{validate, ValidationPolicy};
//!
//! let line = br#"{"protocol":"agh-network/v0","id":"m1","kind":"say","channel":"builders","from":"coder.sess-abc","to":null,"ts":1775822400,"body":{"text":"hi"},"proof":null}"#;
//! let v = validate(line, 1775822400, &ValidationPolicy::default()).unwrap();
//! assert_eq!(v.envelope.kind.as_str(), "say");
//! ```
#![warn(missing_docs)]

pub mod admission;
pub mod body;
pub mod capability;
pub mod catalog;
pub mod dedup;
pub mod envelope;
pub mod grammar;
pub mod greet;
mod json;
pub mod lifecycle;
pub mod message;
pub mod peer_card;
pub mod presence;
pub mod reason;
pub mod receipt;
pub mod route;
pub mod router;
pub mod trace;
pub mod validate;
pub mod whois;

pub use body::Body;
pub use capability::CapabilityDoc;
pub use catalog::Catalog;
pub use dedup::DedupWindow;
pub use envelope::{Envelope, Kind, MAX_ENVELOPE_BYTES, OwnedEnvelope, RawEnvelope};
pub use json::RawJson;
pub use lifecycle::Interactions;
pub use peer_card::PeerCard;
pub use presence::Presence;
pub use reason::{ReasonCode, Rejection};
pub use route::{broadcast_subject, direct_subject, route_token};
pub use router::{IdSource, Router, RouterConfig, UuidIds};
pub use trace::InteractionState;
pub use validate::{Validated, ValidationPolicy, validate};
