//! A JSON-RPC call as a face hands it to the service that answers it: who calls ([`Principal`]),
//! from which connection, the request, and where the outcome goes. Faces make calls (the
//! JSON-RPC face, the HTTP API's pay-per-call route); services answer them. Neither side's
//! module is imported by the other through this one.

use agora_hyperspace::jsonrpc::{Request, RpcError};
use serde_json::Value;
use tokio::sync::oneshot;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// A loopback client without credentials (allowed only when no API key is configured).
    Local,
    /// Holder of the API key.
    ApiKey,
    /// Holder of a session token: may act on that session only.
    Session(String),
}

/// One call for the Hyperspace service.
#[derive(Debug)]
pub struct Call {
    /// Caller.
    pub principal: Principal,
    /// The caller's connection (tools registered by it live as long as it does).
    pub conn: u64,
    /// The request (the only copy: the face keeps only its id).
    pub request: Request,
    /// The outcome.
    pub reply: oneshot::Sender<Result<Value, RpcError>>,
}

/// Where a call's outcome arrives.
pub type Outcome = oneshot::Receiver<Result<Value, RpcError>>;

impl Call {
    /// A call a face makes on its client's behalf once the serving layer has checked the API
    /// key (the HTTP API, `/mcp`, `/a2a`): as the key's holder, on no connection.
    pub fn as_api_key(method: &str, params: Value) -> (Self, Outcome) {
        let (reply, outcome) = oneshot::channel();
        let call = Self {
            principal: Principal::ApiKey,
            conn: 0,
            request: Request {
                id: None,
                method: method.to_owned(),
                params: Some(params),
            },
            reply,
        };
        (call, outcome)
    }
}
