//! The tools of the neutral request (CONTRACT §3) as the drivers read them: each tool's name,
//! description and `parameters` schema, with the two keys of the schema the drivers check.
//! Same reading rules as the rest of [`super`]: any JSON is read, a wrong type is an error only
//! when a driver asks for that field.

use std::borrow::Cow;

use super::{At, Obj, Raw, string};
use crate::lenient::{Fields, Read, raw, skip};
use crate::scan::{Refused, Scan};

/// One tool offered to the model (all fields absent when not an object).
#[derive(Debug, Default)]
pub struct Tool<'a> {
    name: Option<Raw<'a>>,
    description: Option<Raw<'a>>,
    parameters: Option<Raw<'a>>,
    /// The keys of `parameters` the drivers check, read in the same pass (an object only).
    keys: SchemaKeys<'a>,
}

impl<'a> Fields<'a> for Tool<'a> {
    fn field(&mut self, key: Cow<'a, str>, scan: &mut Scan<'a>) -> Result<(), Refused> {
        match &*key {
            "name" => self.name = raw(scan)?,
            "description" => self.description = raw(scan)?,
            "parameters" => {
                // An object is read for its keys as it is passed, so that the schema (most of a
                // tool's text) is not scanned a second time when a driver asks for them.
                scan.peek();
                let start = scan.position();
                let keys = Obj::<SchemaKeys>::read(scan)?;
                self.parameters = Some(Raw::checked(&scan.text()[start..scan.position()]));
                self.keys = keys.fields;
            }
            _ => skip(scan)?,
        }
        Ok(())
    }
}

/// A tool's `parameters` schema and the two of its keys the drivers check.
#[derive(Debug)]
pub struct Schema<'r> {
    /// The object's JSON text (`{}` when `parameters` is absent or `null`).
    pub json: &'r str,
    /// Its `type` key's value, if it has one.
    pub kind: Option<Raw<'r>>,
    /// Whether it has a `properties` key.
    pub has_properties: bool,
}

impl<'a> Tool<'a> {
    /// `name`: a string; tool `i` of the list.
    pub fn name(&self, i: usize) -> Result<&Raw<'a>, String> {
        string(&self.name, At::Tool(i), "name")
    }

    /// `description` when it is a non-empty string.
    pub fn description(&self) -> Option<&Raw<'a>> {
        self.description.as_ref().filter(|d| d.is_nonempty_string())
    }

    /// `parameters`: an object, absent or `null` (an empty schema).
    pub fn parameters(&self, i: usize) -> Result<Schema<'_>, String> {
        let json = match &self.parameters {
            None => "{}",
            Some(p) if p.is_null() => "{}",
            Some(p) if p.is_object() => p.json(),
            Some(_) => return Err(format!("{}.parameters must be a JSON Schema object", At::Tool(i))),
        };
        // Read with the object (none when it is absent or `null`).
        let keys = &self.keys;
        Ok(Schema { json, kind: keys.kind.clone(), has_properties: keys.has_properties })
    }
}

/// The keys of a schema the drivers look at.
#[derive(Debug, Default)]
struct SchemaKeys<'a> {
    kind: Option<Raw<'a>>,
    has_properties: bool,
}

impl<'a> Fields<'a> for SchemaKeys<'a> {
    fn field(&mut self, key: Cow<'a, str>, scan: &mut Scan<'a>) -> Result<(), Refused> {
        match &*key {
            "type" => self.kind = raw(scan)?,
            "properties" => {
                self.has_properties = true;
                skip(scan)?;
            }
            _ => skip(scan)?,
        }
        Ok(())
    }
}
