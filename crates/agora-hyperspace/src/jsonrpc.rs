//! JSON-RPC 2.0 framing for the Hyperspace WebSocket API, sans IO.
//!
//! This module owns everything between one WebSocket text frame and the method handlers: it
//! classifies a frame (single request, batch, or garbage), validates each request object, encodes
//! responses, batch replies and server-pushed notifications byte for byte, and defines the wire
//! error codes. It owns no sockets, no tasks and no method semantics: the node calls
//! [`handle_frame`] (or [`parse_frame`] and [`Request::reply`] when its handlers are async) once per
//! text frame and writes the returned text back, if any.
//!
//! Spec references (the Hyperspace Gossiping Agents Protocol):
//!
//! - §2.2 "JSON-RPC 2.0 Transport": request `{jsonrpc, method, params?, id}` and response
//!   `{jsonrpc, result?, error?: {code, message, data?}, id}` over `ws://host:3100`.
//! - §3 "Protocol Messages": method names are `{primitive}.{action}`; this module does not check
//!   them, an unknown method is the handler's [`RpcError::method_not_found`].
//! - §8 "Error Codes": the names and numbers of [`RpcCode`]'s named constants.
//! - §11 "Wire Format Examples", Example 3: an error with `data` passed through unchanged.
//!
//! The framing rules (batches, notifications, the null id on unreadable requests) come from the
//! JSON-RPC 2.0 specification, and the malformed-input cases from jsonrpsee's behaviour on them,
//! a table of cases which this dispatcher passes row by row (see `tests/jsonrpc.rs`).
//!
//! # What the framing layer answers by itself
//!
//! | input | reply |
//! |---|---|
//! | not JSON (truncated, trailing garbage, lone `"`…) | −32700, id `null` |
//! | `[]` | one −32600, id `null` (not an array) |
//! | a frame or batch element that is not an object | −32600, id `null` |
//! | `id` of type object, array or boolean, or a repeated `id` | −32600, id `null` |
//! | a repeated member, `jsonrpc` not exactly `"2.0"`, `method` missing or not a string | −32600, echoing the id |
//! | `params` present but not an object or array (including `null`) | −32602, echoing the id |
//! | a repeated member anywhere inside `params`, or `params` nested deeper than 128 levels | −32602, echoing the id |
//!
//! Every framing error carries a short fixed English sentence as `data` (a JSON string) saying which
//! rule failed; the `message` is always the §8 name.
//!
//! # Important discrepancies
//!
//! - **Fractional and unusual ids are echoed verbatim.** jsonrpsee 0.26 sends *no reply* to
//!   `"id":1.5`. JSON-RPC 2.0 only says numbers "SHOULD NOT contain fractional parts", so a reply is
//!   still required; we keep every id as its raw JSON text ([`Id`]) and echo it byte for byte:
//!   `1.5`, `1e2`, `-0` and integers beyond 64 bits come back exactly as sent.
//! - **Object, array and boolean ids are invalid, not notifications.** jsonrpsee treats
//!   `"id":{"x":1}` as a notification and stays silent; we answer −32600 with id `null`.
//! - **Non-structured `params` are −32602, not ignored.** jsonrpsee calls the method with
//!   `"params":"str"`. JSON-RPC 2.0 requires an array or object; the conformance table allows
//!   −32600 or −32602 and we pick −32602 "Invalid Params" because the request is otherwise readable
//!   and its id is echoed. `"params":null` is treated the same way (it is not structured), where
//!   some implementations read it as absent. The checks run in the order id, repeated members,
//!   `jsonrpc`, `method`, `params`, so `{"method":1,"params":"bar"}` is −32600 as in the JSON-RPC
//!   2.0 examples.
//! - **Repeated members are rejected.** RFC 8259 leaves duplicate names undefined and
//!   `serde_json::Value` silently keeps the last one; two parsers disagreeing on which `method` or
//!   `id` a frame carries is a smuggling risk, so a repeated member of the request object is
//!   −32600 and one anywhere inside `params` is −32602. Unknown members of the request object are
//!   ignored.
//! - **Malformed requests without an id are answered.** An object that fails validation is not a
//!   valid Request, hence not a Notification, so it gets an error with id `null` (as in the JSON-RPC
//!   2.0 examples `{"foo":"boo"}` and `[1,2,3]`). Only *valid* notifications are silent, and a
//!   handler's error for a notification is dropped.
//! - **The error-code range −32001..−32099 means what §8 says.** jsonrpsee uses −32001 for "unknown
//!   error", −32005 for "batches not supported", −32006/−32007/−32008 for its subscription and
//!   size limits; in Hyperspace those are Loop Detected, Peer Unavailable, Replication Failed and
//!   Trajectory Rejected. This layer itself only ever emits −32700, −32600 and −32602; everything
//!   else comes from the handler. Unknown codes (from peers or future spec versions) are preserved.
//! - **Differences from the Hyperspace spec text itself.** §2.2 types `params?: object` and
//!   `id: string | number`; we follow JSON-RPC 2.0 and also accept array params (a handler that
//!   wants an object answers −32602) and a `null` id (echoed as `null`). §8 has no −32603; we take
//!   [`RpcCode::INTERNAL_ERROR`] "Internal Error" from JSON-RPC 2.0. Example 3 writes the message
//!   as "Budget exceeded" while the §8 table says "Budget Exceeded": default messages use the §8
//!   table and a handler can override them with [`RpcError::with_message`]. The §2.2 examples put
//!   `id` last; we emit `jsonrpc`, `id`, then `result` or `error` (member order is insignificant).
//! - **Limits belong to the transport.** Frame size and batch length limits are the node's job
//!   (before calling [`parse_frame`]); this layer accepts any nesting depth in members it ignores and
//!   is bounded by serde_json's recursion limit (128) where it builds values.

