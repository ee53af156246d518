//! A mesh call of a bridged skill as an A2A 1.0 `SendMessage` (JSON-RPC binding, A2A §9.4.1),
//! and the agent's answer as the tool's result (the note's §6.3, §7.3) or as a Hyperspace error
//! (§7.4: A2A codes are translated by meaning, never passed on).
//!
//! Input (the fixed message schema of [`super::card::message_schema`]): `{text?, data?,
//! contextId?, taskId?}`, or a bare string as `text`. The message goes with `role: ROLE_USER`,
//! a text part and/or a data part, and the skill's id in `metadata["org.agora-mesh/skillId"]`.
//!
//! Result: `{state, taskId?, contextId?, parts[], artifacts[]}`; `state` is the task's
//! `TASK_STATE_…`, or `MESSAGE` when the agent answered with a message instead of a task;
//! `parts` are the parts of the task's status message (or of the message). `INPUT_REQUIRED` and
//! `AUTH_REQUIRED` come back as results too: the caller continues by invoking again with
//! `taskId` and `contextId`. `FAILED` and `REJECTED` add `isError: true`.

use agora_hyperspace::jsonrpc::{RpcCode, RpcError};
use serde_json::{Map, Value, json};

/// The JSON-RPC method of a message to an agent (A2A 1.0).
pub const SEND_MESSAGE: &str = "SendMessage";

/// The task states that end a task (A2A §4.1.3).
pub const TERMINAL_STATES: [&str; 4] = [
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
];

fn invalid(reason: impl Into<String>) -> RpcError {
    RpcError::invalid_params().with_data(json!({ "reason": reason.into() }))
}

/// The `SendMessage` request for one call of skill `skill_id` with `input`; `message_id` is
/// fresh per call, `tenant` is copied from the card's interface.
///
/// # Errors
///
/// −32602 when `input` is not the message schema.
pub fn send_message(
    input: &Value,
    skill_id: &str,
    message_id: &str,
    tenant: Option<&str>,
) -> Result<Value, RpcError> {
    let (text, data, context_id, task_id) = match input {
        Value::String(s) => (Some(s.clone()), None, None, None),
        Value::Object(o) => {
            for k in o.keys() {
                if !["text", "data", "contextId", "taskId"].contains(&k.as_str()) {
                    return Err(invalid(format!("unknown input field {k:?}")));
                }
            }
            let opt_str = |k: &str| -> Result<Option<String>, RpcError> {
                match o.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(invalid(format!("{k} must be a string"))),
                }
            };
            (
                opt_str("text")?,
                o.get("data").filter(|d| !d.is_null()).cloned(),
                opt_str("contextId")?,
                opt_str("taskId")?,
            )
        }
        _ => return Err(invalid("the input is {text?, data?, contextId?, taskId?}")),
    };
    let mut parts = Vec::new();
    if let Some(t) = text {
        parts.push(json!({ "text": t }));
    }
    if let Some(d) = data {
        parts.push(json!({ "data": d }));
    }
    if parts.is_empty() {
        return Err(invalid("give text or data"));
    }
    let mut message = json!({
        "messageId": message_id,
        "role": "ROLE_USER",
        "parts": parts,
        "metadata": { super::SKILL_ID_KEY: skill_id },
    });
    if let Some(c) = context_id {
        message["contextId"] = c.into();
    }
    if let Some(t) = task_id {
        message["taskId"] = t.into();
    }
    let mut params = json!({ "message": message });
    if let Some(t) = tenant {
        params["tenant"] = t.into();
    }
    Ok(json!({"jsonrpc": "2.0", "id": 1, "method": SEND_MESSAGE, "params": params}))
}

fn bad_answer(reason: &str) -> RpcError {
    RpcError::peer_unavailable().with_data(json!({
        "reason": format!("the A2A agent's answer is not A2A 1.0: {reason}")
    }))
}

/// The tool's result from the agent's JSON-RPC response to `SendMessage`.
///
/// # Errors
///
/// The agent's error, translated ([`from_a2a_error`]); an answer that is not an A2A 1.0
/// `SendMessageResponse` is −32006.
pub fn tool_result(response: &Value) -> Result<Value, RpcError> {
    if let Some(error) = response.get("error") {
        return Err(from_a2a_error(error));
    }
    let result = response
        .get("result")
        .and_then(Value::as_object)
        .ok_or_else(|| bad_answer("no result"))?;
    if let Some(task) = result.get("task").and_then(Value::as_object) {
        return task_result(task);
    }
    if let Some(message) = result.get("message").and_then(Value::as_object) {
        let mut out = json!({
            "state": "MESSAGE",
            "parts": message.get("parts").cloned().unwrap_or_else(|| json!([])),
            "artifacts": [],
        });
        copy(message, "contextId", &mut out);
        copy(message, "taskId", &mut out);
        return Ok(out);
    }
    Err(bad_answer("the result is neither a task nor a message"))
}

