//! The node as an MCP server: Streamable HTTP at `/mcp` on the HTTP face (the MCP specification,
//! revisions 2025-11-25 and 2026-07-28, `basic/transports` and `server/tools`; Hyperspace spec
//! §10 in the mesh → MCP direction). The mappings (tool list, names, schemas, `_meta`, results,
//! error translation) are [`agora_bridge::mcp_server`]'s; this module does the IO. The operator's
//! view is `docs/bridges.md` "The node as an MCP server".
//!
//! - **Transport and eras**: rmcp's `StreamableHttpService` with this module's `ServerHandler`.
//!   Clients of 2025-11-25 and earlier get sessions (`initialize`, `Mcp-Session-Id`, the GET
//!   stream); 2026-07-28 clients are served statelessly (`server/discover`, per-request `_meta`).
//! - **Who may call**: `/mcp` sits behind the serving layer ([`crate::faces::serve`]) like every
//!   route of the HTTP face: connection limits, the `Host` check (421), the `Origin` check on
//!   POST/DELETE (403) and the API key (401). rmcp's own `Origin` check is on too, with the
//!   node's own origins and `allowed_origins`, so a foreign `Origin` on a GET stream is 403 as
//!   well. rmcp's `Host` list is off: it cannot know the address a request arrived on, and the
//!   serving layer has already checked the `Host` against exactly that.
//! - **The tool list** follows the mesh: `tool.discover {query: ""}` through the call router.
//!   While an MCP client is about (a legacy session, a `subscriptions/listen` stream, or a
//!   request in the last [`INTEREST`]), the list is fetched again every [`POLL`] ([`EMPTY_POLL`]
//!   while the mesh offers no tool) and `tools/list` answers the list in hand; when it changed,
//!   `notifications/tools/list_changed` goes to every legacy session and every listen stream
//!   (`tools.listChanged: true` is advertised). A `tools/call` of a name not in the list fetches
//!   it first.
//! - **Calls**: `tools/call` → `tool.invoke` (or `tool.discover`, `memory.store`,
//!   `memory.search`, `directory.search` for the node's own tools, which are always listed and
//!   called without fetching the list) as the holder of the API key, since the serving layer
//!   checked it; a client's cancellation drops the call.
//!
//! Bounds: at most [`MAX_SESSIONS`] sessions (and stateless requests in flight) at once (beyond
//! that a new one is refused with 500 and a log line); rmcp ends a legacy session idle for 5
//! minutes; a call waits at most [`CALL_TIMEOUT`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use agora_bridge::mcp_server::{self, CallError, ListedTool, OwnTool, Target};
use agora_hyperspace::jsonrpc::RpcError;
use agora_hyperspace::tool;
use agora_hyperspace::tool_record::ToolRecord;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::call::Call;

/// The path of the MCP endpoint on the HTTP face.
pub const PATH: &str = "/mcp";
/// How long a fetched tool list is served, and how often it is fetched while clients are about.
pub const POLL: Duration = Duration::from_secs(2);
/// How often the list is fetched while the mesh offers no tool.
pub const EMPTY_POLL: Duration = Duration::from_secs(10);
/// How long after a request the list keeps being followed without a session or listen stream.
pub const INTEREST: Duration = Duration::from_secs(60);
/// Most sessions (and stateless requests in flight) at once.
pub const MAX_SESSIONS: usize = 256;
/// Longest wait for a call's answer.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait for `tool.discover` (it asks the DHT and the mesh when nothing is known).
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest `/mcp` request body.
const MAX_BODY: usize = 4 << 20;

/// What the MCP face needs from the node.
#[derive(Debug)]
pub struct Wiring {
    /// The call router (as the JSON-RPC face uses it).
    pub calls: mpsc::Sender<Call>,
    /// Origins allowed besides the node's own (`allowed_origins`).
    pub allowed_origins: Vec<String>,
    /// The HTTP face's port (the node's own pages are `http://localhost:<port>` and loopback).
    pub http_port: u16,
}

