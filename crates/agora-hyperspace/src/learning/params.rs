//! Parameters of the six `learning.*` methods (spec §5.1 "Methods"), with their limits, and the
//! methods' descriptors ([`DOCS`]: params, results, errors, examples) for the OpenRPC document.
//!
//! Params come as an object (or positionally, in the spec's order); members this crate does not
//! know are ignored. Every refusal is −32602 naming the field.
//!
//! | bound ([`LearningLimits`], default) | applies to | beyond it |
//! |---|---|---|
//! | `playbookId` 1..=128 bytes of `A-Z a-z 0-9 . _ : -` | every method | −32602 |
//! | `section` `str` \| `cal` \| `mis` \| `fbk`; `content` 1..=2,000 bytes, not blank | `addBullet` | −32602 |
//! | `bulletId` `<section>-<digits>`; `helpful` a boolean | `feedback` | −32602 |
//! | `maxTokens` 1..=1,000,000 (default 80,000) | `curate` | −32602 |
//! | `execution`: at most 256 steps, 128 KiB serialized; `outcome` 1..=32 bytes; `reward` in [−1, 1]; `action`/`tool` 1..=128 bytes; `duration` 0 ms to a year; `error` (text, or any JSON, kept as its text) and `feedback` ≤ 2,000 bytes; `usedBullets` ≤ 256 ids | `reflect` | −32602 |
//! | `mode` `online` (default) \| `offline` \| `eval-only` | `reflect` | −32602 |

use serde::Deserialize;
use serde_json::Value;

use super::playbook::Section;
use super::reflect::{Execution, Mode, Step};
use crate::jsonrpc::RpcError;
use schemars::{JsonSchema, json_schema};
use serde_json::json;

use super::{ADD_BULLET, CURATE, FEEDBACK, GET_PLAYBOOK, GET_STATS, REFLECT};
use crate::jsonrpc::RpcCode;
use crate::openrpc::{MethodDoc, params_of};
use crate::params::{invalid_choice, invalid_params, parse_params, text};

/// Limits of the learning methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LearningLimits {
    /// Longest bullet content, in bytes.
    pub max_content_bytes: usize,
    /// Most steps of an execution.
    pub max_steps: usize,
    /// Longest execution, serialized, in bytes.
    pub max_execution_bytes: usize,
    /// Largest `maxTokens`.
    pub max_tokens: usize,
    /// `maxTokens` when none is given.
    pub default_max_tokens: usize,
}

impl Default for LearningLimits {
    fn default() -> Self {
        Self {
            max_content_bytes: 2_000,
            max_steps: 256,
            max_execution_bytes: 128 * 1024,
            max_tokens: 1_000_000,
            default_max_tokens: 80_000,
        }
    }
}

/// Longest `playbookId`.
pub const MAX_PLAYBOOK_ID: usize = 128;
/// Longest `action`, `tool` or `outcome`.
const MAX_NAME: usize = 128;
/// Longest `error` or `feedback` text.
const MAX_NOTE: usize = 2_000;
/// Most `usedBullets`.
const MAX_USED: usize = 256;
/// Longest step `duration`, ms (a year: averages of such numbers stay finite).
const MAX_DURATION_MS: f64 = 31_536_000_000.0;

/// Whether `id` is a playbook id.
#[must_use]
pub fn valid_playbook_id(id: &str) -> bool {
    (1..=MAX_PLAYBOOK_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Whether `id` is shaped like a bullet id (`str-00042`).
#[must_use]
pub fn valid_bullet_id(id: &str) -> bool {
    id.split_once('-').is_some_and(|(section, digits)| {
        Section::parse(section).is_some()
            && (5..=12).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

fn playbook_id(id: String) -> Result<String, RpcError> {
    if valid_playbook_id(&id) {
        Ok(id)
    } else {
        Err(invalid_params(
            format!(
                "playbookId: 1..={MAX_PLAYBOOK_ID} bytes of letters, digits, '.', '_', ':' or '-'"
            ),
            Some("playbookId"),
        ))
    }
}

/// `learning.getPlaybook(playbookId)` and `learning.getStats(playbookId)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaybookParams {
    /// Playbook.
    pub playbook_id: String,
}

/// `learning.reflect(playbookId, execution, mode?)`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReflectParams {
    /// Playbook (created by the first reflection).
    pub playbook_id: String,
    /// The execution.
    pub execution: Execution,
    /// Training mode.
    pub mode: Mode,
}

/// `learning.curate(playbookId, maxTokens?)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurateParams {
    /// Playbook.
    pub playbook_id: String,
    /// Token budget.
    pub max_tokens: usize,
}

/// `learning.addBullet(playbookId, section, content)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddBulletParams {
    /// Playbook (created by the first bullet).
    pub playbook_id: String,
    /// Section.
    pub section: Section,
    /// Text.
    pub content: String,
}

/// `learning.feedback(playbookId, bulletId, helpful)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackParams {
    /// Playbook.
    pub playbook_id: String,
    /// Bullet.
    pub bullet_id: String,
    /// Helpful (or harmful).
    pub helpful: bool,
}

