//! RFC 8785 JSON Canonicalization Scheme (JCS) over [`serde_json::Value`]: the byte string the
//! ES256 `ans_signature` is computed over (see [`crate::signature`]).
//!
//! This module owns the canonical serialization, and a strict I-JSON parser ([`parse`]) for text
//! whose canonical form matters (signed bodies). What it implements, by RFC 8785 section:
//!
//! - §3.1 I-JSON input (RFC 7493): [`parse`] rejects duplicate member names, lone surrogates
//!   and numbers outside the `f64` range; a `Value` built in memory is taken as it is.
//! - §3.2.1 whitespace: none is emitted between tokens.
//! - §3.2.2.1 literals: `null`, `true`, `false`.
//! - §3.2.2.2 strings: only `"` and `\` and the C0 controls are escaped; `\b \t \n \f \r` use
//!   their short forms, every other control is `\u00xx` with lowercase hex. Everything else,
//!   U+2028/U+2029 and all non-ASCII included, is written as literal UTF-8.
//! - §3.2.2.3 numbers: ECMAScript `Number.prototype.toString` (via `ryu-js`), so `1e21` is
//!   `1e+21`, `1e-7` is `1e-7`, `0.000001` stays `0.000001` and `-0` is `0`. Integers that
//!   `serde_json` holds as `u64`/`i64` and whose magnitude is at most 2^53 are written exactly (the
//!   same digits `toString` gives, without a float round trip); larger ones are converted to the
//!   nearest `f64` first, exactly as any JSON parser following I-JSON would.
//! - §3.2.3 member order: object members are sorted by the UTF-16 code units of their names,
//!   which differs from UTF-8/code-point order when a name holds characters above U+FFFF and
//!   another holds U+E000..=U+FFFF at the same position. Arrays keep their order.
//!
//! A `Value` cannot hold NaN or infinities, so every `Value` has a canonical form and
//! [`canonicalize`] is infallible (if `serde_json`'s `arbitrary_precision` feature is ever
//! enabled and a number overflows `f64`, it is written as `null`, as `JSON.stringify` does).
//!
//! Why a parser of our own: `serde_json` without its `float_roundtrip` feature (the case when
//! this crate is built on its own; the feature is switched on only by other crates of the
//! workspace) parses about one in five 17-significant-digit decimals one ULP off, e.g.
//! `0.11290774160688077`. The canonical text of such a number then differs from the signer's,
//! and a correct signature fails to verify. [`parse`] converts numbers with the standard
//! library's correctly rounded `f64::from_str`, whatever features are on, so a verifier should
//! parse signed bodies with it (or enable `float_roundtrip`).
//!
//! The writer appends to one caller-supplied buffer and sorts member references in one shared
//! scratch vector, so canonicalizing allocates nothing per object once the buffers are warm.
//!
//! Why not a crate: the maintained `serde_json_canonicalizer` fails the committed vector
//! `error-duplicate-name` (`tests/vectors/agtp/jcs.json`). It canonicalizes a
//! `serde_json::Value`, and `serde_json` keeps the last of duplicate members, so `{"a":1,"a":2}`
//! — not I-JSON, which RFC 8785 §3.1 requires — comes out as `{"a":2}` instead of being refused;
//! a signed body with a duplicate member would then be signed or verified as another object than
//! the one a strict reader sees. On the other 58 canonical vectors it writes the same bytes as
//! this module (`the_jcs_crate_fails_only_the_duplicate_name_vector` pins both facts), and it
//! takes about nine times as long on a 10-result DISCOVER body (55.2 µs against 6.1 µs, `cargo
//! bench -p agora-agtp --bench signature`, same run).

use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

/// Nesting limit of [`parse`] (the same as `serde_json`'s default).
pub const MAX_DEPTH: usize = 128;

/// Why [`parse`] or [`canonicalize_str`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JcsError {
    /// The input is not JSON (RFC 8259), or nests deeper than [`MAX_DEPTH`].
    #[error("invalid JSON at byte {offset}: {reason}")]
    Parse {
        /// Byte offset of the problem.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// An object repeats a member name (not I-JSON, RFC 7493 §2.3).
    #[error("duplicate member name {0:?}")]
    DuplicateName(String),
    /// A number is too large for an IEEE 754 double (not I-JSON, RFC 7493 §2.2).
    #[error("number {0} is out of the IEEE 754 double range")]
    NumberOutOfRange(String),
}

impl JcsError {
    /// A stable machine-readable name (used by the test vectors).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Parse { .. } => "parse",
            Self::DuplicateName(_) => "duplicate-name",
            Self::NumberOutOfRange(_) => "number-out-of-range",
        }
    }
}

/// The canonical (RFC 8785) bytes of `value`.
pub fn canonicalize(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_canonical(value, &mut out);
    out
}

