//! DISCOVER (discovery draft §3): parameter validation, evaluation against the [`Index`], and
//! the response body (§3.4) — `{"status", "task_id", "result": {"query_id", "total_matches",
//! "returned", "results": […], "ans_signature": {…}}}`.
//!
//! Every parameter of Table 1 is checked and a bad value is answered 400 naming it; unknown
//! parameters are refused the same way (a misspelt filter would otherwise silently widen the
//! result). Two parameters of ours: `explain` (adds each result's score components) and
//! `preferred_agent` (dynamic routing, §6; see [`crate::routing`]). Parameters come from the
//! body's `parameters` object, merged over the request target's query string (the body wins),
//! as the reference coordinator does for `DISCOVER /population`.
//!
//! `query_id` is derived from the normalised query and the index digest, so identical queries
//! over an identical index give byte-identical responses.
//!
//! # Paths ([`Target`])
//!
//! The draft's DISCOVER has no path (`AGTP/1.0 DISCOVER`, or `/`). The reference implementation
//! adds `DISCOVER /population` (its presence coordinator's ranked query, with its own parameter
//! names and the results at the top level of the body) and enumerates or refuses (460) other
//! paths; its `agtp-curl` names the path in the body instead (`{"target": "population"}`, a
//! legacy form honoured when the request line has no path). So:
//!
//! - [`Target::Root`]: the draft's query, answered `{"status", "task_id", "result": {…}}`.
//! - [`Target::Population`]: the same query; the reference's names `capability` (a capability
//!   term, like a `capability_domains` entry), `tier` (read as `trust_tier_min`) and
//!   `owner_domain` (`org_domain`) are accepted besides the draft's, and the answer is
//!   [`population_body`]: the result's members at the top level with `method`, `target` and the
//!   normalised `query`, each result also under the Identity Document names `agent_id` and
//!   `name`, with its `score` (= `rank_score`).
//! - [`Target::Other`]: 460 Endpoint Violation.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::error::{AgtpError, BadRequest};
use crate::index::{Filters, Hit, Index, Scratch, Search};
use crate::rank::{self, Weights};

/// Default `limit`.
pub const DEFAULT_LIMIT: usize = 10;
/// Largest `limit`.
pub const MAX_LIMIT: usize = 100;
/// Longest `intent`, in bytes.
pub const MAX_INTENT: usize = 4096;
/// Most `capability_domains` entries.
pub const MAX_DOMAINS: usize = 32;
/// The scope a caller needs to DISCOVER.
pub const QUERY_SCOPE: &str = "discovery:query";
/// The scope a caller needs to register agents (ACTIVATE and the other lifecycle methods).
pub const REGISTER_SCOPE: &str = "discovery:register";

/// The validated DISCOVER parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Natural-language description of the need.
    pub intent: Option<String>,
    /// DESCRIBE domain names (structural criteria) or capability terms.
    pub capability_domains: Vec<String>,
    /// Keep tiers numerically ≤ this.
    pub trust_tier_min: Option<u8>,
    /// Minimum behavioural trust score.
    pub behavioral_trust_min: Option<f64>,
    /// Governance zone.
    pub governance_zone: Option<String>,
    /// Organisation domain.
    pub org_domain: Option<String>,
    /// Most results.
    pub limit: usize,
    /// Include `required_scope` per result.
    pub scope_negotiate: bool,
    /// Include each result's score components.
    pub explain: bool,
    /// The agent the caller would rather use (dynamic routing).
    pub preferred_agent: Option<String>,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            intent: None,
            capability_domains: Vec::new(),
            trust_tier_min: None,
            behavioral_trust_min: None,
            governance_zone: None,
            org_domain: None,
            limit: DEFAULT_LIMIT,
            scope_negotiate: false,
            explain: false,
            preferred_agent: None,
        }
    }
}

/// The reference coordinator's path.
pub const POPULATION_PATH: &str = "/population";

/// Longest path quoted back in a 460 answer.
const MAX_QUOTED_PATH: usize = 128;

/// Which DISCOVER a request is: see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// No path (or `/`): the draft's DISCOVER.
    Root,
    /// `/population`: the reference coordinator's DISCOVER.
    Population,
    /// Any other path (answered 460).
    Other(String),
}

