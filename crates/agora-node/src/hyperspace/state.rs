//! Sessions on the node (spec §4.1 "State Primitive", §2.3 session tokens): who may call what
//! (a session token only its own session's state, guard and recursive methods, §2.3 third
//! tier), session tokens, and each session's snapshot in redb — the session with its guard
//! budget (§4.2) and recursion trace (§4.5), written before a call that changed it is answered
//! and loaded back at start; a call whose write is refused leaves the session as it was
//! ([`Prior`]). The state, guard and recursive calls themselves are answered by
//! the sans-IO primitives (`agora_hyperspace::{state, guard, recursive}`) on the service task;
//! the long guard calls run in [`super::guard`].

use super::*;

impl Service {
    /// Puts the stored sessions back (their tokens are put back by [`restore_tokens`] before the
    /// JSON-RPC face opens).
    pub(super) fn restore(&mut self, snapshots: Vec<Snapshot>) {
        for snap in snapshots {
            let id = snap.session.session_id.clone();
            if let Some(b) = snap.budget {
                self.guard.insert_budget(id.clone(), b);
            }
            if let Some(t) = snap.trace {
                self.recursive.insert_trace(id.clone(), t);
            }
            self.sessions.insert(snap.session);
        }
    }

    pub(super) fn forget_tokens(&self, session_id: &str) {
        if let Ok(mut t) = self.tokens.lock() {
            t.retain(|_, s| s != session_id);
        }
    }

    /// Writes the session's snapshot; the reply waits until it is durable.
    pub(super) async fn persist(&mut self, session_id: &str) -> Result<(), RpcError> {
        let Some(session) = self.sessions.session(session_id) else {
            return Ok(());
        };
        let token = self.tokens.lock().ok().and_then(|t| {
            t.iter()
                .find(|(_, s)| s.as_str() == session_id)
                .map(|(tok, _)| tok.clone())
        });
        let snapshot = Snapshot {
            session: session.clone(),
            budget: self.guard.budget(session_id).cloned(),
            trace: self.recursive.trace(session_id).cloned(),
            token,
        };
        let json = serde_json::to_string(&snapshot)
            .map_err(|e| RpcError::internal_error().with_message(e.to_string()))?;
        self.store
            .put_hs_session(session_id, &json)
            .await
            .map_err(|e| RpcError::internal_error().with_message(e.to_string()))
    }
}

/// What a mutating call may change of one session: put back when the call's durable write is
/// refused (a full disk), so that memory never runs ahead of the disk. Nothing (the default)
/// when the session did not exist before the call (`state.createSession`).
#[derive(Debug, Default)]
pub(super) struct Prior {
    session: Option<Session>,
    budget: Option<Budget>,
    trace: Option<RecursionTrace>,
    token: Option<String>,
}

impl Service {
    /// The session `session_id` as it is before a mutating call.
    pub(super) fn prior(&self, session_id: &str) -> Prior {
        Prior {
            session: self.sessions.session(session_id).cloned(),
            budget: self.guard.budget(session_id).cloned(),
            trace: self.recursive.trace(session_id).cloned(),
            token: self.tokens.lock().ok().and_then(|t| {
                t.iter()
                    .find(|(_, s)| s.as_str() == session_id)
                    .map(|(tok, _)| tok.clone())
            }),
        }
    }

    /// Puts session `session_id` back as it was before a call whose write was refused.
    pub(super) fn roll_back(&mut self, session_id: &str, prior: Prior) {
        match prior.session {
            Some(session) => self.sessions.insert(session),
            None => {
                self.sessions.remove(session_id);
            }
        }
        match prior.budget {
            Some(b) => self.guard.insert_budget(session_id, b),
            None => self.guard.forget_session(session_id),
        }
        match prior.trace {
            Some(t) => self.recursive.insert_trace(session_id, t),
            None => self.recursive.forget_session(session_id),
        }
        self.forget_tokens(session_id);
        if let (Some(token), Ok(mut t)) = (prior.token, self.tokens.lock()) {
            t.insert(token, session_id.to_owned());
        }
    }
}

/// What is stored per session: the session and the guard and recursion state tied to it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// The session.
    pub session: Session,
    /// Its budget, once it has one.
    pub budget: Option<Budget>,
    /// Its recursion trace, once it has one.
    pub trace: Option<RecursionTrace>,
    /// Its session token, while the session is live.
    pub token: Option<String>,
}

/// Methods that change a session's stored snapshot (everything else only reads it).
pub(super) const MUTATING: [&str; 7] = [
    hs_state::CREATE_SESSION,
    hs_state::SET_STATE,
    hs_state::END_SESSION,
    hs_state::RECORD_EPISODE,
    hs_guard::CONSUME_BUDGET,
    hs_recursive::TRACK,
    hs_recursive::SET_MAX_DEPTH,
];

/// Session-less methods a session token may call.
pub(super) const SESSIONLESS: [&str; 3] = [
    hs_guard::VALIDATE,
    hs_guard::CHECK_SAFETY,
    hs_guard::CHECK_RATE_LIMIT,
];

pub(super) fn session_id_param(params: Option<&Value>) -> Option<&str> {
    match params? {
        Value::Object(m) => m.get("sessionId")?.as_str(),
        Value::Array(a) => a.first()?.as_str(),
        _ => None,
    }
}

/// Whether `principal` may call `method`: an API-key (or loopback) client may call anything; a
/// session token only the state, guard and recursive methods of its own session and the
/// session-less guard methods.
pub(super) fn authorize(
    principal: &Principal,
    method: &str,
    params: Option<&Value>,
) -> Result<(), RpcError> {
    let Principal::Session(own) = principal else {
        return Ok(());
    };
    let allowed = SESSIONLESS.contains(&method)
        || (["state.", "guard.", "recursive."]
            .iter()
            .any(|p| method.starts_with(p))
            && method != hs_state::CREATE_SESSION
            && session_id_param(params) == Some(own.as_str()));
    if allowed {
        Ok(())
    } else {
        Err(RpcError::invalid_request()
            .with_message("session token does not grant this call")
            .with_data(serde_json::json!({ "sessionId": own, "method": method })))
    }
}

/// The namespace of `principal`'s `guard.checkRateLimit` keys.
pub(super) fn caller_of(principal: &Principal) -> Caller<'_> {
    match principal {
        Principal::Session(id) => Caller::Session(id),
        Principal::ApiKey | Principal::Local => Caller::Node,
    }
}

/// Puts the session tokens of stored sessions back into `tokens`. Called before the JSON-RPC face
/// serves, so that a token valid before a restart is never refused while the service starts.
pub fn restore_tokens(tokens: &Mutex<HashMap<String, String>>, snapshots: &[Snapshot]) {
    let Ok(mut tokens) = tokens.lock() else {
        return;
    };
    for snap in snapshots {
        if let Some(tok) = &snap.token {
            tokens.insert(tok.clone(), snap.session.session_id.clone());
        }
    }
}
