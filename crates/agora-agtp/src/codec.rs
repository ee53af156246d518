//! AGTP/1.0 message framing: request and response lines, header fields, `Content-Length` bodies
//! and the limits that bound them. Pure functions over byte slices; the caller owns the socket and
//! the buffer.
//!
//! What this module owns (AGTP base draft framing, and the DISCOVER examples of the discovery draft §3.2/§3.3):
//!
//! - **Request line** `AGTP/1.0 SP METHOD [SP request-target]`. Both the three-token form of the
//!   base draft and the two-token form used by the discovery draft's examples (`AGTP/1.0 DISCOVER`)
//!   are accepted; tokens are separated by exactly one space. `METHOD` is 1–32 characters of
//!   `A–Z 0–9 - _`; methods are case-insensitive on input and are uppercased when decoded (so
//!   `discover` is `DISCOVER`). The target must start with `/` and consist of visible ASCII
//!   (RFC 3986 characters; percent-encode anything else) without `#`. See [`Request::path`] and
//!   [`Request::query`] for the split at `?`.
//! - **Status line** `AGTP/1.0 SP 3DIGIT SP reason`; the reason may be empty (and the space
//!   before it may then be missing) or contain spaces and tabs. It is informative only.
//! - **Header fields** `Name: value`: the name is an RFC 9110 token, the value is trimmed of
//!   surrounding spaces and tabs and must be UTF-8 without control characters other than tab.
//!   Obsolete line folding is rejected, as are more than [`MAX_HEADERS`] fields (`Content-Length`
//!   aside). Names are kept as sent and looked up case-insensitively ([`Headers`]).
//! - **Framing**: `Content-Length` is the only completion signal. It must be digits only; repeated
//!   fields must agree; absent means an empty body. Any `Transfer-Encoding` field is rejected.
//!   `Content-Length` is consumed by the decoder (it never appears in a decoded message's
//!   [`Headers`]; the body's length is the length) and always written by the encoder, which
//!   ignores any `Content-Length` in the headers it is given.
//! - **Line endings**: CRLF is written; CRLF and bare LF are accepted. A bare CR is rejected.
//!   A message must start with the start line (no leading empty lines).
//! - **Limits** ([`Limits`]): the head (start line, headers and the blank line) and the body are
//!   bounded; a head that cannot end within the limit and a declared length over the body limit
//!   are errors as soon as they are seen, before the rest of the message arrives.
//! - The JSON body helpers ([`Request::json_body`], [`Request::with_json_body`]) and the accepted
//!   media types ([`JSON_MEDIA_TYPES`]): `application/vnd.agtp+json` is emitted; the discovery
//!   draft's `application/agtp+json` and the other AGTP JSON types are accepted.
//!
//! Decoding is incremental: [`decode_request`] and [`decode_response`] return `Ok(None)` until a
//! whole message is in the buffer, then the message and the number of bytes it used (pipelined
//! bytes after it are left for the next call), and an error as soon as the bytes can never begin a
//! valid message. The head is scanned once, eight bytes at a time, for line ends and control
//! characters; nothing is allocated per byte. The decoders keep no state between calls: a partial
//! message is scanned again on the next call (well under a microsecond for a typical head).
//! Errors are [`BadRequest`] for responses too: a bad status line is [`BadRequest::StartLine`]
//! (code `malformed-request-line`). After an error the stream cannot be resynchronised; answer
//! 400 (requests) and close.
//!
//! Encoding never fails and never lets a field break the framing: control characters other than
//! tab in a method, target, reason, header name or value are written as spaces. It does not
//! otherwise validate fields (a method with spaces is written as is and the peer rejects it).

use std::fmt;

use serde_json::Value;

use crate::error::{AgtpError, BadRequest};
use crate::scope::Scopes;
use crate::status::Status;

/// The protocol version on every start line.
pub const VERSION: &str = "AGTP/1.0";

/// The most header fields a message may carry.
pub const MAX_HEADERS: usize = 100;

/// The longest method name accepted.
pub const MAX_METHOD_LEN: usize = 32;

/// The JSON media type this implementation emits (base draft -07+).
pub const CONTENT_TYPE_AGTP_JSON: &str = "application/vnd.agtp+json";

/// The Agent Identity Document media type (base draft -09): a DESCRIBE answered with the bare
/// document, as the reference server answers it.
pub const CONTENT_TYPE_IDENTITY: &str = "application/vnd.agtp.identity+json";

/// The server manifest media type (base draft -09): a target-less DISCOVER without `Agent-ID`.
pub const CONTENT_TYPE_MANIFEST: &str = "application/vnd.agtp.manifest+json";

/// The media types [`Request::json_body`] and [`Response::json_body`] accept (compared
/// case-insensitively, parameters ignored): the current and the discovery draft's AGTP JSON types,
/// plain JSON (error bodies of the reference server), the identity document and the server
/// manifest types.
pub const JSON_MEDIA_TYPES: [&str; 5] = [
    "application/vnd.agtp+json",
    "application/agtp+json",
    "application/json",
    "application/vnd.agtp.identity+json",
    "application/vnd.agtp.manifest+json",
];

const VERSION_SP: &[u8] = b"AGTP/1.0 ";

/// Size limits applied while decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest head: start line, header lines and the blank line, with their line endings.
    pub max_head: usize,
    /// Largest body (declared `Content-Length`).
    pub max_body: usize,
}

impl Limits {
    /// Default head limit: 16 KiB.
    pub const DEFAULT_MAX_HEAD: usize = 16 * 1024;
    /// Default body limit: 1 MiB.
    pub const DEFAULT_MAX_BODY: usize = 1 << 20;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_head: Self::DEFAULT_MAX_HEAD,
            max_body: Self::DEFAULT_MAX_BODY,
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Headers

/// Header fields in the order sent, names as sent, looked up ASCII case-insensitively.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers {
    fields: Vec<Field>,
}

/// One field, name and value in a single allocation.
#[derive(Clone, PartialEq, Eq)]
struct Field {
    text: String,
    split: usize,
}

impl Field {
    fn new(name: &str, value: &str) -> Self {
        let mut text = String::with_capacity(name.len() + value.len());
        text.push_str(name);
        text.push_str(value);
        Self {
            text,
            split: name.len(),
        }
    }

    fn name(&self) -> &str {
        self.text.get(..self.split).unwrap_or_default()
    }

    fn value(&self) -> &str {
        self.text.get(self.split..).unwrap_or_default()
    }

    fn is(&self, name: &str) -> bool {
        self.name().eq_ignore_ascii_case(name)
    }
}

impl Headers {
    /// No fields.
    pub fn new() -> Self {
        Self::default()
    }

