//! Guard budgets (Hyperspace spec §4.2 `guard.checkBudget`, `guard.consumeBudget`,
//! `guard.getBudgetStatus`; §11 Example 3): one [`Budget`] per session, kept exactly in
//! billionths of a unit, and the `$X.XX` amounts of its messages.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::{
    BUDGET_EXCEEDED_MESSAGE, BudgetExceededData, BudgetStatus, CheckBudgetResult,
    ConsumeBudgetResult,
};
use crate::jsonrpc::RpcError;
use crate::params::{invalid_params, to_result};
use crate::state::{MAX_BUDGET_LIMIT, SessionFacts};

const NANOS_PER_UNIT: f64 = 1e9;

/// One consumption, kept for audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetEntry {
    /// The amount, in billionths of a unit.
    pub amount_nanos: u64,
    /// The `description` given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Unix milliseconds.
    pub at_ms: u64,
}

/// One session's budget, in billionths of a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// The limit.
    pub limit_nanos: u64,
    /// Consumed so far.
    pub consumed_nanos: u64,
    /// The most recent consumptions, oldest first.
    #[serde(default)]
    pub ledger: VecDeque<BudgetEntry>,
}

/// Converts an amount to billionths, rejecting negative, non-finite and too large values.
pub(super) fn to_nanos(field: &str, amount: f64) -> Result<u64, RpcError> {
    if !amount.is_finite() || !(0.0..=MAX_BUDGET_LIMIT).contains(&amount) {
        return Err(invalid_params(
            format!("{field}: must be a finite number in 0..={MAX_BUDGET_LIMIT}"),
            Some(field),
        ));
    }
    // In range by the check above: at most 1e18 < u64::MAX.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok((amount * NANOS_PER_UNIT).round() as u64)
}

/// Billionths to a JSON number (exact for every value with up to 9 decimals).
#[allow(clippy::cast_precision_loss)]
fn from_nanos(nanos: u64) -> f64 {
    nanos as f64 / NANOS_PER_UNIT
}

/// `$5.00`, `$0.12`, `$0.005`: two decimals, more when needed.
fn money(nanos: u64) -> String {
    let whole = nanos / 1_000_000_000;
    let fraction = nanos % 1_000_000_000;
    let mut text = format!("${whole}.{fraction:09}");
    while text.ends_with('0') && text.len() > text.find('.').map_or(0, |dot| dot + 3) {
        text.pop();
    }
    text
}

impl Budget {
    /// A fresh budget with `limit` (clamped to `0..=1e9`).
    #[must_use]
    pub fn new(limit: f64) -> Self {
        Self {
            limit_nanos: to_nanos("limit", limit).unwrap_or(0),
            consumed_nanos: 0,
            ledger: VecDeque::new(),
        }
    }

    pub(super) fn for_session(facts: &SessionFacts, default_limit: f64) -> Self {
        Self::new(facts.budget_limit.unwrap_or(default_limit))
    }

    /// `limit − consumed` in billionths (never negative).
    #[must_use]
    pub fn remaining_nanos(&self) -> u64 {
        self.limit_nanos.saturating_sub(self.consumed_nanos)
    }

    /// `{remaining, consumed, limit}`.
    #[must_use]
    pub fn status(&self) -> BudgetStatus {
        BudgetStatus {
            remaining: from_nanos(self.remaining_nanos()),
            consumed: from_nanos(self.consumed_nanos),
            limit: from_nanos(self.limit_nanos),
        }
    }

    /// The `checkBudget` answer for a cost, for an active or ended session.
    #[must_use]
    pub fn check(&self, cost_nanos: u64, active: bool) -> CheckBudgetResult {
        let status = self.status();
        let remaining = self.remaining_nanos();
        let reason = if !active {
            Some("Session has ended".to_owned())
        } else if cost_nanos > remaining {
            Some(format!(
                "Estimated cost ({}) exceeds remaining budget ({})",
                money(cost_nanos),
                money(remaining)
            ))
        } else {
            None
        };
        CheckBudgetResult {
            allowed: reason.is_none(),
            remaining: status.remaining,
            consumed: status.consumed,
            limit: status.limit,
            reason,
        }
    }

    /// Consumes `amount_nanos` or refuses with −32002 (nothing is consumed then).
    ///
    /// # Errors
    ///
    /// −32002 "Budget exceeded" with `data: {remaining, requested, limit}`.
    pub fn consume(
        &mut self,
        amount_nanos: u64,
        description: Option<String>,
        now_ms: u64,
        max_ledger: usize,
    ) -> Result<ConsumeBudgetResult, RpcError> {
        let remaining = self.remaining_nanos();
        if amount_nanos > remaining {
            let data = BudgetExceededData {
                remaining: from_nanos(remaining),
                requested: from_nanos(amount_nanos),
                limit: from_nanos(self.limit_nanos),
            };
            return Err(RpcError::budget_exceeded()
                .with_message(BUDGET_EXCEEDED_MESSAGE)
                .with_data(to_result(&data)?));
        }
        self.consumed_nanos += amount_nanos;
        if max_ledger > 0 {
            while self.ledger.len() >= max_ledger {
                self.ledger.pop_front();
            }
            self.ledger.push_back(BudgetEntry {
                amount_nanos,
                description,
                at_ms: now_ms,
            });
        }
        Ok(ConsumeBudgetResult {
            remaining: from_nanos(self.remaining_nanos()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_formats_like_example_3() {
        assert_eq!(money(5_000_000_000), "$5.00");
        assert_eq!(money(120_000_000), "$0.12");
        assert_eq!(money(5_000_000), "$0.005");
        assert_eq!(money(0), "$0.00");
        assert_eq!(money(1), "$0.000000001");
    }

    #[test]
    fn nanos_are_exact() {
        assert_eq!(to_nanos("a", 0.88).unwrap(), 880_000_000);
        assert_eq!(from_nanos(1_000_000_000 - 880_000_000), 0.12);
        assert!(to_nanos("a", -0.01).is_err());
        assert!(to_nanos("a", f64::NAN).is_err());
        assert!(to_nanos("a", f64::INFINITY).is_err());
        assert!(to_nanos("a", 2e9).is_err());
    }
}