use std::collections::BTreeSet;
use std::fmt::{self, Write as _};

use serde::Serialize;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// The value of the `jsonrpc` member in every request, response and notification.
pub const VERSION: &str = "2.0";

// ---------------------------------------------------------------------------------------------
// Error codes
// ---------------------------------------------------------------------------------------------

/// A JSON-RPC error code: an open newtype so codes this crate does not name are preserved.
///
/// The named constants are the JSON-RPC 2.0 codes and the Hyperspace application codes of spec §8.
/// `Debug` prints the constant's name (`BUDGET_EXCEEDED`) or, for unknown codes, the number;
/// `Display` prints the number followed by the §8 name in parentheses when there is one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct RpcCode(pub i32);

macro_rules! rpc_codes {
    ($($(#[$doc:meta])* $konst:ident = $value:literal, $name:literal;)*) => {
        impl RpcCode {
            $($(#[$doc])* pub const $konst: Self = Self($value);)*

            /// The spec name of this code ("Budget Exceeded"), or `None` for a code this crate does
            /// not name.
            #[must_use]
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($name),)*
                    _ => None,
                }
            }

            const fn const_name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some(stringify!($konst)),)*
                    _ => None,
                }
            }
        }
    };
}

rpc_codes! {
    /// −32700: the frame is not valid JSON (JSON-RPC 2.0; spec §8 "Invalid JSON").
    PARSE_ERROR = -32700, "Parse Error";
    /// −32600: the JSON is not a valid request object (spec §8 "Missing required fields").
    INVALID_REQUEST = -32600, "Invalid Request";
    /// −32601: the method does not exist (spec §8 "Unknown primitive method").
    METHOD_NOT_FOUND = -32601, "Method Not Found";
    /// −32602: invalid method parameters (spec §8 "Wrong parameter types").
    INVALID_PARAMS = -32602, "Invalid Params";
    /// −32603: internal JSON-RPC error (JSON-RPC 2.0 §5.1; not in the Hyperspace §8 table).
    INTERNAL_ERROR = -32603, "Internal Error";
    /// −32001: invalid session id (spec §8).
    SESSION_NOT_FOUND = -32001, "Session Not Found";
    /// −32002: the operation would exceed the budget (spec §8, §11 Example 3).
    BUDGET_EXCEEDED = -32002, "Budget Exceeded";
    /// −32003: too many requests (spec §8).
    RATE_LIMITED = -32003, "Rate Limited";
    /// −32004: content policy violation (spec §8).
    SAFETY_VIOLATION = -32004, "Safety Violation";
    /// −32005: recursive loop detected (spec §8).
    LOOP_DETECTED = -32005, "Loop Detected";
    /// −32006: the target peer is not reachable (spec §8).
    PEER_UNAVAILABLE = -32006, "Peer Unavailable";
    /// −32007: a memory write did not meet the replication factor (spec §8).
    REPLICATION_FAILED = -32007, "Replication Failed";
    /// −32008: the trajectory failed validation (spec §8).
    TRAJECTORY_REJECTED = -32008, "Trajectory Rejected";
}

