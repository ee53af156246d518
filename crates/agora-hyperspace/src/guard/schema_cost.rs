//! What `guard.validate(data, schema)` (spec §4.2 "Guard Primitive") may be asked to do: the
//! limits checked before a schema is compiled, and an upper bound of the work its validation of
//! `data` can take.
//!
//! This module owns [`ValidateLimits`], [`SchemaLimitError`] and [`check`]; the limits table and
//! the reasoning behind each default are in the [`crate::guard`] module docs.
//!
//! # Why a bound
//!
//! `jsonschema` validates by walking the schema: every `$ref`, `anyOf`, `allOf`, … applies a
//! subschema to the same part of the data, and every `properties`, `items`, … to a part of it.
//! Nothing stops a 1.5 KB schema from applying 2²² subschemas: `a1 = anyOf[a0, a0]`,
//! `a2 = anyOf[a1, a1]`, …, `a22`. Collecting the errors of such a validation keeps every
//! branch's errors (an `anyOf` error holds them all), so it costs time *and* memory in proportion.
//!
//! # The bound
//!
//! [`check`] computes, without compiling or validating, an upper bound of the steps a validation
//! of `data` against `schema` takes, by a memoized walk over pairs (subschema, part of the data):
//!
//! - `V(s, d)`, the steps of `is_valid`: one per keyword of `s`, plus the keyword's own work on
//!   `d` (a `pattern` or `format` reads the string, `enum` and `const` compare, `uniqueItems`
//!   hashes, `properties` and `items` iterate), plus `V` of every subschema applied to `d` (`$ref`,
//!   `allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`, `dependentSchemas`) and to its
//!   parts (`properties`, `patternProperties`, `additionalProperties`, `propertyNames`, `items`,
//!   `prefixItems`, `additionalItems`, `contains`, `unevaluated*`). Every branch counts, as if
//!   nothing short-circuited. `unevaluatedProperties`/`unevaluatedItems` also pay for finding
//!   what the in-place subschemas evaluated: twice their `E`.
//! - `E(s, d) = V(s, d) + 32 · keywords(s) + Σ E(child)`: collecting the errors, where every
//!   `anyOf`/`oneOf`/`not`/`if` first asks `is_valid` of its subtree and then collects from its
//!   branches, and every keyword may build an error (some 400 bytes: 32 steps' worth).
//!
//! The walk memoizes each pair, so it costs one step per distinct pair however often a pair is
//! reached, and it stops as soon as any pair's `E` exceeds [`ValidateLimits::max_cost`]. It also
//! bounds the nesting: the longest chain of subschemas applied within each other (which is how
//! deep `jsonschema` recurses, so how much stack it needs).
//!
//! Compiling is bounded by the sizes, with one exception: `jsonschema` compiles
//! `unevaluatedProperties` and `unevaluatedItems` by walking every subschema they reach in place,
//! once per path, whatever the data. [`check`] counts that walk the same way and bounds it
//! ([`ValidateLimits::max_unevaluated_walk`]).
//!
//! References are resolved with the registry `jsonschema` itself uses, so `$ref` means the same
//! here as in the validator. A `$dynamicRef` or `$recursiveRef` may resolve to any schema carrying
//! its anchor, depending on the path taken; the bound takes the most expensive candidate. A
//! reference that leaves the submitted schema (a meta-schema, say) is refused: the bound cannot be
//! computed for it, and `guard.validate` is offline anyway. A loop of references that applies to
//! the same data forever (`a = allOf[b]`, `b = allOf[a]`) is refused: JSON Schema leaves its
//! behaviour undefined.

use std::io;
use std::sync::Arc;

use jsonschema::{Draft, Registry, Uri};
// The walk's keys are addresses and small integers that no attacker chooses beyond the shape of
// an input whose size is bounded: a fast, unkeyed hash is enough.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde_json::{Map, Value, json};

use crate::jsonrpc::RpcError;

/// The default `$id` base `jsonschema` gives a schema without one.
const DEFAULT_BASE: &str = "json-schema:///";

/// Steps charged per keyword when errors are collected: building one error (its paths, its
/// message's parts) takes about as much time and memory (some 400 bytes) as 32 subschema visits.
const ERROR_STEPS: u64 = 32;

/// Limits of `guard.validate` (see the table in the [`crate::guard::validate`](mod@crate::guard::validate)
/// module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidateLimits {
    /// Bytes of `schema`, serialized compactly.
    pub max_schema_bytes: usize,
    /// Nesting of arrays and objects in `schema`.
    pub max_schema_depth: usize,
    /// Subschemas (objects and booleans in schema positions).
    pub max_subschemas: usize,
    /// `$ref`, `$dynamicRef` and `$recursiveRef` keywords.
    pub max_refs: usize,
    /// `pattern` keywords plus `patternProperties` keys.
    pub max_patterns: usize,
    /// Bytes of one pattern.
    pub max_pattern_bytes: usize,
    /// Size of one compiled regular expression (the `regex` crate's `size_limit`), bytes.
    pub max_regex_bytes: usize,
    /// Lazy DFA cache of one regular expression (the `regex` crate's `dfa_size_limit`), bytes.
    pub max_regex_cache_bytes: usize,
    /// Bytes of `data`, serialized compactly.
    pub max_data_bytes: usize,
    /// Nesting of arrays and objects in `data`.
    pub max_data_depth: usize,
    /// Subschemas applied within each other during the validation.
    pub max_nesting: usize,
    /// Subschemas `jsonschema` walks to compile the `unevaluatedProperties` and
    /// `unevaluatedItems` keywords, all together (see [`SchemaLimitError::Unevaluated`]).
    pub max_unevaluated_walk: usize,
    /// Steps of the validation and of collecting its errors (see the module docs).
    pub max_cost: u64,
    /// Errors reported.
    pub max_errors: usize,
    /// Bytes of one reported error field (`message`, `instancePath`, `schemaPath`).
    pub max_error_field_bytes: usize,
    /// Bytes of all reported errors together.
    pub max_errors_bytes: usize,
}

impl Default for ValidateLimits {
    fn default() -> Self {
        Self {
            max_schema_bytes: 64 * 1024,
            max_schema_depth: 64,
            max_subschemas: 2048,
            max_refs: 512,
            max_patterns: 128,
            max_pattern_bytes: 1024,
            max_regex_bytes: 256 * 1024,
            max_regex_cache_bytes: 256 * 1024,
            max_data_bytes: 512 * 1024,
            max_data_depth: 64,
            max_nesting: 512,
            max_unevaluated_walk: 2048,
            max_cost: 10_000_000,
            max_errors: 32,
            max_error_field_bytes: 256,
            max_errors_bytes: 16 * 1024,
        }
    }
}

