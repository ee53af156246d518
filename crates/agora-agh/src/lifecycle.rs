//! The interaction lifecycle state machine.
//!
//! Interaction Lifecycle page; reference behaviour: the Go reference runtime's `lifecycle.go`. An interaction is
//! keyed by `(channel, interaction_id)`, opened by a directed `direct` or `capability` that
//! carries an `interaction_id` (initiator = `from`, target = `to`, state `submitted`), and moved by
//! `trace`, `receipt` and follow-up `direct`/`capability` envelopes from its two participants only.
//!
//! | from \ event | trace working/needs_input/terminal | trace submitted | receipt rejected | receipt canceled | other receipts | direct/capability |
//! |---|---|---|---|---|---|---|
//! | submitted, working | that state | `internal` | failed | canceled | unchanged | unchanged |
//! | needs_input | that state | `internal` | failed | canceled | unchanged | → working |
//! | completed, failed, canceled | ignored | ignored | ignored | ignored | ignored | `interaction_closed` |
//!
//! The first terminal state wins. Envelopes from third parties, follow-ups not addressed to the
//! sender's counterparty, and receipts or traces for unknown interactions are ignored (not
//! delivered), as in the reference.
//!
//! # Important discrepancies
//! - `receipt(accepted)` leaves the state unchanged (reference code and G1 RFC); the site diagram
//!   shows it moving `submitted → working`.
//! - An invalid transition (`trace submitted`) is reported as `internal`, the reference's choice;
//!   there is no dedicated code.
//! - The table has a memory bound ([`Interactions::with_capacity`]): when full, the oldest
//!   finished interactions are forgotten first; if every tracked interaction is still open, a new
//!   one is refused with `busy`.

use std::collections::HashMap;

use crate::body::Body;
use crate::envelope::{Envelope, Kind};
use crate::reason::Rejection;
use crate::receipt::ReceiptStatus;
use crate::trace::InteractionState;

/// One tracked interaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interaction {
    /// Peer that opened it.
    pub initiator: String,
    /// Peer it was opened with.
    pub target: String,
    /// Current state.
    pub state: InteractionState,
    /// When it was opened (receiver clock, Unix seconds).
    pub opened_at: i64,
    /// When its state last changed.
    pub updated_at: i64,
}

impl Interaction {
    /// `true` when `peer` is the initiator or the target.
    pub fn is_participant(&self, peer: &str) -> bool {
        self.initiator == peer || self.target == peer
    }

    /// The other participant, if `peer` is one.
    pub fn counterparty(&self, peer: &str) -> Option<&str> {
        if self.initiator == peer {
            Some(&self.target)
        } else if self.target == peer {
            Some(&self.initiator)
        } else {
            None
        }
    }
}

/// What applying one envelope did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The envelope opened a new interaction (state `submitted`).
    Opened,
    /// The state moved.
    Changed {
        /// State before.
        from: InteractionState,
        /// State after.
        to: InteractionState,
    },
    /// Accepted; the state did not move.
    Unchanged(InteractionState),
    /// Not a lifecycle event, or one the lifecycle drops (the envelope is not delivered).
    Ignored(Ignored),
    /// The envelope carries no `interaction_id` or is of a kind the lifecycle does not track.
    NotApplicable,
}

impl Outcome {
    /// `true` when the envelope should be delivered.
    pub fn delivers(self) -> bool {
        !matches!(self, Self::Ignored(_))
    }
}

/// Why the lifecycle dropped an envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignored {
    /// A receipt or trace for an interaction that was never opened here.
    UnknownInteraction,
    /// The sender is not a participant.
    NotParticipant,
    /// A follow-up not addressed to the sender's counterparty.
    WrongCounterparty,
    /// A receipt or trace after the interaction finished (first terminal state wins).
    AfterTerminal,
}

/// The lifecycle event an envelope carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Work,
    Trace(InteractionState),
    Receipt(ReceiptStatus),
}