impl RpcCode {
    /// The message used when none is given: the §8 name, "Server Error" for other codes in the
    /// JSON-RPC 2.0 implementation-defined range −32099..=−32000, and "Unknown Error" otherwise.
    #[must_use]
    pub const fn default_message(self) -> &'static str {
        match self.name() {
            Some(name) => name,
            None if self.0 >= -32099 && self.0 <= -32000 => "Server Error",
            None => "Unknown Error",
        }
    }
}

impl fmt::Debug for RpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.const_name() {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.0),
        }
    }
}

impl fmt::Display for RpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{} ({name})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

impl From<i32> for RpcCode {
    fn from(code: i32) -> Self {
        Self(code)
    }
}

impl From<RpcCode> for i32 {
    fn from(code: RpcCode) -> Self {
        code.0
    }
}

// ---------------------------------------------------------------------------------------------
// Error objects
// ---------------------------------------------------------------------------------------------

/// The `error` member of a response: `{"code":…,"message":"…","data":…}`.
///
/// Handlers return it; the framing layer builds it for malformed frames. `data` is passed through
/// unchanged and omitted from the wire when `None`.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, serde::Deserialize)]
#[error("JSON-RPC error {}: {message}", code.0)]
pub struct RpcError {
    /// The error code.
    pub code: RpcCode,
    /// A short description; defaults to the §8 name of the code.
    pub message: String,
    /// Extra information for the client, sent as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with the given code and message and no data.
    #[must_use]
    pub fn new(code: RpcCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// An error with the given code, its [default message](RpcCode::default_message) and no data.
    #[must_use]
    pub fn from_code(code: RpcCode) -> Self {
        Self::new(code, code.default_message())
    }

    /// Replaces the message.
    #[must_use]
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Attaches `data`.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// −32700 "Parse Error".
    #[must_use]
    pub fn parse_error() -> Self {
        Self::from_code(RpcCode::PARSE_ERROR)
    }

    /// −32600 "Invalid Request".
    #[must_use]
    pub fn invalid_request() -> Self {
        Self::from_code(RpcCode::INVALID_REQUEST)
    }

    /// −32601 "Method Not Found".
    #[must_use]
    pub fn method_not_found() -> Self {
        Self::from_code(RpcCode::METHOD_NOT_FOUND)
    }

    /// −32602 "Invalid Params".
    #[must_use]
    pub fn invalid_params() -> Self {
        Self::from_code(RpcCode::INVALID_PARAMS)
    }

    /// −32603 "Internal Error".
    #[must_use]
    pub fn internal_error() -> Self {
        Self::from_code(RpcCode::INTERNAL_ERROR)
    }

    /// −32001 "Session Not Found".
    #[must_use]
    pub fn session_not_found() -> Self {
        Self::from_code(RpcCode::SESSION_NOT_FOUND)
    }

    /// −32002 "Budget Exceeded".
    #[must_use]
    pub fn budget_exceeded() -> Self {
        Self::from_code(RpcCode::BUDGET_EXCEEDED)
    }

    /// −32003 "Rate Limited".
    #[must_use]
    pub fn rate_limited() -> Self {
        Self::from_code(RpcCode::RATE_LIMITED)
    }

    /// −32004 "Safety Violation".
    #[must_use]
    pub fn safety_violation() -> Self {
        Self::from_code(RpcCode::SAFETY_VIOLATION)
    }

    /// −32005 "Loop Detected".
    #[must_use]
    pub fn loop_detected() -> Self {
        Self::from_code(RpcCode::LOOP_DETECTED)
    }

    /// −32006 "Peer Unavailable".
    #[must_use]
    pub fn peer_unavailable() -> Self {
        Self::from_code(RpcCode::PEER_UNAVAILABLE)
    }

    /// −32007 "Replication Failed".
    #[must_use]
    pub fn replication_failed() -> Self {
        Self::from_code(RpcCode::REPLICATION_FAILED)
    }

    /// −32008 "Trajectory Rejected".
    #[must_use]
    pub fn trajectory_rejected() -> Self {
        Self::from_code(RpcCode::TRAJECTORY_REJECTED)
    }

    /// A framing error: the code's default message and a fixed reason as `data`.
    fn framing(code: RpcCode, reason: &'static str) -> Self {
        Self::from_code(code).with_data(Value::from(reason))
    }
}

impl From<RpcCode> for RpcError {
    fn from(code: RpcCode) -> Self {
        Self::from_code(code)
    }
}

// ---------------------------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------------------------

/// A request id, kept as its exact JSON text so it is echoed byte for byte.
///
/// Only JSON numbers (any form, including fractions, exponents and integers beyond 64 bits),
/// strings and `null` are ids. Two ids are equal when their texts are equal, so `1` and `1.0` are
/// different ids (each is echoed as sent).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Id(Box<str>);

impl Id {
    /// The `null` id, used for replies to requests whose id could not be read.
    #[must_use]
    pub fn null() -> Self {
        Self("null".into())
    }

