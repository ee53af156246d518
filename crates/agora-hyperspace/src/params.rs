//! Helpers every primitive's dispatcher shares (Hyperspace spec §2.2 "JSON-RPC 2.0 Transport",
//! §8 "Error Codes"): decoding params given by name or by position ([`parse_params`]), the −32602
//! "Invalid params" and −32003 capacity errors, text checks, and result serialization.
//!
//! Every −32602 has `data: {field, errors: [{field, reason, allowed?}]}`: `field` is the first
//! problem's field, `errors` lists them all. When params do not decode, the params type's JSON
//! Schema (the one the OpenRPC document shows) finds every missing required field and every
//! wrong type at once, with the allowed values of a field that has a set.

use std::any::TypeId;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::jsonrpc::{RpcCode, RpcError};

/// The most problems one −32602 lists.
pub const MAX_PROBLEMS: usize = 32;

/// Decodes JSON-RPC params into `T`: an object as is, an array positionally by `names`, absent
/// (`null`) as `{}`. Unknown members are ignored by `T`'s derive. Errors are −32602 listing every
/// problem `T`'s schema finds (at most [`MAX_PROBLEMS`]), else the one serde found.
pub fn parse_params<T: DeserializeOwned + JsonSchema + 'static>(
    params: &Value,
    names: &[&str],
) -> Result<T, RpcError> {
    let converted;
    let source = match params {
        Value::Object(_) => params,
        Value::Null => {
            converted = Value::Object(Map::new());
            &converted
        }
        Value::Array(items) => {
            if items.len() > names.len() {
                return Err(invalid_params(
                    format!(
                        "expected at most {} positional params, got {}",
                        names.len(),
                        items.len()
                    ),
                    None,
                ));
            }
            converted = Value::Object(
                names
                    .iter()
                    .zip(items)
                    .map(|(name, value)| ((*name).to_owned(), value.clone()))
                    .collect(),
            );
            &converted
        }
        _ => {
            return Err(invalid_params("params must be an object or an array", None));
        }
    };
    serde_path_to_error::deserialize(source).map_err(|error| {
        let problems = schema_problems::<T>(source);
        if !problems.is_empty() {
            return problems_error(&problems);
        }
        let path = error.path().to_string();
        let reason = error.into_inner().to_string();
        let field = if path.is_empty() || path == "." {
            missing_field_name(&reason)
        } else {
            Some(path)
        };
        match field {
            Some(field) => invalid_params(format!("{field}: {reason}"), Some(&field)),
            None => invalid_params(reason, None),
        }
    })
}

/// One problem with params: the field (a path such as `metadata.budget` or `steps[2].action`),
/// why, and the values allowed when the field has a set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    /// The field.
    pub field: String,
    /// Why it is refused.
    pub reason: String,
    /// The values the field may take, when it has a set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Value>,
}

/// −32602 listing `problems` (at least one): the message names each, `data.field` is the first's
/// field and `data.errors` has them all.
#[must_use]
pub fn problems_error(problems: &[Problem]) -> RpcError {
    let detail = problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.reason))
        .collect::<Vec<_>>()
        .join("; ");
    let field = problems.first().map_or("params", |p| p.field.as_str());
    RpcError::invalid_params()
        .with_message(format!("Invalid params: {detail}"))
        .with_data(json!({ "field": field, "errors": problems }))
}

/// A −32602 made complete: `data.field` (`params` when none is named) and `data.errors` (one
/// problem, from `data.reason` or the message, when it has none) added to whatever `data` it
/// has. Other errors are returned unchanged. Faces apply it to every −32602 the node makes.
#[must_use]
pub fn complete(error: RpcError) -> RpcError {
    if error.code != RpcCode::INVALID_PARAMS {
        return error;
    }
    let mut data = match error.data.clone() {
        Some(Value::Object(map)) => map,
        None | Some(Value::Null) => Map::new(),
        Some(other) => Map::from_iter([("detail".to_owned(), other)]),
    };
    let field = data
        .get("field")
        .and_then(Value::as_str)
        .unwrap_or("params")
        .to_owned();
    if !data.get("errors").is_some_and(Value::is_array) {
        let reason = match data.get("reason").and_then(Value::as_str) {
            Some(reason) => reason.to_owned(),
            None => {
                let message = error.message.as_str();
                let message = message.strip_prefix("Invalid params: ").unwrap_or(message);
                message
                    .strip_prefix(field.as_str())
                    .and_then(|rest| rest.strip_prefix(": "))
                    .unwrap_or(message)
                    .to_owned()
            }
        };
        data.insert(
            "errors".to_owned(),
            json!([{ "field": field, "reason": reason }]),
        );
    }
    data.insert("field".to_owned(), Value::String(field));
    error.with_data(Value::Object(data))
}

