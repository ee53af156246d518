//! Channel-scoped presence: who is here, locally and remotely.
//!
//! Peer Discovery page, "Presence and expiry"; reference behaviour: the Go reference runtime's presence table. Presence is kept
//! per `(channel, peer_id)`:
//! - local peers are registered by their owner (an agent connection) and stay until it leaves;
//! - remote peers are refreshed by inbound `greet` and whois responses and expire at
//!   `last_seen + 2 × greet_interval` (expired when `now >= expires_at`);
//! - local peers take precedence: registering a local peer removes a remote entry with the same
//!   key, and remote refreshes for a locally owned key are ignored (which also drops the echo of
//!   our own broadcasts).
//!
//! Generic over `O`, the owner of a local peer (e.g. a connection id), and `R`, where a remote
//! peer was learned from (e.g. the hosting node).

use std::collections::BTreeMap;
use std::collections::HashMap;

use crate::catalog::Catalog;
use crate::peer_card::PeerCard;

/// Default greet interval in seconds (reference `network.greet_interval`).
pub const DEFAULT_GREET_INTERVAL: i64 = 30;

/// A peer hosted here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalPeer<O> {
    /// Who registered it.
    pub owner: O,
    /// Its card as announced (without the brief projection).
    pub card: PeerCard<'static>,
    /// Its local capability catalog, if it published one.
    pub catalog: Option<Catalog>,
}

impl<O> LocalPeer<O> {
    /// The card with the brief catalog projection applied (what greets and whois responses carry).
    pub fn projected_card(&self) -> PeerCard<'static> {
        let mut card = self.card.clone();
        card.project_brief(self.catalog.as_ref());
        card
    }
}

/// A peer learned from the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemotePeer<R> {
    /// Its last announced card.
    pub card: PeerCard<'static>,
    /// Where it was last heard from.
    pub origin: R,
    /// Receiver time of the last refresh.
    pub last_seen: i64,
    /// `last_seen + 2 × greet_interval`.
    pub expires_at: i64,
    /// Rich catalog cached from a whois response, if any.
    pub catalog: Option<Catalog>,
}

/// A presence lookup result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer<'p, O, R> {
    /// Hosted here.
    Local(&'p LocalPeer<O>),
    /// Learned from the network and not expired.
    Remote(&'p RemotePeer<R>),
}

impl<O, R> Peer<'_, O, R> {
    /// The peer's card.
    pub fn card(&self) -> &PeerCard<'static> {
        match self {
            Self::Local(p) => &p.card,
            Self::Remote(p) => &p.card,
        }
    }
}

/// A local registration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PresenceError {
    /// Another owner already holds this Peer ID in this channel.
    #[error(
        "peer {peer_id:?} is already present in channel {channel:?} through another connection"
    )]
    Taken {
        /// Channel.
        channel: String,
        /// Peer ID.
        peer_id: String,
    },
}

/// What a remote refresh did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// A peer not present before (or expired) is now present.
    Appeared,
    /// A present peer was refreshed.
    Refreshed,
    /// The key is owned by a local peer; nothing changed.
    ShadowedByLocal,
}

#[derive(Clone, Debug)]
struct Channel<O, R> {
    local: BTreeMap<String, LocalPeer<O>>,
    remote: BTreeMap<String, RemotePeer<R>>,
}

impl<O, R> Default for Channel<O, R> {
    fn default() -> Self {
        Self {
            local: BTreeMap::new(),
            remote: BTreeMap::new(),
        }
    }
}

/// The presence table.
#[derive(Clone, Debug)]
pub struct Presence<O, R> {
    greet_interval: i64,
    channels: HashMap<String, Channel<O, R>>,
}

impl<O: Clone + PartialEq, R: Clone> Default for Presence<O, R> {
    fn default() -> Self {
        Self::new(DEFAULT_GREET_INTERVAL)
    }
}

impl<O: Clone + PartialEq, R: Clone> Presence<O, R> {
    /// A table whose remote entries live `2 × greet_interval` seconds after their last refresh.
    pub fn new(greet_interval: i64) -> Self {
        Self {
            greet_interval: greet_interval.max(1),
            channels: HashMap::new(),
        }
    }

    /// The greet interval.
    pub fn greet_interval(&self) -> i64 {
        self.greet_interval
    }

    /// Registers (or re-registers) a local peer. Fails if another owner holds the key.
    pub fn register_local(
        &mut self,
        channel: &str,
        card: PeerCard<'static>,
        owner: O,
    ) -> Result<(), PresenceError> {
        let ch = self.channels.entry(channel.to_owned()).or_default();
        let peer_id = card.peer_id.to_string();
        if let Some(existing) = ch.local.get_mut(&peer_id) {
            if existing.owner != owner {
                return Err(PresenceError::Taken {
                    channel: channel.to_owned(),
                    peer_id,
                });
            }
            existing.card = card;
            return Ok(());
        }
        ch.remote.remove(&peer_id);
        let catalog = self.find_local_catalog(&peer_id, &owner);
        let ch = self.channels.entry(channel.to_owned()).or_default();
        ch.local.insert(
            peer_id,
            LocalPeer {
                owner,
                card,
                catalog,
            },
        );
        Ok(())
    }

