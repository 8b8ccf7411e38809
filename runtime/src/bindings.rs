//! Host bindings generated from `components/wit` (world `murmur:worlds/host`): the union of
//! the driver and tool worlds, so one linker serves every artifact.

wasmtime::component::bindgen!({
    path: "../components/wit",
    world: "murmur:worlds/artifact-host",
    imports: { default: async },
    exports: { default: async },
});

/// The hook world (`murmur:worlds/hook`): `murmur:hook/lifecycle@0.5.0` exported, and
/// `murmur:runtime/inference@0.2.0` imported (its `message` type comes from the lifecycle
/// interface, which the component therefore also imports, for that type only).
pub mod hook {
    wasmtime::component::bindgen!({
        path: "../components/wit",
        world: "murmur:worlds/hook",
        imports: { default: async },
        exports: { default: async },
    });
}
