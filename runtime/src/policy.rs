//! The outgoing HTTP policy (CONTRACT §4, §5): the only way out of a guest.
//!
//! Every `wasi:http` request a guest makes reaches [`OutgoingPolicy::send_request`]:
//! - a request to the gateway address (drivers with a `gateway:` only) is rewritten to the real
//!   endpoint; any auth header the guest set is removed and the credential is attached here, so
//!   the key never enters the guest;
//! - otherwise the host must match a `network.allow` rule, or the guest gets
//!   `HttpRequestDenied`.
//!
//! Redirects are returned to the guest, never followed. TCP, UDP and DNS are never granted
//! (the WASI context is built without network), so this hook is the only egress.

use capsule_protocol::manifest::AllowRule;
use http::{HeaderName, HeaderValue, Uri};
use http_body_util::BodyExt;
use std::future::Future;
use std::sync::Arc;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::bodies::{LimitedBody, ResponseLimit};

/// The authority of the gateway address: loopback, never bound. Requests to it are rewritten
/// before any connection is made.
pub const GATEWAY_AUTHORITY: &str = "127.0.0.1:1";

/// `MURMUR_INFERENCE_ENDPOINT` as a driver with a gateway sees it.
pub fn gateway_address() -> String {
    format!("http://{GATEWAY_AUTHORITY}")
}

/// A resolved credential, as the header the gateway writes.
#[derive(Clone)]
pub enum Credential {
    /// Keyless: nothing is attached.
    None,
    /// Attach this header.
    Header {
        /// Header name.
        name: HeaderName,
        /// Header value (holds the key; never logged).
        value: HeaderValue,
    },
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::None => f.write_str("Credential::None"),
            Credential::Header { name, .. } => write!(f, "Credential::Header({name}: <redacted>)"),
        }
    }
}

impl Credential {
    /// Build the header for `key`: the artifact's own `upstream_auth` template when given
    /// (`{key}` is replaced), else `x-api-key` for Anthropic-style paths and
    /// `authorization: Bearer` otherwise (decided per request, see [`OutgoingPolicy`]).
    pub fn templated(header: &str, template: &str, key: &str) -> Option<Credential> {
        let name = HeaderName::from_bytes(header.as_bytes()).ok()?;
        let mut value = HeaderValue::from_str(&template.replace("{key}", key)).ok()?;
        value.set_sensitive(true);
        Some(Credential::Header { name, value })
    }
}

/// Where gateway traffic goes and with what credential.
#[derive(Clone, Debug)]
pub struct GatewayRoute {
    /// The real endpoint (`https://api.anthropic.com`, `http://127.0.0.1:PORT/v1`...).
    pub endpoint: Uri,
    /// A fixed credential header (from `upstream_auth`), when the artifact declares one.
    pub fixed: Option<Credential>,
    /// The raw key for the default styles, when not keyless and not fixed.
    pub key: Option<SecretKey>,
    /// How the driver sends its key, decided at launch from its kind (ignored when `fixed`).
    pub style: KeyStyle,
    /// The W3C `traceparent` of the task this call serves (`observability.otel_endpoint`),
    /// written on every gateway request in place of any the guest set.
    pub traceparent: Option<HeaderValue>,
}

/// How a driver's key goes upstream when its artifact declares no `upstream_auth`: decided
/// once, at launch, from the driver's kind; never from what a request looks like, except for a
/// driver of unknown kind ([`KeyStyle::ByPath`], warned about at launch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyStyle {
    /// Anthropic Messages: `x-api-key`, only with `POST …/messages`.
    Anthropic,
    /// OpenAI-compatible: `authorization: Bearer`, only with `POST` to the completions,
    /// responses and embeddings paths.
    OpenAi,
    /// Unknown kind: each of the two above, by the request's path.
    #[default]
    ByPath,
}

/// A key that never prints.
#[derive(Clone)]
pub struct SecretKey(pub String);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Auth headers a guest may have set; removed from gateway traffic.
const AUTH_HEADERS: [&str; 4] = ["authorization", "x-api-key", "api-key", "proxy-authorization"];

/// Which requests through a gateway carry the credential: only `POST` to a provider's
/// inference path (relative to the endpoint), each path with its provider's header. Any other
/// method or path is forwarded without the credential, so a driver cannot make the host send
/// the key to, say, an endpoint that echoes headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyScope {
    /// `POST …/messages` (Anthropic style: `x-api-key`).
    Messages,
    /// `POST …/chat/completions`, `…/responses`, `…/completions`, `…/embeddings` (Bearer).
    Completions,
    /// Anything else: no credential.
    Outside,
}

