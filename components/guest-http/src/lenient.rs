//! Lenient, borrowing reading of the neutral request: the types under
//! [`crate::neutral`], read by the one-pass [`crate::scan::Scan`].
//!
//! The neutral request used to be read whole into a `serde_json::Value`,
//! which accepts any JSON, keeps the last of duplicate keys and lets the
//! translation decide what a wrong type means. The readers here keep those
//! rules:
//!
//! - [`Raw`]: one value's JSON text exactly as it came, borrowed from the
//!   input; the translation inspects it (string? empty? `true`?) and copies
//!   it into the provider body verbatim;
//! - [`Obj`]: an object read key by key into a [`Fields`] type (the last of
//!   duplicate keys wins, unknown keys are skipped), or just the note that
//!   the value was `null` or not an object;
//! - [`List`]: an array of one element type, or the same note;
//! - [`Read`]: what each of these makes of every kind of JSON value, so
//!   that reading never fails on a type, only on JSON syntax.
//!
//! Guarantees: reading accepts exactly what `serde_json::from_str::<Value>`
//! accepts; every value, read or skipped, is checked as it is passed
//! ([`crate::scan`]), once.
//!
//! Deliberately not done: error messages. A refusal here only says that the
//! input is not valid JSON; [`crate::neutral::Input::parse`] then asks
//! serde_json for the message `Value` would have given.

use std::borrow::Cow;

use crate::scan::{Refused, Scan, decoded};

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

    /// A checked string literal, borrowed; re-encoded by [`Raw::quoted`]
    /// when it holds an escape, as a string decoded and written again would
    /// be.
    pub(crate) fn string_literal(literal: &'a str) -> Result<Raw<'a>, Refused> {
        if literal.contains('\\') { Ok(Raw::quoted(&decoded(literal)?)) } else { Ok(Raw(Cow::Borrowed(literal))) }
    }

    /// A value's text, checked by the caller.
    pub(crate) const fn checked(json: &'a str) -> Raw<'a> {
        Raw(Cow::Borrowed(json))
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

/// Whether `text` is a JSON document `Value` would accept.
pub fn valid_json(text: &str) -> bool {
    Scan::document(text)
}

/// A type read from the next value of a scan, whatever its kind: a kind
/// the type has no use for is checked, passed and noted.
pub trait Read<'a>: Sized {
    fn read(scan: &mut Scan<'a>) -> Result<Self, Refused>;
}

impl<'a> Read<'a> for Raw<'a> {
    fn read(scan: &mut Scan<'a>) -> Result<Self, Refused> {
        scan.raw().map(|json| Raw(Cow::Borrowed(json)))
    }
}

/// The fields of one kind of object, read key by key.
pub trait Fields<'a>: Default {
    /// Read the value of `key` (a known key into its slot, replacing an
    /// earlier duplicate; an unknown one passed with [`skip`]).
    fn field(&mut self, key: Cow<'a, str>, scan: &mut Scan<'a>) -> Result<(), Refused>;
}

/// Read a known key's value as a [`Raw`].
pub fn raw<'a>(scan: &mut Scan<'a>) -> Result<Option<Raw<'a>>, Refused> {
    Raw::read(scan).map(Some)
}

/// Pass a value, checked.
pub fn skip(scan: &mut Scan) -> Result<(), Refused> {
    scan.raw().map(drop)
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

impl<'a, T: Fields<'a>> Read<'a> for Obj<T> {
    fn read(scan: &mut Scan<'a>) -> Result<Self, Refused> {
        Obj::read_into(scan, T::default())
    }
}

impl<'a, T: Fields<'a>> Obj<T> {
    /// [`Read::read`], starting from `fields` instead of the defaults.
    pub fn read_into(scan: &mut Scan<'a>, mut fields: T) -> Result<Self, Refused> {
        let shape = match scan.peek() {
            Some(b'{') => {
                scan.object(|scan, key| fields.field(key, scan))?;
                Shape::Object
            }
            Some(b'n') => skip(scan).map(|()| Shape::Null)?,
            _ => skip(scan).map(|()| Shape::Other)?,
        };
        Ok(Obj { shape, fields })
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

impl<'a, T: Read<'a>> Read<'a> for List<T> {
    fn read(scan: &mut Scan<'a>) -> Result<Self, Refused> {
        match scan.peek() {
            Some(b'[') => {
                let mut items = Vec::new();
                scan.array(|scan| T::read(scan).map(|item| items.push(item)))?;
                Ok(List::Items(items))
            }
            Some(b'n') => skip(scan).map(|()| List::Null),
            _ => skip(scan).map(|()| List::Other),
        }
    }
}
