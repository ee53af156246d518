//! The Learning primitive (`learning.*`, spec §5.1): playbooks of context bullets on this node,
//! a task of its own, its redb tables (`hs_playbooks`, `hs_bullets`) and its worker pool.
//!
//! | module | owns |
//! |---|---|
//! | this one | the task, the playbooks in memory and in redb, the six methods |
//! | `llm` | the optional LLM reflector's chat-completions client |
//!
//! The rules (ids, repeats, near-duplicates, pruning, curation, the built-in reflector, training
//! modes) are `agora_hyperspace::learning`'s; this module runs them. Tokens are counted with
//! cl100k BPE (`tiktoken-rs`, which ships its vocabulary). Near-duplicates are found with the
//! memory service's embedder (all-MiniLM-L6-v2 when installed, else the lexical one); a
//! playbook's vectors are dropped when the node's embedder changes (bullets still merge by text).
//!
//! Every call that changes a playbook runs on the learning worker pool (embedding, the LLM
//! reflector, near-duplicate scans and curation are CPU or wait work, never on a task that
//! answers other calls) while holding that playbook's lock, and writes the changed rows to redb
//! in one transaction before it is answered: an acknowledged change survives a restart, and two
//! calls on one playbook never interleave.
//!
//! Ownership: a playbook is created by its first `learning.reflect` (not `eval-only`) or
//! `learning.addBullet`; the other methods on a playbook that does not exist are −32602
//! `reason: "not-found"`. The API key (and keyless loopback clients) share one namespace of
//! playbook ids; a session token's playbooks live in its session's own namespace, invisible to
//! others.
//!
//! Bounded: at most `[learning] max_playbooks` playbooks (a new one beyond is −32602
//! `reason: "full"`), `[learning] max_bullets` bullets each (the lowest-value bullet makes room),
//! 64 calls in flight (beyond, −32003).

pub(crate) mod llm;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_embed::Embedder;
use agora_hyperspace::jsonrpc::RpcError;
use agora_hyperspace::learning as methods;
use agora_hyperspace::learning::params::{
    AddBulletParams, CurateParams, FeedbackParams, LearningLimits, PlaybookParams, ReflectParams,
};
use agora_hyperspace::learning::playbook::{Added, Candidate, Entry};
use agora_hyperspace::learning::reflect::{self, Mode};
use agora_hyperspace::learning::{Playbook, PlaybookLimits, TokenCounter, not_found};
use serde_json::{Value, json};
use tokio::sync::{OwnedMutexGuard, Semaphore, mpsc, oneshot};
use tokio::time::Instant;

pub use llm::ChatConfig;

use super::guard::{LongCallSettings, LongCalls};
use super::service::{internal, spawn_call};
use crate::call::{Call, Principal};
use crate::clock::now_ms;
use crate::config::Config;
use crate::routes::CallRoute;
use crate::store::Store;

/// Calls handled at once; beyond, −32003.
const IN_FLIGHT: usize = 64;
/// Bullets shown to the LLM reflector.
const LLM_BULLETS_SHOWN: usize = 100;
/// The LLM reflector's system message.
const LLM_SYSTEM: &str =
    "You distil short, reusable lessons from an AI agent's executions. Answer with JSON only.";

/// Which reflector `learning.reflect` uses.
#[derive(Debug, Clone, Default)]
pub enum ReflectorChoice {
    /// The built-in deterministic reflector.
    #[default]
    Builtin,
    /// An OpenAI-compatible chat endpoint, falling back to the built-in one on any error.
    OpenAi(ChatConfig),
}

/// How the learning service runs (`[learning]`; `docs/node.md` "Learning").
#[derive(Debug, Clone)]
pub struct Settings {
    /// Most playbooks. Default 1,000.
    pub max_playbooks: usize,
    /// Bounds of one playbook.
    pub playbook: PlaybookLimits,
    /// Bounds of the calls.
    pub limits: LearningLimits,
    /// Worker threads. Default 1.
    pub workers: usize,
    /// How long a changing call may wait for a worker and run. Default 30 s (an LLM
    /// reflection included).
    pub budget: Duration,
    /// The reflector.
    pub reflector: ReflectorChoice,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_playbooks: 1_000,
            playbook: PlaybookLimits::default(),
            limits: LearningLimits::default(),
            workers: 1,
            budget: Duration::from_secs(30),
            reflector: ReflectorChoice::Builtin,
        }
    }
}

