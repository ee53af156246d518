//! The embedded store: one redb database in the data directory, written by exactly one thread.
//!
//! Writes are sent to the writer thread over a bounded channel and acknowledged only after the
//! transaction that holds them has committed with redb's default `Immediate` durability, so an
//! acknowledged write survives a crash. The writer groups whatever is queued into one
//! transaction (group commit). Reads use read transactions from any thread; they never block the
//! writer. The schema version lives in the `meta` table and migrations are code
//! ([`Store::open`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::{mpsc, oneshot};

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "agora.redb";
/// Current schema version.
pub const SCHEMA_VERSION: u64 = 10;

const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
/// Local capability catalogs: Peer ID → catalog JSON (`{"capabilities":[…]}`).
const CATALOGS: TableDefinition<'_, &str, &str> = TableDefinition::new("agh_catalogs");
/// AGH interactions: `channel NUL interaction_id` → JSON record.
const INTERACTIONS: TableDefinition<'_, &str, &str> = TableDefinition::new("agh_interactions");
/// Hyperspace sessions: `sessionId` → JSON `{session, budget, trace}`.
const HS_SESSIONS: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_sessions");
/// Hyperspace tools registered on this node: tool id → JSON `LocalTool`.
const HS_TOOLS: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_tools");
/// Capability card records this node holds for the DHT: peer id → signed record (envelope text).
const HS_RECORDS: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_records");
/// Agents registered with the Agent Name Service: canonical id → JSON
/// `{manifest, state, registered_ms, updated_ms}`.
const ANS_AGENTS: TableDefinition<'_, &str, &str> = TableDefinition::new("ans_agents");
/// The ANS audit log: 20-digit zero-padded sequence number → JSON record.
const ANS_AUDIT: TableDefinition<'_, &str, &str> = TableDefinition::new("ans_audit");
/// Memories this node holds as a replica: memory id → sealed entry (`hyperspace::memory::vault`:
/// base64 of nonce and XChaCha20-Poly1305 ciphertext of the entry's JSON, live or tombstone).
const HS_MEMORIES: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_memories");
/// Learning playbooks: playbook key (`hyperspace::learning`) → JSON of the playbook without its
/// bullets (version, next number, tool averages).
const HS_PLAYBOOKS: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_playbooks");
/// Their bullets: `playbook key NUL 20-digit number` → JSON of the bullet entry.
const HS_BULLETS: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_bullets");
/// Trajectory libraries (`hyperspace::improving`): `taskType NUL trajectoryId` → JSON of the
/// held trajectory (the trajectory and the node's counts about it).
const HS_TRAJECTORIES: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_trajectories");
/// Contributor reputation (`hyperspace::improving`): PeerId → JSON of its standing.
const HS_REPUTATION: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_reputation");
/// Payment challenges this node issued (`hyperspace::payments`): challenge id → JSON (the
/// challenge and whether it was paid).
const HS_PAY_CHALLENGES: TableDefinition<'_, &str, &str> =
    TableDefinition::new("hs_pay_challenges");
/// Authorization nonces used: `payer NUL 0x-nonce` → JSON `{receiptId, validBefore}`.
const HS_PAY_NONCES: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_pay_nonces");
/// Receipts of accepted payments: receipt id → JSON receipt.
const HS_PAY_RECEIPTS: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_pay_receipts");
/// Payment channels this node is the payer or the payee of: channel id → JSON.
const HS_PAY_CHANNELS: TableDefinition<'_, &str, &str> = TableDefinition::new("hs_pay_channels");
/// The settlement log: 20-digit sequence number → JSON record.
const HS_PAY_SETTLEMENTS: TableDefinition<'_, &str, &str> =
    TableDefinition::new("hs_pay_settlements");
/// MCP servers bridged over JSON-RPC (`bridge.registerMCPServer`), by server name: their specs.
const BRIDGE_MCP: TableDefinition<'_, &str, &str> = TableDefinition::new("bridge_mcp");
/// The A2A face's tasks (`faces::a2a`): task id → the A2A `Task` JSON with its expiry.
const A2A_TASKS: TableDefinition<'_, &str, &str> = TableDefinition::new("a2a_tasks");

/// The tables holding text rows.
#[derive(Clone, Copy, Debug)]
enum Table {
    Catalogs,
    Interactions,
    HsSessions,
    HsTools,
    HsRecords,
    AnsAgents,
    AnsAudit,
    HsMemories,
    HsPlaybooks,
    HsBullets,
    HsTrajectories,
    HsReputation,
    HsPayChallenges,
    HsPayNonces,
    HsPayReceipts,
    HsPayChannels,
    HsPaySettlements,
    BridgeMcp,
    A2aTasks,
}

