//! The A2A bridge (Hyperspace spec §10.2 `announceA2AAgent`; `docs/bridges.md`): announced A2A
//! agents' skills served as tools of this node.
