//! Lenient, borrowing JSON reading: the machinery under [`crate::neutral`].
//!
//! The neutral request used to be read whole into a `serde_json::Value`,
//! which accepts any JSON, keeps the last of duplicate keys and lets the
//! translation decide what a wrong type means. serde's derive does none of
//! that (it refuses wrong types and duplicate keys, and reads an array into
//! a struct), so the readers here are written by hand:
//!
//! - [`Raw`]: one value's JSON text exactly as it came, borrowed from the
//!   input; the translation inspects it (string? empty? `true`?) and copies
//!   it into the provider body verbatim;
//! - [`Obj`]: an object read key by key into a [`Fields`] type (the last of
//!   duplicate keys wins, unknown keys are skipped), or just the note that
//!   the value was `null` or not an object;
//! - [`List`]: an array of one element type, or the same note;
//! - [`Lenient`]: what each of these makes of every kind of JSON value, so
//!   that reading never fails on a type, only on JSON syntax.
//!
//! Guarantees: reading accepts exactly what `serde_json::from_str::<Value>`
//! accepts. Skipped values are read through [`Depth`], which makes
//! serde_json check them as fully as `Value` would (escapes, number range,
//! nesting). [`Raw`] values are skipped by serde_json without those checks,
//! so each one is checked after the fact by [`valid_at`], its nesting
//! counted together with the containers around it ([`Fields::DEPTH`]).
//!
//! Deliberately not done: error messages. A refusal here only says that the
//! input is not valid JSON; [`crate::neutral::Input::parse`] then asks
//! serde_json for the message `Value` would have given.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// The deepest nesting serde_json accepts: its recursion limit of 128 is
/// used up by the 128th container, counting every enclosing one.
const MAX_DEPTH: u32 = 127;

/// One JSON value's text, as it came (or, for a value the reader had to
/// decode, as re-encoded by [`Raw::quoted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raw<'a>(Cow<'a, str>);

impl<'a> Raw<'a> {
    /// A string literal for `s`, escaped the way serde_json escapes.
    pub fn quoted(s: &str) -> Raw<'static> {
        let mut out = Vec::with_capacity(s.len() + 2);
        crate::wire::string(&mut out, s);
        // `wire::string` only adds ASCII to valid UTF-8.
        Raw(Cow::Owned(String::from_utf8(out).unwrap_or_default()))
    }

    /// A literal JSON text known to be valid (for built-in values).
    pub(crate) const fn literal(json: &'static str) -> Raw<'static> {
        Raw(Cow::Borrowed(json))
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        &self.0
    }

    fn first(&self) -> u8 {
        self.0.as_bytes().first().copied().unwrap_or(b' ')
    }

    pub fn is_null(&self) -> bool {
        self.json() == "null"
    }

    pub fn is_string(&self) -> bool {
        self.first() == b'"'
    }

    pub fn is_object(&self) -> bool {
        self.first() == b'{'
    }

    /// `Value::as_bool() == Some(true)`.
    pub fn is_true(&self) -> bool {
        self.json() == "true"
    }

    /// `Value::as_u64()`: an integer literal in `u64` range (not `1.0`,
    /// not `1e2`, not negative).
    pub fn as_u64(&self) -> Option<u64> {
        self.json().parse().ok()
    }

    /// A string's content between the quotes, still escaped: it can be
    /// copied into another string literal as it is.
    pub fn escaped(&self) -> Option<&str> {
        let json = self.json();
        (json.len() >= 2 && self.is_string()).then(|| &json[1..json.len() - 1])
    }

    /// A string's decoded content (borrowed when it holds no escape).
    pub fn decoded(&self) -> Option<Cow<'_, str>> {
        let escaped = self.escaped()?;
        if !escaped.contains('\\') {
            return Some(Cow::Borrowed(escaped));
        }
        serde_json::from_str::<String>(self.json()).ok().map(Cow::Owned)
    }

    /// A string that decodes to something other than `""`.
    pub fn is_nonempty_string(&self) -> bool {
        self.is_string() && self.json() != "\"\""
    }
}

/// Whether a value that serde_json skipped without checking (a [`Raw`])
/// is one `Value` would accept, `enclosing` containers deep.
pub fn valid_at(json: &str, enclosing: u32) -> bool {
    match json.as_bytes().first() {
        // `Value` refuses lone surrogates, which only a `\u` escape can make.
        Some(b'"') => !has_unicode_escape(json) || serde_json::from_str::<Depth>(json).is_ok(),
        Some(b't' | b'f' | b'n') => true,
        // Numbers (range), arrays and objects (everything inside).
        _ => matches!(serde_json::from_str::<Depth>(json), Ok(Depth(d)) if enclosing + d <= MAX_DEPTH),
    }
}

/// Whether a string literal holds a `\u` escape. Each backslash escapes the
/// character after it, so `\\u` (an escaped backslash, then `u`) is not
/// one. Found with `find(char)` (a word-at-a-time scan), not a substring
/// search, whose set-up alone was a visible part of every call.
fn has_unicode_escape(json: &str) -> bool {
    let mut rest = json;
    while let Some(at) = rest.find('\\') {
        let after = &rest.as_bytes()[at + 1..];
        match after.first() {
            Some(b'u') => return true,
            // Escapes are ASCII in a string serde_json has checked; anything
            // else is left to the full check.
            Some(c) if c.is_ascii() => rest = &rest[at + 2..],
            Some(_) => return true,
            None => return false,
        }
    }
    false
}