/// The payment tables, for [`Store::put_payments`] and [`Store::pay_rows`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayTable {
    /// Issued challenges.
    Challenges,
    /// Used authorization nonces.
    Nonces,
    /// Receipts.
    Receipts,
    /// Channels.
    Channels,
    /// The settlement log.
    Settlements,
}

impl PayTable {
    fn table(self) -> Table {
        match self {
            Self::Challenges => Table::HsPayChallenges,
            Self::Nonces => Table::HsPayNonces,
            Self::Receipts => Table::HsPayReceipts,
            Self::Channels => Table::HsPayChannels,
            Self::Settlements => Table::HsPaySettlements,
        }
    }
}

impl Table {
    const ALL: [Self; 19] = [
        Self::Catalogs,
        Self::Interactions,
        Self::HsSessions,
        Self::HsTools,
        Self::HsRecords,
        Self::AnsAgents,
        Self::AnsAudit,
        Self::HsMemories,
        Self::HsPlaybooks,
        Self::HsBullets,
        Self::HsTrajectories,
        Self::HsReputation,
        Self::HsPayChallenges,
        Self::HsPayNonces,
        Self::HsPayReceipts,
        Self::HsPayChannels,
        Self::HsPaySettlements,
        Self::BridgeMcp,
        Self::A2aTasks,
    ];

    fn def(self) -> TableDefinition<'static, &'static str, &'static str> {
        match self {
            Self::Catalogs => CATALOGS,
            Self::Interactions => INTERACTIONS,
            Self::HsSessions => HS_SESSIONS,
            Self::HsTools => HS_TOOLS,
            Self::HsRecords => HS_RECORDS,
            Self::AnsAgents => ANS_AGENTS,
            Self::AnsAudit => ANS_AUDIT,
            Self::HsMemories => HS_MEMORIES,
            Self::HsPlaybooks => HS_PLAYBOOKS,
            Self::HsBullets => HS_BULLETS,
            Self::HsTrajectories => HS_TRAJECTORIES,
            Self::HsReputation => HS_REPUTATION,
            Self::HsPayChallenges => HS_PAY_CHALLENGES,
            Self::HsPayNonces => HS_PAY_NONCES,
            Self::HsPayReceipts => HS_PAY_RECEIPTS,
            Self::HsPayChannels => HS_PAY_CHANNELS,
            Self::HsPaySettlements => HS_PAY_SETTLEMENTS,
            Self::BridgeMcp => BRIDGE_MCP,
            Self::A2aTasks => A2A_TASKS,
        }
    }
}

/// Most writes waiting for the writer thread.
const WRITE_QUEUE: usize = 1024;
/// Most writes folded into one transaction.
const GROUP_COMMIT: usize = 256;

/// A store operation failed. The messages never carry a filesystem path (they can reach a
/// remote client); the path is in the variant, for the node's own log.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// redb reported an error.
    #[error("storage error: {message}")]
    Db {
        /// Database file.
        path: PathBuf,
        /// What redb said.
        message: String,
    },
    /// The disk refused a write (full, or failing): nothing of the write was made, and the
    /// store reopens its database before the next one.
    #[error("storage error: {message}; nothing was written")]
    Io {
        /// Database file.
        path: PathBuf,
        /// What the system said (`No space left on device (os error 28)`).
        message: String,
    },
    /// The database is being reopened after an I/O error.
    #[error("storage unavailable: the database is being reopened after an I/O error; try again")]
    Reopening,
    /// The database was written by a newer Agora.
    #[error("the database has schema version {found}; this build knows up to {SCHEMA_VERSION}")]
    TooNew {
        /// Database file.
        path: PathBuf,
        /// Version found.
        found: u64,
    },
    /// The writer thread is gone (the node is shutting down).
    #[error("the store is closed")]
    Closed,
}

enum Write {
    Put {
        table: Table,
        key: String,
        value: String,
    },
    Delete {
        table: Table,
        key: String,
    },
}

/// Key of an interaction record.
fn interaction_key(channel: &str, interaction_id: &str) -> String {
    format!("{channel}\0{interaction_id}")
}

/// Key of a bullet row: sorts by playbook, then number.
fn bullet_key(playbook: &str, seq: u64) -> String {
    format!("{playbook}\0{seq:020}")
}

/// Key of an audit record: sorts in sequence order.
fn audit_key(seq: u64) -> String {
    format!("{seq:020}")
}

