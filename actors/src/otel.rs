//! `observability.otel_endpoint`: OpenTelemetry spans of a session, exported over OTLP/HTTP
//! (protobuf, `<endpoint>/v1/traces`) by the `opentelemetry` SDK's batch processor.
//!
//! The span tree of a session:
//!
//! ```text
//! capsule.session                      launch → end of session (exit_status)
//! └── capsule.task                     one per task; links to the client's `traceparent`
//!     ├── capsule.inference            one per driver call (turn, tokens, decision, model)
//!     ├── capsule.tool_call            one per tool call (tool_name, bytes, status)
//!     └── capsule.compaction           one per committed compaction (tokens before/after)
//! ```
//!
//! A W3C `traceparent` a door client sends with a task is kept as a **link** on its task span
//! (the session's trace stays one tree) and the task's own context goes upstream with each of
//! its driver calls as `traceparent`. Export never blocks the loop: spans are queued in memory
//! and sent from the SDK's own thread; a collector that is down loses spans, never a step.

use opentelemetry::trace::{
    Link, Span, SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::sync::Arc;
use std::time::SystemTime;

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the OTLP exporter for {endpoint}")]
pub struct OtelError {
    /// The endpoint.
    pub endpoint: String,
    /// The SDK's error.
    #[source]
    pub source: opentelemetry_otlp::ExporterBuildError,
}

/// One session's telemetry.
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

struct Inner {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    session: Context,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

/// `<endpoint>/v1/traces`, unless it already ends there.
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") { base.to_string() } else { format!("{base}/v1/traces") }
}

/// A W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`, ids not all zero), as a remote span
/// context; `None` for anything else (W3C: an invalid header is ignored).
pub fn parse_traceparent(v: &str) -> Option<SpanContext> {
    let parts: Vec<&str> = v.trim().split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else { return None };
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hex(version, 2) || *version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span_id = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    Some(SpanContext::new(trace_id, span_id, flags, true, TraceState::default()))
}

/// The `traceparent` of a span context.
pub fn traceparent(cx: &Context) -> Option<String> {
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

impl Telemetry {
    /// Start exporting to `endpoint` and open the session span. The exporter's HTTP client is
    /// built off the async runtime (it has its own).
    pub async fn start(endpoint: &str, capsule: &str, version: &str, session_id: &str) -> Result<Telemetry, OtelError> {
        let url = traces_url(endpoint);
        let (capsule, version, session_id) = (capsule.to_string(), version.to_string(), session_id.to_string());
        let endpoint = endpoint.to_string();
        let built = tokio::task::spawn_blocking(move || {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(url)
                .build()?;
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name(capsule)
                .with_attribute(KeyValue::new("service.version", version))
                .build();
            let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
            let tracer = provider.tracer("capsule-runtime");
            let span = tracer
                .span_builder("capsule.session")
                .with_attributes([KeyValue::new("session.id", session_id)])
                .start(&tracer);
            let session = Context::new().with_span(span);
            Ok(Telemetry { inner: Arc::new(Inner { provider, tracer, session }) })
        })
        .await;
        match built {
            Ok(r) => r.map_err(|source| OtelError { endpoint, source }),
            Err(join) => std::panic::resume_unwind(join.into_panic()),
        }
    }

    /// Open a task span under the session span, linked to the client's `traceparent`.
    pub fn task(&self, task_id: &str, client: Option<&SpanContext>) -> Context {
        let t = &self.inner.tracer;
        let links = client.map(|c| vec![Link::with_context(c.clone())]).unwrap_or_default();
        let span = t
            .span_builder("capsule.task")
            .with_attributes([KeyValue::new("task.id", task_id.to_string())])
            .with_links(links)
            .start_with_context(t, &self.inner.session);
        self.inner.session.with_span(span)
    }

    /// A finished child span of `parent` that ran from `start` until now.
    pub fn child(&self, parent: &Context, name: &'static str, start: SystemTime, attributes: Vec<KeyValue>) {
        let t = &self.inner.tracer;
        let mut span =
            t.span_builder(name).with_start_time(start).with_attributes(attributes).start_with_context(t, parent);
        span.end();
    }

    /// End a task span.
    pub fn end_task(cx: &Context, exit_status: &str) {
        let span = cx.span();
        span.set_attribute(KeyValue::new("exit_status", exit_status.to_string()));
        span.end();
    }

    /// End the session span and send everything still queued (off the async runtime).
    pub async fn end(&self, exit_status: &str) {
        let span = self.inner.session.span();
        span.set_attribute(KeyValue::new("exit_status", exit_status.to_string()));
        span.end();
        let provider = self.inner.provider.clone();
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!(error = %e, "spans were not all exported");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_traceparent_is_taken() {
        let ok = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").expect("valid");
        assert_eq!(ok.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(ok.is_remote() && ok.is_sampled());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
        assert_eq!(traces_url("http://h:4318/"), "http://h:4318/v1/traces");
        assert_eq!(traces_url("http://h:4318/v1/traces"), "http://h:4318/v1/traces");
    }
}
