//! The tool record (Hyperspace spec §4.3 "Tool Primitive"): one tool as `tool.discover`,
//! `tool.listRegistered` and capability cards (§2.4, §7.4) show it, the limits of one tool, and
//! the checks of its fields. Both the tool registry ([`crate::tool`]) and the capability card
//! table ([`crate::card`]) use it; neither imports the other for it.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::payments::Price;

/// One tool as `tool.discover`, `tool.listRegistered` and capability cards show it (§4.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolRecord {
    /// The tool id (`"tool-8f3a2b"`).
    pub id: String,
    /// Short name (`"web-search"`).
    pub name: String,
    /// The peer that runs the tool (may be omitted inside a capability card).
    #[serde(default)]
    pub peer_id: String,
    /// What the tool does.
    pub description: String,
    /// Capability tags (`["search", "scrape"]`).
    pub capabilities: Vec<String>,
    /// `0..=1` (see the module docs for where it comes from).
    pub reputation: f64,
    /// Mean duration, whole milliseconds (0 when unknown).
    pub avg_latency: u64,
    /// The tool's schema, a JSON object (the spec shows `{input, output}` JSON Schemas).
    pub schema: Value,
    /// Its price per invocation, when it has one (the Micropayments primitive, spec §6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::payments::schema::price")]
    pub price: Option<Price>,
    /// Where a bridged tool comes from (an MCP server's tool, an A2A agent's skill); absent for
    /// tools registered with `tool.register`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ToolSource>,
}

/// Where a bridged tool comes from (Agora's addition to the §4.3 record, spec §10): the bridge,
/// the server or agent on the hosting node, the tool's own name there, and what the hosting node
/// verified about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolSource {
    /// The bridge: [`ToolSource::MCP`] or [`ToolSource::A2A`].
    pub bridge: String,
    /// The bridged MCP server's or A2A agent's name on its hosting node.
    pub server: String,
    /// The tool's name on that server (an MCP tool's `name`, an A2A skill's `id`).
    pub name: String,
    /// What the hosting node verified (e.g. `"signed-card"`); absent when nothing was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<String>,
}

impl ToolSource {
    /// `bridge` of a tool bridged from an MCP server.
    pub const MCP: &'static str = "mcp";
    /// `bridge` of a skill bridged from an A2A agent.
    pub const A2A: &'static str = "a2a";
}

/// Memory bounds of [`ToolRegistry`](crate::tool::ToolRegistry) and of one tool (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// Local tools kept.
    pub max_local_tools: usize,
    /// Bytes of a tool id.
    pub max_id_bytes: usize,
    /// Bytes of `name`.
    pub max_name_bytes: usize,
    /// Bytes of `description`.
    pub max_description_bytes: usize,
    /// Entries of `capabilities`.
    pub max_capabilities: usize,
    /// Bytes of one capability.
    pub max_capability_bytes: usize,
    /// Bytes of `schema`, serialized.
    pub max_schema_bytes: usize,
    /// Bytes of a discover `query`.
    pub max_query_bytes: usize,
    /// Tools returned by `tool.discover`.
    pub max_discover_results: usize,
    /// Analytics entries kept.
    pub max_analytics: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            max_local_tools: 256,
            max_id_bytes: 128,
            max_name_bytes: 128,
            max_description_bytes: 4096,
            max_capabilities: 32,
            max_capability_bytes: 64,
            max_schema_bytes: 64 * 1024,
            max_query_bytes: 1024,
            max_discover_results: 100,
            max_analytics: 4096,
        }
    }
}

pub(crate) type FieldError = (String, String);

pub(crate) fn field_error(field: &str, reason: impl Into<String>) -> FieldError {
    (field.to_owned(), reason.into())
}

fn check_text(field: &str, text: &str, max: usize) -> Result<(), FieldError> {
    if text.trim().is_empty() {
        return Err(field_error(field, "must not be empty"));
    }
    if text.len() > max {
        return Err(field_error(field, format!("longer than {max} bytes")));
    }
    Ok(())
}

/// Validates name, description, schema and capabilities; returns the deduplicated capabilities.
pub(crate) fn check_tool_fields(
    name: &str,
    description: &str,
    schema: &Value,
    capabilities: &[String],
    limits: &ToolLimits,
) -> Result<Vec<String>, FieldError> {
    check_text("name", name, limits.max_name_bytes)?;
    check_text("description", description, limits.max_description_bytes)?;
    if !schema.is_object() {
        return Err(field_error("schema", "must be a JSON object"));
    }
    let schema_bytes = serde_json::to_string(schema).map_or(usize::MAX, |text| text.len());
    if schema_bytes > limits.max_schema_bytes {
        return Err(field_error(
            "schema",
            format!("longer than {} bytes", limits.max_schema_bytes),
        ));
    }
    if capabilities.is_empty() {
        return Err(field_error("capabilities", "must not be empty"));
    }
    if capabilities.len() > limits.max_capabilities {
        return Err(field_error(
            "capabilities",
            format!("more than {} entries", limits.max_capabilities),
        ));
    }
    let mut seen = BTreeSet::new();
    let mut kept = Vec::with_capacity(capabilities.len());
    for (i, capability) in capabilities.iter().enumerate() {
        check_text(
            &format!("capabilities[{i}]"),
            capability,
            limits.max_capability_bytes,
        )?;
        if seen.insert(capability.to_ascii_lowercase()) {
            kept.push(capability.clone());
        }
    }
    Ok(kept)
}

/// Validates an advertised tool record (used by [`crate::card`]); `Err((field, reason))`.
pub(crate) fn validate_record(record: &ToolRecord, limits: &ToolLimits) -> Result<(), FieldError> {
    if record.id.is_empty() || record.id.len() > limits.max_id_bytes {
        return Err(field_error(
            "id",
            format!("must be 1..={} bytes", limits.max_id_bytes),
        ));
    }
    if !record.reputation.is_finite() || !(0.0..=1.0).contains(&record.reputation) {
        return Err(field_error("reputation", "must be a number in 0..=1"));
    }
    if let Some(source) = &record.source {
        check_source(source, limits)?;
    }
    check_tool_fields(
        &record.name,
        &record.description,
        &record.schema,
        &record.capabilities,
        limits,
    )
    .map(|_| ())
}

/// Each field of a tool's [`ToolSource`] is 1..=`max_name_bytes` bytes.
pub(crate) fn check_source(source: &ToolSource, limits: &ToolLimits) -> Result<(), FieldError> {
    let fields = [
        ("source.bridge", Some(&source.bridge)),
        ("source.server", Some(&source.server)),
        ("source.name", Some(&source.name)),
        ("source.verified", source.verified.as_ref()),
    ];
    for (field, value) in fields {
        if let Some(value) = value {
            check_text(field, value, limits.max_name_bytes)?;
        }
    }
    Ok(())
}