    /// No fields, room for `capacity`.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            fields: Vec::with_capacity(capacity),
        }
    }

    /// The value of the first field called `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|f| f.is(name)).map(Field::value)
    }

    /// The values of every field called `name`, in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.fields
            .iter()
            .filter(move |f| f.is(name))
            .map(Field::value)
    }

    /// Whether a field called `name` is present.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name` to `value`, replacing every field of that name: the first one keeps its
    /// position (with the new spelling of the name), the others are removed. Appends when absent.
    pub fn insert(&mut self, name: impl AsRef<str>, value: impl AsRef<str>) {
        let (name, value) = (name.as_ref(), value.as_ref());
        match self.fields.iter().position(|f| f.is(name)) {
            None => self.fields.push(Field::new(name, value)),
            Some(first) => {
                let mut i = 0usize;
                self.fields.retain(|f| {
                    let keep = i <= first || !f.is(name);
                    i += 1;
                    keep
                });
                self.fields[first] = Field::new(name, value);
            }
        }
    }

    /// Adds a field after the others, keeping any of the same name.
    pub fn append(&mut self, name: impl AsRef<str>, value: impl AsRef<str>) {
        self.fields.push(Field::new(name.as_ref(), value.as_ref()));
    }

    /// Removes every field called `name`; returns the first one's value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        let first = self.fields.iter().position(|f| f.is(name))?;
        let value = self.fields.remove(first).value().to_owned();
        self.fields.retain(|f| !f.is(name));
        Some(value)
    }

    /// `(name, value)` pairs in order.
    pub fn iter(&self) -> HeaderIter<'_> {
        HeaderIter(self.fields.iter())
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// No fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// `Agent-ID`: the requesting (or, on a response, echoed) agent.
    pub fn agent_id(&self) -> Option<&str> {
        self.get("Agent-ID")
    }

    /// The principal: `Principal-ID` (base draft -02/-06, discovery draft -00) or, when absent,
    /// `Owner-ID` (base draft -07+, discovery draft -01).
    pub fn principal_id(&self) -> Option<&str> {
        self.get("Principal-ID").or_else(|| self.get("Owner-ID"))
    }

    /// `Task-ID`.
    pub fn task_id(&self) -> Option<&str> {
        self.get("Task-ID")
    }

    /// `Session-ID`.
    pub fn session_id(&self) -> Option<&str> {
        self.get("Session-ID")
    }

    /// `Content-Type`, as sent.
    pub fn content_type(&self) -> Option<&str> {
        self.get("Content-Type")
    }

    /// Whether an `Accept` field lists `media_type` (case-insensitive, parameters ignored; `*/*`
    /// and `type/*` do not count: only an explicit request for the type does).
    pub fn accepts(&self, media_type: &str) -> bool {
        self.get_all("Accept").any(|value| {
            value.split(',').any(|item| {
                item.split_once(';')
                    .map_or(item, |(essence, _)| essence)
                    .trim_matches([' ', '\t'])
                    .eq_ignore_ascii_case(media_type)
            })
        })
    }

    /// The `Authority-Scope` list: `None` when absent; every `Authority-Scope` field is parsed and
    /// the lists are concatenated (RFC 9110 list semantics). An empty value is an empty list.
    pub fn authority_scope(&self) -> Result<Option<Scopes>, BadRequest> {
        let mut values = self.get_all("Authority-Scope");
        let Some(first) = values.next() else {
            return Ok(None);
        };
        let mut scopes = Scopes::parse(first)?;
        for value in values {
            scopes.extend(Scopes::parse(value)?);
        }
        Ok(Some(scopes))
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Iterator over [`Headers`] as `(name, value)`.
#[derive(Clone, Debug)]
pub struct HeaderIter<'a>(std::slice::Iter<'a, Field>);

impl fmt::Debug for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("")
            .field(&self.name())
            .field(&self.value())
            .finish()
    }
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|f| (f.name(), f.value()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for HeaderIter<'_> {}

impl<'a> IntoIterator for &'a Headers {
    type Item = (&'a str, &'a str);
    type IntoIter = HeaderIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        Self {
            fields: iter
                .into_iter()
                .map(|(n, v)| Field::new(n.as_ref(), v.as_ref()))
                .collect(),
        }
    }
}

impl<N: AsRef<str>, V: AsRef<str>> Extend<(N, V)> for Headers {
    fn extend<I: IntoIterator<Item = (N, V)>>(&mut self, iter: I) {
        self.fields.extend(
            iter.into_iter()
                .map(|(n, v)| Field::new(n.as_ref(), v.as_ref())),
        );
    }
}

// ------------------------------------------------------------------------------------------------
// Messages

/// An AGTP request.
#[derive(Clone, PartialEq, Eq)]
pub struct Request {
    /// The method, uppercase when decoded (e.g. `DISCOVER`).
    pub method: String,
    /// The request target (`/path[?query]`); `None` for the two-token request line.
    pub target: Option<String>,
    /// Header fields other than `Content-Length`.
    pub headers: Headers,
    /// The body (`Content-Length` bytes).
    pub body: Vec<u8>,
}

impl Request {
    /// A request for `method` (ASCII-uppercased), no target, no headers, empty body.
    pub fn new(method: impl Into<String>) -> Self {
        let mut method = method.into();
        method.make_ascii_uppercase();
        Self {
            method,
            target: None,
            headers: Headers::new(),
            body: Vec::new(),
        }
    }

    /// Sets the request target.
    pub fn with_target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(target.into());
        self
    }

    /// Sets a header, replacing any of the same name ([`Headers::insert`]).
    pub fn with_header(mut self, name: impl AsRef<str>, value: impl AsRef<str>) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Sets the body and its `Content-Type`.
    pub fn with_body(mut self, body: impl Into<Vec<u8>>, content_type: &str) -> Self {
        self.body = body.into();
        self.headers.insert("Content-Type", content_type);
        self
    }

    /// Sets a compact JSON body with `Content-Type: application/vnd.agtp+json`.
    pub fn with_json_body(self, body: &Value) -> Self {
        self.with_body(body.to_string(), CONTENT_TYPE_AGTP_JSON)
    }

    /// The path part of the target (before `?`); `/` for the two-token request line.
    pub fn path(&self) -> &str {
        match &self.target {
            None => "/",
            Some(t) => t.split_once('?').map_or(t.as_str(), |(p, _)| p),
        }
    }

    /// The query part of the target (after the first `?`), if any.
    pub fn query(&self) -> Option<&str> {
        self.target
            .as_deref()
            .and_then(|t| t.split_once('?'))
            .map(|(_, q)| q)
    }

    /// The body as JSON: `None` when empty; [`BadRequest::ContentType`] unless the `Content-Type`
    /// is absent or one of [`JSON_MEDIA_TYPES`]; [`BadRequest::Body`] when it does not parse.
    pub fn json_body(&self) -> Result<Option<Value>, BadRequest> {
        json_body(&self.headers, &self.body)
    }

    /// The wire form: request line, headers, a correct `Content-Length`, blank line, body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Appends the wire form to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = VERSION_SP.len()
            + self.method.len()
            + self.target.as_ref().map_or(0, |t| t.len() + 1)
            + 2;
        out.reserve(start + tail_len(&self.headers, &self.body));
        out.extend_from_slice(VERSION_SP);
        put_field(out, &self.method);
        if let Some(target) = &self.target {
            out.push(b' ');
            put_field(out, target);
        }
        out.extend_from_slice(b"\r\n");
        put_tail(out, &self.headers, &self.body);
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("target", &self.target)
            .field("headers", &self.headers)
            .field("body", &BodyDebug(&self.body))
            .finish()
    }
}

/// An AGTP response.
#[derive(Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code (100–999 on the wire).
    pub status: Status,
    /// The reason phrase (informative only).
    pub reason: String,
    /// Header fields other than `Content-Length`.
    pub headers: Headers,
    /// The body (`Content-Length` bytes).
    pub body: Vec<u8>,
}

