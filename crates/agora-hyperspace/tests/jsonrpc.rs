//! JSON-RPC 2.0 framing: jsonrpsee's behaviour on malformed input, case by case,
//! repeated members, exact wire bytes, error codes, and properties over arbitrary input.
#![allow(clippy::unwrap_used)]

use agora_hyperspace::jsonrpc::{
    ErrorResponse, Frame, Id, Notification, Request, Response, RpcCode, RpcError, VERSION,
    encode_batch, handle_frame, parse_frame,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A handler that knows `ping` (answers "pong"), `fail` (−32001 with data, as in spec §11
/// Example 3 style) and `echo` (returns its params); anything else is −32601.
fn handler(request: &Request) -> Result<Value, RpcError> {
    match request.method.as_str() {
        "ping" => Ok(json!("pong")),
        "echo" => Ok(request.params.clone().unwrap_or(Value::Null)),
        "fail" => Err(RpcError::session_not_found()
            .with_message("agent not found")
            .with_data(json!({"agent": "x"}))),
        _ => Err(RpcError::method_not_found()),
    }
}

fn reply(text: &str) -> Option<String> {
    handle_frame(text, handler)
}

fn reply_value(text: &str) -> Value {
    serde_json::from_str(&reply(text).unwrap()).unwrap()
}

/// Asserts that `value` is an error response with `code` and the given id.
fn assert_error(value: &Value, code: i32, id: &Value) {
    assert_eq!(value["jsonrpc"], "2.0", "{value}");
    assert_eq!(value["error"]["code"], code, "{value}");
    assert_eq!(&value["id"], id, "{value}");
    assert!(value.get("result").is_none(), "{value}");
    let name = RpcCode(code).name().unwrap();
    assert_eq!(value["error"]["message"], name, "{value}");
}

// ---------------------------------------------------------------------------------------------
// rust-stack §2.2, one test per row
// ---------------------------------------------------------------------------------------------

#[test]
fn row_jsonrpc_1_0_is_invalid_request_echoing_id() {
    let text = r#"{"jsonrpc":"1.0","method":"ping","id":1}"#;
    assert_eq!(
        reply(text).unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"Invalid Request","data":"jsonrpc must be \"2.0\""}}"#
    );
    // Missing or non-string versions are rejected the same way.
    assert_error(
        &reply_value(r#"{"method":"ping","id":1}"#),
        -32600,
        &json!(1),
    );
    assert_error(
        &reply_value(r#"{"jsonrpc":2.0,"method":"ping","id":1}"#),
        -32600,
        &json!(1),
    );
    assert_error(
        &reply_value(r#"{"jsonrpc":"2.00","method":"ping","id":1}"#),
        -32600,
        &json!(1),
    );
}

#[test]
fn row_fractional_id_is_answered_and_echoed_verbatim() {
    assert_eq!(
        reply(r#"{"jsonrpc":"2.0","method":"ping","id":1.5}"#).unwrap(),
        r#"{"jsonrpc":"2.0","id":1.5,"result":"pong"}"#
    );
    // Every number form comes back as sent, including ones f64 or u64 cannot hold.
    for id in [
        "1.50",
        "1e2",
        "-0",
        "123456789012345678901234567890",
        "1e400",
        "-1.5E-7",
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","method":"ping","id":{id}}}"#);
        assert_eq!(
            reply(&text).unwrap(),
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"pong"}}"#)
        );
    }
}

#[test]
fn row_object_id_is_invalid_request_with_null_id() {
    assert_eq!(
        reply(r#"{"jsonrpc":"2.0","method":"ping","id":{"x":1}}"#).unwrap(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":"id must be a string, a number or null"}}"#
    );
    for id in ["[1]", "true", "false", "[]", "{}"] {
        let text = format!(r#"{{"jsonrpc":"2.0","method":"ping","id":{id}}}"#);
        assert_error(&reply_value(&text), -32600, &Value::Null);
    }
}

#[test]
fn row_notification_gets_no_reply_but_reaches_the_handler() {
    let mut calls = Vec::new();
    let out = handle_frame(r#"{"jsonrpc":"2.0","method":"ping"}"#, |r| {
        calls.push(r.clone());
        Ok(json!("pong"))
    });
    assert_eq!(out, None);
    assert_eq!(calls.len(), 1);
    assert!(calls[0].is_notification());
    // A handler error for a notification is dropped too.
    assert_eq!(reply(r#"{"jsonrpc":"2.0","method":"nope"}"#), None);
    assert_eq!(
        reply(r#"{"jsonrpc":"2.0","method":"fail","params":[]}"#),
        None
    );
}

#[test]
fn row_string_params_are_invalid_params() {
    assert_eq!(
        reply(r#"{"jsonrpc":"2.0","method":"ping","params":"str","id":7}"#).unwrap(),
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Invalid Params","data":"params must be an object or an array"}}"#
    );
    for params in ["null", "1", "true", r#""""#] {
        let text = format!(r#"{{"jsonrpc":"2.0","method":"ping","params":{params},"id":"a"}}"#);
        assert_error(&reply_value(&text), -32602, &json!("a"));
    }
    // The handler never sees them.
    let mut called = false;
    let _ = handle_frame(
        r#"{"jsonrpc":"2.0","method":"ping","params":"str","id":7}"#,
        |_| {
            called = true;
            Ok(Value::Null)
        },
    );
    assert!(!called);
}

#[test]
fn row_truncated_json_is_parse_error_with_null_id() {
    let expected = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse Error","data":"invalid JSON"}}"#;
    for text in [
        r#"{"jsonrpc":"2.0","method":"ping","id":1"#,
        r#"[{"jsonrpc":"2.0","method":"ping","id":1},"#,
        r#"{"jsonrpc":"2.0","method":"ping","id":1}}"#,
        "",
        "   ",
        "nul",
        r#"{"a":1,}"#,
        "\u{feff}{}",
    ] {
        assert_eq!(reply(text).unwrap(), expected, "{text:?}");
    }
}

#[test]
fn row_empty_batch_is_single_invalid_request() {
    assert_eq!(
        reply("[]").unwrap(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":"empty batch"}}"#
    );
    assert_eq!(reply(" [ ] ").unwrap(), reply("[]").unwrap());
    assert!(matches!(parse_frame("[]"), Frame::Single(Err(_))));
}

#[test]
fn row_mixed_batch_answers_request_and_bad_element_only() {
    let text = r#"[{"jsonrpc":"2.0","method":"ping","id":1},{"jsonrpc":"2.0","method":"ping"},1]"#;
    assert_eq!(
        reply(text).unwrap(),
        concat!(
            r#"[{"jsonrpc":"2.0","id":1,"result":"pong"},"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":"request must be an object"}}]"#
        )
    );
}

#[test]
fn row_custom_code_and_data_pass_through_exactly() {
    assert_eq!(
        reply(r#"{"jsonrpc":"2.0","method":"fail","id":"q"}"#).unwrap(),
        r#"{"jsonrpc":"2.0","id":"q","error":{"code":-32001,"message":"agent not found","data":{"agent":"x"}}}"#
    );
    // Spec §11 Example 3, with the message as the example writes it.
    let out = handle_frame(
        r#"{"jsonrpc":"2.0","method":"guard.consumeBudget","params":{"sessionId":"sess-a8c3f210","amount":5.00,"description":"large-model-inference"},"id":12}"#,
        |_| {
            Err(RpcError::budget_exceeded()
                .with_message("Budget exceeded")
                .with_data(json!({"remaining": 0.12, "requested": 5.0, "limit": 1.0})))
        },
    );
    assert_eq!(
        out.unwrap(),
        r#"{"jsonrpc":"2.0","id":12,"error":{"code":-32002,"message":"Budget exceeded","data":{"limit":1.0,"remaining":0.12,"requested":5.0}}}"#
    );
    // An unknown code survives untouched.
    let out = handle_frame(r#"{"jsonrpc":"2.0","method":"x","id":1}"#, |_| {
        Err(RpcError::new(RpcCode(-31999), "mine").with_data(json!([1, null])))
    });
    assert_eq!(
        out.unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-31999,"message":"mine","data":[1,null]}}"#
    );
}

#[test]
fn row_unknown_method_is_method_not_found_when_the_handler_says_so() {
    assert_eq!(
        reply(r#"{"jsonrpc":"2.0","method":"state.nope","id":3}"#).unwrap(),
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"Method Not Found"}}"#
    );
}

// ---------------------------------------------------------------------------------------------
// Other framing rules
// ---------------------------------------------------------------------------------------------

#[test]
fn repeated_members_are_rejected() {
    // A repeated `id` makes the id unreadable: null.
    assert_error(
        &reply_value(r#"{"jsonrpc":"2.0","method":"ping","id":1,"id":2}"#),
        -32600,
        &Value::Null,
    );
    // Any other repeated member echoes the id, even if the copies agree.
    for text in [
        r#"{"jsonrpc":"2.0","method":"ping","method":"evil","id":1}"#,
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"ping","id":1}"#,
        r#"{"jsonrpc":"2.0","method":"ping","params":{},"params":[],"id":1}"#,
        r#"{"jsonrpc":"2.0","method":"ping","x":1,"x":1,"id":1}"#,
        // The same name written with an escape is the same member.
        r#"{"jsonrpc":"2.0","method":"ping","\u006dethod":"evil","id":1}"#,
    ] {
        assert_error(&reply_value(text), -32600, &json!(1));
    }
    // Inside params, at any depth: −32602.
    for text in [
        r#"{"jsonrpc":"2.0","method":"echo","params":{"a":1,"a":2},"id":1}"#,
        r#"{"jsonrpc":"2.0","method":"echo","params":[{"b":{"a":1,"a":1}}],"id":1}"#,
    ] {
        let value = reply_value(text);
        assert_error(&value, -32602, &json!(1));
        assert_eq!(value["error"]["data"], "repeated member in params");
    }
    // Repeated names in different objects are fine.
    assert_eq!(
        reply(r#"{"jsonrpc":"2.0","method":"echo","params":{"a":{"a":1},"b":{"a":2}},"id":1}"#)
            .unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"a":{"a":1},"b":{"a":2}}}"#
    );
}

#[test]
fn malformed_requests_without_id_are_still_answered_with_null_id() {
    // The JSON-RPC 2.0 examples: `{"foo":"boo"}`, `{"method":1,"params":"bar"}` and `[1,2,3]`.
    assert_error(&reply_value(r#"{"foo":"boo"}"#), -32600, &Value::Null);
    assert_error(
        &reply_value(r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#),
        -32600,
        &Value::Null,
    );
    let batch = reply_value("[1,2,3]");
    assert_eq!(batch.as_array().unwrap().len(), 3);
    for element in batch.as_array().unwrap() {
        assert_error(element, -32600, &Value::Null);
    }
    // A notification with bad params is not a valid notification.
    assert_error(
        &reply_value(r#"{"jsonrpc":"2.0","method":"ping","params":"x"}"#),
        -32602,
        &Value::Null,
    );
}

#[test]
fn non_object_frames_are_invalid_requests() {
    for text in [
        "1",
        r#""hello""#,
        "null",
        "true",
        "[[]]",
        r#"[[{"jsonrpc":"2.0"}]]"#,
    ] {
        let out = reply(text).unwrap();
        let value: Value = serde_json::from_str(&out).unwrap();
        let items = match value {
            Value::Array(items) => items,
            single => vec![single],
        };
        for item in &items {
            assert_error(item, -32600, &Value::Null);
        }
    }
}

#[test]
fn method_must_be_a_string() {
    assert_error(
        &reply_value(r#"{"jsonrpc":"2.0","id":4}"#),
        -32600,
        &json!(4),
    );
    assert_error(
        &reply_value(r#"{"jsonrpc":"2.0","method":null,"id":4}"#),
        -32600,
        &json!(4),
    );
    assert_error(
        &reply_value(r#"{"jsonrpc":"2.0","method":["a"],"id":4}"#),
        -32600,
        &json!(4),
    );
}

#[test]
fn ids_of_every_allowed_kind_are_echoed_exactly() {
    for id in [
        r#""abc""#,
        r#""\u00e9\n""#,
        r#""""#,
        "null",
        "0",
        "-7",
        "18446744073709551616",
    ] {
        let text = format!(r#"{{"id" : {id} , "jsonrpc":"2.0","method":"ping"}}"#);
        assert_eq!(
            reply(&text).unwrap(),
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"pong"}}"#)
        );
    }
    // A string id serde_json cannot decode (lone surrogate) is not echoed.
    assert_error(
        &reply_value(r#"{"jsonrpc":"2.0","method":"ping","id":"\ud800"}"#),
        -32600,
        &Value::Null,
    );
}

#[test]
fn array_params_unknown_members_and_whitespace_are_accepted() {
    let Frame::Single(Ok(request)) = parse_frame(
        " \n{ \"jsonrpc\" : \"2.0\" , \"method\" : \"tool.invoke\" , \"params\" : [1, {\"a\": 2}] , \"id\" : 9 , \"extra\" : {\"deep\": [[[]]]} }\t",
    ) else {
        panic!("expected a single valid request");
    };
    assert_eq!(
        request,
        Request {
            id: Some(Id::from(9u64)),
            method: "tool.invoke".into(),
            params: Some(json!([1, {"a": 2}])),
        }
    );
}

#[test]
fn spec_example_1_create_session_parses() {
    let text = r#"{
      "jsonrpc": "2.0",
      "method": "state.createSession",
      "params": { "agentName": "research-agent", "agentType": "autonomous", "model": "gemma-3-12b" },
      "id": 1
    }"#;
    let out = handle_frame(text, |r| {
        assert_eq!(r.method, "state.createSession");
        assert_eq!(r.params.as_ref().unwrap()["agentName"], "research-agent");
        Ok(json!({"sessionId": "sess-a8c3f210", "createdAt": "2026-03-18T14:00:00.000Z"}))
    });
    assert_eq!(
        out.unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"createdAt":"2026-03-18T14:00:00.000Z","sessionId":"sess-a8c3f210"}}"#
    );
}

#[test]
fn batches_keep_order_and_drop_notifications() {
    let text = r#"[
        {"jsonrpc":"2.0","method":"ping","id":"a"},
        {"jsonrpc":"2.0","method":"ping"},
        {"jsonrpc":"2.0","method":"nope","id":"b"},
        {"jsonrpc":"1.0","method":"ping","id":"c"},
        {"jsonrpc":"2.0","method":"echo","params":{"k":[1]},"id":"d"}
    ]"#;
    assert_eq!(
        reply(text).unwrap(),
        concat!(
            r#"[{"jsonrpc":"2.0","id":"a","result":"pong"},"#,
            r#"{"jsonrpc":"2.0","id":"b","error":{"code":-32601,"message":"Method Not Found"}},"#,
            r#"{"jsonrpc":"2.0","id":"c","error":{"code":-32600,"message":"Invalid Request","data":"jsonrpc must be \"2.0\""}},"#,
            r#"{"jsonrpc":"2.0","id":"d","result":{"k":[1]}}]"#
        )
    );
    // All notifications: nothing at all, not "[]"; but every handler call still happens.
    let mut calls = 0;
    let out = handle_frame(
        r#"[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b","params":[]}]"#,
        |_| {
            calls += 1;
            Err(RpcError::internal_error())
        },
    );
    assert_eq!(out, None);
    assert_eq!(calls, 2);
    // A one-element batch is still answered with an array.
    assert_eq!(
        reply(r#"[{"jsonrpc":"2.0","method":"ping","id":1}]"#).unwrap(),
        r#"[{"jsonrpc":"2.0","id":1,"result":"pong"}]"#
    );
}

#[test]
fn deep_nesting_does_not_overflow_the_stack() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    // In an ignored member: only scanned, accepted.
    let text = format!(
        r#"{{"jsonrpc":"2.0","method":"ping","x":{},"id":1}}"#,
        deep(100_000)
    );
    assert_eq!(
        reply(&text).unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"result":"pong"}"#
    );
    // In params: beyond serde_json's recursion limit, −32602.
    let text = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":{},"id":1}}"#,
        deep(100_000)
    );
    assert_error(&reply_value(&text), -32602, &json!(1));
    // As a batch element: not an object.
    let text = format!("[{}]", deep(100_000));
    assert_error(&reply_value(&text)[0], -32600, &Value::Null);
    // Modest nesting in params is fine.
    let text = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":{},"id":1}}"#,
        deep(100)
    );
    assert_eq!(
        reply(&text).unwrap(),
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":{}}}"#, deep(100))
    );
}

#[test]
fn parse_frame_exposes_errors_for_async_handling() {
    let Frame::Batch(entries) = parse_frame(
        r#"[{"jsonrpc":"2.0","method":"ping","id":1},{"jsonrpc":"2.0","method":"ping","params":1,"id":2}]"#,
    ) else {
        panic!("expected a batch");
    };
    assert_eq!(entries.len(), 2);
    let request = entries[0].as_ref().unwrap();
    let response = request.reply(Ok(json!(true))).unwrap();
    assert_eq!(
        response.to_json(),
        r#"{"jsonrpc":"2.0","id":1,"result":true}"#
    );
    let rejected = entries[1].clone().unwrap_err();
    assert_eq!(rejected.id, Id::from(2u64));
    assert_eq!(rejected.error.code, RpcCode::INVALID_PARAMS);
    let responses = vec![response, Response::from(rejected)];
    assert_eq!(
        encode_batch(&responses).unwrap(),
        concat!(
            r#"[{"jsonrpc":"2.0","id":1,"result":true},"#,
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"Invalid Params","data":"params must be an object or an array"}}]"#
        )
    );
    assert_eq!(encode_batch(&[]), None);
    // A notification has no reply.
    let notification = Request {
        id: None,
        method: "ping".into(),
        params: None,
    };
    assert_eq!(notification.reply(Ok(Value::Null)), None);
}

// ---------------------------------------------------------------------------------------------
// Exact encoding
// ---------------------------------------------------------------------------------------------

#[test]
fn response_encoding_is_exact() {
    assert_eq!(
        Response::ok(Id::from(1u64), json!({"a": [1, 2.5, "x"], "b": null})).to_json(),
        r#"{"jsonrpc":"2.0","id":1,"result":{"a":[1,2.5,"x"],"b":null}}"#
    );
    assert_eq!(
        Response::ok(Id::from("req-1"), Value::Null).to_json(),
        r#"{"jsonrpc":"2.0","id":"req-1","result":null}"#
    );
    assert_eq!(
        Response::err(Id::null(), RpcError::parse_error()).to_json(),
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse Error"}}"#
    );
    assert_eq!(
        Response::err(
            Id::from(-3i64),
            RpcError::rate_limited()
                .with_message("slow \"down\"\n\u{1}é")
                .with_data(json!(null))
        )
        .to_json(),
        r#"{"jsonrpc":"2.0","id":-3,"error":{"code":-32003,"message":"slow \"down\"\n\u0001é","data":null}}"#
    );
    // Display and ErrorResponse agree with to_json.
    let response = Response::err(Id::from(5u32), RpcError::loop_detected());
    assert_eq!(response.to_string(), response.to_json());
    let rejected = ErrorResponse::new(Id::from(5i32), RpcError::loop_detected());
    assert_eq!(rejected.to_json(), response.to_json());
}

#[test]
fn string_escaping_matches_serde_json() {
    let tricky: String = (0u8..0x80)
        .map(char::from)
        .chain("é😀\u{2028}\u{7f}".chars())
        .collect();
    assert_eq!(
        Id::string(&tricky).as_json(),
        serde_json::to_string(&tricky).unwrap()
    );
    let message = Response::err(
        Id::null(),
        RpcError::internal_error().with_message(tricky.clone()),
    );
    let parsed: Value = serde_json::from_str(&message.to_json()).unwrap();
    assert_eq!(parsed["error"]["message"], Value::String(tricky));
}

#[test]
fn notification_and_request_encoding_is_exact() {
    assert_eq!(
        Notification::new(
            "improving.trajectory",
            json!({"trajectoryId": "traj-b4d1e8c2"})
        )
        .to_json(),
        r#"{"jsonrpc":"2.0","method":"improving.trajectory","params":{"trajectoryId":"traj-b4d1e8c2"}}"#
    );
    assert_eq!(
        Notification {
            method: "state.tick".into(),
            params: None
        }
        .to_json(),
        r#"{"jsonrpc":"2.0","method":"state.tick"}"#
    );
    let request = Request {
        id: Some(Id::from_json("1.5").unwrap()),
        method: "tool.discover".into(),
        params: Some(json!({"query": "web search"})),
    };
    assert_eq!(
        request.to_json(),
        r#"{"jsonrpc":"2.0","id":1.5,"method":"tool.discover","params":{"query":"web search"}}"#
    );
    // A request's encoding parses back to itself.
    assert_eq!(parse_frame(&request.to_json()), Frame::Single(Ok(request)));
    assert_eq!(VERSION, "2.0");
}

#[test]
fn id_constructors_and_accessors() {
    assert_eq!(Id::from(7u64).as_json(), "7");
    assert_eq!(Id::from(-7i64).as_json(), "-7");
    assert_eq!(Id::from("a\"b").as_json(), r#""a\"b""#);
    assert_eq!(Id::from(String::from("x")).to_string(), r#""x""#);
    assert!(Id::null().is_null());
    assert!(Id::from(1u32).is_number());
    assert!(Id::from("1").is_string());
    assert_eq!(Id::from_json("1e2").unwrap().as_json(), "1e2");
    assert_eq!(Id::from_json("1e2").unwrap().to_value(), Some(json!(100.0)));
    assert_eq!(Id::from_json("1e400").unwrap().to_value(), None);
    assert_eq!(Id::from_json("null"), Some(Id::null()));
    for bad in ["true", "{}", "[]", " 1", "1 ", "", "01", r#""\ud800""#] {
        assert_eq!(Id::from_json(bad), None, "{bad:?}");
    }
    assert_ne!(Id::from_json("1").unwrap(), Id::from_json("1.0").unwrap());
    assert_eq!(format!("{:?}", Id::from(1u64)), "Id(1)");
}

// ---------------------------------------------------------------------------------------------
// Error codes
// ---------------------------------------------------------------------------------------------

#[test]
fn rpc_code_names_match_spec_section_8() {
    let table = [
        (RpcCode::PARSE_ERROR, -32700, "Parse Error", "PARSE_ERROR"),
        (
            RpcCode::INVALID_REQUEST,
            -32600,
            "Invalid Request",
            "INVALID_REQUEST",
        ),
        (
            RpcCode::METHOD_NOT_FOUND,
            -32601,
            "Method Not Found",
            "METHOD_NOT_FOUND",
        ),
        (
            RpcCode::INVALID_PARAMS,
            -32602,
            "Invalid Params",
            "INVALID_PARAMS",
        ),
        (
            RpcCode::INTERNAL_ERROR,
            -32603,
            "Internal Error",
            "INTERNAL_ERROR",
        ),
        (
            RpcCode::SESSION_NOT_FOUND,
            -32001,
            "Session Not Found",
            "SESSION_NOT_FOUND",
        ),
        (
            RpcCode::BUDGET_EXCEEDED,
            -32002,
            "Budget Exceeded",
            "BUDGET_EXCEEDED",
        ),
        (
            RpcCode::RATE_LIMITED,
            -32003,
            "Rate Limited",
            "RATE_LIMITED",
        ),
        (
            RpcCode::SAFETY_VIOLATION,
            -32004,
            "Safety Violation",
            "SAFETY_VIOLATION",
        ),
        (
            RpcCode::LOOP_DETECTED,
            -32005,
            "Loop Detected",
            "LOOP_DETECTED",
        ),
        (
            RpcCode::PEER_UNAVAILABLE,
            -32006,
            "Peer Unavailable",
            "PEER_UNAVAILABLE",
        ),
        (
            RpcCode::REPLICATION_FAILED,
            -32007,
            "Replication Failed",
            "REPLICATION_FAILED",
        ),
        (
            RpcCode::TRAJECTORY_REJECTED,
            -32008,
            "Trajectory Rejected",
            "TRAJECTORY_REJECTED",
        ),
    ];
    for (code, number, name, konst) in table {
        assert_eq!(code, RpcCode(number));
        assert_eq!(i32::from(code), number);
        assert_eq!(RpcCode::from(number), code);
        assert_eq!(code.name(), Some(name));
        assert_eq!(code.default_message(), name);
        assert_eq!(format!("{code:?}"), konst);
        assert_eq!(code.to_string(), format!("{number} ({name})"));
        let error = RpcError::from(code);
        assert_eq!(error, RpcError::new(code, name));
        assert_eq!(error.data, None);
    }
    let constructors = [
        RpcError::parse_error(),
        RpcError::invalid_request(),
        RpcError::method_not_found(),
        RpcError::invalid_params(),
        RpcError::internal_error(),
        RpcError::session_not_found(),
        RpcError::budget_exceeded(),
        RpcError::rate_limited(),
        RpcError::safety_violation(),
        RpcError::loop_detected(),
        RpcError::peer_unavailable(),
        RpcError::replication_failed(),
        RpcError::trajectory_rejected(),
    ];
    for ((code, ..), error) in table.iter().zip(constructors) {
        assert_eq!(error.code, *code);
        assert_eq!(Some(error.message.as_str()), code.name());
    }
}

#[test]
fn unknown_rpc_codes_are_preserved() {
    let code = RpcCode(-32050);
    assert_eq!(code.name(), None);
    assert_eq!(format!("{code:?}"), "-32050");
    assert_eq!(code.to_string(), "-32050");
    assert_eq!(code.default_message(), "Server Error");
    assert_eq!(RpcCode(42).default_message(), "Unknown Error");
    assert_eq!(RpcCode(-32000).default_message(), "Server Error");
    assert_eq!(RpcCode(-32100).default_message(), "Unknown Error");
    assert_eq!(serde_json::to_string(&code).unwrap(), "-32050");
    assert_eq!(serde_json::from_str::<RpcCode>("-32050").unwrap(), code);
    let error = RpcError::from_code(code).with_data(json!(1));
    assert_eq!(error.to_string(), "JSON-RPC error -32050: Server Error");
    assert_eq!(
        Response::err(Id::from(1u64), error).to_json(),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32050,"message":"Server Error","data":1}}"#
    );
    assert_eq!(
        format!("{:?}", RpcError::budget_exceeded()),
        r#"RpcError { code: BUDGET_EXCEEDED, message: "Budget Exceeded", data: None }"#
    );
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// Arbitrary JSON values with any finite float.
fn arb_json() -> impl Strategy<Value = Value> {
    arb_json_with(any::<f64>().prop_filter("finite", |f| f.is_finite()))
}

/// Arbitrary JSON values whose floats survive serde_json's text round trip exactly (serde_json
/// without `float_roundtrip` may move a parsed float by one ulp).
fn arb_exact_json() -> impl Strategy<Value = Value> {
    arb_json_with((-1_000_000i32..1_000_000).prop_map(|n| f64::from(n) / 8.0))
}

fn arb_json_with(float: impl Strategy<Value = f64> + 'static) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        float.prop_map(Value::from),
        ".{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Raw id texts that are valid ids, in several number and string forms.
fn arb_id_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| format!("{n}.5")),
        (1u32..1000).prop_map(|n| format!("{n}e-3")),
        "[a-z0-9 ]{0,10}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just("null".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn handle_frame_never_panics_on_arbitrary_strings(text in ".*") {
        let _ = handle_frame(&text, handler);
    }

    #[test]
    fn handle_frame_never_panics_on_arbitrary_json(value in arb_json()) {
        let text = value.to_string();
        if let Some(out) = handle_frame(&text, handler) {
            // Whatever comes back is valid JSON.
            let _: Value = serde_json::from_str(&out).unwrap();
        }
    }

    #[test]
    fn handle_frame_never_panics_on_json_like_bytes(
        text in r#"[\[\]{}":,0-9a-z.\\ e+-]{0,40}"#
    ) {
        let _ = handle_frame(&text, handler);
    }

    #[test]
    fn every_request_gets_exactly_one_response_with_its_id(
        entries in prop::collection::vec(
            (any::<bool>(), arb_id_text(), prop_oneof![Just("ping"), Just("echo"), Just("fail"), Just("nope")], arb_json()),
            1..12,
        )
    ) {
        // Make ids unique by suffixing the index to string ids and skipping repeats.
        let mut seen = std::collections::BTreeSet::new();
        let mut expected = Vec::new();
        let mut texts = Vec::new();
        for (i, (notify, id, method, params)) in entries.into_iter().enumerate() {
            let params = match params {
                p @ (Value::Object(_) | Value::Array(_)) => format!(r#","params":{p}"#),
                _ => String::new(),
            };
            if notify {
                texts.push(format!(r#"{{"jsonrpc":"2.0","method":"{method}"{params}}}"#));
            } else {
                let id = match id.strip_prefix('"') {
                    Some(rest) => format!("\"{i}-{rest}"),
                    None => id,
                };
                if !seen.insert(id.clone()) {
                    continue;
                }
                texts.push(format!(r#"{{"jsonrpc":"2.0","method":"{method}"{params},"id":{id}}}"#));
                expected.push((id, method));
            }
        }
        let text = format!("[{}]", texts.join(","));
        let mut calls = 0;
        let out = handle_frame(&text, |r| { calls += 1; handler(r) });
        prop_assert_eq!(calls, texts.len());
        let Some(out) = out else {
            prop_assert!(expected.is_empty());
            return Ok(());
        };
        let replies: Vec<Value> = serde_json::from_str(&out).unwrap();
        prop_assert_eq!(replies.len(), expected.len());
        // Batch replies are in request order; ids are echoed byte for byte.
        let raw: Vec<Box<serde_json::value::RawValue>> = serde_json::from_str(&out).unwrap();
        for ((reply, raw), (id, method)) in replies.iter().zip(&raw).zip(&expected) {
            let prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"#);
            prop_assert!(raw.get().starts_with(&prefix), "{} vs {}", raw.get(), prefix);
            match *method {
                "ping" | "echo" => prop_assert!(reply.get("result").is_some()),
                "fail" => prop_assert_eq!(&reply["error"]["code"], -32001),
                _ => prop_assert_eq!(&reply["error"]["code"], -32601),
            }
        }
    }

    #[test]
    fn single_request_reply_echoes_id_text(id in arb_id_text()) {
        let text = format!(r#"{{"jsonrpc":"2.0","method":"ping","id":{id}}}"#);
        prop_assert_eq!(
            handle_frame(&text, handler),
            Some(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"pong"}}"#))
        );
    }

    #[test]
    fn request_encoding_round_trips(
        id in prop::option::of(arb_id_text()),
        method in ".{0,12}",
        params in prop::option::of(arb_exact_json().prop_filter("structured", |v| v.is_object() || v.is_array())),
    ) {
        let request = Request { id: id.map(|t| Id::from_json(&t).unwrap()), method, params };
        prop_assert_eq!(parse_frame(&request.to_json()), Frame::Single(Ok(request)));
    }
}