impl Target {
    /// From a path (`/population`) or a body `target` name (`population`).
    pub fn from_name(name: &str) -> Self {
        let trimmed = name.trim();
        let path = trimmed.strip_prefix('/').unwrap_or(trimmed);
        match path {
            "" => Self::Root,
            "population" => Self::Population,
            _ => {
                let mut quoted = String::from("/");
                for c in path.chars() {
                    if quoted.len() + c.len_utf8() > MAX_QUOTED_PATH {
                        break;
                    }
                    quoted.push(c);
                }
                Self::Other(quoted)
            }
        }
    }

    /// The request's target: its path, or the body's legacy `target` member when the request
    /// line has no path.
    pub fn resolve(path: &str, body: Option<&Value>) -> Result<Self, BadRequest> {
        let from_path = Self::from_name(path);
        if from_path != Self::Root {
            return Ok(from_path);
        }
        match body.and_then(|b| b.get("target")) {
            None | Some(Value::Null) => Ok(Self::Root),
            Some(Value::String(t)) => Ok(Self::from_name(t)),
            Some(_) => Err(bad("target", "must be a string naming a DISCOVER path")),
        }
    }

    /// The result of asking for this target where it is not served.
    pub fn violation(&self) -> AgtpError {
        let path = match self {
            Self::Root => "/",
            Self::Population => POPULATION_PATH,
            Self::Other(p) => p,
        };
        AgtpError::EndpointViolation(format!(
            "DISCOVER {path:?} is not served here (paths: / and {POPULATION_PATH})"
        ))
    }
}

/// The DESCRIBE capability domain names; other `capability_domains` entries are search terms.
pub const DESCRIBE_DOMAINS: &[&str] = &[
    "methods",
    "modalities",
    "tools",
    "version",
    "budget",
    "zones",
];

fn bad(parameter: &str, reason: &str) -> BadRequest {
    BadRequest::parameter(parameter, reason)
}

fn string(name: &str, v: &Value, max: usize) -> Result<Option<String>, BadRequest> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.len() > max => Err(bad(name, &format!("longer than {max} bytes"))),
        Value::String(s) if s.trim().is_empty() => Ok(None),
        Value::String(s) => Ok(Some(s.trim().to_owned())),
        _ => Err(bad(name, "must be a string")),
    }
}

/// A query-string value arrives as a string; accept `"2"`, `"0.8"`, `"true"` there too.
fn number(name: &str, v: &Value) -> Result<Option<f64>, BadRequest> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| bad(name, "not a number")),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| bad(name, "must be a number")),
        _ => Err(bad(name, "must be a number")),
    }
}

fn boolean(name: &str, v: &Value) -> Result<bool, BadRequest> {
    match v {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(bad(name, "must be true or false")),
    }
}

fn integer_in(name: &str, v: &Value, lo: u64, hi: u64) -> Result<Option<u64>, BadRequest> {
    let Some(x) = number(name, v)? else {
        return Ok(None);
    };
    if x.fract() != 0.0 || x < lo as f64 || x > hi as f64 {
        return Err(bad(name, &format!("must be an integer from {lo} to {hi}")));
    }
    Ok(Some(x as u64))
}

