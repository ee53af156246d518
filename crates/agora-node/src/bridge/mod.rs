//! The bridges (Hyperspace spec §10): MCP servers' tools and A2A agents' skills served as tools
//! of this node, and the seam through which the Hyperspace service hands them their calls.
//!
//! | module | owns |
//! |---|---|
//! | this one | [`Bridges`], the senders a `tool.invoke` of a bridged tool goes to, by its owner's prefix, and [`BridgeCall`] |
//! | [`mcp`] | §10.1 `registerMCPServer`: the MCP client task, its servers (stdio children, Streamable HTTP), their tools |
//! | [`a2a`] | §10.2 `announceA2AAgent`: announced A2A agents, their cards on gossip, their skills as tools |
//! | [`describe`] | the `bridge.*` methods' params, results and errors, for the OpenRPC document |
//!
//! A bridge owns its tools the way a JSON-RPC connection owns the tools it registered: each tool
//! in the Hyperspace service's registry has an owner, here `mcp:<server>` or `a2a:<agent>`
//! ([`MCP_OWNER`], [`A2A_OWNER`]). A bridge sets its whole list at once
//! ([`crate::hyperspace::Input::Bridged`]); the service announces the changed card at once. A
//! `tool.invoke` of a bridged tool, from this node or from another one, reaches the bridge as a
//! [`BridgeCall`] over a bounded channel ([`QUEUE`]; when it is full the caller gets −32006
//! "Peer Unavailable" at once rather than waiting behind others).

pub mod a2a;
pub mod describe;
pub mod mcp;

use std::time::Duration;

use agora_hyperspace::jsonrpc::RpcError;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// Owner prefix of the tools of a bridged MCP server (`mcp:<server>`).
pub const MCP_OWNER: &str = "mcp:";
/// Owner prefix of the skills of an announced A2A agent (`a2a:<agent>`).
pub const A2A_OWNER: &str = "a2a:";

/// Calls queued to one bridge.
pub const QUEUE: usize = 256;

/// One `tool.invoke` of a bridged tool, for the bridge that owns it.
#[derive(Debug)]
pub struct BridgeCall {
    /// The tool's owner (`mcp:<server>`, `a2a:<agent>`).
    pub owner: String,
    /// The tool.
    pub tool_id: String,
    /// The tool's input, as the caller sent it.
    pub params: Value,
    /// The calling session, if any.
    pub session_id: Option<String>,
    /// How long the bridge has to answer.
    pub timeout: Duration,
    /// The tool's result (`tool.invoke`'s `result`), or the error the caller gets.
    pub reply: oneshot::Sender<Result<Value, RpcError>>,
}

/// The receiving ends of [`Bridges`]: each bridge's task takes its own.
#[derive(Debug)]
pub struct BridgeCalls {
    /// Calls of MCP-bridged tools.
    pub mcp: mpsc::Receiver<BridgeCall>,
    /// Calls of A2A-bridged skills.
    pub a2a: mpsc::Receiver<BridgeCall>,
}

/// The channels between the Hyperspace service and the bridges, made before either starts.
#[must_use]
pub fn channels() -> (Bridges, BridgeCalls) {
    let (mcp_tx, mcp) = mpsc::channel(QUEUE);
    let (a2a_tx, a2a) = mpsc::channel(QUEUE);
    let bridges = Bridges {
        mcp: Some(mcp_tx),
        a2a: Some(a2a_tx),
    };
    (bridges, BridgeCalls { mcp, a2a })
}

/// Where bridged tools' calls go, by owner prefix (held by the Hyperspace service).
#[derive(Clone, Debug, Default)]
pub struct Bridges {
    /// The MCP bridge.
    pub mcp: Option<mpsc::Sender<BridgeCall>>,
    /// The A2A bridge.
    pub a2a: Option<mpsc::Sender<BridgeCall>>,
}

impl Bridges {
    /// The bridge serving tools of `owner`, if `owner` is a bridge's.
    #[must_use]
    pub fn route(&self, owner: &str) -> Option<&mpsc::Sender<BridgeCall>> {
        if owner.starts_with(MCP_OWNER) {
            self.mcp.as_ref()
        } else if owner.starts_with(A2A_OWNER) {
            self.a2a.as_ref()
        } else {
            None
        }
    }

    /// Hands one call to the bridge of `owner` and waits for its answer, at most `timeout`.
    /// The bridge's queue being full, the bridge being gone, or no answer in time is −32006.
    pub async fn call(
        &self,
        owner: &str,
        tool_id: &str,
        params: Value,
        session_id: Option<String>,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let unavailable = |reason: &str| {
            RpcError::peer_unavailable().with_data(json!({"toolId": tool_id, "reason": reason}))
        };
        let Some(bridge) = self.route(owner) else {
            return Err(unavailable("no bridge serves this tool"));
        };
        let (reply, answer) = oneshot::channel();
        let call = BridgeCall {
            owner: owner.to_owned(),
            tool_id: tool_id.to_owned(),
            params,
            session_id,
            timeout,
            reply,
        };
        match bridge.try_send(call) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                return Err(unavailable("the bridge is busy"));
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(unavailable("the bridge is gone"));
            }
        }
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(unavailable("the bridge dropped the call")),
            Err(_) => Err(unavailable("no answer in time")),
        }
    }
}