/// Why a `guard.validate` call is refused before validating; every one is −32602.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaLimitError {
    /// `schema` is too large.
    #[error("schema: larger than {max} bytes")]
    SchemaBytes {
        /// The limit.
        max: usize,
    },
    /// `schema` is nested too deeply.
    #[error("schema: nested deeper than {max} levels")]
    SchemaDepth {
        /// The limit.
        max: usize,
    },
    /// `schema` has too many subschemas.
    #[error("schema: more than {max} subschemas")]
    Subschemas {
        /// The limit.
        max: usize,
    },
    /// `schema` has too many references.
    #[error("schema: more than {max} references ($ref, $dynamicRef, $recursiveRef)")]
    Refs {
        /// The limit.
        max: usize,
    },
    /// `schema` has too many patterns.
    #[error("schema: more than {max} patterns (pattern, patternProperties)")]
    Patterns {
        /// The limit.
        max: usize,
    },
    /// One pattern is too long.
    #[error("schema: the pattern at {at} is longer than {max} bytes")]
    PatternBytes {
        /// JSON Pointer to the pattern in `schema`.
        at: String,
        /// The limit.
        max: usize,
    },
    /// `data` is too large.
    #[error("data: larger than {max} bytes")]
    DataBytes {
        /// The limit.
        max: usize,
    },
    /// `data` is nested too deeply.
    #[error("data: nested deeper than {max} levels")]
    DataDepth {
        /// The limit.
        max: usize,
    },
    /// A reference cannot be followed within `schema`.
    #[error("schema: cannot follow {reference} within the schema: {reason}")]
    Unresolvable {
        /// The reference (shortened).
        reference: String,
        /// Why.
        reason: String,
    },
    /// References loop without moving into the data.
    #[error("schema: {reference} leads back to itself without moving into the data")]
    Cycle {
        /// The reference or applicator (shortened).
        reference: String,
    },
    /// Compiling `unevaluatedProperties`/`unevaluatedItems` would walk too many subschemas:
    /// `jsonschema` walks every subschema applied in place (through `$ref`, `allOf`, `anyOf`,
    /// `oneOf`, `if`/`then`/`else`, `dependentSchemas`) once per path to it, whatever the data.
    #[error(
        "schema: compiling unevaluatedProperties/unevaluatedItems would walk more than {max} subschemas (each subschema they reach in place, once per path to it)"
    )]
    Unevaluated {
        /// The limit.
        max: usize,
    },
    /// Subschemas would nest too deeply.
    #[error(
        "schema: validating this data would apply subschemas within each other more than {max} deep"
    )]
    Nesting {
        /// The limit.
        max: usize,
    },
    /// The validation could take too many steps.
    #[error(
        "schema: validating this data could take more than {max} steps (every subschema applied to every part of the data, through $ref, anyOf and the other applicators)"
    )]
    Cost {
        /// The limit.
        max: u64,
    },
}

impl SchemaLimitError {
    /// The params member at fault: `"schema"` or `"data"`.
    #[must_use]
    pub fn field(&self) -> &'static str {
        match self {
            Self::DataBytes { .. } | Self::DataDepth { .. } => "data",
            _ => "schema",
        }
    }

    /// The name of the limit (`data.limit` of the error); `None` for a schema that is refused
    /// because it is unusable, not because it is too large.
    #[must_use]
    pub fn limit(&self) -> Option<&'static str> {
        Some(match self {
            Self::SchemaBytes { .. } => "schemaBytes",
            Self::SchemaDepth { .. } => "schemaDepth",
            Self::Subschemas { .. } => "subschemas",
            Self::Refs { .. } => "refs",
            Self::Patterns { .. } => "patterns",
            Self::PatternBytes { .. } => "patternBytes",
            Self::DataBytes { .. } => "dataBytes",
            Self::DataDepth { .. } => "dataDepth",
            Self::Nesting { .. } => "nesting",
            Self::Unevaluated { .. } => "unevaluatedWalk",
            Self::Cost { .. } => "steps",
            Self::Unresolvable { .. } | Self::Cycle { .. } => return None,
        })
    }

    /// The limit's value, when it has one.
    #[must_use]
    pub fn max(&self) -> Option<u64> {
        let max = match self {
            Self::SchemaBytes { max }
            | Self::SchemaDepth { max }
            | Self::Subschemas { max }
            | Self::Refs { max }
            | Self::Patterns { max }
            | Self::PatternBytes { max, .. }
            | Self::DataBytes { max }
            | Self::DataDepth { max }
            | Self::Nesting { max }
            | Self::Unevaluated { max } => *max as u64,
            Self::Cost { max } => *max,
            Self::Unresolvable { .. } | Self::Cycle { .. } => return None,
        };
        Some(max)
    }
}

impl From<SchemaLimitError> for RpcError {
    /// −32602 "Invalid params: …" with `data: {field, limit?, max?}`.
    fn from(error: SchemaLimitError) -> Self {
        let mut data = json!({ "field": error.field() });
        if let Some(obj) = data.as_object_mut() {
            if let Some(limit) = error.limit() {
                obj.insert("limit".into(), Value::from(limit));
            }
            if let Some(max) = error.max() {
                obj.insert("max".into(), Value::from(max));
            }
        }
        Self::invalid_params()
            .with_message(format!("Invalid params: {error}"))
            .with_data(data)
    }
}

/// What [`check`] found out about an accepted schema and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Upper bound of the steps of `is_valid` (`V` of the module docs).
    pub validate_steps: u64,
    /// Upper bound of the steps of validating and collecting every error (`E`).
    pub total_steps: u64,
    /// The longest chain of subschemas applied within each other.
    pub nesting: usize,
    /// Pairs (subschema, part of the data) the bound looked at.
    pub pairs: usize,
}

/// Checks `data` and `schema` against `limits` before `schema` is compiled: sizes, nesting,
/// counts, patterns, references, and the bound of the validation's work (module docs).
///
/// # Errors
///
/// The first limit exceeded.
pub fn check(
    data: &Value,
    schema: &Value,
    limits: &ValidateLimits,
) -> Result<Estimate, SchemaLimitError> {
    if serialized_len(data, limits.max_data_bytes).is_none() {
        return Err(SchemaLimitError::DataBytes {
            max: limits.max_data_bytes,
        });
    }
    if !depth_within(data, limits.max_data_depth) {
        return Err(SchemaLimitError::DataDepth {
            max: limits.max_data_depth,
        });
    }
    if serialized_len(schema, limits.max_schema_bytes).is_none() {
        return Err(SchemaLimitError::SchemaBytes {
            max: limits.max_schema_bytes,
        });
    }
    if !depth_within(schema, limits.max_schema_depth) {
        return Err(SchemaLimitError::SchemaDepth {
            max: limits.max_schema_depth,
        });
    }
    let draft = Draft::default().detect(schema);
    let root_base = draft
        .create_resource_ref(schema)
        .id()
        .unwrap_or(DEFAULT_BASE)
        .to_owned();
    let registry = Registry::new()
        .draft(draft)
        .add(&root_base, schema)
        .and_then(jsonschema::RegistryBuilder::prepare)
        .map_err(|error| SchemaLimitError::Unresolvable {
            reference: shorten(&root_base),
            reason: shorten(&error.to_string()),
        })?;
    let root_uri = jsonschema::uri::from_str(root_base.trim_end_matches('#')).map_err(|error| {
        SchemaLimitError::Unresolvable {
            reference: shorten(&root_base),
            reason: shorten(&error.to_string()),
        }
    })?;
    let mut walk = Walk::new(&registry, schema, limits);
    let root_base = walk.intern(Arc::new(root_uri));
    walk.index(schema, root_base, draft, "")?;
    walk.unevaluated_walk(schema, root_base, draft)?;
    walk.estimate(Pair {
        schema,
        data: Part::Value(data),
        base: root_base,
        draft,
    })
}

// ---------------------------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------------------------

/// Counts bytes written and fails once more than `max` are.
struct Counter {
    written: usize,
    max: usize,
}

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.written = self.written.saturating_add(buf.len());
        if self.written > self.max {
            return Err(io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The compact JSON length of `value`, or `None` when it is more than `max` (found without
/// writing more than `max + 1` bytes' worth).
#[must_use]
pub fn serialized_len(value: &Value, max: usize) -> Option<usize> {
    let mut counter = Counter { written: 0, max };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.written)
}

/// Whether arrays and objects nest at most `max` deep in `value` (a scalar is depth 0).
#[must_use]
pub fn depth_within(value: &Value, max: usize) -> bool {
    let children: Box<dyn Iterator<Item = &Value>> = match value {
        Value::Array(items) => Box::new(items.iter()),
        Value::Object(members) => Box::new(members.values()),
        _ => return true,
    };
    max > 0
        && children
            .into_iter()
            .all(|child| depth_within(child, max - 1))
}

/// `text` cut to at most 120 bytes (at a character boundary), for messages.
fn shorten(text: &str) -> String {
    const MAX: usize = 120;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Appends a JSON Pointer segment (`~` → `~0`, `/` → `~1`).
fn pointer_push(pointer: &str, segment: &str) -> String {
    format!(
        "{pointer}/{}",
        segment.replace('~', "~0").replace('/', "~1")
    )
}

// ---------------------------------------------------------------------------------------------
// The walk
// ---------------------------------------------------------------------------------------------

/// A part of the data: a JSON value, or an object key (what `propertyNames` applies to).
#[derive(Debug, Clone, Copy)]
enum Part<'a> {
    Value(&'a Value),
    Key(&'a str),
}

impl Part<'_> {
    /// Identity of the part: its address and kind. Keys with the same address are empty
    /// strings, which cost the same.
    fn id(self) -> (usize, u8) {
        match self {
            Self::Value(value) => (std::ptr::from_ref(value) as usize, 0),
            Self::Key(key) => (key.as_ptr() as usize, 1),
        }
    }
}

/// A subschema applied to a part of the data, with the base URI and draft it is read in (the
/// subschema's own `$id` already applied).
#[derive(Debug, Clone, Copy)]
struct Pair<'a> {
    schema: &'a Value,
    data: Part<'a>,
    base: u32,
    draft: Draft,
}

type PairKey = (usize, usize, u8, u32, Draft);

impl Pair<'_> {
    fn key(&self) -> PairKey {
        let (data, kind) = self.data.id();
        (
            std::ptr::from_ref(self.schema) as usize,
            data,
            kind,
            self.base,
            self.draft,
        )
    }
}

/// The bound of one pair (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    /// `V`.
    validate: u64,
    /// `E`.
    total: u64,
    /// Subschemas in the longest chain starting here.
    height: usize,
}