    /// A string id; `text` is escaped as JSON.
    #[must_use]
    pub fn string(text: &str) -> Self {
        let mut json = String::with_capacity(text.len() + 2);
        // Writing into a String cannot fail.
        let _ = write_json_str(&mut json, text);
        Self(json.into_boxed_str())
    }

    /// Parses the JSON text of an id: a number, a string or `null`, with no surrounding
    /// whitespace. Returns `None` for anything else.
    #[must_use]
    pub fn from_json(json: &str) -> Option<Self> {
        let raw = serde_json::from_str::<&RawValue>(json).ok()?;
        if raw.get().len() != json.len() {
            return None;
        }
        Self::from_raw(raw.get())
    }

    /// Classifies already-validated JSON text.
    fn from_raw(json: &str) -> Option<Self> {
        match json.as_bytes().first()? {
            b'-' | b'0'..=b'9' | b'n' => Some(Self(json.into())),
            // A string that serde_json cannot decode (a lone surrogate escape) would make our
            // reply unreadable for most clients: treat it as an invalid id.
            b'"' => serde_json::from_str::<String>(json)
                .ok()
                .map(|_| Self(json.into())),
            _ => None,
        }
    }

    /// The id's JSON text, exactly as received or built.
    #[must_use]
    pub fn as_json(&self) -> &str {
        &self.0
    }

    /// Whether this is the `null` id.
    #[must_use]
    pub fn is_null(&self) -> bool {
        &*self.0 == "null"
    }

    /// Whether this is a number id.
    #[must_use]
    pub fn is_number(&self) -> bool {
        matches!(self.0.as_bytes().first(), Some(b'-' | b'0'..=b'9'))
    }