/// Params of `learning.getPlaybook(playbookId)` and `learning.getStats(playbookId)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawPlaybook {
    /// The playbook: 1..=128 bytes of letters, digits, `.`, `_`, `:` or `-`.
    playbook_id: String,
}

/// Params of `learning.reflect(playbookId, execution, mode?)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawReflect {
    /// The playbook (created by its first reflection).
    playbook_id: String,
    /// `{input, output, steps: [{action, tool?, duration?, error?}], outcome, reward, feedback?,
    /// usedBullets?}`.
    execution: Value,
    /// `online` (default), `offline` or `eval-only`.
    #[serde(default)]
    mode: Option<String>,
}

/// Params of `learning.curate(playbookId, maxTokens?)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawCurate {
    /// The playbook.
    playbook_id: String,
    /// Token budget, 1..=1,000,000 (default 80,000).
    #[serde(default)]
    max_tokens: Option<u64>,
}

/// Params of `learning.addBullet(playbookId, section, content)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawAdd {
    /// The playbook (created by its first bullet).
    playbook_id: String,
    /// The section: strategy, calculation, mistake, feedback.
    #[schemars(extend("enum" = ["str", "cal", "mis", "fbk"]))]
    section: String,
    /// The bullet's text, 1..=2,000 bytes.
    content: String,
}

/// Params of `learning.feedback(playbookId, bulletId, helpful)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawFeedback {
    /// The playbook.
    playbook_id: String,
    /// The bullet: `<section>-<digits>`.
    bullet_id: String,
    /// Whether it helped (else it harmed).
    helpful: bool,
}

fn playbook_example() -> Value {
    json!({"playbookId": "web-research"})
}