/// Splits a query string (`a=1&b=x%20y`) into parameters (values as strings).
pub fn query_string_params(query: &str) -> Result<Map<String, Value>, BadRequest> {
    let mut out = Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
        let k = percent_decode(k).ok_or_else(|| bad(k, "bad percent-encoding"))?;
        let v = percent_decode(v).ok_or_else(|| bad(&k, "bad percent-encoding"))?;
        out.insert(k, Value::String(v));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A list parameter: a JSON array of strings, or a comma-separated string (query strings).
fn string_list(name: &str, v: &Value) -> Result<Vec<String>, BadRequest> {
    let items: Vec<String> = match v {
        Value::Null => Vec::new(),
        Value::Array(a) => a
            .iter()
            .map(|x| match x {
                Value::String(s) if !s.trim().is_empty() && s.len() <= 64 => {
                    Ok(s.trim().to_owned())
                }
                _ => Err(bad(
                    name,
                    "entries must be non-empty strings of at most 64 bytes",
                )),
            })
            .collect::<Result<_, _>>()?,
        Value::String(s) => s
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(|x| {
                if x.len() <= 64 {
                    Ok(x.to_owned())
                } else {
                    Err(bad(name, "entries must be at most 64 bytes"))
                }
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(bad(name, "must be an array of strings")),
    };
    if items.len() > MAX_DOMAINS {
        return Err(bad(name, &format!("at most {MAX_DOMAINS} entries")));
    }
    Ok(items)
}

/// The reference coordinator's parameter names that are another name for a draft parameter
/// (accepted on `DISCOVER /population`): `(theirs, ours)`.
pub const POPULATION_ALIASES: [(&str, &str); 2] =
    [("tier", "trust_tier_min"), ("owner_domain", "org_domain")];

/// A value as its text, to tell whether an alias and the draft name say the same thing
/// (`"2"` from a query string and `2` from a body do).
fn loose_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.trim().to_owned(),
        other => other.to_string(),
    }
}

/// Renames the reference's aliases to the draft's names within one source of parameters; an
/// alias and its draft name both present with different values is a 400 naming the alias.
fn unalias(mut p: Map<String, Value>) -> Result<Map<String, Value>, BadRequest> {
    for (theirs, ours) in POPULATION_ALIASES {
        if let Some(v) = p.remove(theirs) {
            match p.get(ours) {
                Some(existing) if loose_text(existing) != loose_text(&v) => {
                    return Err(bad(theirs, &format!("contradicts {ours}")));
                }
                Some(_) => {}
                None => {
                    p.insert(ours.to_owned(), v);
                }
            }
        }
    }
    Ok(p)
}

impl Params {
    /// Validates a parameters object of the draft's DISCOVER (no path).
    pub fn from_map(p: &Map<String, Value>) -> Result<Self, BadRequest> {
        Self::from_map_at(p, &Target::Root)
    }

    /// Validates a parameters object of the DISCOVER at `target` (`Root` or `Population`):
    /// `capability` is accepted on `Population` only, and `target` when it names `target`.
    pub fn from_map_at(p: &Map<String, Value>, target: &Target) -> Result<Self, BadRequest> {
        let population = *target == Target::Population;
        let mut out = Self::default();
        let mut capability = Vec::new();
        for (name, v) in p {
            match name.as_str() {
                "intent" => out.intent = string(name, v, MAX_INTENT)?,
                "capability_domains" => out.capability_domains = string_list(name, v)?,
                "capability" if population => capability = string_list(name, v)?,
                "target" => match v {
                    Value::String(t) if Target::from_name(t) == *target => {}
                    _ => return Err(bad(name, "names another DISCOVER path")),
                },
                "trust_tier_min" => {
                    out.trust_tier_min = integer_in(name, v, 1, 3)?.map(|t| t as u8);
                }
                "behavioral_trust_min" => {
                    out.behavioral_trust_min = match number(name, v)? {
                        Some(x) if (0.0..=1.0).contains(&x) => Some(x),
                        Some(_) => return Err(bad(name, "must be a number from 0.0 to 1.0")),
                        None => None,
                    };
                }
                "governance_zone" => out.governance_zone = string(name, v, 256)?,
                "org_domain" => out.org_domain = string(name, v, 256)?,
                "limit" => {
                    out.limit = integer_in(name, v, 1, MAX_LIMIT as u64)?
                        .map_or(DEFAULT_LIMIT, |l| l as usize);
                }
                "scope_negotiate" => out.scope_negotiate = boolean(name, v)?,
                "explain" => out.explain = boolean(name, v)?,
                "preferred_agent" => out.preferred_agent = string(name, v, 128)?,
                other => return Err(bad(other, "unknown DISCOVER parameter")),
            }
        }
        for c in capability {
            if !out.capability_domains.contains(&c) {
                out.capability_domains.push(c);
            }
        }
        if out.capability_domains.len() > MAX_DOMAINS {
            return Err(bad(
                "capability",
                &format!("at most {MAX_DOMAINS} capability_domains and capability entries"),
            ));
        }
        Ok(out)
    }

    /// Reads the parameters of a DISCOVER request at `target`: the body's `parameters` object
    /// (or the body itself when it has no `parameters` member) over the `query` string (the
    /// request target's text after `?`, as [`crate::codec::Request::query`] gives it). On
    /// `Population` the reference's aliases are renamed first, in each source separately, so
    /// the body wins whichever name either source uses.
    pub fn from_parts(
        query: Option<&str>,
        body: Option<&Value>,
        target: &Target,
    ) -> Result<Self, BadRequest> {
        let population = *target == Target::Population;
        let from_query = query
            .map(query_string_params)
            .transpose()?
            .unwrap_or_default();
        let mut merged = if population {
            unalias(from_query)?
        } else {
            from_query
        };
        let from_body = match body {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(obj)) => {
                let params = match obj.get("parameters") {
                    Some(Value::Object(p)) => p,
                    Some(Value::Null) | None if obj.contains_key("method") => {
                        return Self::from_map_at(&merged, target);
                    }
                    Some(_) => {
                        return Err(BadRequest::Body("parameters must be an object".into()));
                    }
                    None => obj,
                };
                params.clone()
            }
            Some(_) => return Err(BadRequest::Body("the body must be a JSON object".into())),
        };
        let from_body = if population {
            unalias(from_body)?
        } else {
            from_body
        };
        merged.extend(from_body);
        Self::from_map_at(&merged, target)
    }

    /// The query terms: intent tokens, then capability terms (domain entries that are not
    /// DESCRIBE domain names), each once, in order of first appearance.
    pub fn terms(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut push = |t: &str| {
            if !out.iter().any(|x| x == t) {
                out.push(t.to_owned());
            }
        };
        if let Some(intent) = &self.intent {
            rank::for_each_token(intent, &mut push);
        }
        for d in self
            .capability_domains
            .iter()
            .filter(|d| !is_describe_domain(d))
        {
            rank::for_each_token(d, &mut push);
        }
        out
    }

    /// The index filters.
    pub fn filters(&self) -> Filters {
        Filters {
            trust_tier_min: self.trust_tier_min,
            behavioral_trust_min: self.behavioral_trust_min,
            governance_zone: self.governance_zone.clone(),
            org_domain: self.org_domain.clone(),
            domains: self
                .capability_domains
                .iter()
                .filter(|d| is_describe_domain(d))
                .map(|d| d.to_ascii_lowercase())
                .collect(),
            exclude: None,
        }
    }

    /// The parameters as a JSON object, normalised (defaults written out), for forwarding to a
    /// federated peer and for the query id.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        if let Some(i) = &self.intent {
            m.insert("intent".into(), json!(i));
        }
        if !self.capability_domains.is_empty() {
            m.insert("capability_domains".into(), json!(self.capability_domains));
        }
        if let Some(t) = self.trust_tier_min {
            m.insert("trust_tier_min".into(), json!(t));
        }
        if let Some(b) = self.behavioral_trust_min {
            m.insert("behavioral_trust_min".into(), json!(b));
        }
        if let Some(z) = &self.governance_zone {
            m.insert("governance_zone".into(), json!(z));
        }
        if let Some(o) = &self.org_domain {
            m.insert("org_domain".into(), json!(o));
        }
        m.insert("limit".into(), json!(self.limit));
        m.insert("scope_negotiate".into(), json!(self.scope_negotiate));
        if self.explain {
            m.insert("explain".into(), json!(true));
        }
        if let Some(p) = &self.preferred_agent {
            m.insert("preferred_agent".into(), json!(p));
        }
        Value::Object(m)
    }
}