    /// Whether this is a string id.
    #[must_use]
    pub fn is_string(&self) -> bool {
        self.0.starts_with('"')
    }

    /// The id as a `serde_json::Value`; `None` when serde_json cannot represent the number (for
    /// example `1e400`). The conversion may round numbers; [`Id::as_json`] never does.
    #[must_use]
    pub fn to_value(&self) -> Option<Value> {
        serde_json::from_str(&self.0).ok()
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.0)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! id_from_int {
    ($($int:ty),*) => {$(
        impl From<$int> for Id {
            fn from(n: $int) -> Self {
                Self(n.to_string().into_boxed_str())
            }
        }
    )*};
}

id_from_int!(i32, i64, u32, u64);

impl From<&str> for Id {
    fn from(text: &str) -> Self {
        Self::string(text)
    }
}

impl From<String> for Id {
    fn from(text: String) -> Self {
        Self::string(&text)
    }
}

// ---------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------

/// A valid request or notification from a client.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The id to echo; `None` makes this a notification, which gets no reply.
    pub id: Option<Id>,
    /// The method name, `{primitive}.{action}` by spec §3 (not checked here).
    pub method: String,
    /// The parameters: an object or an array when present.
    pub params: Option<Value>,
}

impl Request {
    /// Whether this request is a notification (it has no `id`).
    #[must_use]
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }

    /// The response carrying `outcome`, or `None` for a notification.
    #[must_use]
    pub fn reply(&self, outcome: Result<Value, RpcError>) -> Option<Response> {
        self.id.clone().map(|id| Response { id, outcome })
    }

    /// The request's JSON text: `{"jsonrpc":"2.0","id":…,"method":…,"params":…}`, without `id`
    /// for a notification and without `params` when `None` (for clients and tests).
    #[must_use]
    pub fn to_json(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{\"jsonrpc\":\"2.0\"")?;
        if let Some(id) = &self.id {
            write!(f, ",\"id\":{id}")?;
        }
        f.write_str(",\"method\":")?;
        write_json_str(f, &self.method)?;
        if let Some(params) = &self.params {
            write!(f, ",\"params\":{params}")?;
        }
        f.write_char('}')
    }
}

/// The reply to one request: a result or an error, with the request's id.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The id of the request this answers (`null` when it could not be read).
    pub id: Id,
    /// `Ok(result)` or `Err(error)`.
    pub outcome: Result<Value, RpcError>,
}

impl Response {
    /// A success response: `{"jsonrpc":"2.0","id":…,"result":…}`.
    #[must_use]
    pub fn ok(id: Id, result: Value) -> Self {
        Self {
            id,
            outcome: Ok(result),
        }
    }

    /// An error response: `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":"…","data":…}}`.
    #[must_use]
    pub fn err(id: Id, error: RpcError) -> Self {
        Self {
            id,
            outcome: Err(error),
        }
    }

    /// The response's JSON text (the same as its `Display`).
    #[must_use]
    pub fn to_json(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Ok(result) => write!(
                f,
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{result}}}",
                self.id
            ),
            Err(error) => write_error_response(f, &self.id, error),
        }
    }
}

/// A request the framing layer rejected, with the id to reply to (`null` when unreadable).
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorResponse {
    /// The id to echo.
    pub id: Id,
    /// The error to send.
    pub error: RpcError,
}

impl ErrorResponse {
    /// An error response for `id`.
    #[must_use]
    pub fn new(id: Id, error: RpcError) -> Self {
        Self { id, error }
    }

    /// The response's JSON text (the same as its `Display`).
    #[must_use]
    pub fn to_json(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for ErrorResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_error_response(f, &self.id, &self.error)
    }
}

impl From<ErrorResponse> for Response {
    fn from(rejected: ErrorResponse) -> Self {
        Self::err(rejected.id, rejected.error)
    }
}

/// A notification pushed by the server: `{"jsonrpc":"2.0","method":…,"params":…}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// The parameters, omitted from the wire when `None`.
    pub params: Option<Value>,
}