/// What each `learning.*` method takes, returns and may fail with ([`crate::openrpc`]).
pub const DOCS: [MethodDoc; 6] = [
    MethodDoc {
        name: GET_PLAYBOOK,
        summary: "A playbook's bullets, oldest first, its version and token count.",
        params: params_of::<RawPlaybook>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["playbookId", "bullets", "version", "tokenCount"],
                "properties": {
                    "playbookId": {"type": "string"},
                    "bullets": {"type": "array", "items": {
                        "type": "object",
                        "required": ["id", "section", "content", "helpfulCount", "harmfulCount"],
                        "properties": {
                            "id": {"type": "string"},
                            "section": {"type": "string", "enum": ["str", "cal", "mis", "fbk"]},
                            "content": {"type": "string"},
                            "helpfulCount": {"type": "integer"},
                            "harmfulCount": {"type": "integer"},
                            "createdAt": {"type": "string"},
                            "updatedAt": {"type": "string"},
                            "source": {"type": "string"}
                        }
                    }},
                    "version": {"type": "integer"},
                    "tokenCount": {"type": "integer"}
                }
            })
        },
        errors: &[],
        example: playbook_example,
    },
    MethodDoc {
        name: GET_STATS,
        summary: "A playbook's bullet counts per section, mean score and version.",
        params: params_of::<RawPlaybook>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["totalBullets", "bySection", "avgScore", "version"],
                "properties": {
                    "totalBullets": {"type": "integer"},
                    "bySection": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "avgScore": {"type": "number"},
                    "version": {"type": "integer"}
                }
            })
        },
        errors: &[],
        example: playbook_example,
    },
    MethodDoc {
        name: FEEDBACK,
        summary: "Counts a bullet as helpful or harmful.",
        params: params_of::<RawFeedback>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["helpfulCount", "harmfulCount"],
                "properties": {"helpfulCount": {"type": "integer"}, "harmfulCount": {"type": "integer"}}
            })
        },
        errors: &[],
        example: || json!({"playbookId": "web-research", "bulletId": "str-1", "helpful": true}),
    },
    MethodDoc {
        name: ADD_BULLET,
        summary: "Adds a bullet to a playbook (merged when it repeats one).",
        params: params_of::<RawAdd>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["bulletId", "merged"],
                "properties": {
                    "bulletId": {"type": "string"},
                    "merged": {"type": "boolean"},
                    "evicted": {"type": "string"}
                }
            })
        },
        errors: &[RpcCode::RATE_LIMITED],
        example: || json!({"playbookId": "web-research", "section": "str", "content": "Search recent reviews before primary papers."}),
    },
    MethodDoc {
        name: CURATE,
        summary: "Drops the lowest-scoring bullets until the playbook fits a token budget.",
        params: params_of::<RawCurate>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["removed", "remaining", "tokenCount"],
                "properties": {
                    "removed": {"type": "integer"},
                    "remaining": {"type": "integer"},
                    "tokenCount": {"type": "integer"}
                }
            })
        },
        errors: &[],
        example: || json!({"playbookId": "web-research", "maxTokens": 80000}),
    },
    MethodDoc {
        name: REFLECT,
        summary: "Turns an execution into new, updated and pruned bullets.",
        params: params_of::<RawReflect>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["newBullets", "prunedBullets", "updatedBullets", "playbookVersion", "reflector"],
                "properties": {
                    "newBullets": {"type": "array"},
                    "prunedBullets": {"type": "array"},
                    "updatedBullets": {"type": "array"},
                    "playbookVersion": {"type": "integer"},
                    "reflector": {"type": "string"},
                    "reflectorError": {"type": "string"}
                }
            })
        },
        errors: &[RpcCode::RATE_LIMITED],
        example: || {
            json!({
                "playbookId": "web-research",
                "execution": {
                    "input": {"query": "solid-state battery breakthroughs 2026"},
                    "output": {"summary": "...", "confidence": 0.91},
                    "steps": [{"action": "search", "tool": "web-search", "duration": 195}],
                    "outcome": "success",
                    "reward": 0.91
                },
                "mode": "eval-only"
            })
        },
    },
];

impl PlaybookParams {
    /// Parses `{playbookId}`.
    pub fn parse(params: &Value) -> Result<Self, RpcError> {
        let raw: RawPlaybook = parse_params(params, &["playbookId"])?;
        Ok(Self {
            playbook_id: playbook_id(raw.playbook_id)?,
        })
    }
}

impl CurateParams {
    /// Parses `{playbookId, maxTokens?}`.
    pub fn parse(params: &Value, limits: &LearningLimits) -> Result<Self, RpcError> {
        let raw: RawCurate = parse_params(params, &["playbookId", "maxTokens"])?;
        let max_tokens = match raw.max_tokens {
            None => limits.default_max_tokens,
            Some(n) => match usize::try_from(n) {
                Ok(n) if (1..=limits.max_tokens).contains(&n) => n,
                _ => {
                    return Err(invalid_params(
                        format!("maxTokens: {n} is not within 1..={}", limits.max_tokens),
                        Some("maxTokens"),
                    ));
                }
            },
        };
        Ok(Self {
            playbook_id: playbook_id(raw.playbook_id)?,
            max_tokens,
        })
    }
}

impl AddBulletParams {
    /// Parses `{playbookId, section, content}`.
    pub fn parse(params: &Value, limits: &LearningLimits) -> Result<Self, RpcError> {
        let raw: RawAdd = parse_params(params, &["playbookId", "section", "content"])?;
        let section = Section::parse(&raw.section).ok_or_else(|| {
            invalid_choice("section", &raw.section, &["str", "cal", "mis", "fbk"])
        })?;
        let content = raw.content.trim().to_owned();
        text(&content, "content", limits.max_content_bytes)?;
        Ok(Self {
            playbook_id: playbook_id(raw.playbook_id)?,
            section,
            content,
        })
    }
}

