//! `improving.augment` with `FULL_PIPELINE` (spec §5.2, SiriuS's stages 2–3, critique
//! and regeneration): the prompt that asks a model to regenerate a failed run from
//! its critique and the best successful run, and the strict schema its answer must fit.
//! `FEEDBACK_ONLY` needs no model: [`super::Library::critique`].
//!
//! The answer must be one JSON object `{"steps": [...], "output": ...}` (a Markdown fence around
//! it is allowed), the steps passing the same checks as a recorded trajectory's, no other
//! members. The regenerated run is not verified here: the node keeps it beside the original
//! (in its metadata, `augmentation`) and the caller's checker decides whether it passes.

use serde::Deserialize;
use serde_json::{Value, json};

use super::library::Held;
use super::trajectory::{TrajectoryLimits, check_steps};
use crate::learning::reflect::unfence;

/// The user message asking to regenerate `target` from `critique` and, when there is one, the
/// best successful run `best`.
#[must_use]
pub fn prompt(target: &Held, critique: &str, best: Option<&Held>) -> String {
    let run = |h: &Held| {
        json!({
            "input": h.trajectory.input,
            "steps": h.trajectory.steps,
            "output": h.trajectory.output,
            "reward": h.trajectory.reward,
        })
    };
    let mut text = format!(
        "A run of the task type \"{}\" failed.\nThe failed run:\n{}\nCritique:\n{critique}\n",
        target.trajectory.task_type,
        run(target)
    );
    if let Some(b) = best {
        text.push_str(&format!(
            "A successful run of the same task type:\n{}\n",
            run(b)
        ));
    }
    text.push_str(
        "Regenerate the failed run so that it succeeds, as if it had been solved directly. \
         Answer with one JSON object {\"steps\": [{\"action\", \"tool\", \"duration\"}], \
         \"output\": ...} and nothing else.",
    );
    text
}

/// The regenerated `(steps, output)` in a model's `answer`, or why it does not fit.
pub fn parse_regenerated(
    answer: &str,
    limits: &TrajectoryLimits,
) -> Result<(Vec<Value>, Value), String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        steps: Value,
        output: Value,
    }
    let a: Answer = serde_json::from_str(unfence(answer))
        .map_err(|e| format!("not the regenerated-run schema: {e}"))?;
    let steps = check_steps(&a.steps, limits).map_err(|e| e.message)?;
    if steps.is_empty() {
        return Err("the regenerated run has no steps".into());
    }
    Ok((steps, a.output))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn answers_must_fit_the_schema() {
        let limits = TrajectoryLimits::default();
        let (steps, output) = parse_regenerated(
            "```json\n{\"steps\": [{\"action\": \"retry\", \"tool\": \"web-search\"}], \"output\": {\"ok\": true}}\n```",
            &limits,
        )
        .unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!(output["ok"], true);
        for bad in [
            "Great run!",
            "{\"steps\": [], \"output\": 1}",
            "{\"steps\": [{\"tool\": \"x\"}], \"output\": 1}",
            "{\"steps\": [{\"action\": \"a\"}], \"output\": 1, \"extra\": 2}",
        ] {
            assert!(parse_regenerated(bad, &limits).is_err(), "{bad}");
        }
    }
}