/// Writes committed together, in one transaction.
struct Job {
    writes: Vec<Write>,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Arc<Handle>,
    path: Arc<PathBuf>,
    writer: mpsc::Sender<Job>,
    /// Where the writer records each commit's duration, once set ([`Store::observe_commits`]).
    commits: Arc<std::sync::OnceLock<prometheus_client::metrics::histogram::Histogram>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// Rows of a table of JSON values, by key.
type Rows = Vec<(String, String)>;

/// The open database, which the writer closes after an I/O error: redb refuses every later
/// transaction of a database that hit one ("Previous I/O error occurred. Please close and
/// re-open the database"). The next access — a write or a read — opens the file again and
/// checks its integrity; until then (a read that began before the error still holds the old
/// database) accesses answer [`StoreError::Reopening`]. Reads take the current database for
/// the length of their transaction.
#[derive(Debug)]
struct Handle {
    path: PathBuf,
    current: std::sync::RwLock<Option<Arc<Database>>>,
    /// Held while one thread reopens (the others do not wait for it).
    reopening: std::sync::Mutex<()>,
}

impl Handle {
    fn new(path: PathBuf, db: Database) -> Self {
        Self {
            path,
            current: std::sync::RwLock::new(Some(Arc::new(db))),
            reopening: std::sync::Mutex::new(()),
        }
    }

    fn current(&self) -> Option<Arc<Database>> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The database, reopened first if an I/O error closed it.
    fn get(&self) -> Result<Arc<Database>, StoreError> {
        if let Some(db) = self.current() {
            return Ok(db);
        }
        self.reopen();
        self.current().ok_or(StoreError::Reopening)
    }

    /// Drops this handle's database after an I/O error.
    fn close(&self) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    /// Opens the database again and checks its integrity, unless another thread is doing it or
    /// a read still holds the old one (then a later access tries again).
    fn reopen(&self) {
        let Ok(_only_us) = self.reopening.try_lock() else {
            return;
        };
        if self.current().is_some() {
            return;
        }
        match Database::create(&self.path) {
            Ok(mut db) => {
                match db.check_integrity() {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!("store: the database was repaired on reopening"),
                    Err(e) => {
                        tracing::warn!(error = %e, "store: the integrity check failed; not reopened");
                        return;
                    }
                }
                *self
                    .current
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(db));
                tracing::info!("store: the database is open again after an I/O error");
            }
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {}
            Err(e) => tracing::warn!(error = %e, "store: the database could not be reopened yet"),
        }
    }
}

impl Store {
    /// Opens the store off the async threads ([`Store::open`] on a blocking thread).
    pub async fn open_async(dir: &Path) -> Result<Self, StoreError> {
        let d = dir.to_owned();
        tokio::task::spawn_blocking(move || Self::open(&d))
            .await
            .map_err(|e| StoreError::Db {
                path: dir.to_owned(),
                message: e.to_string(),
            })?
    }

    /// Runs a blocking read off the async threads.
    pub async fn read<T: Send + 'static>(
        &self,
        read: fn(&Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let s = self.clone();
        tokio::task::spawn_blocking(move || read(&s))
            .await
            .map_err(|e| StoreError::Db {
                path: PathBuf::from(DB_FILE),
                message: e.to_string(),
            })?
    }

