//! The HTTP client of requests to a node's HTTP API: `ureq` (blocking; callers on a runtime run
//! it on the blocking pool). Used by the client commands (`client.rs`) and, included by path, by
//! the integration tests' harness (`tests/it/support`).

use serde_json::Value;

/// Sends `req` and reads its whole answer: the status, and the body as JSON (`null` when it is
/// not JSON). One connection per request (`Connection: close` is the caller's header), no proxy
/// (not even from `HTTP_PROXY`), no redirects followed, no timeout (a node that never answers is
/// waited for), and every status is an answer, not an error.
pub(crate) fn exchange(req: ureq::http::Request<String>) -> Result<(u16, Value), ureq::Error> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .build()
        .into();
    let mut response = agent.run(req)?;
    let status = response.status().as_u16();
    let payload = response
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()?;
    Ok((
        status,
        serde_json::from_slice(&payload).unwrap_or(Value::Null),
    ))
}