/// The `/mcp` routes, to merge into the HTTP face (behind the serving layer).
pub fn router(wiring: Wiring) -> axum::Router {
    let shared = Arc::new(Shared {
        calls: wiring.calls,
        catalog: Mutex::new(Catalog::default()),
        refreshing: tokio::sync::Mutex::new(()),
        version: watch::channel(0).0,
        started: Instant::now(),
        last_use_ms: AtomicU64::new(0),
        sessions: AtomicUsize::new(0),
    });
    tokio::spawn(follow(Arc::downgrade(&shared)));
    let port = wiring.http_port;
    let mut origins = wiring.allowed_origins;
    origins.extend(
        ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|h| format!("http://{h}:{port}")),
    );
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY);
    let factory = move || {
        let before = shared.sessions.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            shared: Arc::clone(&shared),
            closed: watch::channel(()).0,
        });
        if before >= MAX_SESSIONS {
            tracing::warn!(max = MAX_SESSIONS, "MCP: too many sessions; refused");
            return Err(std::io::Error::other("too many MCP sessions"));
        }
        Ok(Handler { slot })
    };
    let service =
        StreamableHttpService::new(factory, Arc::new(LocalSessionManager::default()), config);
    axum::Router::new().nest_service(PATH, service)
}

/// The tool list and when it was fetched.
#[derive(Debug, Default)]
struct Catalog {
    tools: Arc<Vec<ListedTool>>,
    fetched: Option<Instant>,
}

/// What every session shares.
#[derive(Debug)]
struct Shared {
    calls: mpsc::Sender<Call>,
    catalog: Mutex<Catalog>,
    /// One fetch at a time.
    refreshing: tokio::sync::Mutex<()>,
    /// Bumped when the list changed; legacy sessions and listen streams watch it.
    version: watch::Sender<u64>,
    started: Instant,
    last_use_ms: AtomicU64,
    sessions: AtomicUsize,
}

impl Shared {
    fn millis(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_use_ms.store(self.millis(), Ordering::Relaxed);
    }

    /// Whether an MCP client is about (module docs).
    fn followed(&self) -> bool {
        let idle = self
            .millis()
            .saturating_sub(self.last_use_ms.load(Ordering::Relaxed));
        self.version.receiver_count() > 0
            || (self.last_use_ms.load(Ordering::Relaxed) > 0
                && u128::from(idle) < INTEREST.as_millis())
    }

    /// The list, and whether it was fetched less than `within` ago.
    fn cached(&self, within: Duration) -> (Arc<Vec<ListedTool>>, bool) {
        let catalog = self
            .catalog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let fresh = catalog.fetched.is_some_and(|t| t.elapsed() < within);
        (Arc::clone(&catalog.tools), fresh)
    }

    /// The tool list. While it is followed ([`follow`] fetches it again), the list in hand is
    /// answered at once (a fetch on a mesh without tools waits for the DHT and a gossip ask);
    /// otherwise (first use, or no client about for [`INTEREST`]) it is fetched first.
    async fn tools(&self) -> Arc<Vec<ListedTool>> {
        let followed = self.followed();
        self.touch();
        let (tools, recent) = self.cached(INTEREST);
        if followed && recent {
            return tools;
        }
        self.refresh().await
    }

    /// Fetches the tool list; bumps the version when it changed.
    async fn refresh(&self) -> Arc<Vec<ListedTool>> {
        let _one = self.refreshing.lock().await;
        let (tools, fresh) = self.cached(POLL);
        if fresh {
            return tools;
        }
        let found = match self
            .call(tool::DISCOVER, json!({"query": ""}), LIST_TIMEOUT)
            .await
        {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                tracing::debug!(error = %e.message, "MCP: tool.discover failed");
                return tools;
            }
            Err(e) => {
                tracing::debug!(error = %e, "MCP: tool.discover unanswered");
                return tools;
            }
        };
        let records: Vec<ToolRecord> = found
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| serde_json::from_value(t.clone()).ok())
            .collect();
        let listed = Arc::new(mcp_server::catalog(&records));
        let mut catalog = self
            .catalog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = catalog.fetched.is_some() && *catalog.tools != *listed;
        catalog.tools = Arc::clone(&listed);
        catalog.fetched = Some(Instant::now());
        drop(catalog);
        if changed {
            self.version.send_modify(|v| *v = v.wrapping_add(1));
        }
        listed
    }

    /// Calls `method(params)` through the call router, waiting at most `limit`.
    async fn call(
        &self,
        method: &str,
        params: Value,
        limit: Duration,
    ) -> Result<Result<Value, RpcError>, &'static str> {
        let (call, answer) = Call::as_api_key(method, params);
        if self.calls.send(call).await.is_err() {
            return Err("the node is shutting down");
        }
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(_)) => Err("the node is shutting down"),
            Err(_) => Err("the node did not answer in time"),
        }
    }
}