    /// Reads stored JSON rows and parses them, skipping (and logging) unreadable ones.
    pub async fn read_json<T: serde::de::DeserializeOwned>(
        &self,
        read: fn(&Self) -> Result<Rows, StoreError>,
        what: &str,
    ) -> Result<Vec<T>, StoreError> {
        let rows = self.read(read).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, json)| match serde_json::from_str(&json) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(%id, error = %e, what, "a stored row is unreadable; ignored");
                    None
                }
            })
            .collect())
    }

    /// Opens (or creates) `<dir>/agora.redb`, migrates it to [`SCHEMA_VERSION`] and starts the
    /// writer thread.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join(DB_FILE);
        let err = |e: &dyn std::fmt::Display| StoreError::Db {
            path: path.clone(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
        let db = Database::create(&path).map_err(|e| err(&e))?;
        migrate(&db, &path)?;
        let db = Arc::new(Handle::new(path.clone(), db));
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let writer_db = Arc::clone(&db);
        let writer_path = path.clone();
        let commits = Arc::new(std::sync::OnceLock::new());
        let writer_commits = Arc::clone(&commits);
        std::thread::Builder::new()
            .name("agora-store-writer".into())
            .spawn(move || writer(&writer_db, &writer_path, rx, &writer_commits))
            .map_err(|e| err(&e))?;
        Ok(Self {
            db,
            path: Arc::new(path),
            writer: tx,
            commits,
        })
    }

    /// Records the duration of every commit from now on in `histogram` (the first call wins).
    pub fn observe_commits(&self, histogram: prometheus_client::metrics::histogram::Histogram) {
        let _ = self.commits.set(histogram);
    }

    async fn submit(&self, write: Write) -> Result<(), StoreError> {
        self.submit_all(vec![write]).await
    }

    async fn submit_all(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        let (done, ack) = oneshot::channel();
        self.writer
            .send(Job { writes, done })
            .await
            .map_err(|_| StoreError::Closed)?;
        ack.await.map_err(|_| StoreError::Closed)?
    }

    /// Stores the catalog of a local peer; returns once it is durable.
    pub async fn put_catalog(&self, peer_id: &str, json: &str) -> Result<(), StoreError> {
        self.put(Table::Catalogs, peer_id, json).await
    }

    /// Deletes the catalog of a local peer; returns once it is durable.
    pub async fn delete_catalog(&self, peer_id: &str) -> Result<(), StoreError> {
        self.delete(Table::Catalogs, peer_id).await
    }

    /// Stores an interaction record (JSON); returns once it is durable.
    pub async fn put_interaction(
        &self,
        channel: &str,
        interaction_id: &str,
        json: &str,
    ) -> Result<(), StoreError> {
        self.put(
            Table::Interactions,
            &interaction_key(channel, interaction_id),
            json,
        )
        .await
    }

    /// Deletes an interaction record; returns once it is durable.
    pub async fn delete_interaction(
        &self,
        channel: &str,
        interaction_id: &str,
    ) -> Result<(), StoreError> {
        self.delete(
            Table::Interactions,
            &interaction_key(channel, interaction_id),
        )
        .await
    }

    /// Stores a Hyperspace session snapshot; returns once it is durable.
    pub async fn put_hs_session(&self, session_id: &str, json: &str) -> Result<(), StoreError> {
        self.put(Table::HsSessions, session_id, json).await
    }

    /// Deletes a Hyperspace session snapshot; returns once it is durable.
    pub async fn delete_hs_session(&self, session_id: &str) -> Result<(), StoreError> {
        self.delete(Table::HsSessions, session_id).await
    }

    async fn put(&self, table: Table, key: &str, value: &str) -> Result<(), StoreError> {
        self.submit(Write::Put {
            table,
            key: key.to_owned(),
            value: value.to_owned(),
        })
        .await
    }

    async fn delete(&self, table: Table, key: &str) -> Result<(), StoreError> {
        self.submit(Write::Delete {
            table,
            key: key.to_owned(),
        })
        .await
    }

    /// Stores an A2A task (JSON); returns once it is durable.
    pub async fn put_a2a_task(&self, task_id: &str, json: &str) -> Result<(), StoreError> {
        self.put(Table::A2aTasks, task_id, json).await
    }

    /// Deletes an A2A task; returns once it is durable.
    pub async fn delete_a2a_task(&self, task_id: &str) -> Result<(), StoreError> {
        self.delete(Table::A2aTasks, task_id).await
    }

    /// Every stored A2A task, by id (a blocking read).
    pub fn a2a_tasks(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(A2A_TASKS)
    }

    /// Stores a Hyperspace tool; returns once it is durable.
    pub async fn put_hs_tool(&self, tool_id: &str, json: &str) -> Result<(), StoreError> {
        self.put(Table::HsTools, tool_id, json).await
    }

    /// Deletes a Hyperspace tool; returns once it is durable.
    pub async fn delete_hs_tool(&self, tool_id: &str) -> Result<(), StoreError> {
        self.delete(Table::HsTools, tool_id).await
    }

    /// Stores a sealed memory row (live or tombstone); returns once it is durable.
    pub async fn put_hs_memory(&self, id: &str, row: &str) -> Result<(), StoreError> {
        self.put(Table::HsMemories, id, row).await
    }

    /// The sealed row of memory `id` (a blocking read).
    pub fn hs_memory(&self, id: &str) -> Result<Option<String>, StoreError> {
        let err = |e: &dyn std::fmt::Display| StoreError::Db {
            path: self.path.to_path_buf(),
            message: e.to_string(),
        };
        let txn = self.db.get()?.begin_read().map_err(|e| err(&e))?;
        let table = txn.open_table(HS_MEMORIES).map_err(|e| err(&e))?;
        Ok(table
            .get(id)
            .map_err(|e| err(&e))?
            .map(|v| v.value().to_owned()))
    }

    /// Every sealed memory row, by id (a blocking read).
    pub fn hs_memories(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(HS_MEMORIES)
    }

    /// Writes one change of a playbook in one transaction: its row (`None`: the playbook is
    /// gone), the bullet rows put and the bullet rows deleted (by number); returns once durable.
    pub async fn put_playbook(
        &self,
        key: &str,
        row: Option<&str>,
        bullets: Vec<(u64, String)>,
        removed: &[u64],
    ) -> Result<(), StoreError> {
        let mut writes = Vec::with_capacity(1 + bullets.len() + removed.len());
        writes.push(match row {
            Some(row) => Write::Put {
                table: Table::HsPlaybooks,
                key: key.to_owned(),
                value: row.to_owned(),
            },
            None => Write::Delete {
                table: Table::HsPlaybooks,
                key: key.to_owned(),
            },
        });
        for seq in removed {
            writes.push(Write::Delete {
                table: Table::HsBullets,
                key: bullet_key(key, *seq),
            });
        }
        for (seq, value) in bullets {
            writes.push(Write::Put {
                table: Table::HsBullets,
                key: bullet_key(key, seq),
                value,
            });
        }
        self.submit_all(writes).await
    }

    /// Every playbook row, by key (a blocking read).
    pub fn hs_playbooks(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(HS_PLAYBOOKS)
    }

    /// Every bullet row: `(playbook key, number, JSON)`, in key order (a blocking read).
    pub fn hs_bullets(&self) -> Result<Vec<(String, u64, String)>, StoreError> {
        Ok(self
            .read_all(HS_BULLETS)?
            .into_iter()
            .filter_map(|(k, v)| {
                let (playbook, seq) = k.split_once('\0')?;
                Some((playbook.to_owned(), seq.parse().ok()?, v))
            })
            .collect())
    }

    /// Writes one change of the trajectory libraries in one transaction: trajectory rows put
    /// (`(taskType, trajectoryId, JSON)`), trajectory rows deleted (`(taskType, trajectoryId)`)
    /// and contributor standings put (`(PeerId, JSON)`); returns once durable.
    pub async fn put_trajectories(
        &self,
        puts: Vec<(String, String, String)>,
        deletes: Vec<(String, String)>,
        standings: Vec<(String, String)>,
    ) -> Result<(), StoreError> {
        let mut writes = Vec::with_capacity(puts.len() + deletes.len() + standings.len());
        for (task, id) in deletes {
            writes.push(Write::Delete {
                table: Table::HsTrajectories,
                key: format!("{task}\0{id}"),
            });
        }
        for (task, id, value) in puts {
            writes.push(Write::Put {
                table: Table::HsTrajectories,
                key: format!("{task}\0{id}"),
                value,
            });
        }
        for (peer, value) in standings {
            writes.push(Write::Put {
                table: Table::HsReputation,
                key: peer,
                value,
            });
        }
        if writes.is_empty() {
            return Ok(());
        }
        self.submit_all(writes).await
    }

    /// Every trajectory row: `(taskType, JSON)`, in key order (a blocking read).
    pub fn hs_trajectories(&self) -> Result<Vec<(String, String)>, StoreError> {
        Ok(self
            .read_all(HS_TRAJECTORIES)?
            .into_iter()
            .filter_map(|(k, v)| Some((k.split_once('\0')?.0.to_owned(), v)))
            .collect())
    }

    /// Every contributor standing, by PeerId (a blocking read).
    pub fn hs_reputation(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(HS_REPUTATION)
    }

    /// Writes rows of the payment tables in one transaction (`Some` puts, `None` deletes);
    /// returns once durable. Money moves only through here: a receipt, its nonce and its
    /// challenge are written together or not at all.
    pub async fn put_payments(
        &self,
        rows: Vec<(PayTable, String, Option<String>)>,
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let writes = rows
            .into_iter()
            .map(|(t, key, value)| match value {
                Some(value) => Write::Put {
                    table: t.table(),
                    key,
                    value,
                },
                None => Write::Delete {
                    table: t.table(),
                    key,
                },
            })
            .collect();
        self.submit_all(writes).await
    }

    /// Every row of a payment table, in key order (a blocking read).
    pub fn pay_rows(&self, table: PayTable) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(table.table().def())
    }

    /// Stores the spec of a bridged MCP server; returns once it is durable.
    pub async fn put_bridge_mcp(&self, name: &str, spec: &str) -> Result<(), StoreError> {
        self.put(Table::BridgeMcp, name, spec).await
    }

    /// Deletes a bridged MCP server's spec; returns once it is durable.
    pub async fn delete_bridge_mcp(&self, name: &str) -> Result<(), StoreError> {
        self.delete(Table::BridgeMcp, name).await
    }

    /// Every stored bridged MCP server's spec, by name (a blocking read).
    pub fn bridge_mcp(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(BRIDGE_MCP)
    }

    /// Every stored Hyperspace tool, by id (a blocking read).
    pub fn hs_tools(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(HS_TOOLS)
    }

    /// Stores the card record of `peer_id`; returns once it is durable.
    pub async fn put_hs_record(&self, peer_id: &str, record: &str) -> Result<(), StoreError> {
        self.put(Table::HsRecords, peer_id, record).await
    }

    /// Deletes the card record of `peer_id`; returns once it is durable.
    pub async fn delete_hs_record(&self, peer_id: &str) -> Result<(), StoreError> {
        self.delete(Table::HsRecords, peer_id).await
    }

    /// Every stored card record, by peer id (a blocking read).
    pub fn hs_records(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(HS_RECORDS)
    }

    /// Stores (`Some`) or deletes (`None`) an ANS agent together with its audit record, in one
    /// transaction; returns once both are durable.
    pub async fn put_ans_agent(
        &self,
        canonical_id: &str,
        entry: Option<&str>,
        audit_seq: u64,
        audit: &str,
    ) -> Result<(), StoreError> {
        let key = canonical_id.to_owned();
        let agent = match entry {
            Some(v) => Write::Put {
                table: Table::AnsAgents,
                key,
                value: v.to_owned(),
            },
            None => Write::Delete {
                table: Table::AnsAgents,
                key,
            },
        };
        let record = Write::Put {
            table: Table::AnsAudit,
            key: audit_key(audit_seq),
            value: audit.to_owned(),
        };
        self.submit_all(vec![agent, record]).await
    }

    /// Stores an ANS agent without an audit record (a refresh that replaced its data).
    pub async fn refresh_ans_agent(
        &self,
        canonical_id: &str,
        entry: &str,
    ) -> Result<(), StoreError> {
        self.put(Table::AnsAgents, canonical_id, entry).await
    }

    /// Every registered ANS agent, by canonical id (a blocking read).
    pub fn ans_agents(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(ANS_AGENTS)
    }

    /// The ANS audit log as `(sequence, json)`, oldest first (a blocking read).
    pub fn ans_audit(&self) -> Result<Vec<(u64, String)>, StoreError> {
        Ok(self
            .read_all(ANS_AUDIT)?
            .into_iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v)))
            .collect())
    }

    /// The last `n` audit records, newest first (a blocking read of `n` rows).
    pub fn ans_audit_tail(&self, n: usize) -> Result<Vec<(u64, String)>, StoreError> {
        Ok(self
            .read_rows(ANS_AUDIT, true, n)?
            .into_iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v)))
            .collect())
    }

    /// Every stored Hyperspace session snapshot, by session id (a blocking read).
    pub fn hs_sessions(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(HS_SESSIONS)
    }

    /// Every stored interaction as `(channel, interaction_id, json)` (a blocking read).
    pub fn interactions(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        Ok(self
            .read_all(INTERACTIONS)?
            .into_iter()
            .filter_map(|(k, v)| {
                let (channel, id) = k.split_once('\0')?;
                Some((channel.to_owned(), id.to_owned(), v))
            })
            .collect())
    }

    /// Every stored catalog, by Peer ID (a blocking read; call it off the async threads).
    pub fn catalogs(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_all(CATALOGS)
    }

    fn read_all(
        &self,
        def: TableDefinition<'_, &str, &str>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.read_rows(def, false, usize::MAX)
    }

    /// Up to `limit` rows of `def` in key order (`newest_first`: from the last key).
    fn read_rows(
        &self,
        def: TableDefinition<'_, &str, &str>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let err = |e: &dyn std::fmt::Display| StoreError::Db {
            path: (*self.path).clone(),
            message: e.to_string(),
        };
        let txn = self.db.get()?.begin_read().map_err(|e| err(&e))?;
        let table = match txn.open_table(def) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(err(&e)),
        };
        let mut out = Vec::new();
        let rows = table.iter().map_err(|e| err(&e))?;
        let rows: Box<dyn Iterator<Item = _>> = if newest_first {
            Box::new(rows.rev())
        } else {
            Box::new(rows)
        };
        for entry in rows.take(limit) {
            let (k, v) = entry.map_err(|e| err(&e))?;
            out.push((k.value().to_owned(), v.value().to_owned()));
        }
        Ok(out)
    }
}