/// Appends the canonical (RFC 8785) bytes of `value` to `out`.
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    let mut scratch: Vec<(&str, &Value)> = Vec::new();
    write_value(value, out, &mut scratch);
}

/// The canonical (RFC 8785) bytes of the object `map` with its member named `exclude` (if any)
/// left out, as if it had been removed first; nothing is cloned. This is how a signature member
/// is excluded from the bytes it signs.
pub fn canonicalize_object_excluding(map: &Map<String, Value>, exclude: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut scratch: Vec<(&str, &Value)> = Vec::new();
    write_object(map, Some(exclude), &mut out, &mut scratch);
    out
}

/// Parses `json` with [`parse`] and returns its canonical (RFC 8785) bytes.
pub fn canonicalize_str(json: &str) -> Result<Vec<u8>, JcsError> {
    Ok(canonicalize(&parse(json)?))
}

/// Parses I-JSON text (RFC 7493) into a [`Value`]: strict RFC 8259 grammar, no duplicate member
/// names, no lone surrogates in `\u` escapes, numbers within the `f64` range. Integers without
/// fraction or exponent become `u64` (or `i64` when negative) when they fit, as with
/// `serde_json`; every other number is the correctly rounded nearest `f64`.
pub fn parse(json: &str) -> Result<Value, JcsError> {
    let mut p = Parser {
        s: json,
        b: json.as_bytes(),
        pos: 0,
        depth: 0,
    };
    p.ws();
    let value = p.value()?;
    p.ws();
    if p.pos != p.b.len() {
        return Err(p.err("trailing characters after the JSON value"));
    }
    Ok(value)
}

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, reason: &'static str) -> JcsError {
        JcsError::Parse {
            offset: self.pos,
            reason,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn eat(&mut self, byte: u8, reason: &'static str) -> Result<(), JcsError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(reason))
        }
    }

    fn literal(&mut self, word: &'static str, value: Value) -> Result<Value, JcsError> {
        if self.b.get(self.pos..self.pos + word.len()) == Some(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn value(&mut self) -> Result<Value, JcsError> {
        match self.peek() {
            Some(b'{') => self.nested(Self::object),
            Some(b'[') => self.nested(Self::array),
            Some(b'"') => self.string().map(Value::String),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("expected a JSON value")),
            None => Err(self.err("unexpected end of input")),
        }
    }

    fn nested(&mut self, f: fn(&mut Self) -> Result<Value, JcsError>) -> Result<Value, JcsError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        self.depth += 1;
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn object(&mut self) -> Result<Value, JcsError> {
        self.pos += 1; // '{'
        let mut map = Map::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(map));
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a member name"));
            }
            let name = self.string()?;
            self.ws();
            self.eat(b':', "expected ':' after a member name")?;
            self.ws();
            let value = self.value()?;
            if map.contains_key(&name) {
                return Err(JcsError::DuplicateName(name));
            }
            map.insert(name, value);
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.err("expected ',' or '}' in an object")),
            }
        }
    }

    fn array(&mut self) -> Result<Value, JcsError> {
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.ws();
                }
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.err("expected ',' or ']' in an array")),
            }
        }
    }

    fn string(&mut self) -> Result<String, JcsError> {
        self.pos += 1; // '"'
        let mut out = String::new();
        let mut run = self.pos;
        loop {
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    out.push_str(self.s.get(run..self.pos).unwrap_or_default());
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    out.push_str(self.s.get(run..self.pos).unwrap_or_default());
                    self.pos += 1;
                    self.escape(&mut out)?;
                    run = self.pos;
                }
                Some(0x00..=0x1F) => return Err(self.err("control character in a string")),
                // '"', '\\' and controls are ASCII, so a run always ends on a char boundary.
                Some(_) => self.pos += 1,
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), JcsError> {
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.pos += 1;
                let unit = self.hex4()?;
                let code = match unit {
                    0xD800..=0xDBFF => {
                        if self.b.get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return Err(self.err("lone leading surrogate in \\u escape"));
                        }
                        self.pos += 2;
                        let low = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(
                                self.err("leading surrogate not followed by a trailing one")
                            );
                        }
                        0x1_0000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                    }
                    0xDC00..=0xDFFF => {
                        return Err(self.err("lone trailing surrogate in \\u escape"));
                    }
                    _ => unit,
                };
                let c = char::from_u32(code).ok_or_else(|| self.err("invalid \\u escape"))?;
                out.push(c);
                return Ok(());
            }
            _ => return Err(self.err("invalid escape")),
        };
        self.pos += 1;
        out.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, JcsError> {
        let mut v = 0;
        for _ in 0..4 {
            let d = match self.peek() {
                Some(c @ b'0'..=b'9') => c - b'0',
                Some(c @ b'a'..=b'f') => c - b'a' + 10,
                Some(c @ b'A'..=b'F') => c - b'A' + 10,
                _ => return Err(self.err("expected four hex digits in \\u escape")),
            };
            v = v * 16 + u32::from(d);
            self.pos += 1;
        }
        Ok(v)
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Value, JcsError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("expected a digit")),
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            integer = false;
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.err("expected a digit after '.'"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            integer = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("expected a digit in the exponent"));
            }
        }
        let text = self.s.get(start..self.pos).unwrap_or_default();
        if integer {
            if let Ok(u) = text.parse::<u64>() {
                return Ok(Value::Number(u.into()));
            }
            if let Ok(i) = text.parse::<i64>() {
                return Ok(Value::Number(i.into()));
            }
        }
        text.parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| JcsError::NumberOutOfRange(text.to_owned()))
    }
}

