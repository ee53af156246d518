//! `learning.reflect` (spec §5.1): the built-in deterministic reflector, and the strict schema
//! an LLM reflector's answer must fit.
//!
//! An execution (`input`, `output`, `steps[{action, tool, duration, error?}]`, `outcome`,
//! `reward`, optional `feedback` and `usedBullets`) gets a verdict: **high** when `outcome` is
//! `success` and `reward ≥ 0.7`; **failed** when `outcome` is `failure`, `failed`, `error`,
//! `timeout` or `aborted` (any case), or `reward < 0.3`; else neutral. Each step's *label* is
//! its `tool`, or its `action` without one. The reflector proposes at most one bullet of each
//! section, all pure functions of the execution and the playbook (two nodes give the same):
//!
//! | section | when | content | key |
//! |---|---|---|---|
//! | `str` | high, with steps | `For inputs with {k1, k2}: {l1} → {l2} → … worked (reward 0.92)`, plus `; {action} ({tool}) took 66% of the time` when one step took more than half of the run; the input part only for an object input (its first 5 keys, sorted) | `seq:{l1}>{l2}>…` |
//! | `mis` | failed | `Step '{action}' with tool '{tool}' failed: {error}` for the first step with an error (error cut at 300 bytes), else `{l1} → … failed (outcome {o}, reward {r})` | `step:{action}\|{tool}`, else `fail:{l1}>…` |
//! | `cal` | a step of a tool averaged over ≥ 3 earlier runs took ≥ 2× its average (the largest ratio) | `Tool '{tool}' can be slow: {d} ms against its average of {m} ms over {n} runs` | `slow:{tool}` |
//! | `fbk` | `feedback` is given | the feedback, verbatim | none |
//!
//! Applying a reflection ([`apply`]): votes on the bullets the run used (`usedBullets`: helpful
//! when high, harmful when failed); contradictions, voted harmful: on a failed run, `str`
//! bullets of the same tool sequence; on a high run, `mis` bullets naming a step that now went
//! without error; then the proposed bullets are added (repeats merge, see
//! [`super::playbook`]); then the step durations join their tools' running averages (after the
//! `cal` comparison, so a run is not compared with itself).
//!
//! Training modes ([`Mode`], ACE): `online` (the default) merges near-duplicates by vector as
//! bullets arrive and prunes contradicted bullets after every reflection; `offline` adds and
//! merges exact repeats only and leaves near-duplicate merging and pruning to the next
//! `learning.curate` (ACE's lazy refinement over a training batch); `eval-only` computes the
//! same answer on a copy and never changes the playbook (its version stays).

use serde::Deserialize;
use serde_json::Value;

use super::playbook::{Added, Bullet, Candidate, Playbook, PlaybookLimits, Section, TokenCounter};

/// Reward at or above which a successful run is a strategy worth keeping.
pub const HIGH_REWARD: f64 = 0.7;
/// Reward below which a run failed, whatever its outcome.
pub const LOW_REWARD: f64 = 0.3;
/// A step this many times slower than its tool's average is worth a `cal` bullet.
pub const SLOW_RATIO: f64 = 2.0;
/// Runs of a tool averaged before its durations are compared.
pub const MIN_RUNS: u64 = 3;
/// Longest error text quoted in a `mis` bullet, in bytes.
pub const MAX_QUOTED_ERROR: usize = 300;
/// Most bullets an LLM reflector may propose at once.
pub const MAX_LLM_BULLETS: usize = 8;

/// One step of an execution.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// What was done.
    pub action: String,
    /// With what.
    pub tool: Option<String>,
    /// How long, in ms.
    pub duration: Option<f64>,
    /// Why it failed.
    pub error: Option<String>,
}

impl Step {
    fn label(&self) -> &str {
        self.tool.as_deref().unwrap_or(&self.action)
    }
}

/// An execution to reflect on.
#[derive(Clone, Debug, PartialEq)]
pub struct Execution {
    /// The task's input.
    pub input: Value,
    /// What came out.
    pub output: Value,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// `success`, `failure`, …
    pub outcome: String,
    /// In [−1, 1].
    pub reward: f64,
    /// What the agent was told about the run.
    pub feedback: Option<String>,
    /// Bullets of this playbook the run used.
    pub used_bullets: Vec<String>,
}

/// How an execution went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Succeeded with a high reward.
    High,
    /// Failed.
    Failed,
    /// Neither.
    Neutral,
}