/// The problems `T`'s JSON Schema finds in `instance` (none when the schema accepts it or cannot
/// be compiled).
pub fn schema_problems<T: JsonSchema + 'static>(instance: &Value) -> Vec<Problem> {
    match validator_of::<T>() {
        Some(compiled) => problems_with(&compiled, instance),
        None => Vec::new(),
    }
}

/// The problems a hand-read method's documented params schema (its [`crate::openrpc::MethodDoc`])
/// finds in `instance`, the schema compiled once per method; none when it accepts them or
/// cannot be compiled.
pub fn doc_problems(doc: &crate::openrpc::MethodDoc, instance: &Value) -> Vec<Problem> {
    type Cache = Mutex<HashMap<&'static str, Option<Arc<(jsonschema::Validator, Value)>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Cache::default);
    let cached = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(doc.name)
        .cloned();
    let compiled = cached.unwrap_or_else(|| {
        let mut generator = schemars::generate::SchemaSettings::draft07().into_generator();
        let compiled = compile((doc.params)(&mut generator).to_value());
        cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(doc.name, compiled.clone());
        compiled
    });
    compiled.map_or_else(Vec::new, |c| problems_with(&c, instance))
}

/// A −32602 (or −32008, a trajectory refused by its checks) of a hand-read method made to list
/// every problem at once: its own problem first, then those `doc`'s params schema finds on other
/// fields ([`doc_problems`]); the code stays. Other errors, and params the schema accepts, are
/// returned unchanged.
#[must_use]
pub fn with_every_problem(
    doc: &crate::openrpc::MethodDoc,
    params: &Value,
    error: RpcError,
) -> RpcError {
    let code = error.code;
    if code != RpcCode::INVALID_PARAMS && code != RpcCode::TRAJECTORY_REJECTED {
        return error;
    }
    let more = doc_problems(doc, params);
    if more.is_empty() {
        return error;
    }
    let own = complete(RpcError {
        code: RpcCode::INVALID_PARAMS,
        ..error
    });
    let data = own.data.unwrap_or(Value::Null);
    let first: Vec<Problem> = data["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some(Problem {
                field: e["field"].as_str()?.to_owned(),
                reason: e["reason"].as_str()?.to_owned(),
                allowed: e.get("allowed").cloned(),
            })
        })
        .collect();
    let mut all = first.clone();
    all.extend(
        more.into_iter()
            .filter(|p| first.iter().all(|f| f.field != p.field)),
    );
    let mut merged = problems_error(&all);
    if let (Some(Value::Object(m)), Value::Object(old)) = (merged.data.as_mut(), data) {
        for (k, v) in old {
            m.entry(k).or_insert(v);
        }
    }
    if code == RpcCode::TRAJECTORY_REJECTED {
        let detail = merged
            .message
            .strip_prefix("Invalid params: ")
            .unwrap_or(&merged.message)
            .to_owned();
        merged.code = code;
        merged.message = format!("{}: {detail}", code.default_message());
    }
    merged
}

/// [`with_every_problem`] for `method`, looked up in `docs` (the error unchanged when `docs` do
/// not describe it).
#[must_use]
pub fn with_every_problem_of(
    docs: &[crate::openrpc::MethodDoc],
    method: &str,
    params: &Value,
    error: RpcError,
) -> RpcError {
    match docs.iter().find(|d| d.name == method) {
        Some(doc) => with_every_problem(doc, params, error),
        None => error,
    }
}

/// The problems `compiled` (a validator and its schema) finds in `instance`.
fn problems_with(compiled: &(jsonschema::Validator, Value), instance: &Value) -> Vec<Problem> {
    let (validator, schema) = compiled;
    validator
        .iter_errors(instance)
        .take(MAX_PROBLEMS)
        .map(|error| {
            let mut field = field_path(error.instance_path().as_str());
            if let jsonschema::error::ValidationErrorKind::Required { property } = error.kind() {
                let name = property.as_str().unwrap_or_default();
                field = if field.is_empty() {
                    name.to_owned()
                } else {
                    format!("{field}.{name}")
                };
            }
            if field.is_empty() {
                field = "params".to_owned();
            }
            // The subschema that refused the value: its set, when it has one.
            let keyword_at = error.schema_path().as_str();
            let at = keyword_at.rsplit_once('/').map_or("", |(at, _)| at);
            let allowed = schema
                .pointer(at)
                .and_then(|node| allowed_values(schema, node, 0));
            let reason = match (error.kind(), &allowed) {
                (jsonschema::error::ValidationErrorKind::Required { .. }, _) => {
                    "required".to_owned()
                }
                (_, Some(_)) => "not one of the allowed values".to_owned(),
                (_, None) => error.masked().to_string(),
            };
            Problem {
                field,
                reason,
                allowed,
            }
        })
        .collect()
}

