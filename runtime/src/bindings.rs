//! Host bindings generated from `components/wit` (world `murmur:worlds/host`): the union of
//! the driver and tool worlds, so one linker serves every artifact.

wasmtime::component::bindgen!({
    path: "../components/wit",
    world: "murmur:worlds/artifact-host",
    imports: { default: async },
    exports: { default: async },
});