fn copy(from: &Map<String, Value>, key: &str, to: &mut Value) {
    if let Some(v) = from.get(key).filter(|v| v.is_string()) {
        to[key] = v.clone();
    }
}

/// The tool's result of an A2A task.
///
/// # Errors
///
/// −32006 when the task has no `id` or `status.state`.
pub fn task_result(task: &Map<String, Value>) -> Result<Value, RpcError> {
    let state = task
        .get("status")
        .and_then(|s| s.get("state"))
        .and_then(Value::as_str)
        .ok_or_else(|| bad_answer("the task has no status.state"))?;
    if !task.get("id").is_some_and(Value::is_string) {
        return Err(bad_answer("the task has no id"));
    }
    let parts = task
        .get("status")
        .and_then(|s| s.get("message"))
        .and_then(|m| m.get("parts"))
        .cloned()
        .unwrap_or_else(|| json!([]));
    let mut out = json!({
        "state": state,
        "parts": parts,
        "artifacts": task.get("artifacts").cloned().unwrap_or_else(|| json!([])),
    });
    if let Some(id) = task.get("id") {
        out["taskId"] = id.clone();
    }
    copy(task, "contextId", &mut out);
    if matches!(state, "TASK_STATE_FAILED" | "TASK_STATE_REJECTED") {
        out["isError"] = true.into();
    }
    Ok(out)
}

/// An A2A JSON-RPC error (A2A §5.4, §9.5) as the Hyperspace error a mesh caller gets, by
/// meaning: the caller's input was wrong (task not found, unsupported operation or content
/// type, extension required, invalid params) → −32602; anything that means the agent failed or
/// cannot be talked to (invalid agent response, version not supported, internal and unknown
/// errors) → −32006. `data.a2a` keeps the agent's code and message.
#[must_use]
pub fn from_a2a_error(error: &Value) -> RpcError {
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("")
        .chars()
        .take(512)
        .collect::<String>();
    let base = match code {
        // TaskNotFound, UnsupportedOperation, ContentTypeNotSupported, ExtensionSupportRequired,
        // Invalid params
        -32001 | -32004 | -32005 | -32008 | -32602 => RpcError::from_code(RpcCode::INVALID_PARAMS),
        _ => RpcError::from_code(RpcCode::PEER_UNAVAILABLE),
    };
    base.with_message(format!("A2A agent error {code}: {message}"))
        .with_data(json!({ "a2a": { "code": code, "message": message } }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_becomes_a_message() {
        let req = send_message(
            &json!({"text": "hi", "taskId": "t", "contextId": "c"}),
            "echo",
            "m1",
            None,
        )
        .unwrap();
        let m = &req["params"]["message"];
        assert_eq!(req["method"], SEND_MESSAGE);
        assert_eq!(m["parts"], json!([{"text": "hi"}]));
        assert_eq!(m["metadata"][crate::a2a::SKILL_ID_KEY], "echo");
        assert_eq!(m["taskId"], "t");
        assert!(send_message(&json!({}), "e", "m", None).is_err());
        assert!(send_message(&json!({"text": 1}), "e", "m", None).is_err());
        assert!(send_message(&json!({"other": 1}), "e", "m", None).is_err());
        assert_eq!(
            send_message(&json!("yo"), "e", "m", Some("t")).unwrap()["params"]["tenant"],
            "t"
        );
    }

    #[test]
    fn answers_become_results_and_errors_are_translated() {
        let task = json!({"result": {"task": {"id": "t1", "contextId": "c1",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"parts": [{"text": "name?"}]}}}}});
        let r = tool_result(&task).unwrap();
        assert_eq!(r["state"], "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(r["taskId"], "t1");
        assert_eq!(r["parts"][0]["text"], "name?");
        let failed =
            json!({"result": {"task": {"id": "t", "status": {"state": "TASK_STATE_FAILED"}}}});
        assert_eq!(tool_result(&failed).unwrap()["isError"], true);
        let e = tool_result(&json!({"error": {"code": -32001, "message": "no task"}})).unwrap_err();
        assert_eq!(e.code, RpcCode::INVALID_PARAMS);
        let e = tool_result(&json!({"error": {"code": -32009, "message": "v"}})).unwrap_err();
        assert_eq!(e.code, RpcCode::PEER_UNAVAILABLE);
        assert!(tool_result(&json!({"result": {}})).is_err());
    }
}
