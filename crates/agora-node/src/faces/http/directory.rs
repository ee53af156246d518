//! The directory on the HTTP API (issue 33, `docs/directory.md`):
//! - `GET /directory/search?q=…` → `directory.search`'s result. Filters as query parameters:
//!   `source` (comma-separated), `trust`, `capability`, `kind`, `online`, `maxPrice`,
//!   `maxPriceAtomic`, `maxLatencyMs`, `limit`, `scope`. Bad parameters are 400 with the
//!   −32602's `field` and `errors`.
//! - `GET /.well-known/ai-catalog.json` → the AI Catalog document
//!   (`application/ai-catalog+json`, readable from any origin), its URLs under the address the
//!   client used.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use crate::directory::Input;
use crate::faces::serve::json_error as error;
use crate::faces::state::AppState;

/// `GET /directory/search`.
pub const SEARCH_PATH: &str = "/directory/search";
/// The AI Catalog's well-known path.
pub const CATALOG_PATH: &str = "/.well-known/ai-catalog.json";

/// The directory's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(SEARCH_PATH, get(search))
        .route(CATALOG_PATH, get(ai_catalog))
}

/// The query parameters as `directory.search`'s params.
fn params(q: &HashMap<String, String>) -> Result<Value, (String, String)> {
    let mut filters = Map::new();
    let number = |k: &str, v: &str| -> Result<Value, (String, String)> {
        v.parse::<u64>().map(Value::from).map_err(|_| {
            (
                k.to_owned(),
                format!("{k} must be a whole number, not {v:?}"),
            )
        })
    };
    for (k, v) in q {
        match k.as_str() {
            "q" | "query" | "limit" | "scope" => {}
            "source" => {
                let list: Vec<Value> = v
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| Value::String(s.to_owned()))
                    .collect();
                filters.insert(k.clone(), Value::Array(list));
            }
            "online" => {
                let b = match v.as_str() {
                    "true" | "1" | "yes" | "" => true,
                    "false" | "0" | "no" => false,
                    _ => {
                        return Err((
                            k.clone(),
                            format!("online must be true or false, not {v:?}"),
                        ));
                    }
                };
                filters.insert(k.clone(), Value::Bool(b));
            }
            "maxPriceAtomic" | "maxLatencyMs" => {
                filters.insert(k.clone(), number(k, v)?);
            }
            "trust" | "capability" | "kind" | "maxPrice" => {
                filters.insert(k.clone(), Value::String(v.clone()));
            }
            other => {
                return Err((
                    other.to_owned(),
                    format!(
                        "unknown parameter {other:?}; the parameters are q, source, trust, capability, kind, online, maxPrice, maxPriceAtomic, maxLatencyMs, limit, scope"
                    ),
                ));
            }
        }
    }
    let mut p = json!({
        "query": q.get("q").or_else(|| q.get("query")).cloned().unwrap_or_default(),
        "filters": filters,
    });
    if let Some(limit) = q.get("limit") {
        p["limit"] = number("limit", limit)?;
    }
    if let Some(scope) = q.get("scope") {
        p["scope"] = Value::String(scope.clone());
    }
    Ok(p)
}

async fn search(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let params = match params(&q) {
        Ok(p) => p,
        Err((field, reason)) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"error": reason, "field": field, "errors": [{"field": field, "reason": reason}]})),
            )
                .into_response();
        }
    };
    let (call, answer) = crate::call::Call::as_api_key(agora_directory::rpc::SEARCH, params);
    if state.directory.send(Input::Call(call)).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the node is shutting down");
    }
    match answer.await {
        Ok(Ok(result)) => Json(result).into_response(),
        Ok(Err(e)) => {
            let e = agora_hyperspace::params::complete(e);
            let mut body = json!({"error": e.message, "code": e.code.0});
            if let Some(Value::Object(data)) = e.data {
                for (k, v) in data {
                    body[k] = v;
                }
            }
            (StatusCode::BAD_REQUEST, Json(body)).into_response()
        }
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the node is shutting down"),
    }
}

async fn ai_catalog(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let base_url = format!("http://{host}");
    let (reply, answer) = oneshot::channel();
    if state
        .directory
        .send(Input::Catalog { base_url, reply })
        .await
        .is_err()
    {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the node is shutting down");
    }
    let Ok(doc) = answer.await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the node is shutting down");
    };
    let mut response = Json(doc).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(agora_directory::catalog::MEDIA_TYPE),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn query_parameters_become_params() {
        let p = params(&q(&[
            ("q", "speech to text"),
            ("source", "mcp, hyperspace"),
            ("online", "true"),
            ("maxLatencyMs", "500"),
            ("limit", "3"),
        ]))
        .expect("params");
        assert_eq!(p["query"], "speech to text");
        assert_eq!(p["filters"]["source"], json!(["mcp", "hyperspace"]));
        assert_eq!(p["filters"]["online"], true);
        assert_eq!(p["filters"]["maxLatencyMs"], 500);
        assert_eq!(p["limit"], 3);
        assert_eq!(params(&q(&[("limit", "x")])).expect_err("bad").0, "limit");
        assert_eq!(
            params(&q(&[("colour", "red")])).expect_err("bad").0,
            "colour"
        );
    }
}
