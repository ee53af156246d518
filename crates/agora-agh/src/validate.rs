//! Receive-side validation in the spec's order.
//!
//! Envelope page, "Validation order" and "Freshness rules":
//! 1. structure — [`RawEnvelope::parse`]: size, UTF-8, JSON, top-level object, duplicate keys, types
//!    (duplicate keys inside `body` are caught while the body is parsed in step 4, so that the
//!    body is scanned once, not twice);
//! 2. required fields and grammars — [`RawEnvelope::into_envelope`];
//! 3. freshness — [`check_freshness`];
//! 4. the kind's body — [`Body::parse`] (includes the capability digest check);
//! 5. routing-independent cross rules — [`cross_rules`] (card `peer_id` = `from`, whois responses
//!    need `reply_to`, `direct` needs `to` and `interaction_id`, `receipt`/`trace` need
//!    `interaction_id`), then the optional reference admission policy ([`crate::admission`]).
//!
//! Routing (`not_target`), deduplication and the lifecycle are stateful and live in
//! [`crate::router`], [`crate::dedup`] and [`crate::lifecycle`].
//!
//! # Important discrepancies
//! - Freshness is step 3, as the spec orders it; the reference checks it last, so a stale envelope
//!   with a bad body is `expired` here and `malformed` there.
//! - A `ts` more than the replay age in the future is `expired` even when `expires_at` is set
//!   (reference behaviour).
//! - `greet` and `say` with a `to` are accepted (reference behaviour; the docs say `to` MUST be null).

use crate::body::Body;
use crate::envelope::{Envelope, Kind, RawEnvelope};
use crate::reason::Rejection;
use crate::whois::WhoisBody;

/// Default replay age in seconds (reference `DefaultMaxReplayAge`).
pub const DEFAULT_REPLAY_AGE: i64 = 300;

/// Receive-side policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationPolicy {
    /// Accepted distance, in seconds, between `ts` and the receiver clock (both directions) when
    /// `expires_at` is absent; also the largest accepted future skew. Must be positive.
    pub replay_age: i64,
    /// Apply the AGH runtime's own admission rules (raw-secret scan, `task.write` needs a proof).
    /// They are not part of the protocol; off by default.
    pub reference_admission: bool,
}

impl Default for ValidationPolicy {
    fn default() -> Self {
        Self {
            replay_age: DEFAULT_REPLAY_AGE,
            reference_admission: false,
        }
    }
}

/// An envelope that passed every stateless check, with its parsed body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validated<'a> {
    /// The envelope.
    pub envelope: Envelope<'a>,
    /// Its body.
    pub body: Body<'a>,
}

/// Runs steps 1–5 on `bytes` at receiver time `now` (Unix seconds).
pub fn validate<'a>(
    bytes: &'a [u8],
    now: i64,
    policy: &ValidationPolicy,
) -> Result<Validated<'a>, Rejection> {
    validate_raw(RawEnvelope::parse_deferring_body(bytes)?, now, policy)
}

/// Runs steps 2–5 on an envelope that passed step 1.
pub fn validate_raw<'a>(
    raw: RawEnvelope<'a>,
    now: i64,
    policy: &ValidationPolicy,
) -> Result<Validated<'a>, Rejection> {
    let body_raw = raw.body;
    let envelope = raw.into_envelope()?;
    check_freshness(envelope.ts, envelope.expires_at, now, policy.replay_age)?;
    let body_raw = body_raw.ok_or_else(|| Rejection::malformed("field `body` is required"))?;
    let body = Body::parse(envelope.kind, body_raw)?;
    cross_rules(&envelope, &body)?;
    if policy.reference_admission {
        crate::admission::check(&envelope, &body)?;
    }
    Ok(Validated { envelope, body })
}

