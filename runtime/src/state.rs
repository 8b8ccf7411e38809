//! The data of one store: WASI and HTTP contexts, the policy, the limiter and the event sink,
//! plus the host side of the `murmur:*` imports.

use std::sync::Arc;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::bindings::murmur;
use crate::budget::CallDisk;
use crate::events::GuestEvents;
use crate::grants::ArtifactRole;
use crate::limiter::CallLimiter;
use crate::policy::Hooks;

/// One store's data.
pub struct StoreState {
    pub(crate) wasi: WasiCtx,
    pub(crate) http: WasiHttpCtx,
    pub(crate) table: ResourceTable,
    pub(crate) hooks: Hooks,
    pub(crate) limiter: CallLimiter,
    pub(crate) events: Arc<dyn GuestEvents>,
    pub(crate) paused: Arc<crate::events::Paused>,
    pub(crate) role: ArtifactRole,
    pub(crate) stderr: MemoryOutputPipe,
    pub(crate) disk: CallDisk,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

impl murmur::stream::events::Host for StoreState {
    async fn emit_chunk(&mut self, chunk: String) {
        self.events.chunk(chunk);
    }

    async fn emit_thinking_chunk(&mut self, chunk: String) {
        self.events.thinking(chunk);
    }

    async fn tool_call_started(&mut self, id: String, name: String) {
        if self.role == ArtifactRole::Driver {
            self.events.tool_call_started(id, name);
        }
    }

    async fn tool_call_input_bytes(&mut self, id: String, bytes: u64) {
        if self.role == ArtifactRole::Driver {
            self.events.tool_call_input_bytes(id, bytes);
        }
    }
}

impl murmur::text::chunks::Host for StoreState {
    async fn emit_chunk(&mut self, chunk: String) {
        self.events.chunk(chunk);
    }

    async fn emit_thinking_chunk(&mut self, chunk: String) {
        self.events.thinking(chunk);
    }
}

impl murmur::task::task::Host for StoreState {
    async fn request_input(&mut self, prompt: String) -> String {
        let answer = self.events.request_input(prompt);
        self.paused.start();
        let text = answer.await;
        self.paused.stop();
        text
    }
}

impl crate::bindings::hook::murmur::runtime::inference::Host for StoreState {
    async fn run_inference(
        &mut self,
        request: crate::bindings::hook::murmur::runtime::inference::InferenceRequest,
    ) -> Result<crate::bindings::hook::murmur::runtime::inference::InferenceResponse, String> {
        let ask = crate::events::InferenceAsk {
            messages: request.messages.into_iter().map(|m| (m.role, m.content)).collect(),
            system_prompt: request.system_prompt,
            model: request.model,
        };
        let answer = self.events.run_inference(ask);
        self.paused.start();
        let reply = answer.await;
        self.paused.stop();
        reply.map(|r| crate::bindings::hook::murmur::runtime::inference::InferenceResponse {
            text: r.text,
            model_used: r.model_used,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
        })
    }
}
