//! What a component imports and exports, read from its bytes without compiling it.
//!
//! The launch checks (E-CAP-004 for an import the host does not provide, E-CAP-003 for a
//! missing export) look only at the names of the component's top-level imports and exports,
//! the same names wasmtime's component type lists. Reading them from the binary's sections
//! costs a walk over the section headers, so the checks run before any compiling and a
//! refused component is never compiled. A component compiled in the background
//! ([`crate::later`]) is also validated here first, so an invalid binary is still refused at
//! launch and not at its first call.

use wasmparser::{FuncValidatorAllocations, Parser, Payload, ValidPayload, Validator, WasmFeatures};

/// The names of a component's top-level imports and exports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Surface {
    /// Imported interfaces, in the binary's order.
    pub imports: Vec<String>,
    /// Exported names, in the binary's order.
    pub exports: Vec<String>,
}

/// How much of the binary is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Depth {
    /// Section headers only: the names. For a component the cache already holds compiled
    /// from these very bytes (so they were validated when it was compiled), or one compiled
    /// now (the compile validates).
    Names,
    /// Every section and function body validated, with wasmparser's default (stable)
    /// features, besides the names. Before a compile in the background.
    Validate,
}

/// Read `bytes`' surface. An error means the bytes are not a well-formed (or, with
/// [`Depth::Validate`], not a valid) component.
pub(crate) fn read(bytes: &[u8], depth: Depth) -> Result<Surface, wasmparser::BinaryReaderError> {
    let mut surface = Surface::default();
    let mut validator = (depth == Depth::Validate).then(|| Validator::new_with_features(WasmFeatures::default()));
    let mut bodies = Vec::new();
    // Nested modules and components open a level each and close it with their own `End`.
    let mut level = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload?;
        if let Some(v) = validator.as_mut()
            && let ValidPayload::Func(func, body) = v.payload(&payload)?
        {
            bodies.push((func, body));
        }
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => level += 1,
            Payload::End(_) => level = level.saturating_sub(1),
            Payload::ComponentImportSection(reader) if level == 0 => {
                for import in reader {
                    surface.imports.push(import?.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(reader) if level == 0 => {
                for export in reader {
                    surface.exports.push(export?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    let mut allocations = FuncValidatorAllocations::default();
    for (func, body) in bodies {
        let mut v = func.into_validator(allocations);
        v.validate(&body)?;
        allocations = v.into_allocations();
    }
    Ok(surface)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(wat: &str) -> Vec<u8> {
        wat::parse_str(wat).expect("valid wat")
    }

    #[test]
    fn surface_lists_top_level_names_only() {
        let bytes = component(
            r#"(component
                 (import "wasi:cli/environment@0.2.3" (instance))
                 (import "murmur:task/task@0.1.0" (instance))
                 (component $inner
                   (import "hidden:inner/import" (instance))
                   (instance $i)
                   (export "hidden:inner/export" (instance $i)))
                 (instance $e)
                 (export "murmur:tool/run@0.1.0" (instance $e)))"#,
        );
        for depth in [Depth::Names, Depth::Validate] {
            let s = read(&bytes, depth).expect("reads");
            assert_eq!(s.imports, ["wasi:cli/environment@0.2.3", "murmur:task/task@0.1.0"], "{depth:?}");
            assert_eq!(s.exports, ["murmur:tool/run@0.1.0"], "{depth:?}");
        }
    }

    #[test]
    fn surface_validate_refuses_an_invalid_body_that_names_alone_accept() {
        // A function that returns an i32 but leaves nothing on the stack.
        let bytes = component(
            r#"(component
                 (core module (func (result i32)))
                 (instance $e)
                 (export "murmur:tool/run@0.1.0" (instance $e)))"#,
        );
        assert_eq!(read(&bytes, Depth::Names).expect("well-formed").exports, ["murmur:tool/run@0.1.0"]);
        let err = read(&bytes, Depth::Validate).expect_err("invalid body");
        assert!(err.message().contains("type mismatch"), "{err}");
    }

    #[test]
    fn surface_refuses_truncated_bytes() {
        let bytes = component(r#"(component (instance $e) (export "murmur:tool/run@0.1.0" (instance $e)))"#);
        for depth in [Depth::Names, Depth::Validate] {
            assert!(read(&bytes[..bytes.len() - 3], depth).is_err(), "{depth:?}");
        }
    }
}