impl Response {
    /// A response with `status` and its standard reason phrase, no headers, empty body.
    pub fn new(status: Status) -> Self {
        Self {
            status,
            reason: status.reason().to_owned(),
            headers: Headers::new(),
            body: Vec::new(),
        }
    }

    /// The error response for `error`: its status, its JSON error body ([`AgtpError::body`]) and
    /// the `Task-ID` echoed when known.
    pub fn from_error(error: &AgtpError, task_id: Option<&str>) -> Self {
        let mut response = Self::new(error.status()).with_json_body(&error.body(task_id));
        if let Some(task_id) = task_id {
            response.headers.insert("Task-ID", task_id);
        }
        response
    }

    /// Sets the reason phrase.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into();
        self
    }

    /// Sets a header, replacing any of the same name ([`Headers::insert`]).
    pub fn with_header(mut self, name: impl AsRef<str>, value: impl AsRef<str>) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Sets the body and its `Content-Type`.
    pub fn with_body(mut self, body: impl Into<Vec<u8>>, content_type: &str) -> Self {
        self.body = body.into();
        self.headers.insert("Content-Type", content_type);
        self
    }

    /// Sets a compact JSON body with `Content-Type: application/vnd.agtp+json`.
    pub fn with_json_body(self, body: &Value) -> Self {
        self.with_body(body.to_string(), CONTENT_TYPE_AGTP_JSON)
    }

    /// The body as JSON; see [`Request::json_body`].
    pub fn json_body(&self) -> Result<Option<Value>, BadRequest> {
        json_body(&self.headers, &self.body)
    }

    /// The wire form: status line, headers, a correct `Content-Length`, blank line, body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Appends the wire form to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = VERSION_SP.len() + 5 + 1 + self.reason.len() + 2;
        out.reserve(start + tail_len(&self.headers, &self.body));
        out.extend_from_slice(VERSION_SP);
        put_decimal(out, u64::from(self.status.0));
        out.push(b' ');
        put_field(out, &self.reason);
        out.extend_from_slice(b"\r\n");
        put_tail(out, &self.headers, &self.body);
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("reason", &self.reason)
            .field("headers", &self.headers)
            .field("body", &BodyDebug(&self.body))
            .finish()
    }
}

/// Shows a body as text when it is UTF-8.
struct BodyDebug<'a>(&'a [u8]);

impl fmt::Debug for BodyDebug<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(self.0) {
            Ok(text) => fmt::Debug::fmt(text, f),
            Err(_) => fmt::Debug::fmt(self.0, f),
        }
    }
}

/// Whether `content_type` (parameters ignored, case-insensitive) is one of [`JSON_MEDIA_TYPES`].
pub fn is_json_media_type(content_type: &str) -> bool {
    let essence = content_type
        .split_once(';')
        .map_or(content_type, |(essence, _)| essence)
        .trim_matches([' ', '\t']);
    JSON_MEDIA_TYPES
        .iter()
        .any(|t| t.eq_ignore_ascii_case(essence))
}

fn json_body(headers: &Headers, body: &[u8]) -> Result<Option<Value>, BadRequest> {
    if body.is_empty() {
        return Ok(None);
    }
    if let Some(content_type) = headers.content_type()
        && !is_json_media_type(content_type)
    {
        return Err(BadRequest::ContentType(content_type.to_owned()));
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| BadRequest::Body(e.to_string()))
}

// ------------------------------------------------------------------------------------------------
// Encoding helpers

fn tail_len(headers: &Headers, body: &[u8]) -> usize {
    let fields: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    fields + "Content-Length: ".len() + 20 + 4 + body.len()
}

fn put_tail(out: &mut Vec<u8>, headers: &Headers, body: &[u8]) {
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        put_field(out, name);
        out.extend_from_slice(b": ");
        put_field(out, value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Content-Length: ");
    put_decimal(out, body.len() as u64);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

/// Writes `s` with every control character other than tab replaced by a space, so no field can
/// end a line early.
fn put_field(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let mut from = 0;
    while let Some(i) = find_special(bytes, from) {
        out.extend_from_slice(&bytes[from..i]);
        out.push(if bytes[i] == b'\t' { b'\t' } else { b' ' });
        from = i + 1;
    }
    out.extend_from_slice(&bytes[from..]);
}

fn put_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

// ------------------------------------------------------------------------------------------------
// Decoding

/// Decodes one request from the front of `buf`.
///
/// `Ok(None)`: more bytes are needed. `Ok(Some((request, consumed)))`: a whole request was
/// decoded from `buf[..consumed]`; bytes after it belong to the next message. `Err`: `buf` can
/// never start with a valid request (answer 400 and close).
pub fn decode_request(buf: &[u8], limits: &Limits) -> Result<Option<(Request, usize)>, BadRequest> {
    let Some(head) = decode_head(buf, limits, Kind::Request)? else {
        return Ok(None);
    };
    let Some(body) = head.body(buf) else {
        return Ok(None);
    };
    let StartLine::Request { method, target } = head.start else {
        return Err(BadRequest::StartLine("expected a request line".into()));
    };
    let consumed = head.len + body.len();
    Ok(Some((
        Request {
            method,
            target,
            headers: head.headers,
            body: body.to_vec(),
        },
        consumed,
    )))
}

/// Decodes one response from the front of `buf`; see [`decode_request`] for the contract.
pub fn decode_response(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(Response, usize)>, BadRequest> {
    let Some(head) = decode_head(buf, limits, Kind::Response)? else {
        return Ok(None);
    };
    let Some(body) = head.body(buf) else {
        return Ok(None);
    };
    let StartLine::Response { status, reason } = head.start else {
        return Err(BadRequest::StartLine("expected a status line".into()));
    };
    let consumed = head.len + body.len();
    Ok(Some((
        Response {
            status,
            reason,
            headers: head.headers,
            body: body.to_vec(),
        },
        consumed,
    )))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Request,
    Response,
}

impl Kind {
    fn line(self) -> &'static str {
        match self {
            Self::Request => "request line",
            Self::Response => "status line",
        }
    }
}

enum StartLine {
    Request {
        method: String,
        target: Option<String>,
    },
    Response {
        status: Status,
        reason: String,
    },
}

struct Head {
    start: StartLine,
    headers: Headers,
    content_length: usize,
    /// Bytes up to and including the blank line.
    len: usize,
}

impl Head {
    /// The body, once all of it is in `buf`.
    fn body<'a>(&self, buf: &'a [u8]) -> Option<&'a [u8]> {
        let end = self.len.checked_add(self.content_length)?;
        buf.get(self.len..end)
    }
}

