//! Strict JSON reading shared by every parser in the crate.
//!
//! `serde_json::Value` keeps the last of two duplicate keys without complaint, and derived structs
//! only notice duplicates among their known fields. AGH envelopes are forwarded byte-for-byte, so a
//! relay and a receiver must never read two different objects out of the same bytes: every object
//! this crate reads, at every depth, goes through [`for_each_field`], which refuses a repeated key.
//! Strings are borrowed from the input whenever they contain no escapes.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use smallvec::SmallVec;

/// A JSON string, borrowed from the input when it has no escape sequences.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct Str<'a>(pub(crate) Cow<'a, str>);

impl<'a> Str<'a> {
    pub(crate) fn into_cow(self) -> Cow<'a, str> {
        self.0
    }
}

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// Keys of one object, kept to detect repeats. Small objects are checked linearly; past
/// `LINEAR_LIMIT` keys a hash set keeps the check linear in the object size.
struct SeenKeys<'de> {
    few: SmallVec<[Cow<'de, str>; 8]>,
    many: Option<HashSet<Cow<'de, str>>>,
}

const LINEAR_LIMIT: usize = 16;

impl<'de> SeenKeys<'de> {
    fn new() -> Self {
        Self {
            few: SmallVec::new(),
            many: None,
        }
    }

    /// Records `key`; `false` when it was already present.
    fn insert(&mut self, key: Cow<'de, str>) -> bool {
        if let Some(set) = &mut self.many {
            return set.insert(key);
        }
        if self.few.contains(&key) {
            return false;
        }
        if self.few.len() < LINEAR_LIMIT {
            self.few.push(key);
        } else {
            let mut set: HashSet<_> = self.few.drain(..).collect();
            set.insert(key);
            self.many = Some(set);
        }
        true
    }
}

/// What a field callback did with one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// Consumed the value of the caller's known field number `n` (`n < 64`).
    Known(usize),
    /// Not a field the caller knows; the walker skips the value.
    Unknown,
}

/// Walks the fields of one JSON object, refusing duplicate keys. `field` is called with each key
/// and the map; it either consumes the value of a known field and says which, or leaves the value
/// to be skipped (skipped values are still checked for duplicate keys at every depth). Known
/// fields are tracked in a bit mask; only unknown keys are kept for comparison.
pub(crate) fn for_each_field<'de, A, F>(mut map: A, mut field: F) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    F: FnMut(&str, &mut A) -> Result<Field, A::Error>,
{
    let mut known: u64 = 0;
    let mut unknown: Option<SeenKeys<'de>> = None;
    while let Some(Str(key)) = map.next_key::<Str<'de>>()? {
        let fresh = match field(&key, &mut map)? {
            Field::Known(n) => {
                let bit = 1u64 << (n & 63);
                let fresh = known & bit == 0;
                known |= bit;
                fresh
            }
            Field::Unknown => {
                map.next_value::<NoDup>()?;
                unknown
                    .get_or_insert_with(SeenKeys::new)
                    .insert(key.clone())
            }
        };
        if !fresh {
            return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
        }
    }
    Ok(())
}

/// Any JSON value, checked for duplicate keys at every depth and otherwise ignored.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoDup;

impl<'de> Deserialize<'de> for NoDup {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoDupVisitor)
    }
}

struct NoDupVisitor;