impl Notification {
    /// A notification with parameters.
    #[must_use]
    pub fn new(method: impl Into<String>, params: Value) -> Self {
        Self {
            method: method.into(),
            params: Some(params),
        }
    }

    /// The notification's JSON text (the same as its `Display`).
    #[must_use]
    pub fn to_json(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Notification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{\"jsonrpc\":\"2.0\",\"method\":")?;
        write_json_str(f, &self.method)?;
        if let Some(params) = &self.params {
            write!(f, ",\"params\":{params}")?;
        }
        f.write_char('}')
    }
}

fn write_error_response(f: &mut impl fmt::Write, id: &Id, error: &RpcError) -> fmt::Result {
    write!(
        f,
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":{},\"message\":",
        error.code.0
    )?;
    write_json_str(f, &error.message)?;
    if let Some(data) = &error.data {
        write!(f, ",\"data\":{data}")?;
    }
    f.write_str("}}")
}

/// Writes `text` as a JSON string, escaping exactly as serde_json does.
fn write_json_str(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    out.write_char('"')?;
    let mut start = 0;
    for (i, byte) in text.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.write_str(&text[start..i])?;
        if escape.is_empty() {
            write!(out, "\\u{byte:04x}")?;
        } else {
            out.write_str(escape)?;
        }
        start = i + 1;
    }
    out.write_str(&text[start..])?;
    out.write_char('"')
}

// ---------------------------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------------------------

/// One WebSocket text frame, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A single request, or a single error to send: invalid JSON (−32700), an empty batch or a
    /// non-object (−32600), or an invalid request object.
    Single(Result<Request, ErrorResponse>),
    /// A non-empty batch, one entry per element, in order.
    Batch(Vec<Result<Request, ErrorResponse>>),
}

/// Classifies one text frame. Never panics; every input maps to a [`Frame`].
#[must_use]
pub fn parse_frame(text: &str) -> Frame {
    let Ok(raw) = serde_json::from_str::<&RawValue>(text) else {
        return Frame::Single(Err(reject(
            Id::null(),
            RpcCode::PARSE_ERROR,
            "invalid JSON",
        )));
    };
    let json = raw.get();
    if !json.starts_with('[') {
        return Frame::Single(parse_request(json));
    }
    match serde_json::from_str::<Vec<&RawValue>>(json) {
        Ok(elements) if elements.is_empty() => Frame::Single(Err(reject(
            Id::null(),
            RpcCode::INVALID_REQUEST,
            "empty batch",
        ))),
        Ok(elements) => Frame::Batch(
            elements
                .into_iter()
                .map(|e| parse_request(e.get()))
                .collect(),
        ),
        // Unreachable for text that already scanned as JSON; answered conservatively anyway.
        Err(_) => Frame::Single(Err(reject(
            Id::null(),
            RpcCode::PARSE_ERROR,
            "invalid JSON",
        ))),
    }
}

/// Parses one frame, calls `handler` once for every valid request in it (notifications included,
/// their results dropped), and returns the reply text: one response, a batch array, or `None` when
/// nothing is to be sent (a notification, or a batch of notifications only).
pub fn handle_frame<H>(text: &str, mut handler: H) -> Option<String>
where
    H: FnMut(&Request) -> Result<Value, RpcError>,
{
    match parse_frame(text) {
        Frame::Single(entry) => respond(entry, &mut handler).map(|response| response.to_json()),
        Frame::Batch(entries) => {
            let responses: Vec<Response> = entries
                .into_iter()
                .filter_map(|entry| respond(entry, &mut handler))
                .collect();
            encode_batch(&responses)
        }
    }
}

/// Encodes the responses to a batch as a JSON array, or `None` when there are none (JSON-RPC 2.0:
/// a batch of notifications gets no reply at all, not `[]`).
#[must_use]
pub fn encode_batch(responses: &[Response]) -> Option<String> {
    let (first, rest) = responses.split_first()?;
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = write!(out, "[{first}");
    for response in rest {
        let _ = write!(out, ",{response}");
    }
    out.push(']');
    Some(out)
}