/// Follows the mesh's tools while clients are about, until the face is gone.
/// Every [`POLL`], or every [`EMPTY_POLL`] while the mesh offers no tool (each such fetch asks
/// the DHT and the mesh).
async fn follow(shared: Weak<Shared>) {
    let mut wait = POLL;
    loop {
        tokio::time::sleep(wait).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        wait = POLL;
        if shared.followed() {
            let tools = shared.refresh().await;
            if !tools
                .iter()
                .any(|t| matches!(t.target, Target::Mesh { .. }))
            {
                wait = EMPTY_POLL;
            }
        }
    }
}

/// A session's (or a stateless request's) place among [`MAX_SESSIONS`]; freed when its handler
/// goes, which also ends its list-change notifier.
#[derive(Debug)]
struct Slot {
    shared: Arc<Shared>,
    closed: watch::Sender<()>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The `ServerHandler` of one session (or stateless request).
#[derive(Debug, Clone)]
struct Handler {
    slot: Arc<Slot>,
}

fn to_tool(listed: &ListedTool) -> Tool {
    let mut tool = Tool::new(
        listed.name.clone(),
        listed.description.clone(),
        Arc::new(listed.input_schema.clone()),
    );
    if let Some(output) = &listed.output_schema {
        tool = tool.with_raw_output_schema(Arc::new(output.clone()));
    }
    if !listed.meta.is_empty() {
        tool = tool.with_meta(rmcp::model::MetaObject(listed.meta.clone()));
    }
    tool
}

fn error_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.slot.shared.tools().await;
        let ttl = u64::try_from(POLL.as_millis()).unwrap_or(u64::MAX);
        Ok(
            ListToolsResult::with_all_items(tools.iter().map(to_tool).collect())
                .with_ttl_ms(ttl)
                .with_cache_scope(CacheScope::Public),
        )
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let shared = &self.slot.shared;
        let find = |tools: &[ListedTool]| {
            tools
                .iter()
                .find(|t| t.name == request.name)
                .map(|t| t.target.clone())
        };
        let own = OwnTool::ALL
            .into_iter()
            .find(|o| o.name() == request.name)
            .map(Target::Own);
        let mut target = match own {
            Some(own) => Some(own),
            None => find(&shared.tools().await),
        };
        if target.is_none() {
            // A tool that appeared since the list was fetched.
            shared.catalog.lock().map(|mut c| c.fetched = None).ok();
            target = find(&shared.refresh().await);
        }
        let Some(target) = target else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            ));
        };
        let (method, params) = mcp_server::call_params(&target, request.arguments);
        let outcome = tokio::select! {
            outcome = shared.call(method, params, CALL_TIMEOUT) => outcome,
            () = context.ct.cancelled() => Err("cancelled by the client"),
        };
        let result = match outcome {
            Ok(Ok(answer)) => {
                let out = mcp_server::tool_output(&target, answer);
                let content = content_blocks(out.text, out.blocks);
                let mut r = if out.is_error {
                    CallToolResult::error(content)
                } else {
                    CallToolResult::success(content)
                };
                r.structured_content = out.structured;
                r
            }
            Ok(Err(e)) => {
                match mcp_server::translate_error(i64::from(e.code.0), &e.message, e.data.as_ref())
                {
                    CallError::UnknownTool(m) => return Err(ErrorData::invalid_params(m, None)),
                    CallError::Tool(text) => error_result(text),
                }
            }
            Err(why) => error_result(why),
        };
        Ok(result.into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A legacy session: it hears of list changes until it ends.
        let mut closed = self.slot.closed.subscribe();
        tokio::spawn(notify_changes(
            context.peer,
            self.slot.shared.version.subscribe(),
            async move {
                let _ = closed.changed().await;
            },
        ));
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let shared = &self.slot.shared;
        let mut version = shared.version.subscribe();
        // The list as the client may have it now: changes are relative to it.
        shared.tools().await;
        version.mark_unchanged();
        listen_changes(&context, version).await;
        Ok(())
    }
}

