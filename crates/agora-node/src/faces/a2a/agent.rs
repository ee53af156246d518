//! The A2A face's state ([`A2aFace`]): the card key, the signed card built from the mesh's
//! tools, and the tasks (memory and redb) with their in-flight invokes. `super` serves it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agora_agtp::signature::AnsSigningKey;
use agora_bridge::a2a::serve::{self, codes};
use agora_hyperspace::jsonrpc::RpcError;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::clock::now_ms;
use crate::hyperspace::uuid;
use crate::store::Store;

/// The card's path (RFC 8615).
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// The card key's path.
pub const KEY_PATH: &str = "/.well-known/agent-card-key.json";
/// The JSON-RPC endpoint.
pub const RPC_PATH: &str = "/a2a";
/// The card key's file in the data directory.
pub const KEY_FILE: &str = "a2a-card-key.json";
/// How long a built card is served before it is built again.
pub const CARD_TTL: Duration = Duration::from_secs(5);

/// A task and what is left of its call.
#[derive(Debug)]
struct Entry {
    task: Value,
    /// Unix ms of its last change.
    changed: u64,
    /// The in-flight invoke (aborted by `CancelTask`).
    running: Option<tokio::task::AbortHandle>,
    /// Changes, for streams.
    updates: watch::Sender<Value>,
}

/// What the A2A face keeps.
#[derive(Debug)]
pub(super) struct Inner {
    pub(super) key: AnsSigningKey,
    store: Store,
    hyperspace: mpsc::Sender<crate::hyperspace::Input>,
    name: String,
    a2a_url: String,
    ttl_ms: u64,
    max_tasks: usize,
    card: Mutex<Option<(Instant, Value, Vec<Value>)>>,
    tasks: Mutex<HashMap<String, Entry>>,
}

/// The A2A face's state (cheap to clone).
#[derive(Clone, Debug)]
pub struct A2aFace(pub(super) Arc<Inner>);

/// The settings and handles the face is made from.
#[derive(Debug)]
pub struct Settings<'a> {
    /// The data directory (the card key).
    pub data: &'a Path,
    /// The store (tasks).
    pub store: Store,
    /// The Hyperspace service (`tool.discover`, `tool.invoke`).
    pub hyperspace: mpsc::Sender<crate::hyperspace::Input>,
    /// The node's peer id (the card's name).
    pub peer_id: &'a str,
    /// The HTTP face's URL (`http://host:port`).
    pub http_url: &'a str,
    /// `[bridge] a2a_task_ttl`.
    pub ttl: Duration,
    /// `[bridge] a2a_max_tasks`.
    pub max_tasks: usize,
}

impl A2aFace {
    /// Loads (or makes) the card key and the stored tasks that have not expired.
    ///
    /// # Errors
    ///
    /// The key file cannot be read or written, or the store cannot be read.
    pub async fn new(s: Settings<'_>) -> Result<Self, String> {
        let key = load_or_create_key(s.data)?;
        let rows = s
            .store
            .read(Store::a2a_tasks)
            .await
            .map_err(|e| e.to_string())?;
        let ttl_ms = u64::try_from(s.ttl.as_millis()).unwrap_or(u64::MAX);
        let now = now_ms();
        let mut tasks = HashMap::new();
        for (id, json) in rows {
            let Ok(stored) = serde_json::from_str::<Value>(&json) else {
                continue;
            };
            let changed = stored["changed"].as_u64().unwrap_or(0);
            if now.saturating_sub(changed) > ttl_ms {
                let _ = s.store.delete_a2a_task(&id).await;
                continue;
            }
            let mut task = stored["task"].clone();
            // A task that was in flight when the node stopped will never finish.
            if !is_final(&task) {
                set_status(
                    &mut task,
                    "TASK_STATE_FAILED",
                    Some(json!([{"text": "the node restarted"}])),
                );
            }
            let (updates, _) = watch::channel(task.clone());
            tasks.insert(
                id,
                Entry {
                    task,
                    changed,
                    running: None,
                    updates,
                },
            );
        }
        let short = s
            .peer_id
            .get(s.peer_id.len().saturating_sub(8)..)
            .unwrap_or(s.peer_id);
        Ok(Self(Arc::new(Inner {
            key,
            store: s.store,
            hyperspace: s.hyperspace,
            name: format!("Agora node {short}"),
            a2a_url: format!("{}{RPC_PATH}", s.http_url),
            ttl_ms,
            max_tasks: s.max_tasks.max(1),
            card: Mutex::new(None),
            tasks: Mutex::new(tasks),
        })))
    }
}