/// Scans the head once: finds each line end and rejects control characters on the way, parses
/// each complete line as soon as it is seen (so a bad line is an error before the head is
/// complete), and stops at the first empty line.
fn decode_head(buf: &[u8], limits: &Limits, kind: Kind) -> Result<Option<Head>, BadRequest> {
    let window = &buf[..buf.len().min(limits.max_head)];
    let mut start: Option<StartLine> = None;
    let mut headers = Headers::new();
    let mut fields = 0usize;
    let mut content_length: Option<u64> = None;
    let mut line_start = 0usize;
    let mut pos = 0usize;
    while let Some(i) = find_special(window, pos) {
        let (line_end, next) = match window[i] {
            b'\n' => (i, i + 1),
            b'\r' => match window.get(i + 1) {
                Some(b'\n') => (i, i + 2),
                Some(_) => return Err(control_error(kind, start.is_none(), fields, b'\r')),
                None => break,
            },
            b'\t' => {
                pos = i + 1;
                continue;
            }
            other => return Err(control_error(kind, start.is_none(), fields, other)),
        };
        let line = &window[line_start..line_end];
        match start {
            None => {
                start = Some(match kind {
                    Kind::Request => parse_request_line(line)?,
                    Kind::Response => parse_status_line(line)?,
                });
                headers = Headers::with_capacity(8);
            }
            Some(start) if line.is_empty() => {
                let content_length = match content_length {
                    // Checked against `max_body` (a usize) when parsed.
                    Some(n) => usize::try_from(n).map_err(|_| body_too_large(n, limits))?,
                    None => 0,
                };
                return Ok(Some(Head {
                    start,
                    headers,
                    content_length,
                    len: next,
                }));
            }
            Some(_) => {
                fields += 1;
                parse_header_line(line, &mut headers, &mut content_length, limits)?;
                // `Content-Length` frames the message and is not kept as a field (an encoder adds
                // it), so it does not count: a message of 100 fields re-encodes to one that
                // decodes (found by the `agtp_codec` fuzz target). The head stays bounded by
                // `max_head`.
                if headers.len() > MAX_HEADERS {
                    return Err(BadRequest::Header(format!(
                        "more than {MAX_HEADERS} header fields"
                    )));
                }
            }
        }
        line_start = next;
        pos = next;
    }
    if start.is_none() {
        check_version_prefix(&window[..window.len().min(VERSION_SP.len())], kind)?;
    }
    if buf.len() >= limits.max_head {
        return Err(BadRequest::HeadTooLarge {
            limit: limits.max_head,
        });
    }
    Ok(None)
}

fn control_error(kind: Kind, in_start_line: bool, fields: usize, byte: u8) -> BadRequest {
    let what = if byte == b'\r' {
        "bare CR (not followed by LF)".to_owned()
    } else {
        format!("control character 0x{byte:02x}")
    };
    if in_start_line {
        BadRequest::StartLine(format!("{what} in the {}", kind.line()))
    } else {
        BadRequest::Header(format!("{what} in header line {}", fields + 1))
    }
}

fn body_too_large(length: u64, limits: &Limits) -> BadRequest {
    BadRequest::BodyTooLarge {
        length,
        limit: limits.max_body,
    }
}

/// While the start line is still incomplete: fails as soon as the bytes so far cannot begin
/// `AGTP/1.0 `.
fn check_version_prefix(prefix: &[u8], kind: Kind) -> Result<(), BadRequest> {
    if VERSION_SP.starts_with(prefix) {
        Ok(())
    } else {
        Err(version_error(prefix, kind))
    }
}

/// The error for a start line that does not begin with `AGTP/1.0 `.
fn version_error(line: &[u8], kind: Kind) -> BadRequest {
    let token_end = line
        .iter()
        .position(|&b| b <= b' ' || b == 0x7f)
        .unwrap_or(line.len());
    let token = &line[..token_end.min(40)];
    let shown = String::from_utf8_lossy(token);
    let what = kind.line();
    if token == VERSION.as_bytes() {
        let missing = match kind {
            Kind::Request => "method",
            Kind::Response => "status code",
        };
        BadRequest::StartLine(format!("{what} has no {missing} (expected `AGTP/1.0 ...`)"))
    } else if token.starts_with(b"AGTP/") {
        BadRequest::StartLine(format!(
            "unsupported protocol version {shown:?} in the {what} (expected AGTP/1.0)"
        ))
    } else if token.is_empty() {
        BadRequest::StartLine(format!("empty {what} (expected `AGTP/1.0 ...`)"))
    } else {
        BadRequest::StartLine(format!(
            "not an AGTP/1.0 {what}: starts with {shown:?} (expected `AGTP/1.0 ...`)"
        ))
    }
}

/// `AGTP/1.0 METHOD` or `AGTP/1.0 METHOD target`.
fn parse_request_line(line: &[u8]) -> Result<StartLine, BadRequest> {
    let Some(rest) = line.strip_prefix(VERSION_SP) else {
        return Err(version_error(line, Kind::Request));
    };
    let mut tokens = rest.split(|&b| b == b' ');
    let method = tokens.next().unwrap_or_default();
    let target = tokens.next();
    if tokens.next().is_some() {
        return Err(BadRequest::StartLine(
            "extra tokens on the request line (expected `AGTP/1.0 METHOD [target]`, single spaces)"
                .into(),
        ));
    }
    if method.is_empty() || target.is_some_and(<[u8]>::is_empty) {
        return Err(BadRequest::StartLine(
            "empty token on the request line (expected `AGTP/1.0 METHOD [target]`, single spaces)"
                .into(),
        ));
    }
    if method.len() > MAX_METHOD_LEN {
        return Err(BadRequest::StartLine(format!(
            "method longer than {MAX_METHOD_LEN} characters"
        )));
    }
    if !method
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(BadRequest::StartLine(format!(
            "invalid method {:?} (letters, digits, '-' and '_' only)",
            String::from_utf8_lossy(method)
        )));
    }
    let method = std::str::from_utf8(method)
        .map(str::to_ascii_uppercase)
        .map_err(|_| BadRequest::StartLine("invalid method".into()))?;
    let target = match target {
        None => None,
        Some(target) => Some(parse_target(target)?),
    };
    Ok(StartLine::Request { method, target })
}

fn parse_target(target: &[u8]) -> Result<String, BadRequest> {
    if target.first() != Some(&b'/') {
        return Err(BadRequest::StartLine(format!(
            "request target {:?} does not start with '/'",
            String::from_utf8_lossy(&target[..target.len().min(64)])
        )));
    }
    if let Some(&bad) = target
        .iter()
        .find(|&&b| b == b'#' || !(0x21..=0x7e).contains(&b))
    {
        return Err(BadRequest::StartLine(if bad == b'#' {
            "'#' in the request target".to_owned()
        } else {
            format!("byte 0x{bad:02x} in the request target (visible ASCII only; percent-encode)")
        }));
    }
    ascii_string(target).ok_or_else(|| BadRequest::StartLine("invalid request target".into()))
}

/// `AGTP/1.0 DDD reason` (the reason, and the space before it, may be absent).
fn parse_status_line(line: &[u8]) -> Result<StartLine, BadRequest> {
    let Some(rest) = line.strip_prefix(VERSION_SP) else {
        return Err(version_error(line, Kind::Response));
    };
    let code = match rest.get(..3) {
        Some(&[a, b, c]) if [a, b, c].iter().all(u8::is_ascii_digit) && a != b'0' => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => {
            return Err(BadRequest::StartLine(
                "status code is not three digits 100-999".into(),
            ));
        }
    };
    let reason = match rest.get(3) {
        None => &[][..],
        Some(b' ') => &rest[4..],
        Some(_) => {
            return Err(BadRequest::StartLine(
                "status code is not three digits followed by a space".into(),
            ));
        }
    };
    let reason = std::str::from_utf8(reason)
        .map_err(|_| BadRequest::StartLine("reason phrase is not UTF-8".into()))?;
    Ok(StartLine::Response {
        status: Status(code),
        reason: reason.to_owned(),
    })
}