impl Execution {
    /// The verdict on this run.
    #[must_use]
    pub fn verdict(&self) -> Verdict {
        let outcome = self.outcome.to_ascii_lowercase();
        if outcome == "success" && self.reward >= HIGH_REWARD {
            Verdict::High
        } else if ["failure", "failed", "error", "timeout", "aborted"].contains(&outcome.as_str())
            || self.reward < LOW_REWARD
        {
            Verdict::Failed
        } else {
            Verdict::Neutral
        }
    }

    fn labels(&self) -> Vec<&str> {
        self.steps.iter().map(Step::label).collect()
    }

    fn sequence_key(&self) -> String {
        format!("seq:{}", self.labels().join(">"))
    }
}

/// Training mode of a reflection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Refine as bullets arrive.
    #[default]
    Online,
    /// Refine at the next curation.
    Offline,
    /// Change nothing.
    EvalOnly,
}

/// What a reflection did (`learning.reflect`'s result).
#[derive(Clone, Debug, PartialEq)]
pub struct Reflection {
    /// Bullets added.
    pub new_bullets: Vec<Bullet>,
    /// Bullets whose counters changed (votes, repeats, contradictions), sorted.
    pub updated_bullets: Vec<String>,
    /// Bullets removed: evicted to make room, then pruned.
    pub pruned_bullets: Vec<String>,
    /// The playbook's version after.
    pub playbook_version: u64,
}

fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The built-in reflector's proposals for `e` against `p` (vectors not filled in).
#[must_use]
pub fn propose(p: &Playbook, e: &Execution) -> Vec<Candidate> {
    let verdict = e.verdict();
    let labels = e.labels();
    let sequence = labels.join(" → ");
    let mut out = Vec::new();
    let candidate = |section, content: String, key: Option<String>| Candidate {
        section,
        content,
        source: "reflector".into(),
        key,
        vector: None,
    };
    if verdict == Verdict::High && !e.steps.is_empty() {
        let prefix = match &e.input {
            Value::Object(map) if !map.is_empty() => {
                let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
                keys.sort_unstable();
                keys.truncate(5);
                format!("For inputs with {}: ", keys.join(", "))
            }
            _ => String::new(),
        };
        let total: f64 = e.steps.iter().filter_map(|s| s.duration).sum();
        let slow = e
            .steps
            .iter()
            .filter_map(|s| s.duration.map(|d| (s, d)))
            .fold(None::<(&Step, f64)>, |best, (s, d)| match best {
                Some((_, bd)) if bd >= d => best,
                _ => Some((s, d)),
            })
            .filter(|(_, d)| total > 0.0 && *d > total / 2.0)
            .map(|(s, d)| {
                format!(
                    "; {} ({}) took {:.0}% of the time",
                    s.action,
                    s.label(),
                    d / total * 100.0
                )
            })
            .unwrap_or_default();
        out.push(candidate(
            Section::Str,
            format!("{prefix}{sequence} worked (reward {:.2}){slow}", e.reward),
            Some(e.sequence_key()),
        ));
    }
    if verdict == Verdict::Failed {
        let c = match e.steps.iter().find(|s| s.error.is_some()) {
            Some(s) => candidate(
                Section::Mis,
                format!(
                    "Step '{}' with tool '{}' failed: {}",
                    s.action,
                    s.label(),
                    cut(s.error.as_deref().unwrap_or_default(), MAX_QUOTED_ERROR)
                ),
                Some(format!("step:{}|{}", s.action, s.label())),
            ),
            None if !e.steps.is_empty() => candidate(
                Section::Mis,
                format!(
                    "{sequence} failed (outcome {}, reward {:.2})",
                    e.outcome, e.reward
                ),
                Some(format!("fail:{}", labels.join(">"))),
            ),
            None => candidate(
                Section::Mis,
                format!(
                    "A run failed (outcome {}, reward {:.2})",
                    e.outcome, e.reward
                ),
                None,
            ),
        };
        out.push(c);
    }
    let slowest = e
        .steps
        .iter()
        .filter_map(|s| {
            let tool = s.tool.as_deref()?;
            let d = s.duration?;
            let stat = p.tools.get(tool)?;
            (stat.runs >= MIN_RUNS && stat.mean_ms > 0.0)
                .then(|| (tool, d, stat.mean_ms, stat.runs, d / stat.mean_ms))
        })
        .filter(|(.., ratio)| *ratio >= SLOW_RATIO)
        .fold(None::<(&str, f64, f64, u64, f64)>, |best, c| match best {
            Some(b) if b.4 >= c.4 => Some(b),
            _ => Some(c),
        });
    if let Some((tool, d, mean, runs, _)) = slowest {
        out.push(candidate(
            Section::Cal,
            format!(
                "Tool '{tool}' can be slow: {d:.0} ms against its average of {mean:.0} ms over {runs} runs"
            ),
            Some(format!("slow:{tool}")),
        ));
    }
    if let Some(f) = e
        .feedback
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty())
    {
        out.push(candidate(Section::Fbk, f.to_owned(), None));
    }
    out
}

