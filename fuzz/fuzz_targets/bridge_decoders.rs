//! `bridge_decoders`: arbitrary bytes as what the MCP and A2A bridges (`agora_bridge`, Hyperspace
//! spec §10) read from servers and agents nobody here wrote: an A2A Agent Card (shape and JWS
//! signature), an A2A `SendMessage` answer (a message or a task), an A2A error, a message's
//! parts as a tool's arguments; an MCP `tools/call` result, a tool's input schema, an MCP error,
//! a directory answer shown as text, a tool name.
//!
//! Properties checked: nothing panics; a card that passes the shape check has a JSON-RPC URL
//! and each of its skills becomes one tool, with the skill's stable id and the `a2a` capability;
//! no card is ever taken as signed by a key that signed nothing (an unsigned one is taken as
//! unsigned); an MCP tool name is within its length and character set; a mapped MCP result is
//! an object.
#![no_main]

use agora_agtp::signature::AnsSigningKey;
use agora_bridge::a2a::card::{check_card, skill_tools, tool_id};
use agora_bridge::a2a::jws::{Verified, verify_card};
use agora_bridge::a2a::serve::{arguments, single_string_property, skill_of};
use agora_bridge::a2a::task::{from_a2a_error, task_result, tool_result};
use agora_bridge::mcp::result::map_result;
use agora_bridge::mcp_server::{directory_text, input_schema, tool_name, translate_error};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let name = tool_name(text, 64);
        assert!(!name.is_empty() && name.chars().count() <= 64);
        assert!(name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')));
    }
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    // A2A.
    if let Ok(view) = check_card(&v) {
        assert!(!view.jsonrpc_url.is_empty());
        let url = "http://127.0.0.1/card";
        let tools = skill_tools("agent", url, &view, &[], None, false);
        assert_eq!(tools.len(), view.skills.len());
        for (t, skill) in tools.iter().zip(&view.skills) {
            assert_eq!(t.id, tool_id(url, &skill.id));
            assert_eq!(t.id.len(), 32);
            assert!(t.params.capabilities.iter().any(|c| c == "a2a"));
        }
    }
    // A key that signed nothing here: no card is signed by it (an unsigned card is taken as
    // unsigned, never as verified).
    let key = AnsSigningKey::from_secret_bytes(&[7; 32], "fuzz").expect("a valid scalar");
    assert!(!matches!(
        verify_card(&v, &[key.verifying_key()]),
        Ok(Verified::Signed { .. })
    ));
    let _ = tool_result(&v);
    if let Some(task) = v.as_object() {
        let _ = task_result(task);
    }
    let _ = from_a2a_error(&v);
    let _ = skill_of(&v);
    let _ = arguments(&v, v.get("schema"));
    let _ = single_string_property(v.get("schema"));
    // MCP.
    assert!(map_result(&v).is_object());
    let _ = input_schema(&v);
    let _ = directory_text(&v);
    let code = v.get("code").and_then(Value::as_i64).unwrap_or(-32603);
    let message = v.get("message").and_then(Value::as_str).unwrap_or("");
    let _ = translate_error(code, message, v.get("data"));
});
