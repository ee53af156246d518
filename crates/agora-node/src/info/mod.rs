//! `node.info`: what a client needs to know of the node it reached, in one call — its PeerId,
//! its wallet address, every face's address (p2p included), the embedder of new memories and
//! the version. An SDK needs it before its first useful call (the payee of a channel is a
//! PeerId; a second node joins the first's p2p address); before it, clients read `/status`.
//!
//! Not in the Hyperspace spec (its §2.2 names `{primitive}.{method}`; `node` is Agora's, like
//! `bridge`). The service owns its task and no table: everything it says is known at start,
//! except the p2p addresses, which the mesh reports as it binds them ([`P2pAddresses`]).

use std::sync::{Arc, Mutex};

use agora_hyperspace::jsonrpc::RpcError;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::call::Call;
use crate::routes::CallRoute;

/// `node.info` (named with the face's other own methods, so that telemetry imports no service).
pub use agora_hyperspace::openrpc::NODE_INFO as INFO;
/// Every `node.*` method.
pub use agora_hyperspace::openrpc::NODE_METHODS as METHODS;

/// Calls waiting for the service; beyond, the call router waits (the face stops reading).
const QUEUE: usize = 64;

/// The p2p addresses the mesh listens on (each with `/p2p/<PeerId>`), filled as they are bound;
/// at most [`MAX_P2P`] (later ones are not listed).
#[derive(Clone, Debug, Default)]
pub struct P2pAddresses(Arc<Mutex<Vec<String>>>);

/// Most p2p addresses listed.
pub const MAX_P2P: usize = 16;

impl P2pAddresses {
    /// Adds one.
    pub fn push(&self, addr: String) {
        if let Ok(mut a) = self.0.lock()
            && a.len() < MAX_P2P
            && !a.contains(&addr)
        {
            a.push(addr);
        }
    }

    fn list(&self) -> Vec<String> {
        self.0.lock().map(|a| a.clone()).unwrap_or_default()
    }
}

/// What the node says of itself.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// Its PeerId.
    pub peer_id: String,
    /// Its payments wallet (EIP-55).
    pub wallet_address: String,
    /// Each face and its URL (`rpc` → `ws://…`).
    pub faces: Vec<(&'static str, String)>,
    /// The p2p addresses.
    pub p2p: P2pAddresses,
    /// The embedder of new memories and queries: its id and dimensions.
    pub embedder: (String, usize),
}

impl NodeInfo {
    /// `node.info`'s result.
    pub fn to_value(&self) -> Value {
        let mut faces: Map<String, Value> = self
            .faces
            .iter()
            .map(|(name, url)| ((*name).to_owned(), json!(url)))
            .collect();
        faces.insert("p2p".into(), json!(self.p2p.list()));
        json!({
            "peerId": self.peer_id,
            "walletAddress": self.wallet_address,
            "faces": faces,
            "embedder": { "id": self.embedder.0, "dimensions": self.embedder.1 },
            "version": env!("CARGO_PKG_VERSION"),
        })
    }
}

/// Starts the service; its calls come through [`call_route`].
pub fn start(info: NodeInfo) -> mpsc::Sender<Call> {
    let (tx, mut rx) = mpsc::channel::<Call>(QUEUE);
    tokio::spawn(async move {
        while let Some(call) = rx.recv().await {
            let answer = match call.request.method.as_str() {
                INFO => Ok(info.to_value()),
                _ => Err(RpcError::method_not_found()),
            };
            let _ = call.reply.send(answer);
        }
    });
    tx
}

/// The `node.*` calls, for the call router.
pub fn call_route(tx: &mpsc::Sender<Call>) -> CallRoute {
    CallRoute::new(&["node."], &[&METHODS], tx, |c| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_info_names_every_face_and_the_p2p_addresses() {
        let p2p = P2pAddresses::default();
        let info = NodeInfo {
            peer_id: "12D3KooWx".into(),
            wallet_address: "0xabc".into(),
            faces: vec![("rpc", "ws://127.0.0.1:1".into())],
            p2p: p2p.clone(),
            embedder: ("lexical-v1".into(), 256),
        };
        p2p.push("/ip4/127.0.0.1/tcp/2/p2p/12D3KooWx".into());
        p2p.push("/ip4/127.0.0.1/tcp/2/p2p/12D3KooWx".into());
        let v = info.to_value();
        assert_eq!(v["faces"]["rpc"], "ws://127.0.0.1:1");
        assert_eq!(
            v["faces"]["p2p"],
            json!(["/ip4/127.0.0.1/tcp/2/p2p/12D3KooWx"])
        );
        assert_eq!(v["embedder"]["dimensions"], 256);
        for _ in 0..MAX_P2P + 3 {
            p2p.push(format!("/ip4/127.0.0.1/tcp/{}", p2p.list().len() + 10));
        }
        assert_eq!(p2p.list().len(), MAX_P2P);
    }
}