const MESSAGES_PATHS: [&str; 2] = ["/v1/messages", "/messages"];
const COMPLETIONS_PATHS: [&str; 8] = [
    "/chat/completions",
    "/v1/chat/completions",
    "/responses",
    "/v1/responses",
    "/completions",
    "/v1/completions",
    "/embeddings",
    "/v1/embeddings",
];

/// With an artifact's own `upstream_auth` (`fixed`), every `POST` below the endpoint carries
/// it: that provider's paths are not known here.
fn key_scope(method: &http::Method, guest_path_and_query: &str, fixed: bool, style: KeyStyle) -> KeyScope {
    if method != http::Method::POST {
        return KeyScope::Outside;
    }
    let path = guest_path_and_query.split('?').next().unwrap_or_default();
    if fixed {
        return KeyScope::Completions;
    }
    let messages = MESSAGES_PATHS.contains(&path);
    let completions = COMPLETIONS_PATHS.contains(&path);
    match style {
        KeyStyle::Anthropic | KeyStyle::ByPath if messages => KeyScope::Messages,
        KeyStyle::OpenAi | KeyStyle::ByPath if completions => KeyScope::Completions,
        _ => KeyScope::Outside,
    }
}

/// The per-store policy.
#[derive(Clone, Debug, Default)]
pub struct OutgoingPolicy {
    /// Parsed `network.allow`.
    pub allow: Vec<AllowRule>,
    /// The gateway, for drivers that have one.
    pub gateway: Option<GatewayRoute>,
    /// When requests may leave: with a gate, every request of the call waits until the step
    /// before the call is journaled (`None`: at once).
    pub gate: Option<crate::SendGate>,
}

impl OutgoingPolicy {
    fn rewrite(
        &self,
        gw: &GatewayRoute,
        mut request: http::Request<WasiBody>,
    ) -> Result<http::Request<WasiBody>, HttpError> {
        let guest_path = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/").to_string();
        let base_path = gw.endpoint.path().trim_end_matches('/');
        let joined = format!("{base_path}{guest_path}");
        // An endpoint ending in `/v1` and a guest path starting with `/v1/` would double it.
        let joined = if base_path.ends_with("/v1") && guest_path.starts_with("/v1/") {
            format!("{base_path}{}", &guest_path[3..])
        } else {
            joined
        };
        let authority = gw.endpoint.authority().ok_or(HttpError::HttpRequestUriInvalid)?.clone();
        let uri = Uri::builder()
            .scheme(gw.endpoint.scheme().cloned().unwrap_or(http::uri::Scheme::HTTPS))
            .authority(authority.clone())
            .path_and_query(joined)
            .build()
            .map_err(|_| HttpError::HttpRequestUriInvalid)?;
        let style = key_scope(request.method(), &guest_path, gw.fixed.is_some(), gw.style);
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        for h in AUTH_HEADERS {
            headers.remove(h);
        }
        if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
            headers.insert(http::header::HOST, host);
        }
        headers.remove("traceparent");
        if let Some(tp) = &gw.traceparent {
            headers.insert(HeaderName::from_static("traceparent"), tp.clone());
        }
        let credential = match (style, &gw.fixed, &gw.key) {
            (KeyScope::Outside, _, _) => {
                tracing::debug!("gateway request outside the provider's API; sent without the credential");
                Credential::None
            }
            (_, Some(fixed), _) => fixed.clone(),
            (KeyScope::Messages, None, Some(key)) => {
                Credential::templated("x-api-key", "{key}", &key.0).unwrap_or(Credential::None)
            }
            (KeyScope::Completions, None, Some(key)) => {
                Credential::templated("authorization", "Bearer {key}", &key.0).unwrap_or(Credential::None)
            }
            (_, None, None) => Credential::None,
        };
        if let Credential::Header { name, value } = credential {
            headers.insert(name, value);
        }
        Ok(request)
    }

    fn allowed(&self, uri: &Uri) -> bool {
        let scheme = uri.scheme_str().unwrap_or("https");
        if scheme != "http" && scheme != "https" {
            return false;
        }
        // The connection goes to the raw authority: refuse anything in it but host and port,
        // so the policy decides on exactly what is dialled.
        let Some(authority) = uri.authority() else { return false };
        if authority.as_str().contains('@') {
            return false;
        }
        let Some(host) = uri.host() else { return false };
        let port = uri.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
        self.allow.iter().any(|r| r.allows(scheme, host, port))
    }

    /// Decide one request: rewrite gateway traffic, pass allowed hosts, deny the rest.
    pub fn decide(&self, request: http::Request<WasiBody>) -> Result<http::Request<WasiBody>, HttpError> {
        let to_gateway = request.uri().authority().is_some_and(|a| a.as_str() == GATEWAY_AUTHORITY)
            && matches!(request.uri().scheme_str(), Some("http") | None);
        match (&self.gateway, to_gateway) {
            (Some(gw), true) => self.rewrite(gw, request),
            _ if self.allowed(request.uri()) => Ok(request),
            _ => {
                tracing::debug!(uri = %request.uri(), "outgoing request denied by policy");
                Err(HttpError::HttpRequestDenied)
            }
        }
    }
}

