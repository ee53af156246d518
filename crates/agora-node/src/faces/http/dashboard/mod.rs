//! The operator's dashboard, on the HTTP face.
//!
//! - `GET /` — the dashboard page; `GET /dashboard/app.js`, `/dashboard/style.css` — its script
//!   and style (built into the binary with `include_str!`: no CDN, no build step). These three
//!   hold no state and answer without the API key; the page asks for the key when the node has
//!   one and sends it with its data requests.
//! - `GET /dashboard/snapshot` — the node's live state as one JSON document (see
//!   [`snapshot`]).
//! - `GET /dashboard/events` — server-sent events: `event: snapshot` with that document about
//!   once a second ([`PERIOD`]), read-only. One snapshot is built per period however many
//!   dashboards are open ([`Cache`]); at most [`MAX_VIEWERS`] streams are open at once (more get
//!   `503`).
//!
//! Beyond loopback the node requires its API key on every face (config validation), so the
//! data routes here answer only to it; `public_reads` opens them like `/status`.

pub mod cache;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

pub use cache::Cache;

use crate::faces::http::status::status_value;
use crate::faces::state::{AppState, ask};

/// How often the event stream sends a snapshot.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Event streams open at once.
pub const MAX_VIEWERS: usize = 32;

const PAGE: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("style.css");

/// The dashboard's routes (merged into the HTTP face).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(page))
        .route("/dashboard/app.js", get(script))
        .route("/dashboard/style.css", get(style))
        .route("/dashboard/snapshot", get(snapshot_route))
        .route("/dashboard/events", get(events))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

async fn snapshot_route(State(state): State<AppState>) -> Response {
    let body = cached(&state).await;
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.as_str().to_owned(),
    )
        .into_response()
}

/// The snapshot of this period: made by the first caller, shared with the others.
async fn cached(state: &AppState) -> Arc<String> {
    let mut last = state.snapshot.last.lock().await;
    if let Some((at, body)) = last.as_ref()
        && at.elapsed() < PERIOD.mul_f32(0.9)
    {
        return Arc::clone(body);
    }
    let body = Arc::new(snapshot(state).await.to_string());
    *last = Some((Instant::now(), Arc::clone(&body)));
    body
}

/// Holds a viewer's place while its stream is open.
struct Viewer(Arc<AtomicUsize>);

impl Drop for Viewer {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn events(State(state): State<AppState>) -> Response {
    let viewers = Arc::clone(&state.snapshot.viewers);
    if viewers.fetch_add(1, Ordering::AcqRel) >= MAX_VIEWERS {
        viewers.fetch_sub(1, Ordering::AcqRel);
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_VIEWERS} dashboards are open on this node already"),
        )
            .into_response();
    }
    let viewer = Viewer(viewers);
    let stream = futures::stream::unfold(
        (state, viewer, None::<tokio::time::Interval>),
        |(state, viewer, tick)| async move {
            let mut tick = match tick {
                Some(t) => t,
                None => {
                    let mut t = tokio::time::interval(PERIOD);
                    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                    t
                }
            };
            tick.tick().await;
            let body = cached(&state).await;
            let event = Event::default().event("snapshot").data(body.as_str());
            Some((
                Ok::<_, std::convert::Infallible>(event),
                (state, viewer, Some(tick)),
            ))
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn request<T>(
    service: &mpsc::Sender<crate::agh::Input>,
    make: impl FnOnce(oneshot::Sender<T>) -> crate::agh::Input,
) -> Option<T> {
    let (tx, rx) = oneshot::channel();
    service.send(make(tx)).await.ok()?;
    rx.await.ok()
}

/// The node's live state for the dashboard: `/status` plus the node (version, data directory),
/// AGH presence and interactions, Hyperspace cards and tools, the ANS summary, traffic counters
/// and connection events.
pub async fn snapshot(state: &AppState) -> Value {
    let status = status_value(state).await.unwrap_or(Value::Null);
    let peers = request(&state.agh, |reply| crate::agh::Input::Peers {
        channel: None,
        reply,
    })
    .await
    .map_or(Value::Null, |p| {
        serde_json::to_value(p).unwrap_or(Value::Null)
    });
    let interactions = request(&state.agh, crate::agh::Input::Interactions)
        .await
        .unwrap_or(Value::Null);
    let cards = ask(&state.hyperspace, crate::hyperspace::Input::Cards).await;
    let ans = {
        let ans = Arc::clone(&state.ans);
        tokio::task::spawn_blocking(move || ans.dashboard())
            .await
            .unwrap_or(Value::Null)
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    json!({
        "at_ms": now_ms,
        "node": {
            "version": env!("CARGO_PKG_VERSION"),
            "data_dir": &*state.data_dir,
        },
        "status": status,
        "agh": { "peers": peers, "interactions": interactions },
        "hyperspace": cards,
        "ans": ans,
        "traffic": state.telemetry.traffic(),
        "discovers": state.telemetry.discovers(),
        "events": state.telemetry.conn_events(),
    })
}