/// Inputs of the learning task.
#[derive(Debug)]
pub enum Input {
    /// A `learning.*` call.
    Call(Call),
    /// Report the service's state (`/status` `learning`).
    Status(oneshot::Sender<Value>),
}

/// The calls this service answers (`learning.*`).
pub fn call_route(tx: &mpsc::Sender<Input>) -> CallRoute {
    CallRoute::new(&["learning."], &[&methods::METHODS], tx, Input::Call)
}

/// cl100k BPE as a token counter, built on its first use. Its tables are about 15 MB of heap,
/// three quarters of an idle node's (heaptrack, `docs/performance.md` "Idle RSS"), and a node
/// that never gets a learning call never needs them. Counting runs in the long-call pool, so the
/// first count (about 0.1 s to build) never holds up a task that answers calls.
#[derive(Default)]
struct Cl100k(std::sync::OnceLock<Result<tiktoken_rs::CoreBPE, String>>);

impl Cl100k {
    fn bpe(&self) -> Result<&tiktoken_rs::CoreBPE, &str> {
        self.0
            .get_or_init(|| {
                tiktoken_rs::cl100k_base().map_err(|e| {
                    tracing::error!(error = %e, "learning: cannot build the cl100k tokenizer; counting 4 bytes as a token");
                    e.to_string()
                })
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

impl TokenCounter for Cl100k {
    fn count(&self, text: &str) -> usize {
        match self.bpe() {
            Ok(bpe) => bpe.encode_ordinary(text).len(),
            Err(_) => text.len().div_ceil(4),
        }
    }
}

type Book = Arc<tokio::sync::Mutex<Playbook>>;

/// Playbooks listed by `/status` `learning.list`.
const STATUS_LIST: usize = 20;

struct Shared {
    store: Store,
    settings: Settings,
    embedder: Option<Arc<dyn Embedder>>,
    counter: Arc<Cl100k>,
    chat: Option<llm::Chat>,
    pool: LongCalls,
    books: Mutex<HashMap<String, Book>>,
    in_flight: Arc<Semaphore>,
    runtime: tokio::runtime::Handle,
}

/// The learning service before it runs: playbooks loaded (the tokenizer comes on first use).
pub struct Prepared {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learning").finish_non_exhaustive()
    }
}

/// Loads every playbook (blocking: call it off the runtime's workers, passing the runtime's
/// handle). `embedder` finds near-duplicate bullets.
pub fn prepare(
    store: Store,
    settings: Settings,
    embedder: Option<Arc<dyn Embedder>>,
    runtime: tokio::runtime::Handle,
) -> Result<Prepared, String> {
    let mut books: HashMap<String, Playbook> = HashMap::new();
    for (key, row) in store.hs_playbooks().map_err(|e| e.to_string())? {
        match serde_json::from_str::<Playbook>(&row) {
            Ok(p) => {
                books.insert(key, p);
            }
            Err(e) => {
                tracing::warn!(playbook = key, error = %e, "an unreadable playbook row was skipped");
            }
        }
    }
    for (key, _seq, row) in store.hs_bullets().map_err(|e| e.to_string())? {
        let Some(p) = books.get_mut(&key) else {
            continue;
        };
        match serde_json::from_str::<Entry>(&row) {
            Ok(e) => p.entries.push(e),
            Err(e) => {
                tracing::warn!(playbook = key, error = %e, "an unreadable bullet row was skipped");
            }
        }
    }
    let embedder_id = embedder.as_ref().map(|e| e.id().to_owned());
    let books = books
        .into_iter()
        .map(|(k, mut p)| {
            // Rows come in key order, which is number order.
            p.use_embedder(embedder_id.as_deref());
            (k, Arc::new(tokio::sync::Mutex::new(p)))
        })
        .collect();
    let chat = match &settings.reflector {
        ReflectorChoice::Builtin => None,
        ReflectorChoice::OpenAi(c) => Some(llm::Chat::new(c.clone())),
    };
    let pool = LongCalls::named(
        "learning",
        LongCallSettings {
            workers: settings.workers,
            budget: settings.budget,
            ..LongCallSettings::default()
        },
    );
    Ok(Prepared {
        shared: Arc::new(Shared {
            store,
            settings,
            embedder,
            counter: Arc::new(Cl100k::default()),
            chat,
            pool,
            books: Mutex::new(books),
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
            runtime,
        }),
    })
}

impl Settings {
    /// The settings `config` asks for (`[learning]`).
    pub fn from_config(config: &Config) -> Self {
        let l = &config.learning;
        Self {
            max_playbooks: l.max_playbooks,
            playbook: PlaybookLimits {
                max_bullets: l.max_bullets,
                ..PlaybookLimits::default()
            },
            reflector: match l.reflector.as_str() {
                "openai" => ReflectorChoice::OpenAi(ChatConfig {
                    base_url: l.base_url.clone().unwrap_or_default(),
                    model: l.model.clone().unwrap_or_default(),
                    api_key: l.api_key.clone(),
                    timeout: Duration::from_millis(l.timeout_ms),
                }),
                _ => ReflectorChoice::Builtin,
            },
            ..Self::default()
        }
    }
}

/// Starts the learning service: its settings from `config`, [`prepare`] on a blocking thread
/// (it loads the playbooks and the tokenizer), then [`run`] on a task of its own. `embedder`
/// finds near-duplicate bullets. Returns its input.
pub async fn start(
    config: &Config,
    store: Store,
    embedder: Arc<dyn Embedder>,
) -> Result<mpsc::Sender<Input>, String> {
    let settings = Settings::from_config(config);
    let rt = tokio::runtime::Handle::current();
    let learning =
        tokio::task::spawn_blocking(move || prepare(store, settings, Some(embedder), rt))
            .await
            .map_err(|e| e.to_string())??;
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(run(learning, rx));
    Ok(tx)
}

/// Runs the learning task until `inputs` closes.
pub async fn run(prepared: Prepared, mut inputs: mpsc::Receiver<Input>) {
    let shared = prepared.shared;
    while let Some(input) = inputs.recv().await {
        match input {
            Input::Call(call) => {
                let s = Arc::clone(&shared);
                spawn_call(
                    &shared.in_flight,
                    "learning",
                    call,
                    async move |who, method, params| s.call(&who, &method, &params).await,
                );
            }
            Input::Status(reply) => {
                let _ = reply.send(shared.status());
            }
        }
    }
}

/// A bullet's counts and update time, by number: what tells a changed bullet row.
type Fingerprints = HashMap<u64, (u32, u32, u64)>;

/// The rows of one change: the playbook's row, the bullet rows to put, the numbers to delete.
type Rows = (String, Vec<(u64, String)>, Vec<u64>);

/// What to write for `p`: its row (the playbook without its bullets), the bullet rows that
/// changed since `before` (number → counts and update time), and the numbers of bullets gone.
fn changes(p: &mut Playbook, before: &Fingerprints) -> Result<Rows, String> {
    let mut upserts = Vec::new();
    let mut seen = HashSet::with_capacity(p.entries.len());
    for e in &p.entries {
        seen.insert(e.seq);
        let now = (
            e.bullet.helpful_count,
            e.bullet.harmful_count,
            e.bullet.updated_at,
        );
        if before.get(&e.seq) != Some(&now) {
            upserts.push((e.seq, serde_json::to_string(e).map_err(|e| e.to_string())?));
        }
    }
    let removed = before
        .keys()
        .filter(|seq| !seen.contains(seq))
        .copied()
        .collect();
    // The bullets have rows of their own: the playbook's row is written without them.
    let entries = std::mem::take(&mut p.entries);
    let row = serde_json::to_string(p);
    p.entries = entries;
    Ok((row.map_err(|e| e.to_string())?, upserts, removed))
}

fn snapshot(p: &Playbook) -> Fingerprints {
    p.entries
        .iter()
        .map(|e| {
            (
                e.seq,
                (
                    e.bullet.helpful_count,
                    e.bullet.harmful_count,
                    e.bullet.updated_at,
                ),
            )
        })
        .collect()
}

fn bullet_json(b: &agora_hyperspace::learning::Bullet) -> Value {
    serde_json::to_value(b).unwrap_or(Value::Null)
}

impl Shared {
    /// The key of `playbook_id` in `principal`'s namespace.
    fn key(principal: &Principal, playbook_id: &str) -> String {
        match principal {
            // Playbook ids have no '/', so session keys never meet the shared namespace.
            Principal::Session(session) => format!("{session}/{playbook_id}"),
            Principal::ApiKey | Principal::Local => playbook_id.to_owned(),
        }
    }

    fn lock_books(&self) -> std::sync::MutexGuard<'_, HashMap<String, Book>> {
        self.books
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn find(&self, key: &str, playbook_id: &str) -> Result<Book, RpcError> {
        self.lock_books()
            .get(key)
            .cloned()
            .ok_or_else(|| not_found("playbookId", playbook_id))
    }

    fn find_or_create(&self, key: &str) -> Result<Book, RpcError> {
        let mut books = self.lock_books();
        if let Some(b) = books.get(key) {
            return Ok(Arc::clone(b));
        }
        if books.len() >= self.settings.max_playbooks {
            return Err(RpcError::invalid_params()
                .with_message(format!(
                    "Invalid params: this node holds its maximum of {} playbooks",
                    self.settings.max_playbooks
                ))
                .with_data(json!({"reason": "full", "field": "playbookId"})));
        }
        let playbook_id = key.rsplit('/').next().unwrap_or(key);
        let mut p = Playbook::new(playbook_id, now_ms());
        p.use_embedder(self.embedder.as_ref().map(|e| e.id()));
        let book = Arc::new(tokio::sync::Mutex::new(p));
        books.insert(key.to_owned(), Arc::clone(&book));
        Ok(book)
    }

    /// Removes `book` (held by the caller, its lock taken) from the playbooks when nothing else
    /// holds it: a call waiting for its lock keeps it, and writes it once it has the lock.
    fn forget_unused(&self, key: &str, book: &Book) {
        let mut books = self.lock_books();
        // Ours, and the map's.
        if books.get(key).is_some_and(|b| Arc::ptr_eq(b, book)) && Arc::strong_count(book) == 2 {
            books.remove(key);
        }
    }

    fn status(&self) -> Value {
        let books = self.lock_books();
        // The first playbooks by key, for operators: the id without the session that owns it
        // (a session's name stays private), its scope, size and version; one being changed now
        // is shown without its size.
        let mut keys: Vec<&String> = books.keys().collect();
        crate::hyperspace::first_sorted(&mut keys, STATUS_LIST);
        let listed: Vec<Value> = keys
            .into_iter()
            .take(STATUS_LIST)
            .filter_map(|key| {
                let book = books.get(key)?;
                let (scope, id) = match key.split_once('/') {
                    Some((_, id)) => ("session", id),
                    None => ("shared", key.as_str()),
                };
                let size = book.try_lock().ok().map(|b| {
                    json!({"bullets": b.bullets().count(), "version": b.version, "tokenCount": b.token_count()})
                });
                Some(json!({"playbookId": id, "scope": scope, "size": size}))
            })
            .collect();
        json!({
            "playbooks": books.len(),
            "list": listed,
            "reflector": match self.settings.reflector {
                ReflectorChoice::Builtin => "builtin",
                ReflectorChoice::OpenAi(_) => "openai",
            },
            "embedder": self.embedder.as_ref().map(|e| e.id().to_owned()),
        })
    }

    async fn call(
        self: &Arc<Self>,
        principal: &Principal,
        method: &str,
        params: &Value,
    ) -> Result<Value, RpcError> {
        let limits = &self.settings.limits;
        match method {
            methods::GET_PLAYBOOK => {
                let p = PlaybookParams::parse(params)?;
                let book = self.find(&Self::key(principal, &p.playbook_id), &p.playbook_id)?;
                let book = book.lock().await;
                Ok(json!({
                    "playbookId": p.playbook_id,
                    "bullets": book.bullets().map(bullet_json).collect::<Vec<_>>(),
                    "version": book.version,
                    "tokenCount": book.token_count(),
                }))
            }
            methods::GET_STATS => {
                let p = PlaybookParams::parse(params)?;
                let book = self.find(&Self::key(principal, &p.playbook_id), &p.playbook_id)?;
                let stats = book.lock().await.stats();
                let by_section: serde_json::Map<String, Value> = stats
                    .by_section
                    .iter()
                    .map(|(s, n)| (s.as_str().to_owned(), json!(n)))
                    .collect();
                Ok(json!({
                    "totalBullets": stats.total,
                    "bySection": by_section,
                    "avgScore": stats.avg_score,
                    "version": stats.version,
                }))
            }
            methods::FEEDBACK => {
                let p = FeedbackParams::parse(params)?;
                let book = self.find(&Self::key(principal, &p.playbook_id), &p.playbook_id)?;
                let key = Self::key(principal, &p.playbook_id);
                let guard = book.lock_owned().await;
                self.change(method, key, guard, move |book, _| {
                    let (helpful, harmful) = book
                        .vote(&p.bullet_id, p.helpful, now_ms())
                        .ok_or_else(|| not_found("bulletId", &p.bullet_id))?;
                    book.bump();
                    Ok(json!({"helpfulCount": helpful, "harmfulCount": harmful}))
                })
                .await
            }
            methods::ADD_BULLET => {
                let p = AddBulletParams::parse(params, limits)?;
                let key = Self::key(principal, &p.playbook_id);
                let guard = self.find_or_create(&key)?.lock_owned().await;
                self.change(method, key, guard, move |book, s| {
                    let vector = s.embed(&[p.content.as_str()]).into_iter().next().flatten();
                    let added = book.add(
                        Candidate {
                            section: p.section,
                            content: p.content,
                            source: "addBullet".into(),
                            key: None,
                            vector,
                        },
                        now_ms(),
                        true,
                        s.counter.as_ref(),
                        &s.settings.playbook,
                    );
                    book.bump();
                    Ok(match added {
                        Added::New { id, evicted } => {
                            json!({"bulletId": id, "merged": false, "evicted": evicted})
                        }
                        Added::Merged(id) => json!({"bulletId": id, "merged": true}),
                    })
                })
                .await
            }
            methods::CURATE => {
                let p = CurateParams::parse(params, limits)?;
                let key = Self::key(principal, &p.playbook_id);
                let guard = self.find(&key, &p.playbook_id)?.lock_owned().await;
                self.change(method, key, guard, move |book, _| {
                    let removed = book.curate(p.max_tokens, now_ms());
                    if !removed.is_empty() {
                        book.bump();
                    }
                    Ok(json!({
                        "removed": removed,
                        "remaining": book.entries.len(),
                        "tokenCount": book.token_count(),
                    }))
                })
                .await
            }
            methods::REFLECT => {
                let p = ReflectParams::parse(params, limits)?;
                let key = Self::key(principal, &p.playbook_id);
                let existing = self.lock_books().get(&key).cloned();
                let book = match (existing, p.mode) {
                    (Some(b), _) => b,
                    // An evaluation of a playbook that does not exist runs on an empty one and
                    // creates nothing.
                    (None, Mode::EvalOnly) => Arc::new(tokio::sync::Mutex::new(Playbook::new(
                        &p.playbook_id,
                        now_ms(),
                    ))),
                    (None, _) => self.find_or_create(&key)?,
                };
                let guard = book.lock_owned().await;
                self.change(method, key, guard, move |book, s| {
                    let (mut candidates, reflector, llm_error) = match &s.chat {
                        Some(chat) => match chat
                            .complete(
                                LLM_SYSTEM,
                                &reflect::llm_prompt(book, &p.execution, LLM_BULLETS_SHOWN),
                            )
                            .and_then(|answer| {
                                reflect::parse_llm_answer(
                                    &answer,
                                    s.settings.playbook.max_content_bytes,
                                )
                            }) {
                            Ok(c) => (c, "openai", None),
                            Err(e) => {
                                tracing::info!(error = %e, "the LLM reflector failed; the built-in reflector answers");
                                (reflect::propose(book, &p.execution), "builtin", Some(e))
                            }
                        },
                        None => (reflect::propose(book, &p.execution), "builtin", None),
                    };
                    let texts: Vec<&str> = candidates.iter().map(|c| c.content.as_str()).collect();
                    let vectors = s.embed(&texts);
                    for (c, v) in candidates.iter_mut().zip(vectors) {
                        c.vector = v;
                    }
                    let r = reflect::apply(
                        book,
                        &p.execution,
                        candidates,
                        p.mode,
                        now_ms(),
                        s.counter.as_ref(),
                        &s.settings.playbook,
                    );
                    let mut out = json!({
                        "newBullets": r.new_bullets.iter().map(bullet_json).collect::<Vec<_>>(),
                        "prunedBullets": r.pruned_bullets,
                        "updatedBullets": r.updated_bullets,
                        "playbookVersion": r.playbook_version,
                        "reflector": reflector,
                    });
                    if let (Some(e), Some(o)) = (llm_error, out.as_object_mut()) {
                        o.insert("reflectorError".into(), json!(e));
                    }
                    Ok(out)
                })
                .await
            }
            other => Err(RpcError::method_not_found().with_message(format!(
                "Method Not Found: {other} (learning methods: getPlaybook, reflect, curate, addBullet, feedback, getStats)"
            ))),
        }
    }

    /// Vectors of `texts` with the node's embedder (`None` each without one or on error).
    /// Blocking: on a worker only.
    fn embed(&self, texts: &[&str]) -> Vec<Option<Vec<f32>>> {
        let Some(e) = &self.embedder else {
            return vec![None; texts.len()];
        };
        match e.embed(texts) {
            Ok(v) => v.into_iter().map(Some).collect(),
            Err(err) => {
                tracing::info!(error = %err, "bullets were not embedded; near-duplicates are found by text only");
                vec![None; texts.len()]
            }
        }
    }

    /// Runs `job` on the playbook held by `guard`, on a worker, then writes what changed to
    /// redb, all before the lock is released. Rows are written when the playbook's
    /// version changed; a call that changed nothing (an eval-only reflection) writes nothing. When
    /// the write fails (a full disk) the call is answered with −32603 and the playbook is put
    /// back as it was before the call, so memory never runs ahead of the disk: the job works on
    /// a copy (a playbook is bounded by `max_bullets`; the copy is made on the worker).
    async fn change<F>(
        self: &Arc<Self>,
        method: &str,
        key: String,
        mut guard: OwnedMutexGuard<Playbook>,
        job: F,
    ) -> Result<Value, RpcError>
    where
        F: FnOnce(&mut Playbook, &Self) -> Result<Value, RpcError> + Send + 'static,
    {
        let s = Arc::clone(self);
        let deadline = Instant::now() + self.settings.budget;
        self.pool
            .run(method, deadline, move || {
                let before = snapshot(&guard);
                let mut next = guard.clone();
                let out = job(&mut next, &s)?;
                if next.version == guard.version {
                    *guard = next;
                    return Ok(out);
                }
                let (row, upserts, removed) = changes(&mut next, &before).map_err(internal)?;
                let written =
                    s.runtime
                        .block_on(s.store.put_playbook(&key, Some(&row), upserts, &removed));
                if let Err(e) = written {
                    // A playbook this call created was never written: it goes too.
                    if guard.version == 0 {
                        s.forget_unused(&key, OwnedMutexGuard::mutex(&guard));
                    }
                    return Err(internal(format!("the playbook was not saved: {e}")));
                }
                *guard = next;
                drop(guard);
                Ok(out)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tokenizer_is_built_on_first_count_and_counts_cl100k_tokens() {
        let c = Cl100k::default();
        assert!(c.0.get().is_none(), "nothing built before a count");
        // "hello world" is two cl100k tokens, "tokenization" two (token, ization).
        assert_eq!(c.count("hello world"), 2);
        assert!(c.0.get().is_some_and(Result::is_ok));
        assert_eq!(c.count("tokenization"), 2);
    }
}