type SendFuture = Box<
    dyn Future<
            Output = Result<
                (http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>),
                HttpError,
            >,
        > + Send,
>;

/// The status of the last HTTP response a call received, and its `retry-after` (seconds),
/// so the caller can tell a provider's 429 or 5xx from other failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamStatus {
    /// The HTTP status.
    pub status: u16,
    /// `retry-after`, when it was a number of seconds.
    pub retry_after: Option<std::time::Duration>,
}

/// The hooks of one store: the policy, the cap on each response it lets through, and the
/// status of the last response.
pub(crate) struct Hooks {
    pub policy: OutgoingPolicy,
    pub response: ResponseLimit,
    pub last: Arc<std::sync::Mutex<Option<UpstreamStatus>>>,
    /// The last request that got no answer at all: `(authority, what went wrong)`.
    pub unreachable: Arc<std::sync::Mutex<Option<(String, String)>>>,
    /// The store's paused clock: a wait on the send gate is not the guest's time.
    pub paused: Arc<crate::events::Paused>,
    /// Signalled when the call's first request is out ([`crate::ahead`]).
    pub(crate) sent: Option<crate::ahead::Sent>,
}

/// A transport failure in words a user can act on (wasi:http's error codes name the case).
fn transport_words(e: &HttpError) -> String {
    let raw = format!("{e:?}");
    let known = [
        ("ConnectionRefused", "the connection was refused (nothing listens there)"),
        ("DnsError", "the host name does not resolve"),
        ("lookup address", "the host name does not resolve"),
        ("DnsTimeout", "the host name did not resolve in time"),
        ("ConnectionTimeout", "the connection timed out"),
        ("ConnectionReadTimeout", "the provider stopped answering"),
        ("ConnectionTerminated", "the connection was closed"),
        ("DestinationUnavailable", "the destination is unreachable"),
        ("DestinationNotFound", "the destination was not found"),
        ("DestinationIpProhibited", "the destination address is not allowed"),
        ("DestinationIpUnroutable", "the destination address cannot be routed"),
        ("TlsProtocolError", "TLS failed (is the endpoint really https?)"),
        ("TlsCertificateError", "the TLS certificate was refused"),
        ("TlsAlertReceived", "the provider ended the TLS handshake"),
        ("HttpProtocolError", "the answer was not HTTP (is the endpoint really http?)"),
    ];
    known.iter().find(|(k, _)| raw.contains(k)).map_or(raw, |(_, words)| words.to_string())
}

