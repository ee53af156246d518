//! Long Guard calls off the Hyperspace service task: `guard.validate` and `guard.checkSafety`
//! (spec §4.2 "Guard Primitive"; [`agora_hyperspace::guard::LONG_METHODS`]).
//!
//! The service task owns every session and answers every call in turn, so one slow call makes
//! every other session wait. These two calls read no state, and their work depends on what the
//! client sends (a schema, a megabyte of text), so the service hands them here and goes on: each
//! runs on a worker thread of its own, at most [`LongCallSettings::workers`] at a time, within
//! [`LongCallSettings::budget`] counted from when the call arrived (waiting for a worker
//! included).
//!
//! What a client sees: the call's answer; or, when no worker became free within the budget, or
//! the work did not end within it, −32003 "Rate Limited" with
//! `data: {"reason": "busy" | "timeout", "method", "budgetMs", "retryAfterMs"}`. A worker that ran
//! out of time goes on to the end of its call (a validation cannot be interrupted) and keeps its
//! place until then, so the pool stays bounded; the limits of `guard.validate`
//! ([`agora_hyperspace::guard::ValidateLimits`]) bound how long that can be. A call that panics
//! answers −32603 and frees its worker.

use std::sync::Arc;
use std::time::Duration;

use agora_hyperspace::jsonrpc::{RpcCode, RpcError};
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;

/// How long calls run apart from the service (defaults in [`Default`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongCallSettings {
    /// Calls running at once (worker threads). Default 2, the cores of a small machine: long
    /// calls never take more than that from the node.
    pub workers: usize,
    /// How long a call may wait for a worker and run, together. Default 2 s: a validation within
    /// the default limits takes well under 0.5 s even in a debug build.
    pub budget: Duration,
    /// Stack of a worker thread. Default 8 MiB: `jsonschema` recurses about 1 KiB per nested
    /// subschema and the limits allow 512.
    pub stack_bytes: usize,
    /// Background work (anti-entropy scans): the workers lower their scheduling priority
    /// (`lower_priority`) so that calls on other threads come first. Default false.
    pub background: bool,
}

impl Default for LongCallSettings {
    fn default() -> Self {
        Self {
            workers: crate::config::rpc::GUARD_WORKERS,
            budget: crate::config::rpc::GUARD_BUDGET,
            stack_bytes: 8 << 20,
            background: false,
        }
    }
}

/// The pool of workers for long calls; clones share it.
#[derive(Debug, Clone)]
pub(super) struct LongCalls {
    permits: Arc<Semaphore>,
    settings: LongCallSettings,
    /// What the workers do: names their threads (`agora-{what}`) and the errors.
    what: &'static str,
}

/// A call's outcome.
type Outcome = Result<Value, RpcError>;

impl LongCalls {
    /// A pool with `settings` (at least one worker).
    #[must_use]
    pub(super) fn new(settings: LongCallSettings) -> Self {
        Self::named("guard", settings)
    }

    /// A pool whose workers do `what` (thread names `agora-{what}`, errors "no {what} worker").
    #[must_use]
    pub(super) fn named(what: &'static str, settings: LongCallSettings) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(settings.workers.max(1))),
            settings,
            what,
        }
    }

    /// Runs `job` (the call `method`) on a worker within the budget and sends its outcome to
    /// `reply`; returns at once. Must be called within a Tokio runtime.
    pub(super) fn spawn<F>(&self, method: &str, job: F, reply: oneshot::Sender<Outcome>)
    where
        F: FnOnce() -> Outcome + Send + 'static,
    {
        let pool = self.clone();
        let method = method.to_owned();
        let deadline = Instant::now() + self.settings.budget;
        tokio::spawn(async move {
            let outcome = pool.run(&method, deadline, job).await;
            let _ = reply.send(outcome);
        });
    }

    /// Runs `job` (for `method`) on a worker, waiting for one and for the job until `deadline`.
    pub(super) async fn run<T, F>(
        &self,
        method: &str,
        deadline: Instant,
        job: F,
    ) -> Result<T, RpcError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, RpcError> + Send + 'static,
    {
        let permit = match tokio::time::timeout_at(
            deadline,
            Arc::clone(&self.permits).acquire_owned(),
        )
        .await
        {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => {
                return Err(
                    RpcError::internal_error().with_message(format!("no {} workers", self.what))
                );
            }
            Err(_) => return Err(self.out_of_time(method, "busy")),
        };
        let (tx, rx) = oneshot::channel();
        let background = self.settings.background;
        let worker = std::thread::Builder::new()
            .name(format!("agora-{}", self.what))
            .stack_size(self.settings.stack_bytes)
            .spawn(move || {
                if background {
                    lower_priority();
                }
                work(job, tx, permit);
            });
        if let Err(error) = worker {
            tracing::warn!(%error, what = self.what, "cannot start a worker");
            return Err(RpcError::internal_error()
                .with_message(format!("cannot start a {} worker", self.what)));
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(RpcError::internal_error().with_message(format!("{method} failed"))),
            Err(_) => {
                tracing::info!(
                    method,
                    kind = self.what,
                    "a long call ran out of its time budget"
                );
                Err(self.out_of_time(method, "timeout"))
            }
        }
    }

    /// −32003 for a call that found no worker (`busy`) or did not end (`timeout`) in time.
    fn out_of_time(&self, method: &str, reason: &str) -> RpcError {
        let budget_ms = u64::try_from(self.settings.budget.as_millis()).unwrap_or(u64::MAX);
        let message = if reason == "busy" {
            format!(
                "Rate Limited: no {} worker was free within {budget_ms} ms",
                self.what
            )
        } else {
            format!("Rate Limited: {method} did not finish within {budget_ms} ms")
        };
        RpcError::from_code(RpcCode::RATE_LIMITED)
            .with_message(message)
            .with_data(json!({
                "reason": reason,
                "method": method,
                "budgetMs": budget_ms,
                "retryAfterMs": budget_ms,
            }))
    }
}