/// Whether `text` is a JSON document `Value` would accept.
pub fn valid_json(text: &str) -> bool {
    serde_json::from_str::<Depth>(text).is_ok()
}

/// Read the next map value as a [`Raw`], checked as `Value` would check it.
pub fn next_raw<'de, A: MapAccess<'de>>(map: &mut A, enclosing: u32) -> Result<Raw<'de>, A::Error> {
    let raw: &'de RawValue = map.next_value()?;
    let json = raw.get();
    if valid_at(json, enclosing) { Ok(Raw(Cow::Borrowed(json))) } else { Err(A::Error::custom("invalid JSON value")) }
}

/// What a lenient reader makes of each kind of JSON value. Every kind is
/// accepted; the defaults read a kind the type has no use for as
/// [`Lenient::other`], fully checked and skipped.
pub trait Lenient<'de>: Sized {
    /// A value of a kind this type does not read (bool, number, and the
    /// kinds below unless overridden).
    fn other() -> Self;
    fn null() -> Self {
        Self::other()
    }
    fn string(_: &str) -> Self {
        Self::other()
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<Depth>()?.is_some() {}
        Ok(Self::other())
    }
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<Depth, Depth>()?.is_some() {}
        Ok(Self::other())
    }
}

/// The visitor of every [`Lenient`] type.
pub struct Reader<T>(PhantomData<T>);

impl<T> Reader<T> {
    pub fn read<'de, D: Deserializer<'de>>(d: D) -> Result<T, D::Error>
    where
        T: Lenient<'de>,
    {
        d.deserialize_any(Reader(PhantomData))
    }
}

impl<'de, T: Lenient<'de>> Visitor<'de> for Reader<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_i64<E>(self, _: i64) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_u64<E>(self, _: u64) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_f64<E>(self, _: f64) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_str<E>(self, s: &str) -> Result<T, E> {
        Ok(T::string(s))
    }
    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::null())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
}

/// How deeply a value nests (`0` for a scalar, `1` for `[]`); reading it
/// checks the value as fully as `Value` would and keeps nothing.
pub struct Depth(pub u32);

impl<'de> Lenient<'de> for Depth {
    fn other() -> Self {
        Depth(0)
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut deepest = 0;
        while let Some(Depth(d)) = seq.next_element()? {
            deepest = deepest.max(d);
        }
        Ok(Depth(deepest + 1))
    }
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut deepest = 0;
        while let Some((Depth(_), Depth(d))) = map.next_entry()? {
            deepest = deepest.max(d);
        }
        Ok(Depth(deepest + 1))
    }
}

impl<'de> Deserialize<'de> for Depth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Reader::read(d)
    }
}

/// An object key, borrowed when it holds no escape.
pub struct Key<'de>(pub Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The fields of one kind of object, read key by key.
pub trait Fields<'de>: Default {
    /// How many containers enclose this object's field values, the object
    /// itself included (a field of the top-level object: 1).
    const DEPTH: u32;

    /// Read the value of `key` (a known key into its slot, replacing an
    /// earlier duplicate; an unknown one skipped with [`skip`]).
    fn field<A: MapAccess<'de>>(&mut self, key: Key<'de>, map: &mut A) -> Result<(), A::Error>;

    /// Read a known key's value as a [`Raw`].
    fn raw<A: MapAccess<'de>>(map: &mut A) -> Result<Option<Raw<'de>>, A::Error> {
        next_raw(map, Self::DEPTH).map(Some)
    }
}

/// Skip a value, checking it as `Value` would.
pub fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<Depth>().map(drop)
}

/// What a value expected to be an object turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shape {
    Object,
    Null,
    /// Any other kind (string, number, bool, array).
    #[default]
    Other,
}

/// A value expected to be an object: its fields when it is one (all
/// absent otherwise).
#[derive(Debug, Default)]
pub struct Obj<T> {
    pub shape: Shape,
    pub fields: T,
}

impl<'de, T: Fields<'de>> Lenient<'de> for Obj<T> {
    fn other() -> Self {
        Obj { shape: Shape::Other, fields: T::default() }
    }
    fn null() -> Self {
        Obj { shape: Shape::Null, fields: T::default() }
    }
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut fields = T::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            fields.field(key, &mut map)?;
        }
        Ok(Obj { shape: Shape::Object, fields })
    }
}

impl<'de, T: Fields<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Reader::read(d)
    }
}

/// A value expected to be an array of `T`.
#[derive(Debug)]
pub enum List<T> {
    Null,
    /// Any other kind (string, number, bool, object).
    Other,
    Items(Vec<T>),
}

impl<'de, T: Deserialize<'de>> Lenient<'de> for List<T> {
    fn other() -> Self {
        List::Other
    }
    fn null() -> Self {
        List::Null
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(List::Items(items))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Reader::read(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_is_checked_in_full_only_when_it_holds_a_unicode_escape() {
        // A lone surrogate only comes from a `\u` escape: refused, as `Value` refuses it.
        assert!(!valid_at(r#""a\ud800""#, 0));
        assert!(!valid_at(r#""\n\\\ud800""#, 0));
        // An escaped backslash followed by `u` is no escape of its own.
        assert!(!has_unicode_escape(r#""\\ud800""#));
        assert!(valid_at(r#""\\ud800""#, 0));
        assert!(has_unicode_escape(r#""x\u00e9""#));
        assert!(valid_at(r#""x\u00e9 \ud83d\ude00""#, 0));
        assert!(!has_unicode_escape(r#""é \n \" \\""#));
        assert!(!has_unicode_escape(r#""trailing\"#));
    }
}