fn is_describe_domain(d: &str) -> bool {
    DESCRIBE_DOMAINS.iter().any(|x| x.eq_ignore_ascii_case(d))
}

/// One result entry (§3.4), before ranking positions are assigned.
#[derive(Clone, Debug, PartialEq)]
pub struct ResultItem {
    /// `rank_score`, for merging and ordering.
    pub rank_score: f64,
    /// The entry as published (without `rank`).
    pub fields: Map<String, Value>,
}

impl ResultItem {
    /// The canonical id.
    pub fn canonical_id(&self) -> &str {
        self.fields
            .get("canonical_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// From a hit.
    pub fn from_hit(hit: &Hit<'_>, params: &Params, weights: &Weights) -> Self {
        let m = &hit.entry.manifest;
        let mut f = Map::new();
        f.insert("manifest_uri".into(), json!(m.manifest_uri));
        f.insert("canonical_id".into(), json!(m.canonical_id));
        f.insert("agent_label".into(), json!(m.agent_label));
        f.insert("org_domain".into(), json!(m.org_domain));
        f.insert("trust_tier".into(), json!(m.trust_tier));
        f.insert(
            "behavioral_trust_score".into(),
            json!(m.behavioral_trust_score),
        );
        f.insert("supported_methods".into(), json!(m.supported_methods));
        f.insert(
            "capability_match_score".into(),
            json!(hit.capability_match_score),
        );
        f.insert("governance_zone".into(), json!(m.governance_zone));
        if params.scope_negotiate {
            f.insert(
                "required_scope".into(),
                json!(m.required_scope.clone().unwrap_or_default()),
            );
        }
        f.insert("job_description".into(), json!(m.job_description));
        if params.explain {
            f.insert(
                "score_components".into(),
                explain(
                    m.trust_tier,
                    m.behavioral_trust_score,
                    hit.capability_match_score,
                    weights,
                ),
            );
        }
        Self {
            rank_score: hit.rank_score,
            fields: f,
        }
    }

    /// Recomputes `rank_score` from the published fields with our weights (federation merge:
    /// a peer's own weights must not decide our order). `None` if the fields are unusable.
    pub fn rescore(fields: Map<String, Value>, weights: &Weights) -> Option<Self> {
        let tier = u8::try_from(fields.get("trust_tier")?.as_u64()?).ok()?;
        let behavioral = fields.get("behavioral_trust_score")?.as_f64()?;
        let cms = fields.get("capability_match_score")?.as_f64()?;
        if !(1..=3).contains(&tier)
            || !(0.0..=1.0).contains(&behavioral)
            || !(0.0..=1.0).contains(&cms)
            || fields.get("canonical_id")?.as_str()?.is_empty()
        {
            return None;
        }
        Some(Self {
            rank_score: weights.rank_score(tier, behavioral, cms),
            fields,
        })
    }
}

/// The score components published with `explain: true`.
pub fn explain(tier: u8, behavioral: f64, cms: f64, w: &Weights) -> Value {
    json!({
        "normalized_trust_tier": rank::normalized_trust_tier(tier),
        "behavioral_trust_score": behavioral,
        "capability_match_score": cms,
        "weights": {
            "trust_tier_weight": w.trust_tier_weight,
            "behavioral_trust_weight": w.behavioral_trust_weight,
            "capability_match_weight": w.capability_match_weight,
        },
        "rank_score": rank::round6(w.rank_score(tier, behavioral, cms)),
    })
}

/// Sorts by `rank_score` descending, then `canonical_id` ascending.
pub fn sort_items(items: &mut [ResultItem]) {
    items.sort_by(|a, b| {
        b.rank_score
            .total_cmp(&a.rank_score)
            .then_with(|| a.canonical_id().cmp(b.canonical_id()))
    });
}

/// The outcome of a local search, ready to merge or publish.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Matches before the limit.
    pub total_matches: usize,
    /// Ranked results (at most `limit`).
    pub items: Vec<ResultItem>,
}

/// Runs the query on the index.
pub fn evaluate(index: &Index, params: &Params, weights: &Weights) -> Outcome {
    evaluate_with(index, params, weights, &mut Scratch::new())
}

/// Runs the query on the index with reusable working memory (keep one [`Scratch`] per
/// searching thread): the same outcome as [`evaluate`], which allocates its own each time.
pub fn evaluate_with(
    index: &Index,
    params: &Params,
    weights: &Weights,
    scratch: &mut Scratch,
) -> Outcome {
    let terms = params.terms();
    let filters = params.filters();
    let hits = index.search_with(
        &Search {
            terms: &terms,
            filters: &filters,
            limit: params.limit,
            weights: *weights,
        },
        scratch,
    );
    Outcome {
        total_matches: hits.total_matches,
        items: hits
            .hits
            .iter()
            .map(|h| ResultItem::from_hit(h, params, weights))
            .collect(),
    }
}

/// `qry-` and 16 hex digits of SHA-256 over the normalised query, the caller and the index
/// digest.
pub fn query_id(params: &Params, agent_id: &str, index_digest: &[u8; 32]) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(&params.to_value()).unwrap_or_default());
    h.update([0]);
    h.update(agent_id.as_bytes());
    h.update([0]);
    h.update(index_digest);
    let d = h.finalize();
    format!("qry-{}", hex::encode(&d[..8]))
}