impl Cost {
    fn add(&mut self, other: Self) {
        self.validate = self.validate.saturating_add(other.validate);
        self.total = self.total.saturating_add(other.total);
        self.height = self.height.max(other.height);
    }

    fn max(&mut self, other: Self) {
        self.validate = self.validate.max(other.validate);
        self.total = self.total.max(other.total);
        self.height = self.height.max(other.height);
    }
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Open,
    Done(Cost),
}

/// Subschemas applied by one keyword: to the same part of the data (`in_place`) or to its parts;
/// `any` means only one of them is applied (a dynamic reference's candidates).
#[derive(Debug)]
struct Group<'a> {
    pairs: Vec<Pair<'a>>,
    in_place: bool,
    any: bool,
    /// The keyword or reference, for messages.
    label: &'a str,
}

#[derive(Debug)]
struct Frame<'a> {
    key: PairKey,
    local: u64,
    /// Keywords of the schema: each may build an error when errors are collected.
    keywords: u64,
    unevaluated: bool,
    groups: Vec<Group<'a>>,
    group: usize,
    pair: usize,
    /// The current group's combined cost.
    acc: Cost,
    /// Everything below, summed.
    below: Cost,
    /// `E` of the in-place subschemas (what `unevaluated*` walks again).
    in_place_total: u64,
}

/// A schema with the base URI and draft it is read in.
type Anchored<'a> = (&'a Value, u32, Draft);

/// What a schema object costs whatever the data (see [`Walk::local_steps`]).
#[derive(Debug, Default)]
struct Info<'a> {
    keywords: u64,
    /// One per keyword and the visit, plus comparing `const`/`enum`/`required` values.
    fixed: u64,
    /// Keywords that read a string, and their steps per 16 bytes together.
    string_keywords: u64,
    string_per_16: u64,
    /// Keywords that iterate an object's members or an array's items.
    iterating: u64,
    unique: bool,
    /// `patternProperties` patterns.
    patterns: u64,
    unevaluated: bool,
    /// The applicator keywords (references included), with their values.
    applicators: Vec<(&'static str, &'a Value)>,
}

/// Keywords whose value is one subschema.
const SINGLE: [&str; 11] = [
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas.
const LISTS: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];
/// Keywords whose value is an object of subschemas.
const MAPS: [&str; 6] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];
/// Keywords that read a whole string, and their steps per 16 bytes of it (a step is some 10 ns;
/// measured worst cases: a `pattern` under the size limits 45 ns a byte, the `regex` format
/// 30 ns a byte, counting characters 1 ns a byte).
const STRING_KEYWORDS: [(&str, u64); 6] = [
    ("pattern", 64),
    ("format", 48),
    ("contentEncoding", 4),
    ("contentMediaType", 4),
    ("minLength", 1),
    ("maxLength", 1),
];
/// Keywords that iterate an object's members or an array's items.
const ITERATING: [&str; 12] = [
    "properties",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "dependentSchemas",
    "dependentRequired",
    "dependencies",
    "items",
    "prefixItems",
    "additionalItems",
    "unevaluatedItems",
    "contains",
];

/// Nodes of `value` plus a sixteenth of its string bytes: what comparing or hashing it reads.
fn scan(value: &Value) -> u64 {
    match value {
        Value::String(text) => 1 + text.len() as u64 / 16,
        Value::Array(items) => items.iter().map(scan).fold(1, u64::saturating_add),
        Value::Object(members) => members
            .iter()
            .map(|(key, value)| (1 + key.len() as u64 / 16).saturating_add(scan(value)))
            .fold(1, u64::saturating_add),
        _ => 1,
    }
}

/// Every object in `value` that holds `unevaluatedProperties` or `unevaluatedItems`.
fn collect_unevaluated<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| collect_unevaluated(item, out)),
        Value::Object(members) => {
            if members.contains_key("unevaluatedProperties")
                || members.contains_key("unevaluatedItems")
            {
                out.push(value);
            }
            members
                .values()
                .for_each(|member| collect_unevaluated(member, out));
        }
        _ => {}
    }
}

fn collect_addresses(value: &Value, out: &mut HashSet<usize>) {
    out.insert(std::ptr::from_ref(value) as usize);
    match value {
        Value::Array(items) => items.iter().for_each(|item| collect_addresses(item, out)),
        Value::Object(members) => members
            .values()
            .for_each(|member| collect_addresses(member, out)),
        _ => {}
    }
}

/// Whether `keyword` applies subschemas (a reference or an applicator).
fn is_applicator(keyword: &str) -> bool {
    APPLICATORS.contains(&keyword)
}

/// The static name of an applicator keyword (labels live as long as the schema or forever).
fn static_keyword(keyword: &str) -> &'static str {
    APPLICATORS
        .into_iter()
        .find(|name| *name == keyword)
        .unwrap_or("contains")
}

/// Every keyword that applies subschemas, references included.
const APPLICATORS: [&str; 22] = [
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
    "properties",
    "patternProperties",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "items",
    "prefixItems",
    "additionalItems",
    "unevaluatedItems",
    "contains",
];

struct Walk<'r, 'l> {
    registry: &'r Registry<'r>,
    limits: &'l ValidateLimits,
    /// Addresses of every value inside the submitted schema.
    inside: HashSet<usize>,
    bases: Vec<Arc<Uri<String>>>,
    base_ids: HashMap<String, u32>,
    /// The base and draft of a subschema, by (subschema, parent's base, parent's draft).
    entered: HashMap<(usize, u32, Draft), (u32, Draft)>,
    /// Where references lead, by (schema object, keyword, base).
    resolved: HashMap<(usize, &'static str, u32), Arc<[Anchored<'r>]>>,
    /// What each schema object costs whatever the data, and the index by address.
    infos: Vec<Info<'r>>,
    info_ids: HashMap<usize, usize>,
    /// `$dynamicAnchor` schemas by name.
    dynamic: HashMap<&'r str, Vec<Anchored<'r>>>,
    /// `$recursiveAnchor: true` schemas.
    recursive: Vec<Anchored<'r>>,
    subschemas: usize,
    refs: usize,
    patterns: usize,
    /// The base and draft of every schema object [`Walk::index`] reached, by address.
    indexed: HashMap<usize, (u32, Draft)>,
    memo: HashMap<PairKey, Slot>,
    /// [`scan`] of data values (for `uniqueItems`), by address.
    scans: HashMap<usize, u64>,
}