/// One `Name: value` line (no line ending; control characters other than tab already rejected).
fn parse_header_line(
    line: &[u8],
    headers: &mut Headers,
    content_length: &mut Option<u64>,
    limits: &Limits,
) -> Result<(), BadRequest> {
    if matches!(line.first(), Some(b' ' | b'\t')) {
        return Err(BadRequest::Header(
            "obsolete line folding (a header line starting with a space or tab)".into(),
        ));
    }
    let mut colon = None;
    for (i, &b) in line.iter().enumerate() {
        if b == b':' {
            colon = Some(i);
            break;
        }
        if !is_tchar(b) {
            return Err(BadRequest::Header(format!(
                "invalid character {:?} in header name {:?}",
                char::from(b),
                String::from_utf8_lossy(&line[..line.len().min(64)])
            )));
        }
    }
    let Some(colon) = colon else {
        return Err(BadRequest::Header(format!(
            "no ':' in header line {:?}",
            String::from_utf8_lossy(&line[..line.len().min(64)])
        )));
    };
    if colon == 0 {
        return Err(BadRequest::Header("empty header name".into()));
    }
    let name = &line[..colon];
    let value_range = trim_ows(line, colon + 1);
    let value = &line[value_range.clone()];
    if name.eq_ignore_ascii_case(b"content-length") {
        let n = parse_content_length(value)?;
        if content_length.is_some_and(|previous| previous != n) {
            return Err(BadRequest::ContentLength(
                "repeated Content-Length fields disagree".into(),
            ));
        }
        if n > limits.max_body as u64 {
            return Err(body_too_large(n, limits));
        }
        *content_length = Some(n);
        return Ok(());
    }
    if name.eq_ignore_ascii_case(b"transfer-encoding") {
        return Err(BadRequest::ContentLength(
            "Transfer-Encoding is not allowed (AGTP frames bodies with Content-Length only)".into(),
        ));
    }
    // One UTF-8 check per line; the name is ASCII and ':' is a char boundary.
    let text = std::str::from_utf8(line).map_err(|_| {
        BadRequest::Header(format!(
            "value of {} is not UTF-8",
            String::from_utf8_lossy(name)
        ))
    })?;
    let (Some(name), Some(value)) = (text.get(..colon), text.get(value_range)) else {
        return Err(BadRequest::Header("invalid header line".into()));
    };
    headers.fields.push(Field::new(name, value));
    Ok(())
}

fn parse_content_length(value: &[u8]) -> Result<u64, BadRequest> {
    if value.is_empty() {
        return Err(BadRequest::ContentLength("empty value".into()));
    }
    let mut n = 0u64;
    for &b in value {
        if !b.is_ascii_digit() {
            return Err(BadRequest::ContentLength(format!(
                "{:?} is not a decimal number",
                String::from_utf8_lossy(&value[..value.len().min(32)])
            )));
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(b - b'0')))
            .ok_or_else(|| BadRequest::ContentLength("value out of range".into()))?;
    }
    Ok(n)
}

/// The range of `line[from..]` without surrounding spaces and tabs.
fn trim_ows(line: &[u8], from: usize) -> std::ops::Range<usize> {
    let mut start = from;
    let mut end = line.len();
    while start < end && matches!(line[start], b' ' | b'\t') {
        start += 1;
    }
    while end > start && matches!(line[end - 1], b' ' | b'\t') {
        end -= 1;
    }
    start..end
}