/// Lowers the calling thread's scheduling priority to about nice 10 (on Linux a thread's own
/// nice value; a tenth of the CPU share of a thread at nice 0 when both want the same core),
/// for background work that must not delay calls: it still runs whenever a core is free, and
/// is not starved under load. Best effort: a failure is logged once per thread and ignored.
pub(crate) fn lower_priority() {
    // thread-priority maps 0..=99 onto nice 19..=-20; 23 is nice 10.
    let outcome = match thread_priority::ThreadPriorityValue::try_from(23u8) {
        Ok(p) => thread_priority::set_current_thread_priority(
            thread_priority::ThreadPriority::Crossplatform(p),
        )
        .map_err(|e| format!("{e:?}")),
        Err(e) => Err(e),
    };
    if let Err(error) = outcome {
        tracing::debug!(error, "cannot lower a background thread's priority");
    }
}

/// The worker thread: runs the job, answers, and only then gives its place back.
fn work<T, F>(job: F, reply: oneshot::Sender<Result<T, RpcError>>, permit: OwnedSemaphorePermit)
where
    F: FnOnce() -> Result<T, RpcError>,
{
    let outcome = job();
    let _ = reply.send(outcome);
    drop(permit);
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    fn pool(workers: usize, budget_ms: u64) -> LongCalls {
        LongCalls::new(LongCallSettings {
            workers,
            budget: Duration::from_millis(budget_ms),
            ..LongCallSettings::default()
        })
    }

    async fn call<F>(pool: &LongCalls, job: F) -> Outcome
    where
        F: FnOnce() -> Outcome + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        pool.spawn("guard.validate", job, tx);
        rx.await.unwrap_or_else(|_| Err(RpcError::internal_error()))
    }

    #[tokio::test]
    async fn a_call_runs_on_a_worker_thread() {
        let pool = pool(2, 5_000);
        let outcome = call(&pool, || {
            Ok(json!(std::thread::current().name().map(str::to_owned)))
        })
        .await;
        assert_eq!(outcome, Ok(json!("agora-guard")));
    }

    #[tokio::test]
    async fn a_full_pool_answers_busy_and_a_slow_call_times_out() {
        let pool = pool(1, 200);
        let (release, blocked) = mpsc::channel::<()>();
        let (started_tx, started) = oneshot::channel();
        let slow = {
            let pool = pool.clone();
            tokio::spawn(async move {
                call(&pool, move || {
                    let _ = started_tx.send(());
                    let _ = blocked.recv();
                    Ok(json!("late"))
                })
                .await
            })
        };
        started.await.ok();
        // The only worker is taken: the next call waits out its budget.
        let busy = call(&pool, || Ok(json!("never"))).await.unwrap_err();
        assert_eq!(busy.code, RpcCode::RATE_LIMITED);
        assert_eq!(busy.data.as_ref().unwrap()["reason"], "busy");
        assert_eq!(busy.data.as_ref().unwrap()["budgetMs"], 200);
        let timed_out = slow.await.unwrap().unwrap_err();
        assert_eq!(timed_out.code, RpcCode::RATE_LIMITED);
        assert_eq!(timed_out.data.as_ref().unwrap()["reason"], "timeout");
        // The worker keeps its place until its call ends, then the next call runs.
        assert_eq!(pool.permits.available_permits(), 0);
        release.send(()).ok();
        let permit = tokio::time::timeout(
            Duration::from_secs(10),
            Arc::clone(&pool.permits).acquire_owned(),
        )
        .await
        .unwrap()
        .unwrap();
        drop(permit);
        assert_eq!(call(&pool, || Ok(json!(1))).await, Ok(json!(1)));
    }

    #[tokio::test]
    async fn a_panicking_call_answers_an_internal_error_and_frees_its_worker() {
        // A generous budget: printing the panic's backtrace on a loaded machine took over 5 s.
        let pool = pool(1, 60_000);
        let outcome = call(&pool, || panic!("boom")).await;
        assert_eq!(outcome.unwrap_err().code, RpcCode::INTERNAL_ERROR);
        assert_eq!(call(&pool, || Ok(json!(2))).await, Ok(json!(2)));
    }
}
