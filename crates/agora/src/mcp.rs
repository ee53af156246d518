//! `agora mcp`: a stdio MCP server for desktop MCP clients, which proxies to a running node's
//! MCP endpoint (`<node>/mcp`, Streamable HTTP; the MCP specification's `basic/transports`).
//!
//! Standard input and output carry MCP (newline-delimited JSON-RPC; both eras, as rmcp's server
//! does: `initialize` for 2025-11-25 clients, `server/discover` for 2026-07-28 ones); standard
//! error carries logs only. The node is reached as an rmcp Streamable HTTP client (a legacy
//! session, which hears the node's `notifications/tools/list_changed` on its GET stream), with
//! the API key as `Authorization: Bearer`. `tools/list` and `tools/call` are forwarded as they
//! are, errors included; a list change at the node is forwarded to the desktop client (to a
//! legacy session, and to every `subscriptions/listen` stream of a modern one).

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::Args;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
    ListToolsResult, PaginatedRequestParams, ResultType, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{
    NotificationContext, RequestContext, RunningService, ServiceError, SubscriptionContext,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, RoleServer, ServerHandler, ServiceExt};
use tokio::sync::watch;

use agora_node::faces::mcp;

use crate::client::DEFAULT_NODE;

/// `agora mcp`.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// The node's HTTP API (its MCP endpoint is `<URL>/mcp`).
    #[arg(long, env = "AGORA_NODE", default_value = DEFAULT_NODE, value_name = "URL")]
    node: String,
    /// The node's API key, sent as `Authorization: Bearer` (needed once the node has one).
    #[arg(
        long = "api-key",
        env = "AGORA_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    api_key: Option<String>,
}

/// Runs the proxy until the desktop client closes standard input (exit 0), or fails to reach
/// the node (exit 1, with the reason on standard error).
pub(crate) fn run(args: McpArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(proxy(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn proxy(args: McpArgs) -> Result<(), String> {
    let url = format!("{}/mcp", args.node.trim_end_matches('/'));
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
    if let Some(key) = args.api_key {
        config = config.auth_header(key);
    }
    let changes = watch::channel(0u64).0;
    let upstream = Upstream {
        changes: changes.clone(),
    }
    .serve(StreamableHttpClientTransport::from_config(config))
    .await
    .map_err(|e| format!("cannot reach the node's MCP endpoint {url}: {e}"))?;
    let downstream = Downstream {
        node: upstream.peer().clone(),
        changes,
        session: Arc::new(Mutex::new(None)),
    };
    let served = downstream
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await
        .map_err(|e| format!("the MCP client on standard input: {e}"))?;
    let _ = served.waiting().await;
    close(upstream).await;
    Ok(())
}

async fn close(upstream: RunningService<RoleClient, Upstream>) {
    let _ = upstream.cancel().await;
}

/// The client side, towards the node: it hears list changes.
#[derive(Debug, Clone)]
struct Upstream {
    changes: watch::Sender<u64>,
}

impl ClientHandler for Upstream {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agora-mcp", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }
}

/// The server side, towards the desktop client.
#[derive(Debug, Clone)]
struct Downstream {
    node: Peer<RoleClient>,
    changes: watch::Sender<u64>,
    session: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

fn forwarded(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("the node: {other}"), None),
    }
}

impl ServerHandler for Downstream {
    fn get_info(&self) -> ServerConfig {
        mcp::server_config()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // The node's answer to this (legacy) session carries no `resultType`; a modern client
        // here needs it (rmcp drops it again for a legacy one).
        let mut listed = self.node.list_tools(request).await.map_err(forwarded)?;
        listed.result_type = Some(ResultType::COMPLETE);
        Ok(listed)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut forward = CallToolRequestParams::new(request.name);
        if let Some(arguments) = request.arguments {
            forward = forward.with_arguments(arguments);
        }
        let mut result = self.node.call_tool(forward).await.map_err(forwarded)?;
        result.result_type = Some(ResultType::COMPLETE);
        Ok(result.into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let task = tokio::spawn(mcp::notify_changes(
            context.peer,
            self.changes.subscribe(),
            std::future::pending(),
        ));
        if let Ok(mut session) = self.session.lock()
            && let Some(old) = session.replace(task)
        {
            old.abort();
        }
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        mcp::listen_changes(&context, self.changes.subscribe()).await;
        Ok(())
    }
}