/// Step 3: `expires_at <= now` is expired; a `ts` more than `replay_age` ahead is expired; with
/// no `expires_at`, a `ts` more than `replay_age` behind is expired.
pub fn check_freshness(
    ts: i64,
    expires_at: Option<i64>,
    now: i64,
    replay_age: i64,
) -> Result<(), Rejection> {
    if ts.saturating_sub(now) > replay_age {
        return Err(Rejection::Expired(
            format!(
                "field `ts`: {ts} is more than {replay_age} s ahead of the receiver clock ({now})"
            )
            .into(),
        ));
    }
    match expires_at {
        Some(exp) if exp <= now => Err(Rejection::Expired(
            format!("field `expires_at`: {exp} is not after the receiver clock ({now})").into(),
        )),
        Some(_) => Ok(()),
        None if now.saturating_sub(ts) > replay_age => Err(Rejection::Expired(
            format!(
                "field `ts`: {ts} is more than {replay_age} s behind the receiver clock ({now})"
            )
            .into(),
        )),
        None => Ok(()),
    }
}

/// The last Unix second at which an envelope can still pass freshness:
/// max(`expires_at`, `ts` + `replay_age`). Deduplication remembers its id until then.
pub fn dedup_deadline(ts: i64, expires_at: Option<i64>, replay_age: i64) -> i64 {
    let by_age = ts.saturating_add(replay_age);
    expires_at.map_or(by_age, |exp| exp.max(by_age))
}

/// Step 5: rules that tie the body to the envelope header.
pub fn cross_rules(envelope: &Envelope<'_>, body: &Body<'_>) -> Result<(), Rejection> {
    let card_matches = |peer_id: &str| {
        if peer_id == envelope.from {
            Ok(())
        } else {
            Err(Rejection::Malformed(
                format!(
                    "body: field `peer_card.peer_id` ({peer_id:?}) must equal `from` ({:?})",
                    envelope.from
                )
                .into(),
            ))
        }
    };
    match (envelope.kind, body) {
        (Kind::Greet, Body::Greet(g)) => card_matches(&g.peer_card.peer_id),
        (Kind::Whois, Body::Whois(WhoisBody::Response { peer_card })) => {
            if envelope.reply_to.is_none() {
                return Err(Rejection::malformed(
                    "field `reply_to` is required on a whois response",
                ));
            }
            card_matches(&peer_card.peer_id)
        }
        (Kind::Direct, _) => {
            if envelope.to.is_none() {
                return Err(Rejection::malformed("field `to` is required on a direct"));
            }
            require_interaction(envelope)
        }
        (Kind::Receipt | Kind::Trace, _) => require_interaction(envelope),
        _ => Ok(()),
    }
}

fn require_interaction(envelope: &Envelope<'_>) -> Result<(), Rejection> {
    if envelope.interaction_id.is_some() {
        Ok(())
    } else {
        Err(Rejection::Malformed(
            format!("field `interaction_id` is required on a {}", envelope.kind).into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freshness_rules() {
        let now = 1_000_000;
        let age = 300;
        assert!(check_freshness(now, None, now, age).is_ok());
        assert!(check_freshness(now - 300, None, now, age).is_ok());
        assert!(check_freshness(now - 301, None, now, age).is_err());
        assert!(check_freshness(now + 300, None, now, age).is_ok());
        assert!(check_freshness(now + 301, None, now, age).is_err());
        // expires_at wins over the age check for old ts...
        assert!(check_freshness(now - 10_000, Some(now + 1), now, age).is_ok());
        assert!(check_freshness(now, Some(now), now, age).is_err());
        assert!(check_freshness(now, Some(now - 1), now, age).is_err());
        // ...but not over the future-skew check.
        assert!(check_freshness(now + 301, Some(now + 10_000), now, age).is_err());
        assert!(check_freshness(i64::MAX, None, i64::MIN, age).is_err());
        assert!(check_freshness(1, None, i64::MAX, age).is_err());
    }

    #[test]
    fn deadline_covers_every_accepting_instant() {
        let age = 300;
        for (ts, exp) in [
            (1000, None),
            (1000, Some(900)),
            (1000, Some(5000)),
            (10, Some(1_000_000)),
        ] {
            let deadline = dedup_deadline(ts, exp, age);
            for now in (ts - 400)..(ts + 2000).max(exp.unwrap_or(0) + 10) {
                if check_freshness(ts, exp, now, age).is_ok() {
                    assert!(
                        now <= deadline,
                        "ts={ts} exp={exp:?} now={now} deadline={deadline}"
                    );
                }
            }
        }
    }
}