impl<'r, 'l> Walk<'r, 'l> {
    fn new(registry: &'r Registry<'r>, schema: &'r Value, limits: &'l ValidateLimits) -> Self {
        let mut inside = HashSet::default();
        collect_addresses(schema, &mut inside);
        Self {
            registry,
            limits,
            inside,
            bases: Vec::new(),
            base_ids: HashMap::default(),
            entered: HashMap::default(),
            resolved: HashMap::default(),
            infos: Vec::new(),
            info_ids: HashMap::default(),
            dynamic: HashMap::default(),
            recursive: Vec::new(),
            subschemas: 0,
            refs: 0,
            patterns: 0,
            indexed: HashMap::default(),
            memo: HashMap::default(),
            scans: HashMap::default(),
        }
    }

    fn intern(&mut self, uri: Arc<Uri<String>>) -> u32 {
        if let Some(&id) = self.base_ids.get(uri.as_str()) {
            return id;
        }
        let id = u32::try_from(self.bases.len()).unwrap_or(u32::MAX);
        self.base_ids.insert(uri.as_str().to_owned(), id);
        self.bases.push(uri);
        id
    }

    /// The base URI and draft `schema` is read in, given its parent's: its own `$schema` and
    /// `$id` (or `id` in draft 4) apply, as in `jsonschema`'s compiler.
    fn enter(
        &mut self,
        schema: &Value,
        base: u32,
        draft: Draft,
    ) -> Result<(u32, Draft), SchemaLimitError> {
        let key = (std::ptr::from_ref(schema) as usize, base, draft);
        if let Some(&known) = self.entered.get(&key) {
            return Ok(known);
        }
        let draft_here = draft.detect(schema);
        let mut entered = (base, draft_here);
        if let Some(id) = draft_here.create_resource_ref(schema).id()
            && let Some(parent) = self.bases.get(base as usize).cloned()
        {
            let uri = self
                .registry
                .resolve_uri(&parent.borrow(), id)
                .map_err(|error| SchemaLimitError::Unresolvable {
                    reference: shorten(id),
                    reason: shorten(&error.to_string()),
                })?;
            entered.0 = self.intern(uri);
        }
        self.entered.insert(key, entered);
        Ok(entered)
    }

    // -----------------------------------------------------------------------------------------
    // Index: counts, patterns, anchors
    // -----------------------------------------------------------------------------------------