fn ascii_string(bytes: &[u8]) -> Option<String> {
    std::str::from_utf8(bytes).ok().map(str::to_owned)
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// Whether `b` is a control character (C0 or DEL).
fn is_special(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

/// The index of the first control character (C0 or DEL) in `hay[from..]`, eight bytes at a time.
///
/// For a word `w`, `(w - 0x20..20) & !w & 0x80..80` flags the bytes below 0x20 and the same trick
/// on `w ^ 0x7f..7f` with 0x01 flags DEL. Spurious flags only ever appear above a real one (a
/// borrow runs upwards), so the lowest flag is exact.
fn find_special(hay: &[u8], from: usize) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let rest = hay.get(from..)?;
    let mut chunks = rest.chunks_exact(8);
    let mut base = from;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let below = w.wrapping_sub(LO * 0x20) & !w & HI;
        let x = w ^ (LO * 0x7f);
        let del = x.wrapping_sub(LO) & !x & HI;
        let flags = below | del;
        if flags != 0 {
            return Some(base + (flags.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| is_special(b))
        .map(|i| base + i)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    const DISCOVER_3_2_BODY: &str = r#"{
  "method": "DISCOVER",
  "task_id": "task-disc-001",
  "parameters": {
    "intent": "Audit smart contracts for security vulnerabilities",
    "capability_domains": ["methods", "tools"],
    "trust_tier_min": 1,
    "behavioral_trust_min": 0.85,
    "governance_zone": "zone:external-partner",
    "limit": 5,
    "scope_negotiate": true
  }
}"#;

    fn discover_3_2() -> Vec<u8> {
        format!(
            "AGTP/1.0 DISCOVER\r\n\
             Agent-ID: agtp://agtp.acme.tld/agents/orchestrator\r\n\
             Principal-ID: usr-chris-hood\r\n\
             Authority-Scope: discovery:query agents:delegate\r\n\
             Session-ID: sess-discovery-01\r\n\
             Task-ID: task-disc-001\r\n\
             Content-Type: application/agtp+json\r\n\
             Content-Length: {}\r\n\
             \r\n{DISCOVER_3_2_BODY}",
            DISCOVER_3_2_BODY.len()
        )
        .into_bytes()
    }

    fn req(buf: &[u8]) -> Result<Option<(Request, usize)>, BadRequest> {
        decode_request(buf, &Limits::default())
    }

    fn resp(buf: &[u8]) -> Result<Option<(Response, usize)>, BadRequest> {
        decode_response(buf, &Limits::default())
    }

    fn req_err(buf: &[u8]) -> BadRequest {
        req(buf).expect_err(&String::from_utf8_lossy(buf))
    }

    #[test]
    fn decodes_the_discovery_draft_example() {
        let raw = discover_3_2();
        let (r, n) = req(&raw).expect("valid").expect("complete");
        assert_eq!(n, raw.len());
        assert_eq!(r.method, "DISCOVER");
        assert_eq!(r.target, None);
        assert_eq!(r.path(), "/");
        assert_eq!(r.headers.len(), 6);
        assert_eq!(
            r.headers.agent_id(),
            Some("agtp://agtp.acme.tld/agents/orchestrator")
        );
        assert_eq!(r.headers.principal_id(), Some("usr-chris-hood"));
        assert_eq!(r.headers.task_id(), Some("task-disc-001"));
        assert_eq!(r.headers.session_id(), Some("sess-discovery-01"));
        assert!(!r.headers.contains("content-length"));
        let scopes = r
            .headers
            .authority_scope()
            .expect("valid")
            .expect("present");
        assert!(scopes.grants("discovery:query"));
        let body = r.json_body().expect("json").expect("non-empty");
        assert_eq!(body["parameters"]["limit"], 5);
        // Every proper prefix needs more bytes.
        for k in 0..raw.len() {
            assert_eq!(req(&raw[..k]), Ok(None), "prefix {k}");
        }
    }

    #[test]
    fn bare_lf_and_three_token_lines() {
        let raw = b"AGTP/1.0 describe /agents/a?x=1&y=2\nOwner-ID:  o-1 \t\n\n";
        let (r, n) = req(raw).expect("valid").expect("complete");
        assert_eq!(n, raw.len());
        assert_eq!(r.method, "DESCRIBE");
        assert_eq!(r.path(), "/agents/a");
        assert_eq!(r.query(), Some("x=1&y=2"));
        assert_eq!(r.headers.principal_id(), Some("o-1"));
        assert!(r.body.is_empty());
        assert_eq!(r.json_body(), Ok(None));
    }

    #[test]
    fn start_line_errors() {
        for (raw, needle) in [
            (
                &b"AGTP/2.0 DISCOVER\r\n\r\n"[..],
                "unsupported protocol version",
            ),
            (b"HTTP/1.1 200 OK\r\n", "not an AGTP/1.0"),
            (b"GET / HTTP/1.1\r\n\r\n", "not an AGTP/1.0"),
            (b"AGTP/1.0\r\n\r\n", "has no method"),
            (b"AGTP/1.0  DISCOVER\r\n\r\n", "empty token"),
            (b"AGTP/1.0 DISCOVER \r\n\r\n", "empty token"),
            (b"AGTP/1.0 DISCOVER / x\r\n\r\n", "extra tokens"),
            (b"AGTP/1.0 DIS.COVER\r\n\r\n", "invalid method"),
            (
                b"AGTP/1.0 DISCOVER agents\r\n\r\n",
                "does not start with '/'",
            ),
            (b"AGTP/1.0 DISCOVER /a#b\r\n\r\n", "'#'"),
            (b"AGTP/1.0 DISCOVER /a\tb\r\n\r\n", "0x09"),
            ("AGTP/1.0 DISCOVER /é\r\n\r\n".as_bytes(), "0xc3"),
            (b"AGTP/1.0 DISCOVER\r\r\n\r\n", "bare CR"),
            (b"AGTP/1.0 DIS\0COVER\r\n\r\n", "0x00"),
            (b"\r\nAGTP/1.0 DISCOVER\r\n\r\n", "empty request line"),
        ] {
            let err = req_err(raw);
            assert_eq!(err.code(), "malformed-request-line", "{err}");
            assert!(err.to_string().contains(needle), "{err} lacks {needle}");
        }
        let long = format!("AGTP/1.0 {}\r\n\r\n", "A".repeat(33));
        assert!(
            req_err(long.as_bytes())
                .to_string()
                .contains("longer than 32")
        );
        let ok = format!("AGTP/1.0 {}\r\n\r\n", "a_-9".repeat(8));
        assert_eq!(
            req(ok.as_bytes())
                .expect("valid")
                .expect("complete")
                .0
                .method,
            "A_-9".repeat(8)
        );
    }

    #[test]
    fn start_line_errors_come_early() {
        // No terminator yet, but the bytes can never become a request.
        assert_eq!(req_err(b"H").code(), "malformed-request-line");
        assert_eq!(req_err(b"AGTP/2").code(), "malformed-request-line");
        assert_eq!(
            req_err(b"\x16\x03\x01\x02\x00").code(),
            "malformed-request-line"
        );
        assert_eq!(
            req_err(b"AGTP/1.0 DISCOVER x\r\n").code(),
            "malformed-request-line"
        );
        assert_eq!(req(b"AGTP/1"), Ok(None));
        assert_eq!(req(b"AGTP/1.0 DISCOVER\r"), Ok(None));
        assert_eq!(req(b""), Ok(None));
        assert_eq!(
            req_err(b"AGTP/1.0 DISCOVER\r\nTransfer-Encoding: chunked\r\n").code(),
            "invalid-content-length"
        );
    }

    #[test]
    fn header_errors() {
        for (raw, code) in [
            (
                &b"AGTP/1.0 X\r\nNo colon here\r\n\r\n"[..],
                "malformed-header",
            ),
            (b"AGTP/1.0 X\r\n: empty\r\n\r\n", "malformed-header"),
            (b"AGTP/1.0 X\r\nBad Name: v\r\n\r\n", "malformed-header"),
            (b"AGTP/1.0 X\r\nName : v\r\n\r\n", "malformed-header"),
            (b"AGTP/1.0 X\r\nA: b\r\n folded\r\n\r\n", "malformed-header"),
            (b"AGTP/1.0 X\r\nA: b\x01c\r\n\r\n", "malformed-header"),
            (b"AGTP/1.0 X\r\nA: b\x7fc\r\n\r\n", "malformed-header"),
            (b"AGTP/1.0 X\r\nA: b\rc\r\n\r\n", "malformed-header"),
            (b"AGTP/1.0 X\r\nA: \xff\xfe\r\n\r\n", "malformed-header"),
            (
                b"AGTP/1.0 X\r\nContent-Length: -1\r\n\r\n",
                "invalid-content-length",
            ),
            (
                b"AGTP/1.0 X\r\nContent-Length: 1 2\r\n\r\n",
                "invalid-content-length",
            ),
            (
                b"AGTP/1.0 X\r\nContent-Length:\r\n\r\n",
                "invalid-content-length",
            ),
            (
                b"AGTP/1.0 X\r\nContent-Length: 0x10\r\n\r\n",
                "invalid-content-length",
            ),
            (
                b"AGTP/1.0 X\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                "invalid-content-length",
            ),
            (
                b"AGTP/1.0 X\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\nab",
                "invalid-content-length",
            ),
            (
                b"AGTP/1.0 X\r\ntransfer-encoding: identity\r\n\r\n",
                "invalid-content-length",
            ),
            (
                b"AGTP/1.0 X\r\nContent-Length: 1048577\r\n\r\n",
                "body-too-large",
            ),
        ] {
            let err = req_err(raw);
            assert_eq!(
                err.code(),
                code,
                "{err} for {}",
                String::from_utf8_lossy(raw)
            );
        }
        let (r, _) =
            req(b"AGTP/1.0 X\r\nContent-Length: 02\r\nContent-Length: 2\r\nX-Empty:\r\n\r\nab")
                .expect("valid")
                .expect("complete");
        assert_eq!(r.body, b"ab");
        assert_eq!(r.headers.get("x-empty"), Some(""));
        assert_eq!(r.headers.len(), 1);
    }

    #[test]
    fn header_count_limit() {
        let mut raw = String::from("AGTP/1.0 X\r\n");
        for i in 0..MAX_HEADERS {
            raw.push_str(&format!("H{i}: v\r\n"));
        }
        let ok = format!("{raw}\r\n");
        assert_eq!(
            req(ok.as_bytes())
                .expect("valid")
                .expect("complete")
                .0
                .headers
                .len(),
            MAX_HEADERS
        );
        // Content-Length is not one of the fields: 100 of them and a length still decode.
        let framed = format!("{raw}Content-Length: 2\r\n\r\nhi");
        let (r, _) = req(framed.as_bytes()).expect("valid").expect("complete");
        assert_eq!(
            (r.headers.len(), r.body.as_slice()),
            (MAX_HEADERS, &b"hi"[..])
        );
        assert_eq!(
            req(&r.encode()).expect("valid").expect("complete").0,
            r,
            "re-encoded, with its Content-Length, it decodes again"
        );
        raw.push_str("One-Too-Many: v\r\n");
        assert!(
            req_err(raw.as_bytes())
                .to_string()
                .contains("more than 100")
        );
    }

    #[test]
    fn limits() {
        let limits = Limits::default();
        assert_eq!((limits.max_head, limits.max_body), (16384, 1 << 20));
        // A head that has not ended within the limit.
        let mut raw = b"AGTP/1.0 DISCOVER\r\nX-Pad: ".to_vec();
        raw.resize(limits.max_head - 1, b'a');
        assert_eq!(req(&raw), Ok(None));
        raw.push(b'a');
        assert_eq!(req_err(&raw), BadRequest::HeadTooLarge { limit: 16384 });
        // Exactly at the limit (terminator included) is fine.
        let mut raw = b"AGTP/1.0 DISCOVER\r\nX-Pad: ".to_vec();
        raw.resize(limits.max_head - 4, b'a');
        raw.extend_from_slice(b"\r\n\r\n");
        assert!(req(&raw).expect("valid").is_some());
        raw.insert(30, b'a');
        assert_eq!(req_err(&raw), BadRequest::HeadTooLarge { limit: 16384 });
        // A declared body over the limit fails before the body arrives; at the limit it waits.
        let err = req_err(b"AGTP/1.0 X\r\nContent-Length: 1048577\r\n");
        assert_eq!(
            err,
            BadRequest::BodyTooLarge {
                length: 1_048_577,
                limit: 1 << 20
            }
        );
        assert_eq!(
            req(b"AGTP/1.0 X\r\nContent-Length: 1048576\r\n\r\n"),
            Ok(None)
        );
        let small = Limits {
            max_head: 64,
            max_body: 4,
        };
        assert!(decode_request(b"AGTP/1.0 X\r\nContent-Length: 4\r\n\r\nabcd", &small).is_ok());
        assert!(decode_request(b"AGTP/1.0 X\r\nContent-Length: 5\r\n\r\nabcde", &small).is_err());
    }

    #[test]
    fn pipelined_requests() {
        let mut raw = discover_3_2();
        let first = raw.len();
        raw.extend_from_slice(b"AGTP/1.0 DESCRIBE /agents/x\r\nContent-Length: 2\r\n\r\n{}AGTP");
        let (a, n) = req(&raw).expect("valid").expect("complete");
        assert_eq!((a.method.as_str(), n), ("DISCOVER", first));
        let (b, m) = req(&raw[n..]).expect("valid").expect("complete");
        assert_eq!(b.method, "DESCRIBE");
        assert_eq!(b.json_body(), Ok(Some(json!({}))));
        assert_eq!(req(&raw[n + m..]), Ok(None));
    }

    #[test]
    fn responses() {
        let raw = b"AGTP/1.0 200 OK\r\nTask-ID: t\r\nContent-Length: 2\r\n\r\n{}";
        let (r, n) = resp(raw).expect("valid").expect("complete");
        assert_eq!(
            (r.status, r.reason.as_str(), n),
            (Status::OK, "OK", raw.len())
        );
        for (raw, reason) in [
            (&b"AGTP/1.0 451 Scope Violation\n\n"[..], "Scope Violation"),
            (b"AGTP/1.0 204\r\n\r\n", ""),
            (b"AGTP/1.0 204 \r\n\r\n", ""),
            (b"AGTP/1.0 299 a\tb  \r\n\r\n", "a\tb  "),
        ] {
            assert_eq!(
                resp(raw).expect("valid").expect("complete").0.reason,
                reason
            );
        }
        for raw in [
            &b"AGTP/1.0 20 OK\r\n\r\n"[..],
            b"AGTP/1.0 2000 OK\r\n\r\n",
            b"AGTP/1.0 099 OK\r\n\r\n",
            b"AGTP/1.0 OK\r\n\r\n",
            b"AGTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"AGTP/1.0 200 \xff\r\n\r\n",
        ] {
            let err = resp(raw).expect_err(&String::from_utf8_lossy(raw));
            assert_eq!(err.code(), "malformed-request-line");
        }
        // A request is not a response and vice versa.
        assert!(resp(&discover_3_2()).is_err());
        assert!(req(b"AGTP/1.0 200 OK\r\n\r\n").is_err());
    }

    #[test]
    fn encode_writes_canonical_framing() {
        let r = Request::new("discover")
            .with_header("Agent-ID", "agtp://a")
            .with_header("Content-Length", "999")
            .with_json_body(&json!({"method": "DISCOVER"}));
        assert_eq!(
            r.encode(),
            b"AGTP/1.0 DISCOVER\r\nAgent-ID: agtp://a\r\nContent-Type: application/vnd.agtp+json\r\n\
              Content-Length: 21\r\n\r\n{\"method\":\"DISCOVER\"}"
                .to_vec()
        );
        let r = Response::new(Status(204));
        assert_eq!(
            r.encode(),
            b"AGTP/1.0 204 No Content\r\nContent-Length: 0\r\n\r\n".to_vec()
        );
        let mut out = b"prefix".to_vec();
        Response::new(Status::OK)
            .with_reason("")
            .encode_into(&mut out);
        assert_eq!(
            out,
            b"prefixAGTP/1.0 200 \r\nContent-Length: 0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn encode_cannot_inject_lines() {
        // A value with line breaks stays one field.
        let r = Request::new("X").with_header("A", "5\r\n\r\nsmuggled\x00");
        let wire = r.encode();
        let (back, n) = req(&wire).expect("valid").expect("complete");
        assert_eq!(n, wire.len());
        assert_eq!(back.headers.get("a"), Some("5    smuggled"));
        assert!(back.body.is_empty());
        // Names, targets, methods and reasons cannot add lines either: the peer sees one
        // (malformed) field or start line, never a second one.
        let r = Request::new("X\n")
            .with_target("/a\r\nEvil: 1")
            .with_header("B\r\nContent-Length", "5")
            .with_body(b"ok".to_vec(), "text/plain\n");
        let wire = r.encode();
        let lines = wire.iter().filter(|&&b| b == b'\n').count();
        assert_eq!(lines, 5, "{}", String::from_utf8_lossy(&wire));
        assert!(wire.ends_with(b"Content-Length: 2\r\n\r\nok"));
        let s = Response::new(Status::OK).with_reason("OK\r\nEvil: 1");
        let (back, _) = resp(&s.encode()).expect("valid").expect("complete");
        assert_eq!(back.reason, "OK  Evil: 1");
        assert!(back.headers.is_empty());
    }

    #[test]
    fn with_body_and_json_body_media_types() {
        let r =
            Response::new(Status::OK).with_body("[1]", "Application/VND.AGTP+JSON ; charset=utf-8");
        assert_eq!(r.json_body(), Ok(Some(json!([1]))));
        for ct in JSON_MEDIA_TYPES {
            let r = Request::new("X").with_body("{}", ct);
            assert_eq!(r.json_body(), Ok(Some(json!({}))), "{ct}");
        }
        let r = Request::new("X").with_body("{}", "text/plain");
        assert_eq!(
            r.json_body(),
            Err(BadRequest::ContentType("text/plain".into()))
        );
        let mut r = Request::new("X").with_body("{", "application/json");
        assert_eq!(r.json_body().map_err(|e| e.code()), Err("invalid-body"));
        r.headers.remove("content-type");
        r.body = b"true".to_vec();
        assert_eq!(r.json_body(), Ok(Some(json!(true))));
        r.body.clear();
        r.headers.insert("Content-Type", "text/plain");
        assert_eq!(r.json_body(), Ok(None));
    }

    #[test]
    fn error_responses() {
        let e = AgtpError::from(BadRequest::MissingHeader("Agent-ID"));
        let r = Response::from_error(&e, Some("task-1"));
        assert_eq!(r.status, Status::BAD_REQUEST);
        assert_eq!(r.reason, "Bad Request");
        assert_eq!(r.headers.task_id(), Some("task-1"));
        let body = r.json_body().expect("json").expect("body");
        // The newer base draft's name, with Agora's draft-era one beside it.
        assert_eq!(body["error"]["code"], "missing-agent-id");
        assert_eq!(body["error"]["draft_code"], "missing-header");
        let (back, _) = resp(&r.encode()).expect("valid").expect("complete");
        assert_eq!(back, r);
    }

    #[test]
    fn accept_lists_name_media_types_explicitly() {
        let h: Headers = [
            ("Accept", "application/json"),
            (
                "accept",
                "text/html, Application/VND.agtp.identity+json;q=0.9",
            ),
        ]
        .into_iter()
        .collect();
        assert!(h.accepts(CONTENT_TYPE_IDENTITY));
        assert!(h.accepts("application/json"));
        assert!(!h.accepts(CONTENT_TYPE_MANIFEST));
        let any: Headers = [("Accept", "*/*")].into_iter().collect();
        assert!(!any.accepts(CONTENT_TYPE_IDENTITY));
        assert!(!Headers::new().accepts("application/json"));
    }

    #[test]
    fn headers_api() {
        let mut h: Headers = [("A", "1"), ("b", "2"), ("a", "3"), ("C", "4")]
            .into_iter()
            .collect();
        assert_eq!(h.get("a"), Some("1"));
        assert_eq!(h.get_all("A").collect::<Vec<_>>(), ["1", "3"]);
        h.insert("a", "5");
        assert_eq!(
            h.iter().collect::<Vec<_>>(),
            [("a", "5"), ("b", "2"), ("C", "4")]
        );
        h.append("B", "6");
        assert_eq!(h.remove("b"), Some("2".to_owned()));
        assert!(!h.contains("B"));
        assert_eq!(h.remove("b"), None);
        h.insert("D", "7");
        assert_eq!(h.len(), 3);
        h.extend([("Owner-ID", "o")]);
        assert_eq!(h.principal_id(), Some("o"));
        h.append("Principal-ID", "p");
        assert_eq!(h.principal_id(), Some("p"));
        assert_eq!(h.authority_scope(), Ok(None));
        h.append("Authority-Scope", "a:b, c:*");
        h.append("authority-scope", "");
        h.append("AUTHORITY-SCOPE", "d:e");
        let s = h.authority_scope().expect("valid").expect("present");
        assert_eq!(s.to_string(), "a:b c:* d:e");
        h.append("Authority-Scope", "bad");
        assert_eq!(
            h.authority_scope().map_err(|e| e.code()),
            Err("malformed-header")
        );
        assert!(Headers::new().is_empty());
        assert_eq!(Headers::with_capacity(4).iter().len(), 0);
    }

    #[test]
    fn find_special_matches_naive() {
        let mut hay: Vec<u8> = (0u8..=255).collect();
        hay.extend((0u8..=255).rev());
        for from in 0..hay.len() + 2 {
            let naive = hay
                .get(from..)
                .and_then(|r| r.iter().position(|&b| is_special(b)))
                .map(|i| i + from);
            assert_eq!(find_special(&hay, from), naive, "from {from}");
        }
    }

    // ---- property tests ----

    fn method() -> impl Strategy<Value = String> {
        "[A-Z0-9_-]{1,32}"
    }

    fn target() -> impl Strategy<Value = Option<String>> {
        proptest::option::of("/[!-\"$-~]{0,40}")
    }

    fn header_name() -> impl Strategy<Value = String> {
        "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,24}".prop_filter("framing headers", |n| {
            !n.eq_ignore_ascii_case("content-length")
                && !n.eq_ignore_ascii_case("transfer-encoding")
        })
    }

    fn header_value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            "[!-~]",
            "[!-~][ -~\t]{0,40}[!-~]",
            "[^\\p{Cc} \t][^\\p{Cc}]{0,20}[^\\p{Cc} \t]",
        ]
    }

    fn headers() -> impl Strategy<Value = Headers> {
        proptest::collection::vec((header_name(), header_value()), 0..12)
            .prop_map(|v| v.into_iter().collect())
    }

    fn body() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(Vec::new()),
            proptest::collection::vec(any::<u8>(), 0..300),
        ]
    }

    fn request() -> impl Strategy<Value = Request> {
        (method(), target(), headers(), body()).prop_map(|(method, target, headers, body)| {
            Request {
                method,
                target,
                headers,
                body,
            }
        })
    }

    fn response() -> impl Strategy<Value = Response> {
        (100u16..=999, "[^\\p{Cc}]{0,30}", headers(), body()).prop_map(
            |(code, reason, headers, body)| Response {
                status: Status(code),
                reason,
                headers,
                body,
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn request_round_trip(r in request()) {
            let wire = r.encode();
            let decoded = req(&wire);
            prop_assert_eq!(decoded, Ok(Some((r, wire.len()))));
        }

        #[test]
        fn response_round_trip(r in response()) {
            let wire = r.encode();
            let decoded = resp(&wire);
            prop_assert_eq!(decoded, Ok(Some((r, wire.len()))));
        }

        #[test]
        fn two_pieces(r in request(), s in response(), cut in any::<prop::sample::Index>()) {
            let wire = r.encode();
            let k = cut.index(wire.len());
            prop_assert_eq!(req(&wire[..k]), Ok(None));
            prop_assert_eq!(req(&wire), Ok(Some((r, wire.len()))));
            let wire = s.encode();
            let k = cut.index(wire.len());
            prop_assert_eq!(resp(&wire[..k]), Ok(None));
            prop_assert_eq!(resp(&wire), Ok(Some((s, wire.len()))));
        }

        #[test]
        fn pipelined_pair(a in request(), b in request()) {
            let mut wire = a.encode();
            let first = wire.len();
            b.encode_into(&mut wire);
            prop_assert_eq!(req(&wire), Ok(Some((a, first))));
            prop_assert_eq!(req(&wire[first..]), Ok(Some((b, wire.len() - first))));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let small = Limits { max_head: 64, max_body: 16 };
            let _ = req(&bytes);
            let _ = resp(&bytes);
            let _ = decode_request(&bytes, &small);
            let _ = decode_response(&bytes, &small);
        }

        #[test]
        fn mutated_messages_never_panic_and_errors_are_final(
            r in request(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut wire = r.encode();
            for (at, byte) in edits {
                let i = at.index(wire.len());
                wire[i] = byte;
            }
            let full = req(&wire);
            let k = cut.index(wire.len() + 1);
            let prefix = req(&wire[..k]);
            // An input that can never be valid stays invalid as bytes are added.
            if prefix.is_err() {
                prop_assert!(full.is_err(), "{:?} then {:?}", prefix, full);
            }
            // A prefix of a valid message is never an error.
            if let Ok(Some((_, n))) = full && k < n {
                prop_assert_eq!(prefix, Ok(None));
            }
            if let Ok(Some((m, n))) = full {
                let again = m.encode();
                prop_assert_eq!(req(&again), Ok(Some((m, again.len()))));
                prop_assert!(n <= wire.len());
            }
        }
    }
}