    fn find_local_catalog(&self, peer_id: &str, owner: &O) -> Option<Catalog> {
        self.channels
            .values()
            .filter_map(|c| c.local.get(peer_id))
            .find(|p| p.owner == *owner)
            .and_then(|p| p.catalog.clone())
    }

    /// Sets the catalog of every local registration of `peer_id` held by `owner`; returns the
    /// channels it applied to.
    pub fn set_local_catalog(
        &mut self,
        peer_id: &str,
        owner: &O,
        catalog: Option<&Catalog>,
    ) -> Vec<String> {
        let mut applied = Vec::new();
        for (name, ch) in &mut self.channels {
            if let Some(p) = ch.local.get_mut(peer_id)
                && p.owner == *owner
            {
                p.catalog = catalog.cloned();
                applied.push(name.clone());
            }
        }
        applied.sort();
        applied
    }

    /// Removes every local peer registered by `owner`; returns their `(channel, peer_id)` keys.
    pub fn remove_owner(&mut self, owner: &O) -> Vec<(String, String)> {
        let mut removed = Vec::new();
        for (name, ch) in &mut self.channels {
            ch.local.retain(|id, p| {
                let keep = p.owner != *owner;
                if !keep {
                    removed.push((name.clone(), id.clone()));
                }
                keep
            });
        }
        self.channels
            .retain(|_, c| !c.local.is_empty() || !c.remote.is_empty());
        removed.sort();
        removed
    }

    /// Refreshes a remote peer from a greet or whois response heard at `now`.
    pub fn refresh_remote(
        &mut self,
        channel: &str,
        card: PeerCard<'static>,
        origin: R,
        now: i64,
    ) -> Refresh {
        let expires_at = now.saturating_add(self.greet_interval.saturating_mul(2));
        let ch = self.channels.entry(channel.to_owned()).or_default();
        let peer_id = card.peer_id.to_string();
        if ch.local.contains_key(&peer_id) {
            return Refresh::ShadowedByLocal;
        }
        match ch.remote.get_mut(&peer_id) {
            Some(p) if p.expires_at > now => {
                // Keep a cached rich catalog only while the capability ids stay the same.
                if p.card.capabilities != card.capabilities {
                    p.catalog = None;
                }
                p.card = card;
                p.origin = origin;
                p.last_seen = now;
                p.expires_at = expires_at;
                Refresh::Refreshed
            }
            _ => {
                ch.remote.insert(
                    peer_id,
                    RemotePeer {
                        card,
                        origin,
                        last_seen: now,
                        expires_at,
                        catalog: None,
                    },
                );
                Refresh::Appeared
            }
        }
    }

    /// Caches a rich catalog for a present remote peer. Kept only when its ids equal the card's
    /// `capabilities` as a multiset (reference rule); returns whether it was kept.
    pub fn set_remote_catalog(&mut self, channel: &str, peer_id: &str, catalog: Catalog) -> bool {
        let Some(p) = self
            .channels
            .get_mut(channel)
            .and_then(|c| c.remote.get_mut(peer_id))
        else {
            return false;
        };
        let mut ids: Vec<&str> = catalog.ids().collect();
        let mut claimed: Vec<&str> = p.card.capabilities.iter().map(|c| &**c).collect();
        ids.sort_unstable();
        claimed.sort_unstable();
        if ids != claimed {
            return false;
        }
        p.catalog = Some(catalog);
        true
    }

    /// Drops remote peers expired at `now`; returns their `(channel, peer_id)` keys.
    pub fn sweep(&mut self, now: i64) -> Vec<(String, String)> {
        let mut gone = Vec::new();
        for (name, ch) in &mut self.channels {
            ch.remote.retain(|id, p| {
                let keep = p.expires_at > now;
                if !keep {
                    gone.push((name.clone(), id.clone()));
                }
                keep
            });
        }
        self.channels
            .retain(|_, c| !c.local.is_empty() || !c.remote.is_empty());
        gone.sort();
        gone
    }