    /// Walks the subschemas of `schema` (read at `base`/`draft`, its own `$id` applied; at JSON
    /// Pointer `at`): counts them, their references and patterns, and records dynamic and
    /// recursive anchors.
    fn index(
        &mut self,
        schema: &'r Value,
        base: u32,
        draft: Draft,
        at: &str,
    ) -> Result<(), SchemaLimitError> {
        self.subschemas += 1;
        if self.subschemas > self.limits.max_subschemas {
            return Err(SchemaLimitError::Subschemas {
                max: self.limits.max_subschemas,
            });
        }
        let Value::Object(members) = schema else {
            return Ok(());
        };
        self.indexed
            .insert(std::ptr::from_ref(schema) as usize, (base, draft));
        for (keyword, value) in members {
            match (keyword.as_str(), value) {
                ("$ref" | "$dynamicRef" | "$recursiveRef", _) => {
                    self.refs += 1;
                    if self.refs > self.limits.max_refs {
                        return Err(SchemaLimitError::Refs {
                            max: self.limits.max_refs,
                        });
                    }
                }
                ("$dynamicAnchor", Value::String(name)) => {
                    self.dynamic
                        .entry(name.as_str())
                        .or_default()
                        .push((schema, base, draft));
                }
                ("$recursiveAnchor", Value::Bool(true)) => {
                    self.recursive.push((schema, base, draft));
                }
                ("pattern", Value::String(pattern)) => {
                    self.pattern(pattern, &pointer_push(at, "pattern"))?;
                }
                ("patternProperties", Value::Object(patterns)) => {
                    let here = pointer_push(at, "patternProperties");
                    for pattern in patterns.keys() {
                        self.pattern(pattern, &pointer_push(&here, pattern))?;
                    }
                }
                _ => {}
            }
        }
        let mut subs: Vec<(&'r Value, String)> = Vec::new();
        for keyword in SINGLE {
            if let Some(sub) = members.get(keyword) {
                subs.push((sub, pointer_push(at, keyword)));
            }
        }
        if let Some(items) = members.get("items") {
            let here = pointer_push(at, "items");
            match items {
                Value::Array(list) => subs.extend(
                    list.iter()
                        .enumerate()
                        .map(|(i, sub)| (sub, pointer_push(&here, &i.to_string()))),
                ),
                sub => subs.push((sub, here)),
            }
        }
        for keyword in LISTS {
            if let Some(Value::Array(list)) = members.get(keyword) {
                let here = pointer_push(at, keyword);
                subs.extend(
                    list.iter()
                        .enumerate()
                        .map(|(i, sub)| (sub, pointer_push(&here, &i.to_string()))),
                );
            }
        }
        for keyword in MAPS {
            if let Some(Value::Object(map)) = members.get(keyword) {
                let here = pointer_push(at, keyword);
                // `dependencies` also holds arrays of property names.
                subs.extend(
                    map.iter()
                        .filter(|(_, sub)| sub.is_object() || sub.is_boolean())
                        .map(|(name, sub)| (sub, pointer_push(&here, name))),
                );
            }
        }
        for (sub, here) in subs {
            let (base, draft) = self.enter(sub, base, draft)?;
            self.index(sub, base, draft, &here)?;
        }
        Ok(())
    }

    fn pattern(&mut self, pattern: &str, at: &str) -> Result<(), SchemaLimitError> {
        self.patterns += 1;
        if self.patterns > self.limits.max_patterns {
            return Err(SchemaLimitError::Patterns {
                max: self.limits.max_patterns,
            });
        }
        if pattern.len() > self.limits.max_pattern_bytes {
            return Err(SchemaLimitError::PatternBytes {
                at: shorten(at),
                max: self.limits.max_pattern_bytes,
            });
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Compiling `unevaluated*`
    // -----------------------------------------------------------------------------------------

    /// Counts what `jsonschema` walks to compile every `unevaluatedProperties` and
    /// `unevaluatedItems` in `schema` (any object holding one, wherever it is): the subschemas
    /// reached in place, once per path, a subschema already on the path not again (as its
    /// compiler does).
    fn unevaluated_walk(
        &mut self,
        schema: &'r Value,
        root_base: u32,
        root_draft: Draft,
    ) -> Result<(), SchemaLimitError> {
        let mut roots = Vec::new();
        collect_unevaluated(schema, &mut roots);
        let mut walked = 0usize;
        for root in roots {
            let (base, draft) = self
                .indexed
                .get(&(std::ptr::from_ref(root) as usize))
                .copied()
                .unwrap_or((root_base, root_draft));
            // Depth-first, each entry a subschema and the in-place subschemas left to walk.
            let mut stack: Vec<(usize, Vec<Anchored<'r>>)> = Vec::new();
            let mut next = Some((root, base, draft));
            while let Some((node, base, draft)) = next.take() {
                walked += 1;
                if walked > self.limits.max_unevaluated_walk {
                    return Err(SchemaLimitError::Unevaluated {
                        max: self.limits.max_unevaluated_walk,
                    });
                }
                let children = self.in_place(node, base, draft)?;
                stack.push((std::ptr::from_ref(node) as usize, children));
                while let Some((_, children)) = stack.last_mut() {
                    let Some(child) = children.pop() else {
                        stack.pop();
                        continue;
                    };
                    let address = std::ptr::from_ref(child.0) as usize;
                    if !stack.iter().any(|(on_path, _)| *on_path == address) {
                        next = Some(child);
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// The subschemas `schema` applies in place, each with its base and draft.
    fn in_place(
        &mut self,
        schema: &'r Value,
        base: u32,
        draft: Draft,
    ) -> Result<Vec<Anchored<'r>>, SchemaLimitError> {
        let Value::Object(members) = schema else {
            return Ok(Vec::new());
        };
        let mut children = Vec::new();
        for (keyword, value) in members {
            match (keyword.as_str(), value) {
                (k @ ("$ref" | "$dynamicRef" | "$recursiveRef"), Value::String(reference)) => {
                    let targets = self.targets(schema, static_keyword(k), reference, base)?;
                    children.extend(targets.iter().copied());
                }
                ("allOf" | "anyOf" | "oneOf", Value::Array(list)) => {
                    for sub in list {
                        let (base, draft) = self.enter(sub, base, draft)?;
                        children.push((sub, base, draft));
                    }
                }
                ("if" | "then" | "else", sub) => {
                    let (base, draft) = self.enter(sub, base, draft)?;
                    children.push((sub, base, draft));
                }
                ("dependentSchemas", Value::Object(map)) => {
                    for sub in map.values() {
                        let (base, draft) = self.enter(sub, base, draft)?;
                        children.push((sub, base, draft));
                    }
                }
                _ => {}
            }
        }
        Ok(children)
    }

    // -----------------------------------------------------------------------------------------
    // References
    // -----------------------------------------------------------------------------------------

    /// Where `reference` (in a schema read at `base`) leads, as `jsonschema` resolves it.
    fn lookup(&mut self, reference: &str, base: u32) -> Result<Anchored<'r>, SchemaLimitError> {
        let unresolvable = |reason: &str| SchemaLimitError::Unresolvable {
            reference: shorten(reference),
            reason: shorten(reason),
        };
        let uri = self
            .bases
            .get(base as usize)
            .cloned()
            .ok_or_else(|| unresolvable("no base URI"))?;
        let resolved = self
            .registry
            .resolver((*uri).clone())
            .lookup(reference)
            .map_err(|error| unresolvable(&error.to_string()))?;
        let (contents, resolver, draft) = resolved.into_inner();
        if !self
            .inside
            .contains(&(std::ptr::from_ref(contents) as usize))
        {
            return Err(unresolvable("it leads outside the submitted schema"));
        }
        let base = self.intern(resolver.base_uri());
        Ok((contents, base, draft))
    }

    /// The schemas a reference keyword of `schema` may lead to (cached per schema and base).
    fn targets(
        &mut self,
        schema: &'r Value,
        keyword: &'static str,
        reference: &'r str,
        base: u32,
    ) -> Result<Arc<[Anchored<'r>]>, SchemaLimitError> {
        let key = (std::ptr::from_ref(schema) as usize, keyword, base);
        if let Some(found) = self.resolved.get(&key) {
            return Ok(Arc::clone(found));
        }
        let mut targets = Vec::new();
        match keyword {
            "$recursiveRef" => {
                targets.push(self.lookup("#", base)?);
                targets.extend(self.recursive.iter().copied());
            }
            "$dynamicRef" => {
                targets.push(self.lookup(reference, base)?);
                let name = reference.rsplit_once('#').map_or("", |(_, name)| name);
                if !name.is_empty()
                    && !name.starts_with('/')
                    && let Some(anchored) = self.dynamic.get(name)
                {
                    targets.extend(anchored.iter().copied());
                }
            }
            _ => targets.push(self.lookup(reference, base)?),
        }
        let targets: Arc<[Anchored<'r>]> = targets.into();
        self.resolved.insert(key, Arc::clone(&targets));
        Ok(targets)
    }

    // -----------------------------------------------------------------------------------------
    // The bound
    // -----------------------------------------------------------------------------------------

    fn data_scan(&mut self, value: &Value) -> u64 {
        let address = std::ptr::from_ref(value) as usize;
        if let Some(&known) = self.scans.get(&address) {
            return known;
        }
        let computed = scan(value);
        self.scans.insert(address, computed);
        computed
    }

    fn too_costly(&self) -> SchemaLimitError {
        SchemaLimitError::Cost {
            max: self.limits.max_cost,
        }
    }

    /// What a schema object costs whatever the data, computed once per schema.
    fn info(&mut self, schema: &'r Value, members: &'r Map<String, Value>) -> usize {
        let address = std::ptr::from_ref(schema) as usize;
        if let Some(&index) = self.info_ids.get(&address) {
            return index;
        }
        let mut info = Info {
            keywords: members.len() as u64,
            fixed: 1 + members.len() as u64,
            ..Info::default()
        };
        for (keyword, value) in members {
            let k = keyword.as_str();
            match k {
                "const" | "enum" | "required" | "dependentRequired" => {
                    info.fixed = info.fixed.saturating_add(scan(value));
                }
                "uniqueItems" => info.unique = true,
                "patternProperties" => {
                    info.patterns = value.as_object().map_or(0, Map::len) as u64;
                }
                _ => {}
            }
            if let Some((_, per_16)) = STRING_KEYWORDS.iter().find(|(name, _)| *name == k) {
                info.string_keywords += 1;
                info.string_per_16 += per_16;
            }
            if ITERATING.contains(&k) {
                info.iterating += 1;
            }
            info.unevaluated |= k.starts_with("unevaluated");
            if is_applicator(k) {
                info.applicators.push((static_keyword(k), value));
            }
        }
        let index = self.infos.len();
        self.infos.push(info);
        self.info_ids.insert(address, index);
        index
    }

    /// A pair's own steps: one per keyword, plus what the keywords read of the data.
    fn local_steps(&mut self, info: usize, data: Part<'_>) -> u64 {
        let Some(info) = self.infos.get(info) else {
            return 0;
        };
        let (fixed, string_keywords, string_per_16) =
            (info.fixed, info.string_keywords, info.string_per_16);
        let (iterating, unique, patterns) = (info.iterating, info.unique, info.patterns);
        let mut local = fixed;
        match data {
            Part::Value(Value::String(text)) => {
                let reading = (text.len() as u64).saturating_mul(string_per_16) / 16;
                local = local.saturating_add(string_keywords + reading);
            }
            Part::Key(key) => {
                let reading = (key.len() as u64).saturating_mul(string_per_16) / 16;
                local = local.saturating_add(string_keywords + reading);
            }
            Part::Value(array @ Value::Array(items)) => {
                local = local.saturating_add(iterating.saturating_mul(items.len() as u64));
                if unique {
                    local = local.saturating_add(self.data_scan(array));
                }
            }
            Part::Value(Value::Object(object)) => {
                local = local.saturating_add(iterating.saturating_mul(object.len() as u64));
                if patterns > 0 {
                    let key_bytes = object
                        .keys()
                        .map(|key| 1 + 4 * key.len() as u64)
                        .fold(0, u64::saturating_add);
                    local = local.saturating_add(patterns.saturating_mul(key_bytes));
                }
            }
            Part::Value(_) => {}
        }
        local
    }

    /// The frame of one pair: its own steps and the subschemas it applies.
    fn frame(&mut self, pair: Pair<'r>) -> Result<Frame<'r>, SchemaLimitError> {
        let mut frame = Frame {
            key: pair.key(),
            local: 1,
            keywords: 1,
            unevaluated: false,
            groups: Vec::new(),
            group: 0,
            pair: 0,
            acc: Cost::default(),
            below: Cost::default(),
            in_place_total: 0,
        };
        let Value::Object(members) = pair.schema else {
            return Ok(frame);
        };
        let info = self.info(pair.schema, members);
        frame.local = self.local_steps(info, pair.data);
        let (keywords, unevaluated, patterns, applicators) = match self.infos.get(info) {
            Some(i) => (i.keywords, i.unevaluated, i.patterns, i.applicators.len()),
            None => return Ok(frame),
        };
        frame.keywords = keywords;
        frame.unevaluated = unevaluated;
        // Every pair listed below is at least one step: refuse before listing too many.
        let children = match pair.data {
            Part::Value(Value::Object(o)) => o.len(),
            Part::Value(Value::Array(a)) => a.len(),
            _ => 0,
        } as u64;
        if frame
            .local
            .saturating_add(children.saturating_mul(8 + patterns))
            > self.limits.max_cost
        {
            return Err(self.too_costly());
        }
        for index in 0..applicators {
            let Some(&(keyword, value)) =
                self.infos.get(info).and_then(|i| i.applicators.get(index))
            else {
                break;
            };
            if let ("$ref" | "$dynamicRef" | "$recursiveRef", Value::String(reference)) =
                (keyword, value)
            {
                let targets = self.targets(pair.schema, keyword, reference, pair.base)?;
                let pairs = targets
                    .iter()
                    .map(|&(schema, base, draft)| Pair {
                        schema,
                        data: pair.data,
                        base,
                        draft,
                    })
                    .collect();
                frame.groups.push(Group {
                    pairs,
                    in_place: true,
                    any: keyword != "$ref",
                    label: reference,
                });
                continue;
            }
            let Some((in_place, applied)) = applied(keyword, value, pair.data) else {
                continue;
            };
            let mut pairs = Vec::with_capacity(applied.len());
            let mut last: Option<(usize, (u32, Draft))> = None;
            for (schema, data) in applied {
                // Items of one keyword share their subschema: enter it once.
                let address = std::ptr::from_ref(schema) as usize;
                let (base, draft) = match last {
                    Some((known, entered)) if known == address => entered,
                    _ => {
                        let entered = self.enter(schema, pair.base, pair.draft)?;
                        last = Some((address, entered));
                        entered
                    }
                };
                pairs.push(Pair {
                    schema,
                    data,
                    base,
                    draft,
                });
            }
            if !pairs.is_empty() {
                frame.groups.push(Group {
                    pairs,
                    in_place,
                    any: false,
                    label: keyword,
                });
            }
        }
        Ok(frame)
    }

    /// The cost of a frame whose subschemas are all known.
    fn finish(&self, frame: &Frame<'r>) -> Result<Cost, SchemaLimitError> {
        let unevaluated = if frame.unevaluated {
            frame.in_place_total.saturating_mul(2)
        } else {
            0
        };
        let validate = frame
            .local
            .saturating_add(frame.below.validate)
            .saturating_add(unevaluated);
        let cost = Cost {
            validate,
            total: validate
                .saturating_add(frame.keywords.saturating_mul(ERROR_STEPS))
                .saturating_add(frame.below.total),
            height: frame.below.height + 1,
        };
        if cost.total > self.limits.max_cost {
            return Err(self.too_costly());
        }
        if cost.height > self.limits.max_nesting {
            return Err(SchemaLimitError::Nesting {
                max: self.limits.max_nesting,
            });
        }
        Ok(cost)
    }

    /// The bound for `root`. Iterative, so the walk's own stack is the nesting it measures;
    /// pairs whose schema applies no subschema are costed at once and not remembered.
    fn estimate(&mut self, root: Pair<'r>) -> Result<Estimate, SchemaLimitError> {
        let limits = *self.limits;
        // Every remembered pair costs at least one keyword's error steps.
        let max_pairs = usize::try_from(limits.max_cost / ERROR_STEPS).unwrap_or(usize::MAX);
        let first = self.frame(root)?;
        self.memo.insert(first.key, Slot::Open);
        let mut stack: Vec<Frame<'r>> = vec![first];
        while let Some(top) = stack.last_mut() {
            if top.group == top.groups.len() {
                let cost = self.finish(top)?;
                let key = top.key;
                stack.pop();
                self.memo.insert(key, Slot::Done(cost));
                if stack.is_empty() {
                    return Ok(Estimate {
                        validate_steps: cost.validate,
                        total_steps: cost.total,
                        nesting: cost.height,
                        pairs: self.memo.len(),
                    });
                }
                continue;
            }
            let group = &top.groups[top.group];
            let next = group.pairs[top.pair];
            let cost = match self.memo.get(&next.key()) {
                Some(Slot::Done(cost)) => *cost,
                Some(Slot::Open) => {
                    return Err(SchemaLimitError::Cycle {
                        reference: shorten(group.label),
                    });
                }
                None => {
                    if stack.len() >= limits.max_nesting {
                        return Err(SchemaLimitError::Nesting {
                            max: limits.max_nesting,
                        });
                    }
                    let frame = self.frame(next)?;
                    if frame.groups.is_empty() {
                        self.finish(&frame)?
                    } else {
                        if self.memo.len() >= max_pairs {
                            return Err(self.too_costly());
                        }
                        self.memo.insert(frame.key, Slot::Open);
                        stack.push(frame);
                        continue;
                    }
                }
            };
            let Some(top) = stack.last_mut() else {
                break;
            };
            top.take(cost);
        }
        Err(self.too_costly())
    }
}

impl Frame<'_> {
    /// Adds the cost of the next subschema of the current group.
    fn take(&mut self, cost: Cost) {
        let Some(group) = self.groups.get(self.group) else {
            return;
        };
        if group.any {
            self.acc.max(cost);
        } else {
            self.acc.add(cost);
        }
        self.pair += 1;
        if self.pair == group.pairs.len() {
            let acc = std::mem::take(&mut self.acc);
            self.below.add(acc);
            if group.in_place {
                self.in_place_total = self.in_place_total.saturating_add(acc.total);
            }
            self.group += 1;
            self.pair = 0;
        }
    }
}

/// The subschemas applicator `keyword` (with `value`) applies to `data`, and whether it
/// applies them in place (to `data` itself) rather than to its parts. `None` when `keyword` is
/// not an applicator (references are handled apart). Keywords are taken from every draft at
/// once, and a subschema that may apply is counted as applied.
fn applied<'a>(
    keyword: &str,
    value: &'a Value,
    data: Part<'a>,
) -> Option<(bool, Vec<(&'a Value, Part<'a>)>)> {
    let object = match data {
        Part::Value(Value::Object(object)) => Some(object),
        _ => None,
    };
    let array = match data {
        Part::Value(Value::Array(array)) => Some(array),
        _ => None,
    };
    let members = |sub: &'a Value| -> Vec<(&'a Value, Part<'a>)> {
        object.map_or_else(Vec::new, |o| {
            o.values().map(|item| (sub, Part::Value(item))).collect()
        })
    };
    let items = |sub: &'a Value| -> Vec<(&'a Value, Part<'a>)> {
        array.map_or_else(Vec::new, |a| {
            a.iter().map(|item| (sub, Part::Value(item))).collect()
        })
    };
    let applied = match (keyword, value) {
        ("allOf" | "anyOf" | "oneOf", Value::Array(list)) => {
            (true, list.iter().map(|sub| (sub, data)).collect())
        }
        ("not" | "if" | "then" | "else", sub) => (true, vec![(sub, data)]),
        ("dependentSchemas" | "dependencies", Value::Object(map)) => (
            true,
            object.map_or_else(Vec::new, |o| {
                map.iter()
                    .filter(|(name, sub)| {
                        o.contains_key(name.as_str()) && (sub.is_object() || sub.is_boolean())
                    })
                    .map(|(_, sub)| (sub, data))
                    .collect()
            }),
        ),
        ("properties", Value::Object(map)) => (
            false,
            object.map_or_else(Vec::new, |o| {
                o.iter()
                    .filter_map(|(name, item)| map.get(name).map(|sub| (sub, Part::Value(item))))
                    .collect()
            }),
        ),
        ("patternProperties", Value::Object(map)) => {
            (false, map.values().flat_map(members).collect())
        }
        ("additionalProperties" | "unevaluatedProperties", sub) => (false, members(sub)),
        ("propertyNames", sub) => (
            false,
            object.map_or_else(Vec::new, |o| {
                o.keys().map(|key| (sub, Part::Key(key.as_str()))).collect()
            }),
        ),
        ("items" | "prefixItems", Value::Array(list)) => (
            false,
            array.map_or_else(Vec::new, |a| {
                list.iter()
                    .zip(a)
                    .map(|(sub, item)| (sub, Part::Value(item)))
                    .collect()
            }),
        ),
        ("items" | "additionalItems" | "unevaluatedItems" | "contains", sub) => (false, items(sub)),
        _ => return None,
    };
    Some(applied)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use proptest::prelude::*;

    use super::*;

    /// `a_n = anyOf[a_(n-1), a_(n-1)]` down to `a0 = {"type": "integer"}`: 2ⁿ subschema visits.
    fn chain(levels: usize, keyword: &str) -> Value {
        let mut defs = Map::new();
        defs.insert("a0".into(), json!({"type": "integer"}));
        for i in 1..=levels {
            let below = format!("#/$defs/a{}", i - 1);
            defs.insert(
                format!("a{i}"),
                json!({ keyword: [{"$ref": below}, {"$ref": below}] }),
            );
        }
        json!({"$defs": defs, "$ref": format!("#/$defs/a{levels}")})
    }

    fn unlimited() -> ValidateLimits {
        ValidateLimits {
            max_cost: u64::MAX / 4,
            max_nesting: 1 << 20,
            ..ValidateLimits::default()
        }
    }

    #[test]
    fn the_crafted_chain_is_refused_by_the_bound() {
        // The doubling chain: 22 levels, 1.4 KB; 23 s and 6.5 GB before the limits.
        let schema = chain(22, "anyOf");
        assert!(serialized_len(&schema, 2000).is_some());
        let error = check(&json!("x"), &schema, &ValidateLimits::default()).unwrap_err();
        assert_eq!(error, SchemaLimitError::Cost { max: 10_000_000 });
        let rpc = RpcError::from(error);
        assert_eq!(rpc.code, RpcError::invalid_params().code);
        assert_eq!(
            rpc.data,
            Some(json!({"field": "schema", "limit": "steps", "max": 10_000_000}))
        );
        // The bound doubles with each level, as the work does.
        let steps = |levels| {
            check(&json!("x"), &chain(levels, "anyOf"), &unlimited())
                .unwrap()
                .total_steps
        };
        assert!(steps(11) > 2 * steps(10) - 64);
        // Every applicator that branches counts every branch.
        for keyword in ["allOf", "oneOf"] {
            assert!(check(&json!("x"), &chain(22, keyword), &ValidateLimits::default()).is_err());
        }
    }

    /// A limit, set by `set`, accepts the test input at `value` and refuses it at `value − 1`
    /// with `refusal(value − 1)`.
    type Case = (
        &'static str,
        fn(&mut ValidateLimits, usize),
        usize,
        fn(usize) -> SchemaLimitError,
    );

    #[test]
    fn every_limit_at_and_just_over() {
        let schema = json!({"properties": {"a": {"pattern": "^ab$"}, "b": {"$ref": "#/$defs/n"}},
                            "patternProperties": {"^x": true},
                            "$defs": {"n": {"type": "number"}}});
        let data = json!({"a": "ab", "b": [1, [2]]});
        let estimate = check(&data, &schema, &unlimited()).unwrap();
        // root → properties/b → $ref → n.
        assert_eq!(estimate.nesting, 3);
        let cases: [Case; 10] = [
            (
                "schema bytes",
                |l, v| l.max_schema_bytes = v,
                serialized_len(&schema, usize::MAX).unwrap(),
                |max| SchemaLimitError::SchemaBytes { max },
            ),
            (
                "schema depth",
                |l, v| l.max_schema_depth = v,
                3,
                |max| SchemaLimitError::SchemaDepth { max },
            ),
            // The root, a, b, n and the patternProperties one.
            (
                "subschemas",
                |l, v| l.max_subschemas = v,
                5,
                |max| SchemaLimitError::Subschemas { max },
            ),
            (
                "refs",
                |l, v| l.max_refs = v,
                1,
                |max| SchemaLimitError::Refs { max },
            ),
            (
                "patterns",
                |l, v| l.max_patterns = v,
                2,
                |max| SchemaLimitError::Patterns { max },
            ),
            (
                "pattern bytes",
                |l, v| l.max_pattern_bytes = v,
                4,
                |max| SchemaLimitError::PatternBytes {
                    at: "/properties/a/pattern".into(),
                    max,
                },
            ),
            (
                "data bytes",
                |l, v| l.max_data_bytes = v,
                serialized_len(&data, usize::MAX).unwrap(),
                |max| SchemaLimitError::DataBytes { max },
            ),
            (
                "data depth",
                |l, v| l.max_data_depth = v,
                3,
                |max| SchemaLimitError::DataDepth { max },
            ),
            (
                "nesting",
                |l, v| l.max_nesting = v,
                3,
                |max| SchemaLimitError::Nesting { max },
            ),
            (
                "steps",
                |l, v| l.max_cost = v as u64,
                usize::try_from(estimate.total_steps).unwrap(),
                |max| SchemaLimitError::Cost { max: max as u64 },
            ),
        ];
        for (name, set, value, refusal) in cases {
            let mut limits = unlimited();
            set(&mut limits, value);
            assert!(check(&data, &schema, &limits).is_ok(), "{name} at {value}");
            set(&mut limits, value - 1);
            assert_eq!(
                check(&data, &schema, &limits),
                Err(refusal(value - 1)),
                "{name} at {}",
                value - 1
            );
        }
    }

    #[test]
    fn compiling_unevaluated_keywords_is_bounded() {
        // The keyword, two `anyOf` branches and the `$ref` target of each: 5 subschemas walked.
        let schema = json!({"unevaluatedProperties": false,
                            "anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}],
                            "$defs": {"a": {"type": "object"}}});
        let mut limits = unlimited();
        limits.max_unevaluated_walk = 5;
        assert!(check(&json!({}), &schema, &limits).is_ok());
        limits.max_unevaluated_walk = 4;
        assert_eq!(
            check(&json!({}), &schema, &limits),
            Err(SchemaLimitError::Unevaluated { max: 4 })
        );
        // jsonschema walks a doubling chain under `unevaluatedProperties` once per path while
        // compiling, whatever the data (14 levels: 13 s); the data never reaches it here, so
        // only this limit stops it.
        let mut chain = chain(14, "anyOf");
        chain["$ref"] = json!(null);
        let schema = json!({"$defs": chain["$defs"],
            "properties": {"x": {"unevaluatedItems": false, "$ref": "#/$defs/a14"}}});
        assert_eq!(
            check(&json!({}), &schema, &ValidateLimits::default()),
            Err(SchemaLimitError::Unevaluated { max: 2048 })
        );
        // Recursion through the data is not walked: a tree with `unevaluatedProperties`.
        let tree = json!({"$defs": {"node": {"unevaluatedProperties": false,
            "properties": {"kids": {"items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node"});
        assert!(
            check(
                &json!({"kids": [{"kids": []}]}),
                &tree,
                &ValidateLimits::default()
            )
            .is_ok()
        );
    }

    #[test]
    fn the_defaults_leave_room_for_real_schemas() {
        // A tool's input schema of the usual kind, with 1,000 records of 10 fields.
        let record = json!({"type": "object", "required": ["id", "name"],
            "additionalProperties": false,
            "properties": {
                "id": {"type": "integer", "minimum": 1}, "name": {"type": "string", "maxLength": 80},
                "email": {"type": "string", "format": "email"},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "kind": {"enum": ["a", "b", "c"]}, "score": {"type": "number"},
                "parent": {"$ref": "#/$defs/ref"}, "active": {"type": "boolean"},
                "note": {"type": ["string", "null"]}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}});
        let schema = json!({"type": "object", "$defs": {"ref": {"anyOf": [{"type": "null"}, {"type": "integer"}]}},
            "properties": {"records": {"type": "array", "items": record}}});
        let one = json!({"id": 1, "name": "n", "email": "a@b.io", "tags": ["x", "y"], "kind": "a",
            "score": 1.5, "parent": null, "active": true, "note": null, "zip": "12345"});
        let data = json!({"records": vec![one; 1000]});
        let estimate = check(&data, &schema, &ValidateLimits::default()).unwrap();
        assert!(
            estimate.total_steps < ValidateLimits::default().max_cost / 4,
            "{estimate:?}"
        );
    }

    #[test]
    fn loops_and_references_outside_are_refused() {
        for schema in [
            json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
            json!({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
                   "$ref": "#/$defs/a"}),
            json!({"$dynamicAnchor": "x", "allOf": [{"$dynamicRef": "#x"}]}),
        ] {
            assert!(
                matches!(
                    check(&json!(1), &schema, &unlimited()),
                    Err(SchemaLimitError::Cycle { .. })
                ),
                "{schema}"
            );
        }
        for schema in [
            json!({"$ref": "https://json-schema.org/draft/2020-12/schema"}),
            json!({"$ref": "https://example.com/remote.json"}),
            json!({"$ref": "#/$defs/missing"}),
        ] {
            let error = check(&json!(1), &schema, &unlimited()).unwrap_err();
            assert!(
                matches!(error, SchemaLimitError::Unresolvable { .. }),
                "{schema}"
            );
            assert_eq!(RpcError::from(error).data, Some(json!({"field": "schema"})));
        }
        // Recursion through the data is fine: it ends with the data.
        let tree = json!({"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}});
        let mut data = json!({});
        for _ in 0..20 {
            data = json!({"kids": [data]});
        }
        let estimate = check(&data, &tree, &ValidateLimits::default()).unwrap();
        assert!(estimate.nesting > 40, "{estimate:?}");
    }

    #[test]
    fn references_resolve_as_jsonschema_resolves_them() {
        // Embedded resources with relative `$id`s, anchors, and draft 7 `$id` anchors.
        let schema = json!({
            "$id": "https://example.com/root.json",
            "$defs": {
                "a": {"$id": "sub/a.json", "$defs": {"b": {"$anchor": "bee", "type": "string"}},
                      "$ref": "#bee"},
                "c": {"$id": "sub/c.json", "$ref": "a.json"}
            },
            "properties": {"x": {"$ref": "sub/c.json"}, "y": {"$ref": "sub/a.json#/$defs/b"}}
        });
        let estimate = check(&json!({"x": "s", "y": "t"}), &schema, &unlimited()).unwrap();
        // root → properties/x → c → a → b.
        assert_eq!(estimate.nesting, 5);
        let draft7 = json!({"$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"n": {"$id": "#num", "type": "number"}}, "items": {"$ref": "#num"}});
        assert!(check(&json!([1, 2]), &draft7, &unlimited()).is_ok());
        // A `$dynamicRef` may lead to any schema with its anchor: the costlier one counts.
        let dynamic = json!({
            "$id": "https://example.com/tree", "$dynamicAnchor": "node",
            "type": "object", "properties": {"kids": {"type": "array", "items": {"$dynamicRef": "#node"}}},
            "$defs": {"strict": {"$id": "strict", "$dynamicAnchor": "node", "$ref": "tree",
                                 "unevaluatedProperties": false}}
        });
        let data = json!({"kids": [{"kids": []}]});
        assert!(check(&data, &dynamic, &unlimited()).is_ok());
    }

    #[test]
    fn sizes_and_depths() {
        assert_eq!(serialized_len(&json!({"a": [1, "x"]}), 100), Some(13));
        assert_eq!(serialized_len(&json!({"a": [1, "x"]}), 12), None);
        assert!(depth_within(&json!(1), 0));
        assert!(!depth_within(&json!([]), 0));
        assert!(depth_within(&json!([[1]]), 2));
        assert!(!depth_within(&json!([[[]]]), 2));
        assert_eq!(shorten("abc"), "abc");
        assert_eq!(shorten(&"é".repeat(100)).len(), 120 + "…".len());
    }

    // -----------------------------------------------------------------------------------------
    // The bound holds: a keyword in every subschema counts jsonschema's actual visits
    // -----------------------------------------------------------------------------------------

    struct Count(Arc<AtomicU64>);

    impl<'i> jsonschema::Keyword<'i> for Count {
        fn validate(&self, _: &'i Value) -> Result<(), jsonschema::ValidationError<'i>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }

        fn is_valid(&self, _: &'i Value) -> bool {
            self.0.fetch_add(1, Ordering::Relaxed);
            true
        }
    }

    /// Puts `"x-count": true` into every subschema of `schema`.
    fn mark(schema: &mut Value) {
        let Value::Object(members) = schema else {
            return;
        };
        members.insert("x-count".into(), Value::Bool(true));
        for (keyword, value) in members.iter_mut() {
            let keyword = keyword.as_str();
            if SINGLE.contains(&keyword) || keyword == "items" {
                match value {
                    Value::Array(list) => list.iter_mut().for_each(mark),
                    sub => mark(sub),
                }
            } else if LISTS.contains(&keyword) {
                if let Value::Array(list) = value {
                    list.iter_mut().for_each(mark);
                }
            } else if MAPS.contains(&keyword)
                && let Value::Object(map) = value
            {
                map.values_mut().for_each(mark);
            }
        }
    }

    fn schemas() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!(true)),
            Just(json!(false)),
            Just(json!({"type": "integer"})),
            Just(json!({"type": "string", "minLength": 2})),
            Just(json!({"pattern": "^a+$", "format": "email"})),
            Just(json!({"enum": [1, "a", [1]], "const": 1})),
            Just(json!({"uniqueItems": true, "required": ["a"]})),
            (0..3u8).prop_map(|i| json!({"$ref": format!("#/$defs/d{i}")})),
            Just(json!({"$dynamicRef": "#node"})),
        ];
        leaf.prop_recursive(4, 40, 3, |inner| {
            let list = || prop::collection::vec(inner.clone(), 1..4);
            prop_oneof![
                list().prop_map(|v| json!({"anyOf": v})),
                list().prop_map(|v| json!({"allOf": v})),
                list().prop_map(|v| json!({"oneOf": v})),
                list().prop_map(|v| json!({"prefixItems": v})),
                inner.clone().prop_map(|s| json!({"not": s})),
                (inner.clone(), inner.clone(), inner.clone())
                    .prop_map(|(a, b, c)| json!({"if": a, "then": b, "else": c})),
                (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| json!({"properties": {"a": a, "b": b}})),
                inner.clone().prop_map(|s| json!({"items": s})),
                inner.clone().prop_map(|s| json!({"additionalProperties": s})),
                inner.clone().prop_map(|s| json!({"patternProperties": {"^a": s}})),
                inner.clone().prop_map(|s| json!({"propertyNames": s})),
                inner.clone().prop_map(|s| json!({"contains": s})),
                (inner.clone(), inner.clone()).prop_map(
                    |(a, s)| json!({"unevaluatedProperties": s, "properties": {"a": true}, "anyOf": [a]})
                ),
                (inner.clone(), inner.clone())
                    .prop_map(|(a, s)| json!({"unevaluatedItems": s, "allOf": [a]})),
                inner.clone().prop_map(|s| json!({"dependentSchemas": {"a": s}})),
            ]
        })
    }

    fn data() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!(1)),
            Just(json!("a")),
            Just(json!("aa")),
            Just(json!("b@c.io")),
            Just(json!(null)),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("a".to_owned()),
                        Just("b".to_owned()),
                        Just("aa".to_owned())
                    ],
                    inner,
                    0..3
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn the_bound_holds_and_the_checker_never_panics(
            defs in prop::collection::vec(schemas(), 3),
            root in schemas(),
            data in data(),
        ) {
            let mut schema = json!({
                "$dynamicAnchor": "node",
                "$defs": {"d0": defs[0], "d1": defs[1], "d2": defs[2]},
                "allOf": [root],
            });
            mark(&mut schema);
            let Ok(estimate) = check(&data, &schema, &unlimited()) else {
                return Ok(());
            };
            let visits = Arc::new(AtomicU64::new(0));
            let counter = Arc::clone(&visits);
            let Ok(validator) = jsonschema::options()
                .offline()
                .should_validate_formats(true)
                .with_pattern_options(jsonschema::PatternOptions::regex())
                .with_keyword("x-count", move |_, _, _| Ok(Box::new(Count(Arc::clone(&counter)))))
                .build(&schema)
            else {
                return Ok(());
            };
            let valid = validator.is_valid(&data);
            let validating = visits.load(Ordering::Relaxed);
            prop_assert!(validating <= estimate.validate_steps, "{validating} > {estimate:?}");
            if !valid {
                let _ = validator.iter_errors(&data).count();
            }
            let all = visits.load(Ordering::Relaxed);
            prop_assert!(all <= estimate.total_steps, "{all} > {estimate:?}");
        }

        #[test]
        fn arbitrary_json_never_panics_the_checker(schema in data(), data in data()) {
            let _ = check(&data, &schema, &ValidateLimits::default());
        }
    }
}
