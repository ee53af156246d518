//! `GET /metrics`: the [`crate::telemetry`] registry in the OpenMetrics text format, with the
//! service queue depths sampled at the scrape.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use crate::faces::state::AppState;

/// Messages waiting in a service's queue.
fn queued<T>(queue: &mpsc::Sender<T>) -> usize {
    queue.max_capacity().saturating_sub(queue.capacity())
}

pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let depths = [
        ("agh", queued(&state.agh)),
        ("mesh", queued(&state.mesh)),
        ("hyperspace", queued(&state.hyperspace)),
        ("memory", queued(&state.memory)),
        ("learning", queued(&state.learning)),
        ("improving", queued(&state.improving)),
        ("payments", queued(&state.payments)),
    ];
    for (queue, depth) in depths {
        state
            .telemetry
            .queue_depth
            .get_or_create(&crate::telemetry::QueueLabel { queue })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.telemetry.encode(),
    )
        .into_response()
}