    /// Looks a peer up: local first, then unexpired remote.
    pub fn lookup(&self, channel: &str, peer_id: &str, now: i64) -> Option<Peer<'_, O, R>> {
        let ch = self.channels.get(channel)?;
        if let Some(p) = ch.local.get(peer_id) {
            return Some(Peer::Local(p));
        }
        ch.remote
            .get(peer_id)
            .filter(|p| p.expires_at > now)
            .map(Peer::Remote)
    }

    /// The local peer `(channel, peer_id)`.
    pub fn local(&self, channel: &str, peer_id: &str) -> Option<&LocalPeer<O>> {
        self.channels.get(channel)?.local.get(peer_id)
    }

    /// Local peers of a channel, by Peer ID.
    pub fn local_peers<'s>(&'s self, channel: &str) -> impl Iterator<Item = &'s LocalPeer<O>> + 's {
        self.channels
            .get(channel)
            .into_iter()
            .flat_map(|c| c.local.values())
    }

    /// Unexpired remote peers of a channel, by Peer ID.
    pub fn remote_peers<'s>(
        &'s self,
        channel: &str,
        now: i64,
    ) -> impl Iterator<Item = &'s RemotePeer<R>> + 's {
        self.channels
            .get(channel)
            .into_iter()
            .flat_map(|c| c.remote.values())
            .filter(move |p| p.expires_at > now)
    }

    /// Every present peer of a channel (local ones, then remote ones not shadowed), by Peer ID.
    pub fn peers<'s>(&'s self, channel: &str, now: i64) -> Vec<Peer<'s, O, R>> {
        let mut out: Vec<Peer<'s, O, R>> = self.local_peers(channel).map(Peer::Local).collect();
        out.extend(self.remote_peers(channel, now).map(Peer::Remote));
        out
    }

    /// Channels that currently have any entry, sorted.
    pub fn channels(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.channels.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(id: &str, caps: &[&str]) -> PeerCard<'static> {
        let mut c = PeerCard::minimal(id.to_owned());
        c.capabilities = caps
            .iter()
            .map(|s| std::borrow::Cow::Owned((*s).to_owned()))
            .collect();
        c
    }

    #[test]
    fn remote_expiry_is_two_intervals() {
        let mut p: Presence<u32, &str> = Presence::new(30);
        assert_eq!(
            p.refresh_remote("b", card("x.1", &[]), "node-a", 100),
            Refresh::Appeared
        );
        assert!(p.lookup("b", "x.1", 159).is_some());
        assert!(
            p.lookup("b", "x.1", 160).is_none(),
            "expired at last_seen + 60"
        );
        assert_eq!(
            p.refresh_remote("b", card("x.1", &[]), "node-a", 150),
            Refresh::Refreshed
        );
        assert!(p.lookup("b", "x.1", 209).is_some());
        assert_eq!(p.sweep(210), vec![("b".to_owned(), "x.1".to_owned())]);
        assert!(p.channels().is_empty());
    }

    #[test]
    fn local_peers_take_precedence() {
        let mut p: Presence<u32, &str> = Presence::new(30);
        p.refresh_remote("b", card("x.1", &["remote"]), "node-a", 0);
        p.register_local("b", card("x.1", &["local"]), 7).unwrap();
        assert!(matches!(p.lookup("b", "x.1", 1), Some(Peer::Local(_))));
        assert_eq!(
            p.refresh_remote("b", card("x.1", &["remote"]), "node-a", 2),
            Refresh::ShadowedByLocal
        );
        assert_eq!(p.remote_peers("b", 2).count(), 0);
        assert!(matches!(
            p.register_local("b", card("x.1", &[]), 8),
            Err(PresenceError::Taken { .. })
        ));
        p.register_local("c", card("x.1", &[]), 8).unwrap();
        assert_eq!(p.remove_owner(&7), vec![("b".to_owned(), "x.1".to_owned())]);
        assert!(p.lookup("b", "x.1", 3).is_none());
        assert!(p.lookup("c", "x.1", 3).is_some());
    }

    #[test]
    fn channels_are_separate() {
        let mut p: Presence<u32, ()> = Presence::default();
        p.register_local("a", card("x.1", &[]), 1).unwrap();
        assert!(p.lookup("b", "x.1", 0).is_none());
        assert_eq!(p.local_peers("a").count(), 1);
    }

    #[test]
    fn remote_catalog_cached_only_when_ids_match() {
        use crate::capability::CapabilityDoc;
        let doc = |id: &str| CapabilityDoc {
            id: id.into(),
            summary: "s".into(),
            outcome: "o".into(),
            ..Default::default()
        };
        let mut p: Presence<u32, ()> = Presence::default();
        p.refresh_remote("b", card("x.1", &["two", "one"]), (), 0);
        let wrong = Catalog::new(vec![doc("one")]).unwrap();
        assert!(!p.set_remote_catalog("b", "x.1", wrong));
        let right = Catalog::new(vec![doc("one"), doc("two")]).unwrap();
        assert!(p.set_remote_catalog("b", "x.1", right));
        p.refresh_remote("b", card("x.1", &["two", "one"]), (), 1);
        assert!(matches!(p.lookup("b", "x.1", 1), Some(Peer::Remote(r)) if r.catalog.is_some()));
        p.refresh_remote("b", card("x.1", &["three"]), (), 2);
        assert!(matches!(p.lookup("b", "x.1", 2), Some(Peer::Remote(r)) if r.catalog.is_none()));
    }
}