/// Applies a reflection on `e` to `p`: votes, contradictions, the `candidates` (the built-in
/// reflector's, or an LLM's, with vectors when the node has an embedder), durations, pruning,
/// by `mode` (see the module doc).
pub fn apply(
    p: &mut Playbook,
    e: &Execution,
    candidates: Vec<Candidate>,
    mode: Mode,
    now_ms: u64,
    counter: &dyn TokenCounter,
    limits: &PlaybookLimits,
) -> Reflection {
    if mode == Mode::EvalOnly {
        let mut scratch = p.clone();
        let mut r = apply(
            &mut scratch,
            e,
            candidates,
            Mode::Online,
            now_ms,
            counter,
            limits,
        );
        r.playbook_version = p.version;
        return r;
    }
    let verdict = e.verdict();
    let mut updated = Vec::new();
    for id in &e.used_bullets {
        let vote = match verdict {
            Verdict::High => Some(true),
            Verdict::Failed => Some(false),
            Verdict::Neutral => None,
        };
        if let Some(helpful) = vote
            && p.vote(id, helpful, now_ms).is_some()
        {
            updated.push(id.clone());
        }
    }
    let contradicted: Vec<String> = match verdict {
        Verdict::Failed if !e.steps.is_empty() => vec![e.sequence_key()],
        Verdict::High => e
            .steps
            .iter()
            .filter(|s| s.error.is_none())
            .map(|s| format!("step:{}|{}", s.action, s.label()))
            .collect(),
        _ => Vec::new(),
    };
    for key in &contradicted {
        for entry in p
            .entries
            .iter()
            .filter(|x| x.key.as_deref() == Some(key.as_str()))
        {
            updated.push(entry.bullet.id.clone());
        }
        p.contradict(key, now_ms);
    }
    let mut new_ids = Vec::new();
    let mut pruned = Vec::new();
    for c in candidates {
        match p.add(c, now_ms, mode == Mode::Online, counter, limits) {
            Added::New { id, evicted } => {
                pruned.extend(evicted);
                new_ids.push(id);
            }
            Added::Merged(id) => updated.push(id),
        }
    }
    for s in &e.steps {
        if let (Some(tool), Some(d)) = (s.tool.as_deref(), s.duration) {
            p.observe_duration(tool, d);
        }
    }
    match mode {
        Mode::Online => pruned.extend(p.prune()),
        Mode::Offline => p.refine_pending = true,
        Mode::EvalOnly => {}
    }
    if !updated.is_empty() || !new_ids.is_empty() || !pruned.is_empty() {
        p.bump();
    }
    updated.sort_unstable();
    updated.dedup();
    updated.retain(|id| !pruned.contains(id) && !new_ids.contains(id));
    Reflection {
        new_bullets: new_ids
            .iter()
            .filter_map(|id| p.bullet(id).cloned())
            .collect(),
        updated_bullets: updated,
        pruned_bullets: pruned,
        playbook_version: p.version,
    }
}

/// `text` without the Markdown fence models often wrap JSON in (`` ```json … ``` ``), trimmed.
#[must_use]
pub fn unfence(text: &str) -> &str {
    let body = text.trim();
    body.strip_prefix("```json")
        .or_else(|| body.strip_prefix("```"))
        .and_then(|b| b.strip_suffix("```"))
        .unwrap_or(body)
        .trim()
}