/// Reads the card key from `<data>/a2a-card-key.json`, or makes it.
fn load_or_create_key(data: &Path) -> Result<AnsSigningKey, String> {
    let path = data.join(KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            crate::ans::signing_key_from_jwk(&text).map_err(|e| format!("{}: {e}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = crate::ans::generate_key(None)?;
            let kid = crate::ans::derived_key_id(&key.verifying_key()).replacen("ans-", "a2a-", 1);
            let key = AnsSigningKey::from_secret_bytes(&key.secret_bytes(), kid)
                .map_err(|e| e.to_string())?;
            let jwk = crate::ans::private_jwk(&key).to_string();
            crate::keys::write_private(&path, jwk.as_bytes())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(key)
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

pub(super) fn is_final(task: &Value) -> bool {
    task["status"]["state"]
        .as_str()
        .is_some_and(|s| agora_bridge::a2a::task::TERMINAL_STATES.contains(&s))
}

fn timestamp() -> String {
    agora_hyperspace::timestamp::format_timestamp(now_ms())
}

fn set_status(task: &mut Value, state: &str, parts: Option<Value>) {
    let mut status = json!({"state": state, "timestamp": timestamp()});
    if let Some(parts) = parts {
        status["message"] = json!({
            "messageId": crate::hyperspace::random_hex(16),
            "role": "ROLE_AGENT",
            "parts": parts,
            "taskId": task["id"],
            "contextId": task["contextId"],
        });
    }
    task["status"] = status;
}

pub(super) fn a2a_err(code: i32, message: &str) -> RpcError {
    serve::a2a_error(code, message)
}

impl A2aFace {
    /// The signed card and the tool records it was built from.
    pub(super) async fn card(&self) -> Option<(Value, Vec<Value>)> {
        if let Some((at, card, tools)) = &*self.0.card.lock().unwrap_or_else(|p| p.into_inner())
            && at.elapsed() < CARD_TTL
        {
            return Some((card.clone(), tools.clone()));
        }
        let found = self
            .call("tool.discover", json!({"query": ""}))
            .await
            .ok()?;
        let mut tools = vec![serve::search_skill_record()];
        tools.extend(found["tools"].as_array().cloned().unwrap_or_default());
        let unsigned = serve::node_card(
            &self.0.name,
            env!("CARGO_PKG_VERSION"),
            &self.0.a2a_url,
            &tools,
        );
        let card = agora_bridge::a2a::jws::sign_card(&unsigned, &self.0.key);
        *self.0.card.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), card.clone(), tools.clone()));
        Some((card, tools))
    }

    /// One call to the Hyperspace service, as the API key.
    async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let (call, answer) = crate::call::Call::as_api_key(method, params);
        let gone = || RpcError::internal_error().with_message("the node is shutting down");
        self.0
            .hyperspace
            .send(crate::hyperspace::Input::Call(call))
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    /// Keeps `task` (memory and redb) and tells its streams.
    async fn save(&self, task: &Value) {
        let id = task["id"].as_str().unwrap_or_default().to_owned();
        let now = now_ms();
        {
            let mut tasks = self.0.tasks.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(e) = tasks.get_mut(&id) {
                e.task = task.clone();
                e.changed = now;
                if is_final(task) {
                    e.running = None;
                }
                let _ = e.updates.send(task.clone());
            }
        }
        let row = json!({"changed": now, "task": task}).to_string();
        if let Err(e) = self.0.store.put_a2a_task(&id, &row).await {
            tracing::warn!(task = %id, error = %e, "an A2A task could not be stored");
        }
    }

    /// Makes room for one more task: forgets expired tasks, then the oldest finished one.
    async fn make_room(&self) -> bool {
        let now = now_ms();
        let forgotten: Vec<String> = {
            let mut tasks = self.0.tasks.lock().unwrap_or_else(|p| p.into_inner());
            let mut gone: Vec<String> = tasks
                .iter()
                .filter(|(_, e)| {
                    e.running.is_none() && now.saturating_sub(e.changed) > self.0.ttl_ms
                })
                .map(|(id, _)| id.clone())
                .collect();
            if tasks.len() - gone.len() >= self.0.max_tasks
                && let Some((id, _)) = tasks
                    .iter()
                    .filter(|(id, e)| e.running.is_none() && !gone.contains(id))
                    .min_by_key(|(_, e)| e.changed)
            {
                gone.push(id.clone());
            }
            for id in &gone {
                tasks.remove(id);
            }
            gone
        };
        for id in &forgotten {
            let _ = self.0.store.delete_a2a_task(id).await;
        }
        self.0.tasks.lock().unwrap_or_else(|p| p.into_inner()).len() < self.0.max_tasks
    }

    /// `SendMessage`/`SendStreamingMessage`: makes the task and starts the invoke; returns the
    /// task as first kept and a receiver of its changes.
    pub(super) async fn start(
        &self,
        params: &Value,
    ) -> Result<(Value, watch::Receiver<Value>), RpcError> {
        let message = params
            .get("message")
            .filter(|m| m.is_object())
            .ok_or_else(|| RpcError::invalid_params().with_message("params.message is required"))?;
        if let Some(task_id) = message.get("taskId").and_then(Value::as_str) {
            let known = self
                .0
                .tasks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(task_id);
            return Err(if known {
                a2a_err(
                    codes::UNSUPPORTED_OPERATION,
                    "the node's tasks take no further messages",
                )
            } else {
                a2a_err(codes::TASK_NOT_FOUND, "task not found")
            });
        }
        let tool_id = serve::skill_of(params)?;
        let (_, tools) = self.card().await.unwrap_or_default();
        let schema = tools
            .iter()
            .find(|t| t["id"] == tool_id.as_str())
            .and_then(|t| t.get("schema"))
            .cloned();
        let arguments = serve::arguments(message, schema.as_ref())?;
        if !self.make_room().await {
            return Err(RpcError::internal_error().with_message("too many tasks in flight"));
        }
        let id = uuid();
        let context = message
            .get("contextId")
            .and_then(Value::as_str)
            .map_or_else(uuid, str::to_owned);
        let mut user = message.clone();
        user["taskId"] = id.clone().into();
        user["contextId"] = context.clone().into();
        let mut task = json!({"id": id, "contextId": context, "history": [user]});
        set_status(&mut task, "TASK_STATE_WORKING", None);
        let (updates, rx) = watch::channel(task.clone());
        self.0
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                id.clone(),
                Entry {
                    task: task.clone(),
                    changed: now_ms(),
                    running: None,
                    updates,
                },
            );
        self.save(&task).await;
        let face = self.clone();
        let running = tokio::spawn({
            let mut task = task.clone();
            async move {
                let outcome = if tool_id == serve::SEARCH_SKILL {
                    (face.call("tool.discover", arguments).await)
                        .map(|found| json!({ "result": found }))
                } else {
                    let params = json!({"toolId": tool_id, "params": arguments});
                    face.call("tool.invoke", params).await
                };
                let (state, message, artifact_parts) = serve::outcome_state(&outcome);
                if let Some(parts) = artifact_parts {
                    task["artifacts"] =
                        json!([{"artifactId": uuid(), "name": "result", "parts": parts}]);
                }
                set_status(&mut task, state, message);
                face.save(&task).await;
            }
        });
        if let Some(e) = self
            .0
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&id)
            && !running.is_finished()
        {
            e.running = Some(running.abort_handle());
        }
        Ok((task, rx))
    }

    pub(super) fn get(&self, id: &str) -> Result<Value, RpcError> {
        self.0
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .map(|e| e.task.clone())
            .ok_or_else(|| a2a_err(codes::TASK_NOT_FOUND, "task not found"))
    }

    pub(super) async fn cancel(&self, id: &str) -> Result<Value, RpcError> {
        let mut task = {
            let mut tasks = self.0.tasks.lock().unwrap_or_else(|p| p.into_inner());
            let e = tasks
                .get_mut(id)
                .ok_or_else(|| a2a_err(codes::TASK_NOT_FOUND, "task not found"))?;
            match e.running.take() {
                Some(handle) if !is_final(&e.task) => {
                    handle.abort();
                    e.task.clone()
                }
                _ => {
                    return Err(a2a_err(
                        codes::TASK_NOT_CANCELABLE,
                        "the task is not in flight",
                    ));
                }
            }
        };
        set_status(&mut task, "TASK_STATE_CANCELED", None);
        self.save(&task).await;
        Ok(task)
    }

    pub(super) fn list(&self, params: &Value) -> Value {
        let context = params.get("contextId").and_then(Value::as_str);
        let state = params.get("status").and_then(Value::as_str);
        let size = params
            .get("pageSize")
            .and_then(Value::as_u64)
            .map_or(50, |n| n.clamp(1, 100)) as usize;
        let tasks = self.0.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<(&u64, &Value)> = tasks
            .values()
            .filter(|e| context.is_none_or(|c| e.task["contextId"] == c))
            .filter(|e| state.is_none_or(|s| e.task["status"]["state"] == s))
            .map(|e| (&e.changed, &e.task))
            .collect();
        all.sort_by(|a, b| b.0.cmp(a.0));
        let total = all.len();
        let page: Vec<Value> = all.into_iter().take(size).map(|(_, t)| t.clone()).collect();
        json!({"tasks": page, "nextPageToken": "", "pageSize": size, "totalSize": total})
    }
}