impl<'de> Visitor<'de> for NoDupVisitor {
    type Value = NoDup;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<NoDup, E> {
        Ok(NoDup)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<NoDup, E> {
        Ok(NoDup)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<NoDup, E> {
        Ok(NoDup)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<NoDup, E> {
        Ok(NoDup)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<NoDup, E> {
        Ok(NoDup)
    }
    fn visit_unit<E: de::Error>(self) -> Result<NoDup, E> {
        Ok(NoDup)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NoDup, A::Error> {
        while seq.next_element::<NoDup>()?.is_some() {}
        Ok(NoDup)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<NoDup, A::Error> {
        for_each_field(map, |_, _| Ok(Field::Unknown))?;
        Ok(NoDup)
    }
}

/// Checks that `raw` (already known to be JSON) has no duplicate keys anywhere.
pub(crate) fn check_value(raw: &str) -> Result<(), serde_json::Error> {
    serde_json::from_str::<NoDup>(raw).map(|_| ())
}

/// Checks an opaque body field captured raw for duplicate keys.
pub(crate) fn check_raw(raw: &RawValue, field: &str) -> Result<(), crate::reason::Rejection> {
    check_value(raw.get()).map_err(|e| {
        crate::reason::Rejection::Malformed(
            format!(
                "body: field `{field}`: {}",
                without_position(&e.to_string())
            )
            .into(),
        )
    })
}

/// `true` when the raw JSON text is an object.
pub(crate) fn is_object(raw: &str) -> bool {
    raw.as_bytes().first() == Some(&b'{')
}

/// `true` when the raw JSON text is an array.
pub(crate) fn is_array(raw: &str) -> bool {
    raw.as_bytes().first() == Some(&b'[')
}

/// `true` when the raw JSON text is `null`.
pub(crate) fn is_null(raw: &str) -> bool {
    raw == "null"
}

/// Trims Unicode white space; stays borrowed when the input was borrowed.
pub(crate) fn trim_cow(s: Cow<'_, str>) -> Cow<'_, str> {
    match s {
        Cow::Borrowed(b) => Cow::Borrowed(b.trim()),
        Cow::Owned(o) => {
            let t = o.trim();
            if t.len() == o.len() {
                Cow::Owned(o)
            } else {
                Cow::Owned(t.to_owned())
            }
        }
    }
}

/// Trims an optional identifier; blank becomes absent (reference normalisation).
pub(crate) fn trim_opt(s: Option<Str<'_>>) -> Option<Cow<'_, str>> {
    s.map(|s| trim_cow(s.0)).filter(|s| !s.is_empty())
}

/// An array of strings: each entry trimmed, blank entries dropped (Peer Card lists and the
/// optional capability lists).
#[derive(Debug, Default)]
pub(crate) struct TrimmedList<'a>(pub(crate) Vec<Cow<'a, str>>);

impl<'de> Deserialize<'de> for TrimmedList<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TrimmedList<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(Str(s)) = seq.next_element::<Str<'de>>()? {
                    let s = trim_cow(s);
                    if !s.is_empty() {
                        out.push(s);
                    }
                }
                Ok(TrimmedList(out))
            }
        }
        deserializer.deserialize_seq(V)
    }
}

/// Deserialises an optional value: JSON `null` and absence are the same.
pub(crate) fn next_opt<'de, A, T>(map: &mut A) -> Result<Option<T>, A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de>,
{
    map.next_value::<Option<T>>()
}

/// The entries of a raw JSON object, in order, each value as its exact text. `None` when `raw`
/// is not an object.
pub(crate) fn object_entries(raw: &str) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    struct Entries<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);
    impl<'de> Deserialize<'de> for Entries<'de> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Entries<'de>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut out = Vec::new();
                    while let Some(Str(k)) = map.next_key::<Str<'de>>()? {
                        out.push((k, map.next_value::<&'de RawValue>()?));
                    }
                    Ok(Entries(out))
                }
            }
            deserializer.deserialize_map(V)
        }
    }
    serde_json::from_str::<Entries<'_>>(raw).ok().map(|e| e.0)
}

/// Rewraps a field's decode error so its detail names the field (serde_json appends the position
/// once more when the error leaves the deserializer, so the inner position is dropped here).
pub(crate) fn field_error<E: de::Error>(name: &str, err: &E) -> E {
    let text = err.to_string();
    E::custom(format_args!("field `{name}`: {}", without_position(&text)))
}

/// Rewraps an error from a nested parse so that only the outer position is reported.
pub(crate) fn nested_error<E: de::Error>(err: &serde_json::Error) -> E {
    let text = err.to_string();
    E::custom(without_position(&text))
}

fn without_position(text: &str) -> &str {
    text.rfind(" at line ").map_or(text, |i| &text[..i])
}