fn migrate(db: &Database, path: &Path) -> Result<(), StoreError> {
    let err = |e: &dyn std::fmt::Display| StoreError::Db {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let txn = db.begin_write().map_err(|e| err(&e))?;
    {
        let mut meta = txn.open_table(META).map_err(|e| err(&e))?;
        let found = meta
            .get("schema_version")
            .map_err(|e| err(&e))?
            .map(|v| v.value());
        match found {
            Some(v) if v > SCHEMA_VERSION => {
                return Err(StoreError::TooNew {
                    path: path.to_path_buf(),
                    found: v,
                });
            }
            Some(v) if v == SCHEMA_VERSION => {}
            // Migrations, in order: 0 (a fresh file) → 1 creates the catalogs table, 1 → 2 the
            // interactions table, 2 → 3 the Hyperspace sessions table, 3 → 4 the Hyperspace
            // tools and card records tables, 4 → 5 the ANS agents
            // and audit tables, 5 → 6 the memories table, 6 → 7 the playbook and bullet tables,
            // 7 → 8 the trajectory and reputation tables, 8 → 9 the payment tables, 9 → 10 the
            // bridged MCP servers and A2A tasks tables.
            found => {
                let from = found.unwrap_or(0);
                if from < 1 {
                    txn.open_table(CATALOGS).map_err(|e| err(&e))?;
                }
                if from < 2 {
                    txn.open_table(INTERACTIONS).map_err(|e| err(&e))?;
                }
                if from < 3 {
                    txn.open_table(HS_SESSIONS).map_err(|e| err(&e))?;
                }
                if from < 4 {
                    txn.open_table(HS_TOOLS).map_err(|e| err(&e))?;
                    txn.open_table(HS_RECORDS).map_err(|e| err(&e))?;
                }
                if from < 5 {
                    txn.open_table(ANS_AGENTS).map_err(|e| err(&e))?;
                    txn.open_table(ANS_AUDIT).map_err(|e| err(&e))?;
                }
                if from < 6 {
                    txn.open_table(HS_MEMORIES).map_err(|e| err(&e))?;
                }
                if from < 7 {
                    txn.open_table(HS_PLAYBOOKS).map_err(|e| err(&e))?;
                    txn.open_table(HS_BULLETS).map_err(|e| err(&e))?;
                }
                if from < 8 {
                    txn.open_table(HS_TRAJECTORIES).map_err(|e| err(&e))?;
                    txn.open_table(HS_REPUTATION).map_err(|e| err(&e))?;
                }
                if from < 9 {
                    for t in [
                        HS_PAY_CHALLENGES,
                        HS_PAY_NONCES,
                        HS_PAY_RECEIPTS,
                        HS_PAY_CHANNELS,
                        HS_PAY_SETTLEMENTS,
                    ] {
                        txn.open_table(t).map_err(|e| err(&e))?;
                    }
                }
                if from < 10 {
                    txn.open_table(BRIDGE_MCP).map_err(|e| err(&e))?;
                    txn.open_table(A2A_TASKS).map_err(|e| err(&e))?;
                }
                meta.insert("schema_version", SCHEMA_VERSION)
                    .map_err(|e| err(&e))?;
            }
        }
    }
    txn.commit().map_err(|e| err(&e))
}

fn writer(
    db: &Handle,
    path: &Path,
    mut rx: mpsc::Receiver<Job>,
    commits: &std::sync::OnceLock<prometheus_client::metrics::histogram::Histogram>,
) {
    while let Some(first) = rx.blocking_recv() {
        let mut jobs = vec![first];
        while jobs.len() < GROUP_COMMIT {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        // A database closed by an earlier I/O error is opened again first.
        let Ok(current) = db.get() else {
            for job in jobs {
                let _ = job.done.send(Err(StoreError::Reopening));
            }
            continue;
        };
        let started = std::time::Instant::now();
        let result = apply(&current, &jobs);
        drop(current);
        if let Some(h) = commits.get() {
            h.observe(started.elapsed().as_secs_f64());
        }
        let failure = result.err();
        if let Some(f) = &failure {
            tracing::warn!(path = %path.display(), error = %f.message(), "store: a write failed");
        }
        for job in jobs {
            let r = match &failure {
                None => Ok(()),
                Some(Failure::Io(message)) => Err(StoreError::Io {
                    path: path.to_path_buf(),
                    message: message.clone(),
                }),
                Some(Failure::Other(message)) => Err(StoreError::Db {
                    path: path.to_path_buf(),
                    message: message.clone(),
                }),
            };
            let _ = job.done.send(r);
        }
        if matches!(failure, Some(Failure::Io(_))) {
            db.close();
            db.reopen();
        }
    }
}

/// Why a write transaction failed: the disk (the database must be reopened), or anything else.
#[derive(Debug)]
enum Failure {
    Io(String),
    Other(String),
}

impl Failure {
    fn of(e: impl Into<redb::Error>) -> Self {
        match e.into() {
            e @ (redb::Error::Io(_) | redb::Error::PreviousIo) => Self::Io(e.to_string()),
            e => Self::Other(e.to_string()),
        }
    }

    fn message(&self) -> &str {
        match self {
            Self::Io(m) | Self::Other(m) => m,
        }
    }
}

fn apply(db: &Database, jobs: &[Job]) -> Result<(), Failure> {
    let txn = db.begin_write().map_err(Failure::of)?;
    {
        let mut tables = Table::ALL
            .iter()
            .map(|t| txn.open_table(t.def()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Failure::of)?;
        for write in jobs.iter().flat_map(|j| &j.writes) {
            match write {
                Write::Put { table, key, value } => {
                    tables[*table as usize]
                        .insert(key.as_str(), value.as_str())
                        .map_err(Failure::of)?;
                }
                Write::Delete { table, key } => {
                    tables[*table as usize]
                        .remove(key.as_str())
                        .map_err(Failure::of)?;
                }
            }
        }
    }
    txn.commit().map_err(Failure::of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_no_path() {
        let path = PathBuf::from("/srv/agora/data/agora.redb");
        for e in [
            StoreError::Db {
                path: path.clone(),
                message: "boom".into(),
            },
            StoreError::Io {
                path: path.clone(),
                message: "No space left on device (os error 28)".into(),
            },
            StoreError::TooNew { path, found: 99 },
            StoreError::Reopening,
        ] {
            let text = e.to_string();
            assert!(
                !text.contains("/srv") && !text.contains("agora.redb"),
                "{text}"
            );
        }
    }

    #[tokio::test]
    async fn catalogs_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            store
                .put_catalog("a.1", r#"{"capabilities":[]}"#)
                .await
                .unwrap();
            store.put_catalog("b.2", "x").await.unwrap();
            store.delete_catalog("b.2").await.unwrap();
        }
        // The writer thread of the first handle may still hold the file for a moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let store = loop {
            match Store::open(dir.path()) {
                Ok(s) => break s,
                Err(e) if std::time::Instant::now() < deadline => {
                    tokio::task::yield_now().await;
                    let _ = e;
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(
            store.catalogs().unwrap(),
            vec![("a.1".to_owned(), r#"{"capabilities":[]}"#.to_owned())]
        );
    }

    #[tokio::test]
    async fn ans_agents_and_audit_are_written_together() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store
            .put_ans_agent(
                "agt-1",
                Some("{\"state\":\"Active\"}"),
                1,
                "{\"m\":\"ACTIVATE\"}",
            )
            .await
            .unwrap();
        store
            .put_ans_agent("agt-2", Some("{}"), 2, "{\"m\":\"ACTIVATE\"}")
            .await
            .unwrap();
        store
            .put_ans_agent("agt-2", None, 10, "{\"m\":\"REMOVE\"}")
            .await
            .unwrap();
        assert_eq!(
            store.ans_agents().unwrap(),
            vec![("agt-1".to_owned(), "{\"state\":\"Active\"}".to_owned())]
        );
        let audit = store.ans_audit().unwrap();
        assert_eq!(
            audit.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            vec![1, 2, 10]
        );
        assert_eq!(audit[2].1, "{\"m\":\"REMOVE\"}");
    }

    #[tokio::test]
    async fn interactions_round_trip_and_schema_is_current() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store
            .put_interaction("builders", "int-1", "{\"state\":\"working\"}")
            .await
            .unwrap();
        store
            .put_interaction("builders", "int-2", "{}")
            .await
            .unwrap();
        store.delete_interaction("builders", "int-2").await.unwrap();
        assert_eq!(
            store.interactions().unwrap(),
            vec![(
                "builders".into(),
                "int-1".into(),
                "{\"state\":\"working\"}".into()
            )]
        );
        let txn = store.db.get().unwrap().begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        assert_eq!(
            meta.get("schema_version").unwrap().unwrap().value(),
            SCHEMA_VERSION
        );
    }
}