/// The unsigned `result` object: ranks assigned in order. `federation_path` is included when
/// not empty.
pub fn result_object(
    query_id: &str,
    total_matches: usize,
    items: Vec<ResultItem>,
    federation_path: &[String],
    routing: Option<Value>,
) -> Map<String, Value> {
    let returned = items.len();
    let results: Vec<Value> = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let mut f = Map::new();
            f.insert("rank".into(), json!(i + 1));
            f.extend(item.fields);
            Value::Object(f)
        })
        .collect();
    let mut r = Map::new();
    r.insert("query_id".into(), json!(query_id));
    r.insert("total_matches".into(), json!(total_matches));
    r.insert("returned".into(), json!(returned));
    r.insert("results".into(), Value::Array(results));
    if !federation_path.is_empty() {
        r.insert("federation_path".into(), json!(federation_path));
    }
    if let Some(routing) = routing {
        r.insert("routing".into(), routing);
    }
    r
}

/// Gives each result the reference's names as well: `agent_id` (= `canonical_id`), `name`
/// (= `agent_label`) and `score` (= `rank_score`, 6 decimals), for [`population_body`].
pub fn annotate_for_population(items: &mut [ResultItem]) {
    for item in items {
        let f = &mut item.fields;
        if let Some(id) = f.get("canonical_id").cloned() {
            f.insert("agent_id".into(), id);
        }
        if let Some(label) = f.get("agent_label").cloned() {
            f.insert("name".into(), label);
        }
        f.insert("score".into(), json!(rank::round6(item.rank_score)));
    }
}

