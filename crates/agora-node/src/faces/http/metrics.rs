//! `GET /metrics`: the [`crate::telemetry`] registry in the OpenMetrics text format, with the
//! service queue depths sampled at the scrape.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::faces::state::AppState;

pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let depth = |name: &'static str, max: usize, free: usize| {
        state
            .telemetry
            .queue_depth
            .get_or_create(&crate::telemetry::QueueLabel { queue: name })
            .set(i64::try_from(max.saturating_sub(free)).unwrap_or(i64::MAX));
    };
    depth("agh", state.agh.max_capacity(), state.agh.capacity());
    depth("mesh", state.mesh.max_capacity(), state.mesh.capacity());
    depth(
        "hyperspace",
        state.hyperspace.max_capacity(),
        state.hyperspace.capacity(),
    );
    depth(
        "memory",
        state.memory.max_capacity(),
        state.memory.capacity(),
    );
    depth(
        "learning",
        state.learning.max_capacity(),
        state.learning.capacity(),
    );
    depth(
        "improving",
        state.improving.max_capacity(),
        state.improving.capacity(),
    );
    depth(
        "payments",
        state.payments.max_capacity(),
        state.payments.capacity(),
    );
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.telemetry.encode(),
    )
        .into_response()
}