fn respond<H>(entry: Result<Request, ErrorResponse>, handler: &mut H) -> Option<Response>
where
    H: FnMut(&Request) -> Result<Value, RpcError>,
{
    match entry {
        Ok(request) => {
            let outcome = handler(&request);
            request.reply(outcome)
        }
        Err(rejected) => Some(rejected.into()),
    }
}

fn reject(id: Id, code: RpcCode, reason: &'static str) -> ErrorResponse {
    ErrorResponse::new(id, RpcError::framing(code, reason))
}

/// Validates one request object given as already-scanned JSON text.
fn parse_request(json: &str) -> Result<Request, ErrorResponse> {
    if !json.starts_with('{') {
        return Err(reject(
            Id::null(),
            RpcCode::INVALID_REQUEST,
            "request must be an object",
        ));
    }
    let Ok(members) = serde_json::from_str::<Members<'_>>(json) else {
        // A member name serde_json cannot decode (a lone surrogate escape).
        return Err(reject(
            Id::null(),
            RpcCode::INVALID_REQUEST,
            "unreadable member name",
        ));
    };

    let id = match members.id {
        None => None,
        Some(_) if members.id_repeated => {
            return Err(reject(
                Id::null(),
                RpcCode::INVALID_REQUEST,
                "repeated member \"id\"",
            ));
        }
        Some(raw) => match Id::from_raw(raw.get()) {
            Some(id) => Some(id),
            None => {
                return Err(reject(
                    Id::null(),
                    RpcCode::INVALID_REQUEST,
                    "id must be a string, a number or null",
                ));
            }
        },
    };
    let reply_id = || id.clone().unwrap_or_else(Id::null);

    if members.repeated {
        return Err(reject(
            reply_id(),
            RpcCode::INVALID_REQUEST,
            "repeated member",
        ));
    }
    if decode_string(members.jsonrpc).as_deref() != Some(VERSION) {
        return Err(reject(
            reply_id(),
            RpcCode::INVALID_REQUEST,
            "jsonrpc must be \"2.0\"",
        ));
    }
    let Some(method) = decode_string(members.method) else {
        return Err(reject(
            reply_id(),
            RpcCode::INVALID_REQUEST,
            "method must be a string",
        ));
    };
    let params = match members.params {
        None => None,
        Some(raw) => match parse_params(raw.get()) {
            Ok(params) => Some(params),
            Err(reason) => return Err(reject(reply_id(), RpcCode::INVALID_PARAMS, reason)),
        },
    };
    Ok(Request { id, method, params })
}

fn decode_string(raw: Option<&RawValue>) -> Option<String> {
    serde_json::from_str(raw?.get()).ok()
}

fn parse_params(json: &str) -> Result<Value, &'static str> {
    if !(json.starts_with('{') || json.starts_with('[')) {
        return Err("params must be an object or an array");
    }
    if let Err(e) = serde_json::from_str::<NoRepeatedMembers>(json) {
        return Err(if e.classify() == serde_json::error::Category::Data {
            "repeated member in params"
        } else {
            "params nested too deeply or not decodable"
        });
    }
    serde_json::from_str(json).map_err(|_| "params nested too deeply or not decodable")
}