impl FeedbackParams {
    /// Parses `{playbookId, bulletId, helpful}`.
    pub fn parse(params: &Value) -> Result<Self, RpcError> {
        let raw: RawFeedback = parse_params(params, &["playbookId", "bulletId", "helpful"])?;
        if !valid_bullet_id(&raw.bullet_id) {
            return Err(invalid_params(
                "bulletId: not a bullet id (like str-00042)",
                Some("bulletId"),
            ));
        }
        Ok(Self {
            playbook_id: playbook_id(raw.playbook_id)?,
            bullet_id: raw.bullet_id,
            helpful: raw.helpful,
        })
    }
}

impl ReflectParams {
    /// Parses `{playbookId, execution, mode?}`.
    pub fn parse(params: &Value, limits: &LearningLimits) -> Result<Self, RpcError> {
        let raw: RawReflect = parse_params(params, &["playbookId", "execution", "mode"])?;
        let mode = match raw.mode.as_deref() {
            None | Some("online") => Mode::Online,
            Some("offline") => Mode::Offline,
            Some("eval-only") => Mode::EvalOnly,
            Some(other) => {
                return Err(invalid_choice(
                    "mode",
                    other,
                    &["online", "offline", "eval-only"],
                ));
            }
        };
        Ok(Self {
            playbook_id: playbook_id(raw.playbook_id)?,
            execution: execution(&raw.execution, limits)?,
            mode,
        })
    }
}

fn field_err(field: &str, detail: impl std::fmt::Display) -> RpcError {
    invalid_params(format!("{field}: {detail}"), Some(field))
}