/// Compares two member names by their UTF-16 code units (RFC 8785 §3.2.3), without allocating.
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    let common = ab.iter().zip(bb).take_while(|(x, y)| x == y).count();
    // Back up to the start of the character the first difference is in; the prefixes are equal,
    // so this is a character boundary of both strings.
    let mut start = common;
    while !a.is_char_boundary(start) {
        start -= 1;
    }
    let ca = a.get(start..).and_then(|s| s.chars().next());
    let cb = b.get(start..).and_then(|s| s.chars().next());
    match (ca, cb) {
        (Some(x), Some(y)) => utf16_rank(x).cmp(&utf16_rank(y)),
        // One is a prefix of the other (or they are equal): the shorter sorts first.
        _ => ab.len().cmp(&bb.len()),
    }
}

/// A key whose order is UTF-16 code-unit order for single characters: U+0000..U+D7FF, then the
/// supplementary planes (whose leading surrogates are 0xD800..0xDBFF), then U+E000..U+FFFF.
fn utf16_rank(c: char) -> u32 {
    let c = u32::from(c);
    if (0xE000..=0xFFFF).contains(&c) {
        c + 0x11_0000
    } else {
        c
    }
}

fn write_value<'a>(value: &'a Value, out: &mut Vec<u8>, scratch: &mut Vec<(&'a str, &'a Value)>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out, scratch);
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(map, None, out, scratch),
    }
}

fn write_object<'a>(
    map: &'a Map<String, Value>,
    exclude: Option<&str>,
    out: &mut Vec<u8>,
    scratch: &mut Vec<(&'a str, &'a Value)>,
) {
    // This object's members occupy scratch[base..end]; nested objects push (and pop) theirs
    // above `end`, so the segment stays valid while we recurse.
    let base = scratch.len();
    scratch.extend(
        map.iter()
            .filter(|(k, _)| Some(k.as_str()) != exclude)
            .map(|(k, v)| (k.as_str(), v)),
    );
    let end = scratch.len();
    if let Some(members) = scratch.get_mut(base..end) {
        members.sort_unstable_by(|x, y| cmp_utf16(x.0, y.0));
    }
    out.push(b'{');
    for i in base..end {
        let Some(&(name, member)) = scratch.get(i) else {
            break;
        };
        if i > base {
            out.push(b',');
        }
        write_string(name, out);
        out.push(b':');
        write_value(member, out, scratch);
    }
    out.push(b'}');
    scratch.truncate(base);
}

/// 2^53: integers up to this magnitude are exact in an `f64`, so their ECMAScript form is their
/// decimal digits.
const MAX_EXACT: u64 = 1 << 53;

fn write_number(n: &Number, out: &mut Vec<u8>) {
    if let Some(u) = n.as_u64()
        && u <= MAX_EXACT
    {
        write_u64(u, out);
        return;
    }
    if let Some(i) = n.as_i64()
        && i.unsigned_abs() <= MAX_EXACT
    {
        if i < 0 {
            out.push(b'-');
        }
        write_u64(i.unsigned_abs(), out);
        return;
    }
    match n.as_f64() {
        Some(f) if f.is_finite() => {
            let mut buf = ryu_js::Buffer::new();
            out.extend_from_slice(buf.format_finite(f).as_bytes());
        }
        _ => out.extend_from_slice(b"null"),
    }
}