/// What Agora's MCP servers (this face and `agora mcp`) say of themselves: tools, with
/// `listChanged`.
#[must_use]
pub fn server_config() -> ServerConfig {
    ServerConfig::new(
        ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build(),
    )
    .with_server_info(Implementation::new("agora", env!("CARGO_PKG_VERSION")))
    .with_instructions(
        "The tools of an Agora mesh: this node's own (agora.tools.search, agora.memory.store, \
         agora.memory.search, agora.directory.search) and every tool it can invoke in the mesh.",
    )
}

/// Sends `notifications/tools/list_changed` to a legacy session's `peer` at every change of
/// `changes`, until `ended` completes, the changes end or the peer is gone.
pub async fn notify_changes(
    peer: rmcp::Peer<RoleServer>,
    mut changes: watch::Receiver<u64>,
    ended: impl Future<Output = ()>,
) {
    let mut ended = std::pin::pin!(ended);
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() || peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
            () = &mut ended => return,
        }
    }
}

/// Runs a `subscriptions/listen` stream (2026-07-28): `notifications/tools/list_changed` at every
/// change of `changes`, until the client cancels it, the changes end or the stream is gone.
pub async fn listen_changes(context: &SubscriptionContext, mut changes: watch::Receiver<u64>) {
    loop {
        tokio::select! {
            () = context.cancelled() => return,
            changed = changes.changed() => {
                if changed.is_err() || context.sink().notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The content of a call's result: a bridged MCP tool's blocks as its server sent them (a block
/// rmcp cannot read becomes its JSON text, so nothing is dropped), else one text block.
fn content_blocks(text: String, blocks: Option<Vec<Value>>) -> Vec<ContentBlock> {
    match blocks {
        Some(blocks) if !blocks.is_empty() => blocks
            .into_iter()
            .map(|b| {
                serde_json::from_value::<ContentBlock>(b.clone())
                    .unwrap_or_else(|_| ContentBlock::text(b.to_string()))
            })
            .collect(),
        _ => vec![ContentBlock::text(text)],
    }
}

#[cfg(test)]
mod tests {
    use agora_directory::query::OneOrMany;
    use agora_directory::{Filters, Kind, Source, TrustLevel};
    use serde::de::DeserializeOwned;

    use super::*;

    fn all_parse<T: DeserializeOwned>(values: &Value) -> bool {
        values.as_array().is_some_and(|vs| {
            !vs.is_empty()
                && vs
                    .iter()
                    .all(|v| serde_json::from_value::<T>(v.clone()).is_ok())
        })
    }

    /// The bridge crate declares `agora.directory.search` without depending on the directory's
    /// crate: its method, its filters and the values its schema offers are the directory's.
    #[test]
    fn the_directory_tool_matches_directory_search() {
        assert_eq!(
            OwnTool::DirectorySearch.method(),
            agora_directory::rpc::SEARCH
        );
        let listed = mcp_server::catalog(&[]);
        let tool = listed
            .iter()
            .find(|t| t.target == Target::Own(OwnTool::DirectorySearch))
            .expect("listed");
        let filters = &tool.input_schema["properties"]["filters"]["properties"];
        assert!(all_parse::<Source>(&filters["source"]["anyOf"][0]["enum"]));
        assert!(all_parse::<TrustLevel>(&filters["trust"]["enum"]));
        assert!(all_parse::<Kind>(&filters["kind"]["enum"]));
        let every = Filters {
            source: Some(OneOrMany::One(Source::Agh)),
            trust: Some(TrustLevel::Claimed),
            capability: Some(String::new()),
            kind: Some(Kind::Agent),
            online: Some(true),
            max_price: Some(Value::Null),
            max_price_atomic: Some(0),
            max_latency_ms: Some(0),
        };
        let every = serde_json::to_value(every).expect("filters serialize");
        let keys = |v: &Value| -> Vec<String> {
            let mut k: Vec<String> = v
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect();
            k.sort_unstable();
            k
        };
        assert_eq!(keys(filters), keys(&every), "every filter, and only those");
    }
}