/// The answer an LLM reflector must give: `{"bullets": [{"section": "str"|"cal"|"mis"|"fbk",
/// "content": "…"}]}`, at most [`MAX_LLM_BULLETS`], every content non-blank and within
/// `max_content_bytes`, no other members. Anything else is an error (and the node falls back to
/// the built-in reflector).
pub fn parse_llm_answer(text: &str, max_content_bytes: usize) -> Result<Vec<Candidate>, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        bullets: Vec<Item>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        section: String,
        content: String,
    }
    let answer: Answer =
        serde_json::from_str(unfence(text)).map_err(|e| format!("not the bullet schema: {e}"))?;
    if answer.bullets.len() > MAX_LLM_BULLETS {
        return Err(format!(
            "{} bullets, at most {MAX_LLM_BULLETS}",
            answer.bullets.len()
        ));
    }
    answer
        .bullets
        .into_iter()
        .map(|item| {
            let section = Section::parse(&item.section)
                .ok_or_else(|| format!("section {:?} is not str, cal, mis or fbk", item.section))?;
            let content = item.content.trim();
            if content.is_empty() || content.len() > max_content_bytes {
                return Err(format!(
                    "content of {} bytes (1..={max_content_bytes})",
                    content.len()
                ));
            }
            Ok(Candidate {
                section,
                content: content.to_owned(),
                source: "llm-reflector".into(),
                key: None,
                vector: None,
            })
        })
        .collect()
}