impl WasiHttpHooks for Hooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> SendFuture {
        drop(fut);
        let decided = self.policy.decide(crate::bodies::when_sent(request, self.sent.take()));
        let limit = self.response.clone();
        let last = self.last.clone();
        let unreachable = self.unreachable.clone();
        let gate = self.policy.gate.clone();
        let paused = self.paused.clone();
        Box::new(async move {
            let request = decided?;
            // Nothing leaves before the step this call follows is journaled.
            if let Some(mut gate) = gate {
                paused.start();
                let passed = gate.passed().await;
                paused.stop();
                if !passed {
                    return Err(HttpError::InternalError(Some(
                        "the step before this call was not journaled; the request was not sent".into(),
                    )));
                }
            }
            let authority = request.uri().authority().map(ToString::to_string).unwrap_or_default();
            let res = match crate::upstream::send(request, options).await {
                Ok(answer) => answer,
                Err(e) => {
                    *unreachable.lock().unwrap_or_else(|p| p.into_inner()) = Some((authority, transport_words(&e)));
                    return Err(e);
                }
            };
            let retry_after = res
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(std::time::Duration::from_secs);
            *last.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(UpstreamStatus { status: res.status().as_u16(), retry_after });
            let res = res.map(|b| LimitedBody { inner: b, left: limit.bytes, limit }.boxed_unsync());
            // The pool drives the connection; nothing is left for the caller to run.
            Ok((res, Box::new(async { Ok(()) }) as Box<dyn Future<Output = Result<(), HttpError>> + Send>))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::Empty;

    fn req(uri: &str) -> http::Request<WasiBody> {
        req_with(http::Method::POST, uri)
    }

    fn req_with(method: http::Method, uri: &str) -> http::Request<WasiBody> {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header("x-api-key", "guest-set")
            .header("authorization", "Bearer guest")
            .body(Empty::<Bytes>::new().map_err(|_| HttpError::HttpProtocolError).boxed_unsync())
            .expect("request")
    }

    fn gw(endpoint: &str) -> OutgoingPolicy {
        OutgoingPolicy {
            allow: vec![],
            gateway: Some(GatewayRoute {
                traceparent: None,
                endpoint: endpoint.parse().expect("uri"),
                fixed: None,
                key: Some(SecretKey("sk-test".into())),
                style: KeyStyle::ByPath,
            }),
            gate: None,
        }
    }

    #[test]
    fn a_driver_of_known_kind_sends_its_key_only_in_its_own_style_and_paths() {
        let keyed = |style, path: &str| {
            let mut p = gw("https://api.example.com");
            if let Some(g) = p.gateway.as_mut() {
                g.style = style;
            }
            let out = p.decide(req(&format!("http://127.0.0.1:1{path}"))).expect("forwarded");
            (out.headers().get("x-api-key").is_some(), out.headers().get("authorization").is_some())
        };
        assert_eq!(keyed(KeyStyle::Anthropic, "/v1/messages"), (true, false));
        assert_eq!(keyed(KeyStyle::Anthropic, "/v1/chat/completions"), (false, false), "not its path: no key");
        assert_eq!(keyed(KeyStyle::OpenAi, "/v1/chat/completions"), (false, true));
        assert_eq!(keyed(KeyStyle::OpenAi, "/v1/messages"), (false, false), "not its path: no key");
        assert_eq!(keyed(KeyStyle::ByPath, "/v1/messages"), (true, false));
        assert_eq!(keyed(KeyStyle::ByPath, "/v1/chat/completions"), (false, true));
    }

    #[test]
    fn gateway_traffic_is_rewritten_and_keyed_by_the_host() {
        let out = gw("https://api.example.com").decide(req("http://127.0.0.1:1/v1/messages")).expect("allowed");
        assert_eq!(out.uri().to_string(), "https://api.example.com/v1/messages");
        assert_eq!(out.headers()["x-api-key"], "sk-test");
        assert!(out.headers().get("authorization").is_none(), "guest auth header must be stripped");
    }

    #[test]
    fn openai_style_paths_get_a_bearer_and_v1_is_not_doubled() {
        let out =
            gw("http://127.0.0.1:8080/v1").decide(req("http://127.0.0.1:1/v1/chat/completions")).expect("allowed");
        assert_eq!(out.uri().to_string(), "http://127.0.0.1:8080/v1/chat/completions");
        assert_eq!(out.headers()["authorization"], "Bearer sk-test");
        assert!(out.headers().get("x-api-key").is_none());
    }

    #[test]
    fn unlisted_hosts_are_denied_and_listed_ones_pass() {
        let p = OutgoingPolicy {
            allow: vec![AllowRule::parse("https://ok.example").expect("rule")],
            gateway: None,
            gate: None,
        };
        assert!(matches!(p.decide(req("http://evil.example/")), Err(HttpError::HttpRequestDenied)));
        assert!(p.decide(req("https://ok.example/x")).is_ok());
        assert!(
            matches!(p.decide(req("http://127.0.0.1:1/v1/messages")), Err(HttpError::HttpRequestDenied)),
            "no gateway for this artifact"
        );
    }

    #[test]
    fn the_credential_goes_only_with_post_to_the_providers_inference_paths() {
        let g = gw("https://api.example.com");
        let get = g.decide(req_with(http::Method::GET, "http://127.0.0.1:1/v1/messages")).expect("forwarded");
        assert!(get.headers().get("x-api-key").is_none(), "GET carries no key");
        let echo = g.decide(req("http://127.0.0.1:1/echo-headers")).expect("forwarded");
        assert!(echo.headers().get("x-api-key").is_none() && echo.headers().get("authorization").is_none());
        let models = g.decide(req("http://127.0.0.1:1/v1/messages/../../echo")).expect("forwarded");
        assert!(models.headers().get("x-api-key").is_none(), "only the exact paths");
        let ok = g.decide(req("http://127.0.0.1:1/v1/messages?beta=true")).expect("forwarded");
        assert_eq!(ok.headers()["x-api-key"], "sk-test");
    }

    #[test]
    fn user_info_in_the_authority_is_refused_whatever_the_host() {
        let p = OutgoingPolicy { allow: vec![AllowRule::parse("127.0.0.1").expect("rule")], gateway: None, gate: None };
        assert!(p.decide(req("http://127.0.0.1:9/x")).is_ok());
        for bad in ["http://x@127.0.0.1:9/x", "http://127.0.0.1@evil.example/x", "http://u:p@127.0.0.1/x"] {
            assert!(matches!(p.decide(req(bad)), Err(HttpError::HttpRequestDenied)), "{bad} passed");
        }
    }
}