fn write_u64(mut u: u64, out: &mut Vec<u8>) {
    // u64::MAX has 20 digits, so `pos` never underflows.
    let mut buf = [0u8; 20];
    let mut pos = buf.len();
    loop {
        pos -= 1;
        buf[pos] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[pos..]);
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn write_string(s: &str, out: &mut Vec<u8>) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0A => b"\\n",
            0x0C => b"\\f",
            0x0D => b"\\r",
            0x00..=0x1F => b"",
            _ => continue,
        };
        if let Some(literal) = bytes.get(run..i) {
            out.extend_from_slice(literal);
        }
        if short.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xF)]);
        } else {
            out.extend_from_slice(short);
        }
        run = i + 1;
    }
    if let Some(literal) = bytes.get(run..) {
        out.extend_from_slice(literal);
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(v: &Value) -> String {
        String::from_utf8(canonicalize(v)).unwrap()
    }

    #[test]
    fn sorts_by_utf16_not_utf8() {
        // U+1F600 is F0 9F 98 80 in UTF-8 (after EE 80 80 for U+E000) but D83D DE00 in UTF-16
        // (before E000).
        let v = json!({"\u{e000}": 1, "\u{1f600}": 2, "a": 3, "": 4, "ab": 5});
        assert_eq!(
            canon(&v),
            "{\"\":4,\"a\":3,\"ab\":5,\"\u{1f600}\":2,\"\u{e000}\":1}"
        );
        assert_eq!(cmp_utf16("\u{1f600}", "\u{e000}"), Ordering::Less);
        assert_eq!(cmp_utf16("\u{d7ff}", "\u{1f600}"), Ordering::Less);
        assert_eq!(cmp_utf16("\u{10000}", "\u{10ffff}"), Ordering::Less);
        assert_eq!(cmp_utf16("é", "éa"), Ordering::Less);
        assert_eq!(cmp_utf16("x", "x"), Ordering::Equal);
    }

    #[test]
    fn escapes_exactly_the_required_characters() {
        let v = json!("\u{0}\u{8}\t\n\u{b}\u{c}\r\u{1f}\"\\/\u{7f}\u{2028}\u{2029}é€😀");
        assert_eq!(
            canon(&v),
            "\"\\u0000\\b\\t\\n\\u000b\\f\\r\\u001f\\\"\\\\/\u{7f}\u{2028}\u{2029}é€😀\""
        );
    }

    #[test]
    fn numbers_follow_ecmascript() {
        let cases = [
            (json!(0), "0"),
            (json!(-0.0), "0"),
            (json!(1e21), "1e+21"),
            (json!(1e-7), "1e-7"),
            (json!(0.000001), "0.000001"),
            (json!(4.5), "4.5"),
            (json!(u64::MAX), "18446744073709552000"),
            (json!(i64::MIN), "-9223372036854776000"),
            (json!(9_007_199_254_740_992_u64), "9007199254740992"),
            (json!(-9_007_199_254_740_992_i64), "-9007199254740992"),
            (json!(9_007_199_254_740_993_u64), "9007199254740992"),
            (json!(123_456_789), "123456789"),
            (json!(-1), "-1"),
        ];
        for (v, want) in cases {
            assert_eq!(canon(&v), want, "{v}");
        }
    }

    #[test]
    fn nested_objects_reuse_the_scratch_correctly() {
        let v = json!({"b": {"d": 1, "c": {"f": [], "e": {}}}, "a": [{"z": 1, "y": 2}]});
        assert_eq!(
            canon(&v),
            r#"{"a":[{"y":2,"z":1}],"b":{"c":{"e":{},"f":[]},"d":1}}"#
        );
    }

    #[test]
    fn parse_is_strict_i_json() {
        assert_eq!(canonicalize_str(" [ 1 , true ] ").unwrap(), b"[1,true]");
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "1e",
            "+1",
            "-",
            "tru",
            "[1] x",
            "\"\\x\"",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"\\ud800\\u0041\"",
            "\"a\u{1}\"",
            "\"abc",
            "{1:2}",
            "{\"a\" 1}",
            "NaN",
            "[\"\\u12\"]",
        ] {
            assert!(matches!(parse(bad), Err(JcsError::Parse { .. })), "{bad:?}");
        }
        assert_eq!(
            parse(r#"{"a":1,"b":{},"a":2}"#),
            Err(JcsError::DuplicateName("a".into()))
        );
        assert_eq!(
            parse("1e400"),
            Err(JcsError::NumberOutOfRange("1e400".into()))
        );
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(parse(&deep).is_err());
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(&ok).is_ok());
        assert_eq!(
            parse(r#""\ud83d\ude00\u00e9\/\b\f\n\r\t\"\\""#).unwrap(),
            json!("\u{1f600}é/\u{8}\u{c}\n\r\t\"\\")
        );
        assert_eq!(parse("-0").unwrap(), json!(0));
        assert_eq!(parse("18446744073709551615").unwrap(), json!(u64::MAX));
        assert_eq!(parse("-9223372036854775808").unwrap(), json!(i64::MIN));
        assert_eq!(
            parse("18446744073709551616").unwrap(),
            json!(18446744073709551616.0)
        );
    }

    #[test]
    fn parse_rounds_numbers_correctly() {
        // serde_json without float_roundtrip reads this one ULP off.
        let v = parse("0.11290774160688077").unwrap();
        assert_eq!(v.as_f64(), Some(0.11290774160688077));
        assert_eq!(canon(&v), "0.11290774160688077");
    }
}