/// A JSON value as text: strings as they are, anything else serialized.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Checks and converts an `execution` object.
pub fn execution(v: &Value, limits: &LearningLimits) -> Result<Execution, RpcError> {
    let Value::Object(map) = v else {
        return Err(field_err("execution", "must be an object"));
    };
    let size = serde_json::to_string(v).map_or(usize::MAX, |s| s.len());
    if size > limits.max_execution_bytes {
        return Err(field_err(
            "execution",
            format!("{size} bytes, at most {}", limits.max_execution_bytes),
        ));
    }
    let outcome = match map.get("outcome") {
        Some(Value::String(s)) if (1..=32).contains(&s.trim().len()) => s.trim().to_owned(),
        _ => {
            return Err(field_err(
                "execution.outcome",
                "a string of 1..=32 bytes is required",
            ));
        }
    };
    let reward = match map.get("reward").and_then(Value::as_f64) {
        Some(r) if (-1.0..=1.0).contains(&r) => r,
        Some(r) => {
            return Err(field_err(
                "execution.reward",
                format!("{r} is not within -1..=1"),
            ));
        }
        None => return Err(field_err("execution.reward", "a number is required")),
    };
    let raw_steps = match map.get("steps") {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(field_err("execution.steps", "must be an array")),
    };
    if raw_steps.len() > limits.max_steps {
        return Err(field_err(
            "execution.steps",
            format!("{} steps, at most {}", raw_steps.len(), limits.max_steps),
        ));
    }
    let mut steps = Vec::with_capacity(raw_steps.len());
    for (i, s) in raw_steps.iter().enumerate() {
        let Value::Object(s) = s else {
            return Err(field_err(
                &format!("execution.steps[{i}]"),
                "must be an object",
            ));
        };
        let name = |key: &str, required: bool| -> Result<Option<String>, RpcError> {
            match s.get(key) {
                Some(Value::String(t)) if !t.trim().is_empty() && t.len() <= MAX_NAME => {
                    Ok(Some(t.trim().to_owned()))
                }
                None | Some(Value::Null) if !required => Ok(None),
                _ => Err(field_err(
                    &format!("execution.steps[{i}].{key}"),
                    format!("a string of 1..={MAX_NAME} bytes"),
                )),
            }
        };
        let action = name("action", true)?.unwrap_or_default();
        let tool = name("tool", false)?;
        let duration = match s.get("duration") {
            None | Some(Value::Null) => None,
            Some(d) => match d.as_f64() {
                Some(d) if (0.0..=MAX_DURATION_MS).contains(&d) => Some(d),
                _ => {
                    return Err(field_err(
                        &format!("execution.steps[{i}].duration"),
                        "a number of milliseconds from 0 to a year",
                    ));
                }
            },
        };
        let error = match s.get("error") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => None,
            Some(e) => {
                let t = as_text(e);
                if t.len() > MAX_NOTE {
                    return Err(field_err(
                        &format!("execution.steps[{i}].error"),
                        format!("at most {MAX_NOTE} bytes"),
                    ));
                }
                Some(t)
            }
        };
        steps.push(Step {
            action,
            tool,
            duration,
            error,
        });
    }
    let feedback = match map.get("feedback") {
        None | Some(Value::Null) => None,
        Some(Value::String(f)) if f.len() <= MAX_NOTE => Some(f.clone()),
        Some(_) => {
            return Err(field_err(
                "execution.feedback",
                format!("a string of at most {MAX_NOTE} bytes"),
            ));
        }
    };
    let used_bullets = match map.get("usedBullets") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ids)) if ids.len() <= MAX_USED => ids
            .iter()
            .map(|id| match id.as_str() {
                Some(id) if valid_bullet_id(id) => Ok(id.to_owned()),
                _ => Err(field_err(
                    "execution.usedBullets",
                    "bullet ids like str-00042",
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(field_err(
                "execution.usedBullets",
                format!("an array of at most {MAX_USED} bullet ids"),
            ));
        }
    };
    Ok(Execution {
        input: map.get("input").cloned().unwrap_or(Value::Null),
        output: map.get("output").cloned().unwrap_or(Value::Null),
        steps,
        outcome,
        reward,
        feedback,
        used_bullets,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn the_spec_reflect_request_parses() {
        let p = ReflectParams::parse(
            &json!({
                "playbookId": "web-research-v3",
                "execution": {
                    "input": { "query": "quantum computing market size 2026" },
                    "output": { "summary": "...", "sources": 12 },
                    "steps": [
                        { "action": "search", "tool": "web-search", "duration": 340 },
                        { "action": "filter", "tool": "relevance-scorer", "duration": 120 },
                        { "action": "synthesize", "tool": "summarizer", "duration": 890 }
                    ],
                    "outcome": "success",
                    "reward": 0.92
                }
            }),
            &LearningLimits::default(),
        )
        .unwrap();
        assert_eq!(p.mode, Mode::Online);
        assert_eq!(p.execution.steps.len(), 3);
        assert_eq!(p.execution.steps[2].duration, Some(890.0));
    }

    #[test]
    fn bad_params_name_their_field() {
        let limits = LearningLimits::default();
        let base = json!({"outcome": "success", "reward": 0.5, "steps": []});
        let cases = [
            (
                json!({"playbookId": "a b", "execution": base}),
                "playbookId",
            ),
            (json!({"playbookId": "p", "execution": 3}), "execution"),
            (
                json!({"playbookId": "p", "execution": {"outcome": "success", "reward": 2}}),
                "execution.reward",
            ),
            (
                json!({"playbookId": "p", "execution": {"reward": 0.1}}),
                "execution.outcome",
            ),
            (
                json!({"playbookId": "p", "execution": {"outcome": "x", "reward": 0, "steps": [{"tool": "t"}]}}),
                "execution.steps[0].action",
            ),
            (
                json!({"playbookId": "p", "execution": {"outcome": "x", "reward": 0, "steps": [{"action": "a", "duration": -1}]}}),
                "execution.steps[0].duration",
            ),
            (
                json!({"playbookId": "p", "execution": base, "mode": "batch"}),
                "mode",
            ),
        ];
        for (params, field) in cases {
            let err = ReflectParams::parse(&params, &limits).unwrap_err();
            assert_eq!(err.data.as_ref().unwrap()["field"], field, "{params}");
        }
        let many = json!({"playbookId": "p", "execution": {"outcome": "x", "reward": 0,
            "steps": vec![json!({"action": "a"}); 257]}});
        assert!(ReflectParams::parse(&many, &limits).is_err());
        assert!(
            AddBulletParams::parse(
                &json!({"playbookId": "p", "section": "str", "content": "x".repeat(2001)}),
                &limits
            )
            .is_err()
        );
        assert!(AddBulletParams::parse(&json!(["p", "tip", "x"]), &limits).is_err());
        assert!(FeedbackParams::parse(&json!(["p", "str-00001", true])).is_ok());
        assert!(FeedbackParams::parse(&json!(["p", "str-1", true])).is_err());
        assert!(CurateParams::parse(&json!({"playbookId": "p", "maxTokens": 0}), &limits).is_err());
        assert_eq!(
            CurateParams::parse(&json!({"playbookId": "p"}), &limits)
                .unwrap()
                .max_tokens,
            80_000
        );
    }
}