/// The members of a request object that matter, borrowed as raw JSON text.
#[derive(Default)]
struct Members<'a> {
    jsonrpc: Option<&'a RawValue>,
    id: Option<&'a RawValue>,
    method: Option<&'a RawValue>,
    params: Option<&'a RawValue>,
    /// Some member name occurs more than once.
    repeated: bool,
    /// `id` occurs more than once.
    id_repeated: bool,
}

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor<'a>(std::marker::PhantomData<&'a ()>);

        impl<'de: 'a, 'a> Visitor<'de> for MembersVisitor<'a> {
            type Value = Members<'a>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC request object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Members::default();
                let mut seen = BTreeSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: &'de RawValue = map.next_value()?;
                    if seen.contains(&key) {
                        members.repeated = true;
                        members.id_repeated |= key == "id";
                        continue;
                    }
                    match key.as_str() {
                        "jsonrpc" => members.jsonrpc = Some(value),
                        "id" => members.id = Some(value),
                        "method" => members.method = Some(value),
                        "params" => members.params = Some(value),
                        _ => {}
                    }
                    seen.insert(key);
                }
                Ok(members)
            }
        }

        deserializer.deserialize_map(MembersVisitor(std::marker::PhantomData))
    }
}

/// Walks a JSON value and fails (with a custom, `Category::Data` error) on a repeated member name
/// in any object.
struct NoRepeatedMembers;

impl<'de> Deserialize<'de> for NoRepeatedMembers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoRepeatedMembersVisitor)
    }
}

struct NoRepeatedMembersVisitor;

impl<'de> Visitor<'de> for NoRepeatedMembersVisitor {
    type Value = NoRepeatedMembers;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(NoRepeatedMembers)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(NoRepeatedMembers)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(NoRepeatedMembers)
    }

    fn visit_i128<E>(self, _: i128) -> Result<Self::Value, E> {
        Ok(NoRepeatedMembers)
    }

    fn visit_u128<E>(self, _: u128) -> Result<Self::Value, E> {
        Ok(NoRepeatedMembers)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(NoRepeatedMembers)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(NoRepeatedMembers)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(NoRepeatedMembers)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<NoRepeatedMembers>()?.is_some() {}
        Ok(NoRepeatedMembers)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key) {
                return Err(de::Error::custom("repeated member"));
            }
            map.next_value::<NoRepeatedMembers>()?;
        }
        Ok(NoRepeatedMembers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_code_names_and_debug() {
        assert_eq!(RpcCode::PARSE_ERROR.name(), Some("Parse Error"));
        assert_eq!(
            RpcCode::TRAJECTORY_REJECTED.name(),
            Some("Trajectory Rejected")
        );
        assert_eq!(RpcCode(-32009).name(), None);
        assert_eq!(
            format!("{:?}", RpcCode::SESSION_NOT_FOUND),
            "SESSION_NOT_FOUND"
        );
        assert_eq!(format!("{:?}", RpcCode(-32009)), "-32009");
        assert_eq!(RpcCode::INTERNAL_ERROR.const_name(), Some("INTERNAL_ERROR"));
        assert_eq!(
            RpcCode::INVALID_PARAMS.to_string(),
            "-32602 (Invalid Params)"
        );
    }

    #[test]
    fn framing_errors_carry_the_spec_name_and_a_reason() {
        let error = RpcError::framing(RpcCode::INVALID_REQUEST, "empty batch");
        assert_eq!(error.message, "Invalid Request");
        assert_eq!(error.data, Some(Value::from("empty batch")));
    }

    #[test]
    fn json_strings_match_serde_json() {
        for text in [
            "",
            "plain",
            "q\"b\\s/",
            "\u{0}\u{1f}\u{7f}\u{8}\u{c}\n\r\t",
            "é😀",
        ] {
            let mut ours = String::new();
            write_json_str(&mut ours, text).unwrap();
            assert_eq!(ours, serde_json::to_string(text).unwrap());
        }
    }

    #[test]
    fn request_members_are_read_once() {
        let members: Members<'_> =
            serde_json::from_str(r#"{"id":1,"x":{},"x":[],"method":"m"}"#).unwrap();
        assert!(members.repeated);
        assert!(!members.id_repeated);
        assert_eq!(members.id.map(RawValue::get), Some("1"));
        assert_eq!(members.method.map(RawValue::get), Some("\"m\""));
        assert!(members.jsonrpc.is_none() && members.params.is_none());
    }
}