fn event_of(kind: Kind, body: &Body<'_>) -> Option<Event> {
    match (kind, body) {
        (Kind::Direct | Kind::Capability, _) => Some(Event::Work),
        (Kind::Trace, Body::Trace(t)) => Some(Event::Trace(t.state)),
        (Kind::Receipt, Body::Receipt(r)) => Some(Event::Receipt(r.status)),
        _ => None,
    }
}

/// Default number of interactions tracked at once.
pub const DEFAULT_INTERACTION_CAPACITY: usize = 100_000;

/// All interactions known to one receiver, keyed by `(channel, interaction_id)`.
#[derive(Clone, Debug)]
pub struct Interactions {
    by_channel: HashMap<String, HashMap<String, Interaction>>,
    len: usize,
    capacity: usize,
}

impl Default for Interactions {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_INTERACTION_CAPACITY)
    }
}

impl Interactions {
    /// A table that tracks at most `capacity` interactions.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            by_channel: HashMap::new(),
            len: 0,
            capacity: capacity.max(1),
        }
    }

    /// Number of tracked interactions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The interaction `(channel, id)`.
    pub fn get(&self, channel: &str, id: &str) -> Option<&Interaction> {
        self.by_channel.get(channel)?.get(id)
    }

    /// Evaluates `envelope` against the current state without changing anything (the send-side
    /// preflight: refuse to send work into a finished interaction).
    pub fn check(&self, envelope: &Envelope<'_>, body: &Body<'_>) -> Result<Outcome, Rejection> {
        let Some((event, iid)) = Self::lifecycle_event(envelope, body) else {
            return Ok(Outcome::NotApplicable);
        };
        let current = self.get(&envelope.channel, iid);
        evaluate(current, event, envelope)
    }

    /// Applies `envelope` (already validated, deduplicated and routed) at receiver time `now`.
    pub fn apply(
        &mut self,
        envelope: &Envelope<'_>,
        body: &Body<'_>,
        now: i64,
    ) -> Result<Outcome, Rejection> {
        let outcome = self.check(envelope, body)?;
        let Some(iid) = envelope.interaction_id.as_deref() else {
            return Ok(outcome);
        };
        match outcome {
            Outcome::Opened => {
                self.make_room(now)?;
                let target = envelope.to.as_deref().unwrap_or_default();
                self.by_channel
                    .entry(envelope.channel.to_string())
                    .or_default()
                    .insert(
                        iid.to_owned(),
                        Interaction {
                            initiator: envelope.from.to_string(),
                            target: target.to_owned(),
                            state: InteractionState::Submitted,
                            opened_at: now,
                            updated_at: now,
                        },
                    );
                self.len += 1;
            }
            Outcome::Changed { to, .. } => {
                if let Some(i) = self
                    .by_channel
                    .get_mut(&*envelope.channel)
                    .and_then(|m| m.get_mut(iid))
                {
                    i.state = to;
                    i.updated_at = now;
                }
            }
            _ => {}
        }
        Ok(outcome)
    }

    fn lifecycle_event<'e>(
        envelope: &'e Envelope<'_>,
        body: &Body<'_>,
    ) -> Option<(Event, &'e str)> {
        let iid = envelope.interaction_id.as_deref()?;
        Some((event_of(envelope.kind, body)?, iid))
    }

    /// Forgets finished interactions last updated before `before`; returns their
    /// `(channel, interaction_id)` keys.
    pub fn prune_finished(&mut self, before: i64) -> Vec<(String, String)> {
        let mut removed = Vec::new();
        for (channel, map) in &mut self.by_channel {
            map.retain(|id, i| {
                let keep = !(i.state.is_terminal() && i.updated_at < before);
                if !keep {
                    removed.push((channel.clone(), id.clone()));
                }
                keep
            });
        }
        self.by_channel.retain(|_, m| !m.is_empty());
        self.len -= removed.len();
        removed
    }

    /// Puts back an interaction loaded from storage (after a restart). Refused with `busy` when
    /// the table is full of open interactions.
    pub fn restore(
        &mut self,
        channel: &str,
        interaction_id: &str,
        interaction: Interaction,
        now: i64,
    ) -> Result<(), Rejection> {
        if self.get(channel, interaction_id).is_none() {
            self.make_room(now)?;
            self.len += 1;
        }
        self.by_channel
            .entry(channel.to_owned())
            .or_default()
            .insert(interaction_id.to_owned(), interaction);
        Ok(())
    }

    /// Sets interaction `(channel, id)` back to `prior`, or forgets it when `prior` is `None`
    /// (undoing an envelope that opened or moved it: `Router::undo`).
    pub fn put_back(&mut self, channel: &str, id: &str, prior: Option<Interaction>) {
        let Some(map) = self.by_channel.get_mut(channel) else {
            return;
        };
        match prior {
            Some(i) => {
                if let Some(slot) = map.get_mut(id) {
                    *slot = i;
                }
            }
            None => {
                if map.remove(id).is_some() {
                    self.len -= 1;
                }
                if map.is_empty() {
                    self.by_channel.remove(channel);
                }
            }
        }
    }

    /// Every tracked interaction as `(channel, interaction_id, interaction)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Interaction)> {
        self.by_channel
            .iter()
            .flat_map(|(c, m)| m.iter().map(move |(id, i)| (c.as_str(), id.as_str(), i)))
    }

    fn make_room(&mut self, now: i64) -> Result<(), Rejection> {
        if self.len < self.capacity {
            return Ok(());
        }
        // Forget the oldest finished interactions: at least one, and a tenth of the table at most
        // so that pruning stays amortised.
        let mut finished: Vec<i64> = self
            .by_channel
            .values()
            .flat_map(HashMap::values)
            .filter(|i| i.state.is_terminal())
            .map(|i| i.updated_at)
            .collect();
        if finished.is_empty() {
            return Err(Rejection::Busy(
                format!(
                    "{} interactions are open; refusing to open another",
                    self.len
                )
                .into(),
            ));
        }
        let n = (self.capacity / 10).clamp(1, finished.len());
        let (_, cutoff, _) = finished.select_nth_unstable(n - 1);
        let cutoff = (*cutoff).min(now).saturating_add(1);
        self.prune_finished(cutoff);
        Ok(())
    }
}