/// Declares a wire struct whose fields are all optional and implements a strict `Deserialize` for
/// it: duplicate keys refused at every depth, unknown keys skipped, `null` read as absent, and
/// decode errors naming the field.
macro_rules! wire_struct {
    ($(#[$meta:meta])* $name:ident<$lt:lifetime>, $what:literal, { $($key:literal => $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Default)]
        pub(crate) struct $name<$lt> {
            $(pub(crate) $field: Option<$ty>,)*
            _marker: std::marker::PhantomData<&$lt ()>,
        }

        impl<$lt> serde::Deserialize<$lt> for $name<$lt> {
            fn deserialize<D: serde::Deserializer<$lt>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<$lt> serde::de::Visitor<$lt> for V {
                    type Value = $name<$lt>;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_map<A: serde::de::MapAccess<$lt>>(self, map: A) -> Result<Self::Value, A::Error> {
                        let mut out = $name::default();
                        $crate::json::for_each_field(map, |key, map| {
                            let mut index = 0;
                            $(
                                if key == $key {
                                    out.$field = map
                                        .next_value::<Option<$ty>>()
                                        .map_err(|e| $crate::json::field_error($key, &e))?;
                                    return Ok($crate::json::Field::Known(index));
                                }
                                index += 1;
                            )*
                            let _ = index;
                            Ok($crate::json::Field::Unknown)
                        })?;
                        Ok(out)
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}
pub(crate) use wire_struct;

/// Raw JSON text kept exactly as received (or as this crate wrote it). Compared by its text.
#[derive(Clone, Debug)]
pub struct RawJson<'a>(Cow<'a, RawValue>);

impl<'a> RawJson<'a> {
    /// Wraps borrowed raw JSON.
    pub fn borrowed(raw: &'a RawValue) -> Self {
        Self(Cow::Borrowed(raw))
    }

    /// Wraps owned raw JSON.
    pub fn owned(raw: Box<RawValue>) -> RawJson<'static> {
        RawJson(Cow::Owned(raw))
    }

    /// Checks that `json` is one JSON value and wraps it.
    pub fn from_string(json: String) -> Result<RawJson<'static>, serde_json::Error> {
        RawValue::from_string(json).map(RawJson::owned)
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Detaches from the input.
    pub fn into_owned(self) -> RawJson<'static> {
        RawJson(Cow::Owned(self.0.into_owned()))
    }

    /// The borrowed raw value, when the text is borrowed from the input.
    pub fn as_borrowed(&self) -> Option<&'a RawValue> {
        match self.0 {
            Cow::Borrowed(r) => Some(r),
            Cow::Owned(_) => None,
        }
    }
}

impl Deref for RawJson<'_> {
    type Target = RawValue;
    fn deref(&self) -> &RawValue {
        &self.0
    }
}

impl PartialEq for RawJson<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RawJson<'_> {}

/// Writes `value` as compact JSON into `out` (infallible for the types this crate serialises).
pub(crate) fn write_compact<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Serialising strings, integers and raw values into a Vec cannot fail.
    if serde_json::to_writer(&mut *out, value).is_err() {
        debug_assert!(false, "serialising into a Vec failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused_at_every_depth() {
        assert!(check_value(r#"{"a":1,"b":{"c":[{"d":1,"e":2}]}}"#).is_ok());
        for bad in [
            r#"{"a":1,"a":2}"#,
            r#"{"a":{"x":1,"x":1}}"#,
            r#"[{"k":[],"k":null}]"#,
            r#"{"a\u0062":1,"ab":2}"#,
        ] {
            let err = check_value(bad).unwrap_err().to_string();
            assert!(err.contains("duplicate key"), "{bad}: {err}");
        }
    }

    #[test]
    fn large_objects_switch_to_the_hash_set() {
        let mut s = String::from("{");
        for i in 0..200 {
            s.push_str(&format!("\"k{i}\":{i},"));
        }
        s.push_str("\"k7\":0}");
        assert!(check_value(&s).unwrap_err().to_string().contains("`k7`"));
        let ok = s.replace("\"k7\":0}", "\"last\":0}");
        assert!(check_value(&ok).is_ok());
    }

    #[test]
    fn strings_borrow_without_escapes() {
        let s: Str<'_> = serde_json::from_str(r#""plain""#).unwrap();
        assert!(matches!(s.0, Cow::Borrowed("plain")));
        let s: Str<'_> = serde_json::from_str(r#""esc\n""#).unwrap();
        assert!(matches!(s.0, Cow::Owned(ref o) if o == "esc\n"));
    }

    #[test]
    fn trimmed_lists_drop_blank_entries() {
        let l: TrimmedList<'_> = serde_json::from_str(r#"["  a ", "", "  ", "b"]"#).unwrap();
        assert_eq!(l.0, vec!["a", "b"]);
        assert!(serde_json::from_str::<TrimmedList<'_>>("null").is_err());
        assert!(serde_json::from_str::<TrimmedList<'_>>("[1]").is_err());
    }
}