/// The unsigned body of a `DISCOVER /population` answer: the members of the (unsigned)
/// `result` object at the top level, with `status`, `task_id`, `method`, `target` and the
/// normalised `query`. The node signs the whole body (every member but `ans_signature`).
pub fn population_body(
    task_id: Option<&str>,
    params: &Params,
    result: Map<String, Value>,
) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("status".into(), json!(200));
    body.insert("task_id".into(), json!(task_id.unwrap_or_default()));
    body.insert("method".into(), json!("DISCOVER"));
    body.insert("target".into(), json!("population"));
    body.insert("query".into(), params.to_value());
    body.extend(result);
    body
}

/// The whole response body around a (signed) result.
pub fn response_body(task_id: Option<&str>, result: Map<String, Value>) -> Value {
    let mut body = Map::new();
    body.insert("status".into(), json!(200));
    body.insert("task_id".into(), json!(task_id.unwrap_or_default()));
    body.insert("result".into(), Value::Object(result));
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(query: Option<&str>, body: &Value, target: &Target) -> Result<Params, BadRequest> {
        Params::from_parts(query, Some(body), target)
    }

    #[test]
    fn targets_come_from_the_path_or_the_legacy_body_member() {
        assert_eq!(Target::resolve("/", None).unwrap(), Target::Root);
        assert_eq!(
            Target::resolve("/population", None).unwrap(),
            Target::Population
        );
        // agtp-curl DISCOVER agtp://host/population: no path, the name in the body.
        let curl = json!({"target": "population"});
        assert_eq!(
            Target::resolve("/", Some(&curl)).unwrap(),
            Target::Population
        );
        assert_eq!(
            Target::resolve("/", Some(&json!({"target": "/methods"}))).unwrap(),
            Target::Other("/methods".into())
        );
        // The request line wins over the body.
        assert_eq!(
            Target::resolve("/agents", Some(&curl)).unwrap(),
            Target::Other("/agents".into())
        );
        assert!(Target::resolve("/", Some(&json!({"target": 3}))).is_err());
        // A long path is quoted back bounded.
        let long = format!("/{}", "x".repeat(10_000));
        let Target::Other(p) = Target::resolve(&long, None).unwrap() else {
            panic!("not Other");
        };
        assert!(p.len() <= MAX_QUOTED_PATH);
        assert_eq!(Target::Other("/m".into()).violation().status().0, 460);
    }

    #[test]
    fn the_query_string_is_read_and_the_body_wins() {
        let p = parts(
            Some("intent=audit%20contracts&limit=3&trust_tier_min=2"),
            &json!({"parameters": {"limit": 5}}),
            &Target::Root,
        )
        .unwrap();
        assert_eq!(p.intent.as_deref(), Some("audit contracts"));
        assert_eq!((p.limit, p.trust_tier_min), (5, Some(2)));
        // The query alone.
        let p = Params::from_parts(Some("limit=1"), None, &Target::Population).unwrap();
        assert_eq!(p.limit, 1);
        // Unknown parameters in the query string are refused, naming them.
        let e = Params::from_parts(Some("bogus=1"), None, &Target::Population).unwrap_err();
        assert_eq!(
            e,
            BadRequest::parameter("bogus", "unknown DISCOVER parameter")
        );
    }

    #[test]
    fn the_reference_names_are_aliases_on_population_only() {
        let p = Params::from_parts(
            Some("capability=audit&tier=2&owner_domain=Example.org&limit=4"),
            None,
            &Target::Population,
        )
        .unwrap();
        assert_eq!(p.capability_domains, vec!["audit"]);
        assert_eq!(p.trust_tier_min, Some(2));
        assert_eq!(p.org_domain.as_deref(), Some("Example.org"));
        assert_eq!(p.limit, 4);
        assert_eq!(p.terms(), vec!["audit"]);
        // capability adds to capability_domains, once.
        let p = parts(
            Some("capability=tools,audit"),
            &json!({"capability_domains": ["audit"]}),
            &Target::Population,
        )
        .unwrap();
        assert_eq!(p.capability_domains, vec!["audit", "tools"]);
        // Body over query across names: the body's tier wins over the query's trust_tier_min.
        let p = parts(
            Some("trust_tier_min=1"),
            &json!({"parameters": {"tier": 2}}),
            &Target::Population,
        )
        .unwrap();
        assert_eq!(p.trust_tier_min, Some(2));
        // Both names in one source: fine when they agree, 400 naming the alias otherwise.
        assert!(
            parts(
                None,
                &json!({"tier": "2", "trust_tier_min": 2}),
                &Target::Population
            )
            .is_ok()
        );
        let e = parts(
            None,
            &json!({"tier": 1, "trust_tier_min": 2}),
            &Target::Population,
        )
        .unwrap_err();
        assert!(matches!(&e, BadRequest::Parameter { parameter, .. } if parameter == "tier"));
        // Validated like the draft names.
        let e = Params::from_parts(Some("tier=7"), None, &Target::Population).unwrap_err();
        assert!(
            matches!(&e, BadRequest::Parameter { parameter, .. } if parameter == "trust_tier_min")
        );
        // The draft's DISCOVER keeps refusing them.
        for q in ["capability=x", "tier=1", "owner_domain=x"] {
            assert!(
                Params::from_parts(Some(q), None, &Target::Root).is_err(),
                "{q}"
            );
        }
        // agtp-curl's body names the path it was sent to; another path is refused.
        assert!(parts(None, &json!({"target": "population"}), &Target::Population).is_ok());
        assert!(parts(None, &json!({"target": "/"}), &Target::Root).is_ok());
        assert!(parts(None, &json!({"target": "population"}), &Target::Root).is_err());
    }

    #[test]
    fn population_bodies_put_the_result_at_the_top_level() {
        let mut fields = Map::new();
        fields.insert("canonical_id".into(), json!("agt-1"));
        fields.insert("agent_label".into(), json!("one"));
        let mut items = vec![ResultItem {
            rank_score: 0.123_456_789,
            fields,
        }];
        annotate_for_population(&mut items);
        let params = Params::default();
        let result = result_object("qry-1", 1, items, &[], None);
        let body = Value::Object(population_body(Some("t"), &params, result));
        assert_eq!(body["method"], "DISCOVER");
        assert_eq!(body["target"], "population");
        assert_eq!(body["query"]["limit"], 10);
        assert_eq!(body["query_id"], "qry-1");
        assert_eq!(body["total_matches"], 1);
        assert_eq!(body["results"][0]["rank"], 1);
        assert_eq!(body["results"][0]["agent_id"], "agt-1");
        assert_eq!(body["results"][0]["name"], "one");
        assert_eq!(body["results"][0]["score"], 0.123457);
        assert!(body.get("result").is_none());
    }
}