/// The prompt of an LLM reflector: the execution and the playbook's current bullets, asking for
/// the schema of [`parse_llm_answer`].
#[must_use]
pub fn llm_prompt(p: &Playbook, e: &Execution, max_bullets_shown: usize) -> String {
    let steps: Vec<Value> = e
        .steps
        .iter()
        .map(|s| {
            serde_json::json!({
                "action": s.action, "tool": s.tool, "duration": s.duration, "error": s.error,
            })
        })
        .collect();
    let execution = serde_json::json!({
        "input": e.input, "output": e.output, "steps": steps,
        "outcome": e.outcome, "reward": e.reward, "feedback": e.feedback,
    });
    let mut shown = String::new();
    for b in p.bullets().take(max_bullets_shown) {
        shown.push_str(&format!(
            "[{}] helpful={} harmful={} :: {}\n",
            b.id, b.helpful_count, b.harmful_count, b.content
        ));
    }
    format!(
        "You maintain a playbook of short, reusable lessons for an AI agent. Sections: str \
         (strategies that worked), cal (costs, durations, numbers), mis (mistakes to avoid), fbk \
         (feedback received).\n\nCurrent playbook:\n{shown}\nExecution:\n{execution}\n\nAnswer \
         with JSON only, exactly {{\"bullets\": [{{\"section\": \"str|cal|mis|fbk\", \
         \"content\": \"...\"}}]}}, at most {MAX_LLM_BULLETS} new lessons that are not already \
         in the playbook, each one sentence."
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn words(text: &str) -> usize {
        text.split_whitespace().count()
    }

    fn step(action: &str, tool: &str, duration: f64, error: Option<&str>) -> Step {
        Step {
            action: action.into(),
            tool: Some(tool.into()),
            duration: Some(duration),
            error: error.map(Into::into),
        }
    }

    /// The spec's §5.1 example execution.
    fn spec_example() -> Execution {
        Execution {
            input: json!({"query": "quantum computing market size 2026"}),
            output: json!({"summary": "...", "sources": 12}),
            steps: vec![
                step("search", "web-search", 340.0, None),
                step("filter", "relevance-scorer", 120.0, None),
                step("synthesize", "summarizer", 890.0, None),
            ],
            outcome: "success".into(),
            reward: 0.92,
            feedback: None,
            used_bullets: Vec::new(),
        }
    }

    fn reflect(p: &mut Playbook, e: &Execution, mode: Mode, now: u64) -> Reflection {
        let c = propose(p, e);
        apply(p, e, c, mode, now, &words, &PlaybookLimits::default())
    }

    #[test]
    fn the_spec_example_gives_a_strategy_bullet() {
        let mut p = Playbook::new("web-research-v3", 1);
        let r = reflect(&mut p, &spec_example(), Mode::Online, 10);
        assert_eq!(r.new_bullets.len(), 1);
        let b = &r.new_bullets[0];
        assert_eq!(b.id, "str-00001");
        assert_eq!(
            b.content,
            "For inputs with query: web-search → relevance-scorer → summarizer worked (reward 0.92); synthesize (summarizer) took 66% of the time"
        );
        assert_eq!(r.playbook_version, 1);
        // The same run again repeats it: helpful + 1, no new bullet.
        let again = reflect(&mut p, &spec_example(), Mode::Online, 11);
        assert!(again.new_bullets.is_empty());
        assert_eq!(again.updated_bullets, vec!["str-00001".to_owned()]);
        assert_eq!(p.bullet("str-00001").unwrap().helpful_count, 1);
        assert_eq!(again.playbook_version, 2);
    }

    #[test]
    fn failures_durations_and_feedback() {
        let mut p = Playbook::new("pb", 1);
        for _ in 0..3 {
            reflect(&mut p, &spec_example(), Mode::Online, 5);
        }
        let failed = Execution {
            steps: vec![
                step("search", "web-search", 1000.0, None),
                step(
                    "extract",
                    "content-extractor",
                    40.0,
                    Some("HTTP 429 from the site"),
                ),
            ],
            outcome: "failure".into(),
            reward: 0.1,
            feedback: Some("  Use the cached copy when the site rate-limits.  ".into()),
            ..spec_example()
        };
        let r = reflect(&mut p, &failed, Mode::Online, 20);
        let contents: Vec<(&str, &str)> = r
            .new_bullets
            .iter()
            .map(|b| (b.id.as_str(), b.content.as_str()))
            .collect();
        assert_eq!(
            contents,
            vec![
                (
                    "mis-00002",
                    "Step 'extract' with tool 'content-extractor' failed: HTTP 429 from the site"
                ),
                (
                    "cal-00003",
                    "Tool 'web-search' can be slow: 1000 ms against its average of 340 ms over 3 runs"
                ),
                (
                    "fbk-00004",
                    "Use the cached copy when the site rate-limits."
                ),
            ]
        );
        // A later run where `extract` works contradicts the mistake bullet.
        let worked = Execution {
            steps: vec![step("extract", "content-extractor", 50.0, None)],
            ..spec_example()
        };
        for k in 0..3 {
            let r = reflect(&mut p, &worked, Mode::Online, 30 + k);
            if k < 2 {
                assert!(r.pruned_bullets.is_empty());
            } else {
                assert_eq!(r.pruned_bullets, vec!["mis-00002".to_owned()]);
            }
        }
    }

    #[test]
    fn used_bullets_are_voted_and_failed_sequences_contradicted() {
        let mut p = Playbook::new("pb", 1);
        reflect(&mut p, &spec_example(), Mode::Online, 1);
        let failed = Execution {
            outcome: "error".into(),
            reward: 0.0,
            used_bullets: vec!["str-00001".into(), "nope-1".into()],
            ..spec_example()
        };
        let r = reflect(&mut p, &failed, Mode::Online, 2);
        // One harmful vote for its use, one for the contradiction.
        assert_eq!(p.bullet("str-00001").unwrap().harmful_count, 2);
        assert_eq!(r.updated_bullets, vec!["str-00001".to_owned()]);
    }

    #[test]
    fn eval_only_changes_nothing_and_offline_defers_refinement() {
        let mut p = Playbook::new("pb", 1);
        let r = reflect(&mut p, &spec_example(), Mode::EvalOnly, 1);
        assert_eq!(r.new_bullets.len(), 1);
        assert_eq!(r.playbook_version, 0);
        assert_eq!(p, Playbook::new("pb", 1));
        reflect(&mut p, &spec_example(), Mode::Offline, 2);
        assert!(p.refine_pending);
        p.curate(1_000, 3);
        assert!(!p.refine_pending);
    }

    #[test]
    fn llm_answers_must_fit_the_schema() {
        let ok = parse_llm_answer(
            "```json\n{\"bullets\": [{\"section\": \"mis\", \"content\": \" Back off on 429. \"}]}\n```",
            100,
        )
        .unwrap();
        assert_eq!(ok[0].section, Section::Mis);
        assert_eq!(ok[0].content, "Back off on 429.");
        assert_eq!(ok[0].source, "llm-reflector");
        for bad in [
            "not json",
            "{\"bullets\": [{\"section\": \"xyz\", \"content\": \"a\"}]}",
            "{\"bullets\": [{\"section\": \"str\", \"content\": \"  \"}]}",
            "{\"bullets\": [], \"extra\": 1}",
            "{\"bullets\": [{\"section\": \"str\", \"content\": \"a\", \"why\": 1}]}",
        ] {
            assert!(parse_llm_answer(bad, 100).is_err(), "{bad}");
        }
        let many = json!({"bullets": vec![json!({"section": "str", "content": "a"}); 9]});
        assert!(parse_llm_answer(&many.to_string(), 100).is_err());
        let p = Playbook::new("pb", 1);
        assert!(llm_prompt(&p, &spec_example(), 50).contains("web-search"));
    }
}