/// The values `node` allows when it is a set: an `enum`, or `oneOf`/`anyOf` branches that are
/// `const`s or sets themselves (`null` branches aside), through `$ref`s into `root`.
fn allowed_values(root: &Value, node: &Value, depth: usize) -> Option<Value> {
    if depth > 8 {
        return None;
    }
    if let Some(values) = node.get("enum") {
        return Some(values.clone());
    }
    if let Some(target) = node.get("$ref").and_then(Value::as_str) {
        let target = root.pointer(target.strip_prefix('#')?)?;
        return allowed_values(root, target, depth + 1);
    }
    let branches = node
        .get("oneOf")
        .or_else(|| node.get("anyOf"))
        .and_then(Value::as_array)?;
    let mut values = Vec::new();
    for branch in branches {
        if branch.get("type") == Some(&Value::from("null")) {
            continue;
        }
        match branch.get("const") {
            Some(c) => values.push(c.clone()),
            None => match allowed_values(root, branch, depth + 1)? {
                Value::Array(more) => values.extend(more),
                _ => return None,
            },
        }
    }
    (!values.is_empty()).then_some(Value::Array(values))
}

/// `T`'s compiled schema and the schema itself, compiled once per type.
fn validator_of<T: JsonSchema + 'static>() -> Option<Arc<(jsonschema::Validator, Value)>> {
    type Cache = Mutex<HashMap<TypeId, Option<Arc<(jsonschema::Validator, Value)>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Cache::default);
    let key = TypeId::of::<T>();
    if let Some(v) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return v.clone();
    }
    let compiled = compile(
        schemars::generate::SchemaSettings::draft07()
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value(),
    );
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, compiled.clone());
    compiled
}

/// `schema` compiled, with the schema kept beside it; `None` when it does not compile.
fn compile(schema: Value) -> Option<Arc<(jsonschema::Validator, Value)>> {
    jsonschema::validator_for(&schema)
        .ok()
        .map(|validator| Arc::new((validator, schema)))
}

/// A JSON pointer (`/steps/2/action`) as a field path (`steps[2].action`).
fn field_path(pointer: &str) -> String {
    let mut out = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(&segment);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&segment);
        }
    }
    out
}

/// The field name in serde's "missing field `x`" message.
fn missing_field_name(reason: &str) -> Option<String> {
    let rest = reason.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_owned())
}

/// Checks a text param: not blank, at most `max` bytes; else −32602 naming `field`.
pub(crate) fn text(value: &str, field: &str, max: usize) -> Result<(), RpcError> {
    if value.trim().is_empty() {
        return Err(invalid_params(
            format!("{field}: must not be blank"),
            Some(field),
        ));
    }
    if value.len() > max {
        return Err(invalid_params(
            format!("{field}: {} bytes, at most {max}", value.len()),
            Some(field),
        ));
    }
    Ok(())
}

/// −32602 with message "Invalid params: {detail}" and `data: {field, errors: [{field,
/// reason}]}` (`field` is `params` when none is known).
pub(crate) fn invalid_params(detail: impl AsRef<str>, field: Option<&str>) -> RpcError {
    let detail = detail.as_ref();
    let field = field.unwrap_or("params");
    let reason = detail
        .strip_prefix(field)
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(detail);
    RpcError::invalid_params()
        .with_message(format!("Invalid params: {detail}"))
        .with_data(json!({
            "field": field,
            "errors": [{ "field": field, "reason": reason }],
        }))
}

/// −32602 for a `value` of `field` outside its set: the problem lists the `allowed` values.
pub(crate) fn invalid_choice(field: &str, value: &str, allowed: &[&str]) -> RpcError {
    problems_error(&[Problem {
        field: field.to_owned(),
        reason: format!("{value:?} is not one of {}", allowed.join(", ")),
        allowed: Some(allowed.iter().copied().map(Value::from).collect()),
    }])
}

/// −32602 when `text` is longer than `max` bytes.
pub(crate) fn check_len(field: &str, text: &str, max: usize) -> Result<(), RpcError> {
    if text.len() > max {
        return Err(invalid_params(
            format!("{field}: longer than {max} bytes"),
            Some(field),
        ));
    }
    Ok(())
}

/// Serializes a result; the result types cannot fail, but a failure is −32603, not a panic.
pub(crate) fn to_result<T: Serialize>(value: &T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|_| RpcError::internal_error())
}

/// −32003 "Rate Limited" for a full store.
pub(crate) fn capacity_error(what: &str, limit: usize) -> RpcError {
    RpcError::from_code(RpcCode::RATE_LIMITED).with_data(json!({
        "reason": format!("too many {what}"),
        "limit": limit,
    }))
}