fn evaluate(
    current: Option<&Interaction>,
    event: Event,
    envelope: &Envelope<'_>,
) -> Result<Outcome, Rejection> {
    let from = &*envelope.from;
    let Some(current) = current else {
        return match event {
            Event::Work if envelope.to.is_some() => Ok(Outcome::Opened),
            Event::Work => Err(Rejection::malformed(
                "field `to`: an interaction is opened only by a directed envelope",
            )),
            _ => Ok(Outcome::Ignored(Ignored::UnknownInteraction)),
        };
    };
    let Some(counterparty) = current.counterparty(from) else {
        return Ok(Outcome::Ignored(Ignored::NotParticipant));
    };
    // Work must go to the sender's counterparty; a stray follow-up is dropped before anything else
    // so that no third party ever answers for the interaction.
    if event == Event::Work && envelope.to.as_deref() != Some(counterparty) {
        return Ok(Outcome::Ignored(Ignored::WrongCounterparty));
    }
    let state = current.state;
    if state.is_terminal() {
        return match event {
            Event::Work => Err(Rejection::InteractionClosed(
                format!("interaction is {state}; no more work can be sent into it").into(),
            )),
            _ => Ok(Outcome::Ignored(Ignored::AfterTerminal)),
        };
    }
    let next = match event {
        Event::Work => {
            if state == InteractionState::NeedsInput {
                InteractionState::Working
            } else {
                state
            }
        }
        Event::Trace(InteractionState::Submitted) => {
            return Err(Rejection::Internal(
                format!("invalid interaction transition {state} -> submitted").into(),
            ));
        }
        Event::Trace(to) => to,
        Event::Receipt(ReceiptStatus::Rejected) => InteractionState::Failed,
        Event::Receipt(ReceiptStatus::Canceled) => InteractionState::Canceled,
        Event::Receipt(_) => state,
    };
    Ok(if next == state {
        Outcome::Unchanged(state)
    } else {
        Outcome::Changed {
            from: state,
            to: next,
        }
    })
}