/// The number of bytes of `value`'s compact JSON text.
pub(crate) fn json_len(value: &Value) -> usize {
    struct Counter(usize);
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a Value to an infallible writer cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    /// A colour with a fixed set of names.
    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Colour {
        Red,
        Blue,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Sample {
        name: String,
        count: u32,
        colour: Colour,
        tags: Vec<String>,
        #[serde(default)]
        note: Option<String>,
        #[serde(default)]
        shade: Option<Colour>,
    }

    fn problems(params: &Value) -> Value {
        let error = parse_params::<Sample>(params, &["name", "count", "colour", "tags"])
            .expect_err("invalid params");
        assert_eq!(error.code, RpcCode::INVALID_PARAMS);
        error.data.unwrap_or_default()
    }

    /// The fields of `data.errors`, in order.
    fn fields(data: &Value) -> Vec<&str> {
        let errors = data["errors"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        errors.iter().filter_map(|e| e["field"].as_str()).collect()
    }

    #[test]
    fn every_missing_required_field_is_listed_at_once() {
        let data = problems(&json!({}));
        let fields = fields(&data);
        assert_eq!(fields, ["name", "count", "colour", "tags"]);
        assert_eq!(data["field"], "name");
        assert!(
            data["errors"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["reason"] == "required")
        );
    }

    #[test]
    fn wrong_types_and_values_outside_a_set_are_listed_with_what_is_allowed() {
        let data = problems(&json!({
            "name": 7, "count": "many", "colour": "green", "tags": ["a", 2], "note": null,
            "shade": "pink"
        }));
        let errors = data["errors"].as_array().unwrap();
        let by_field = |f: &str| errors.iter().find(|e| e["field"] == f).cloned();
        assert_eq!(errors.len(), 5, "{data}");
        assert_eq!(
            by_field("shade").unwrap()["allowed"],
            json!(["red", "blue"])
        );
        assert!(
            by_field("name").unwrap()["reason"]
                .as_str()
                .unwrap()
                .contains("string")
        );
        assert!(by_field("count").is_some());
        assert_eq!(
            by_field("colour").unwrap()["allowed"],
            json!(["red", "blue"])
        );
        assert!(by_field("tags[1]").is_some(), "{data}");
        assert_eq!(data["field"], errors[0]["field"]);
    }

    #[test]
    fn positional_params_are_checked_by_name() {
        let data = problems(&json!(["n", -1]));
        let fields = fields(&data);
        assert_eq!(fields.len(), 3, "{data}");
        assert!(
            fields.contains(&"count") && fields.contains(&"colour") && fields.contains(&"tags")
        );
    }

    #[test]
    fn other_errors_name_a_field_and_list_it() {
        let error = invalid_params("toolId: no such tool", Some("toolId"));
        assert_eq!(
            error.data,
            Some(
                json!({"field": "toolId", "errors": [{"field": "toolId", "reason": "no such tool"}]})
            )
        );
        let error = parse_params::<Sample>(&json!("x"), &[]).expect_err("not an object");
        assert_eq!(error.data.unwrap()["field"], "params");
    }

    #[test]
    fn every_invalid_params_error_is_completed_with_a_field_and_errors() {
        let e = complete(
            RpcError::invalid_params()
                .with_message("no playbook x")
                .with_data(json!({"reason": "not-found", "field": "playbookId"})),
        );
        assert_eq!(
            e.data,
            Some(json!({"reason": "not-found", "field": "playbookId",
                "errors": [{"field": "playbookId", "reason": "not-found"}]}))
        );
        let e = complete(RpcError::invalid_params().with_message("card record refused"));
        assert_eq!(
            e.data,
            Some(
                json!({"field": "params", "errors": [{"field": "params", "reason": "card record refused"}]})
            )
        );
        let listed = invalid_params("toolId: no such tool", Some("toolId"));
        assert_eq!(complete(listed.clone()), listed);
        let other = RpcError::from_code(RpcCode::SESSION_NOT_FOUND);
        assert_eq!(complete(other.clone()), other);
    }

    #[test]
    fn a_value_outside_a_set_lists_the_allowed_ones() {
        let e = invalid_choice("mode", "fast", &["online", "offline"]);
        assert_eq!(
            e.message,
            "Invalid params: mode: \"fast\" is not one of online, offline"
        );
        assert_eq!(
            e.data,
            Some(json!({"field": "mode", "errors": [{
                "field": "mode",
                "reason": "\"fast\" is not one of online, offline",
                "allowed": ["online", "offline"]
            }]}))
        );
    }

    #[test]
    fn pointers_become_field_paths() {
        assert_eq!(field_path(""), "");
        assert_eq!(field_path("/steps/2/action"), "steps[2].action");
        assert_eq!(field_path("/a~1b/c~0d"), "a/b.c~d");
    }
}
