//! Load-time rules of CONTRACT §1 that types alone cannot say.

use super::grant_rules::{capability_rules, gateway_rules};
use super::types::{ArtifactRuntime, Gateway, Manifest};
use crate::diagnostics::{Code, Diagnostic, Diagnostics};

/// Settings the control surface knows.
pub const KNOWN_SETTINGS: [&str; 2] = ["inference.driver", "inference.max_tokens"];

/// One parsed `network.allow` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    /// `Some("https")`/`Some("http")` when the entry named a scheme; any scheme otherwise.
    pub scheme: Option<String>,
    /// Host name, lowercased.
    pub host: String,
    /// Port when the entry named one; any port otherwise.
    pub port: Option<u16>,
}

impl AllowRule {
    /// Parse `https://host[:port]`, `host` or `host:port`.
    pub fn parse(entry: &str) -> Result<AllowRule, String> {
        let (scheme, rest) = match entry.split_once("://") {
            Some((s, r)) => {
                let s = s.to_ascii_lowercase();
                if s != "http" && s != "https" {
                    return Err(format!("scheme `{s}` is not http or https"));
                }
                (Some(s), r)
            }
            None => (None, entry),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') || rest.contains('?') || rest.contains('#') {
            return Err("an entry names a host, never a path or query".into());
        }
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') || h.ends_with(']') => {
                let port: u16 = p.parse().map_err(|_| format!("port `{p}` is not a number 1..65535"))?;
                (h, Some(port))
            }
            _ => (rest, None),
        };
        if host.is_empty() || host.contains('@') || host.contains('*') {
            return Err("the host is empty or holds `@` or `*`".into());
        }
        Ok(AllowRule { scheme, host: host.to_ascii_lowercase(), port })
    }

    /// Whether a request to `scheme://host:port` is allowed by this rule.
    pub fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        let default_port = if scheme == "https" { 443 } else { 80 };
        self.scheme.as_deref().is_none_or(|s| s == scheme)
            && self.host.eq_ignore_ascii_case(host)
            && self.port.unwrap_or(match self.scheme.as_deref() {
                Some(_) => default_port,
                None => port,
            }) == port
    }
}

/// Whether `host` is a loopback name or address.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h == "::1"
        || h.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether an env var name looks like a credential, so it is never passed to a guest.
pub fn is_credential_shaped(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n.ends_with("_API_KEY")
        || n.ends_with("_TOKEN")
        || n.ends_with("_SECRET")
        || n.ends_with("_PASSWORD")
        || n.starts_with("AWS_")
        || n == "API_KEY"
        || n.contains("SECRET_KEY")
}

/// The variable name inside `${NAME}`, when the value has that form.
pub fn interpolated_name(value: &str) -> Option<&str> {
    value.strip_prefix("${").and_then(|v| v.strip_suffix('}'))
}

pub(super) fn valid_var_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub(super) fn validate(m: &Manifest) -> Diagnostics {
    let mut out = Vec::new();
    let mut err = |code, at: String, rule: String, fix: &str| out.push(Diagnostic::new(code, at, rule, fix));

    if m.name.is_empty()
        || m.name.len() > 100
        || !m.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        err(
            Code::ManifestInvalid,
            "name".into(),
            format!("`{}` must be 1..100 characters of a-z, 0-9 and -", m.name),
            "rename the capsule, e.g. `my-agent`",
        );
    }

    for (i, a) in m.artifacts.iter().enumerate() {
        let at = format!("artifacts[{i}]");
        if m.artifacts.iter().filter(|b| b.name == a.name).count() > 1 {
            err(
                Code::ManifestArtifactRef,
                format!("{at}.name"),
                format!("artifact `{}` is declared more than once", a.name),
                "give each artifact a unique name",
            );
        }
        if a.name.is_empty() {
            err(Code::ManifestInvalid, format!("{at}.name"), "an artifact name is empty".into(), "name the artifact");
        }
        for (key, set, why) in [
            ("local_source", a.local_source.is_some(), "every `source` is a local path here"),
            ("prompt_payload", a.prompt_payload.is_some(), "skills do not run here yet"),
            (
                "on_overflow",
                a.on_overflow.is_some(),
                "a full async hook queue always drops the new event and traces it (hook_dispatch_error queue-overflow)",
            ),
        ] {
            if set {
                err(
                    Code::ManifestKeyNotHonoured,
                    format!("{at}.{key}"),
                    format!("Murmur's `{key}` has no effect in this runtime ({why})"),
                    "remove it, or keep it for Murmur; the capsule runs either way",
                );
            }
        }
        if a.source.is_none() && a.version.is_none() {
            err(
                Code::ManifestArtifactRef,
                format!("{at}.source"),
                format!("artifact `{}` has neither a source nor a version", a.name),
                "set `source:` to a .wasm file or an artifact folder, or `version:` to use the installed package (`capsule install`)",
            );
        }
        if let Some(g) = &a.gateway {
            gateway_rules(g, &format!("{at}.gateway"), &mut err);
            if a.runtime != ArtifactRuntime::Driver {
                err(
                    Code::ManifestGateway,
                    format!("{at}.gateway"),
                    format!("tool `{}` has a gateway; only drivers reach an upstream through the host", a.name),
                    "remove `gateway:` from the tool",
                );
            }
        }
        if let Some(c) = &a.capabilities {
            capability_rules(c, &format!("{at}.capabilities"), &mut err);
        }
    }
    capability_rules(&m.capabilities, "capabilities", &mut err);

    let inf = &m.inference;
    if inf.transport != "http" {
        err(
            Code::ManifestInvalid,
            "inference.transport".into(),
            format!("transport `{}` is not supported; only `http`", inf.transport),
            "set `transport: http` or remove the key",
        );
    }
    if inf.model.is_empty() {
        err(
            Code::ManifestInvalid,
            "inference.model".into(),
            "the model is empty".into(),
            "name the primary model, e.g. `claude-sonnet-4-5`",
        );
    }
    match m.artifact(&inf.driver.artifact) {
        None => err(
            Code::ManifestArtifactRef,
            "inference.driver.artifact".into(),
            format!("driver `{}` is not declared in artifacts[]", inf.driver.artifact),
            "declare it under artifacts with `runtime: driver`",
        ),
        Some(a) if a.runtime != ArtifactRuntime::Driver => err(
            Code::ManifestArtifactRef,
            "inference.driver.artifact".into(),
            format!("`{}` is declared with runtime: tool, not driver", a.name),
            "point inference.driver.artifact at a `runtime: driver` artifact",
        ),
        Some(a) => {
            if a.gateway.is_some() && (inf.endpoint.is_some() || inf.api_key.is_some()) {
                err(
                    Code::ManifestGateway,
                    "inference.endpoint".into(),
                    "the primary driver has a `gateway:` and `inference.endpoint`/`api_key` too".into(),
                    "keep one: the driver's `gateway:` block or the older `inference.endpoint` shorthand",
                );
            }
            if a.gateway.is_none() {
                if let Some(e) = &inf.endpoint {
                    let g =
                        Gateway { endpoint: e.clone(), api_key: inf.api_key.clone(), keyless: inf.api_key.is_none() };
                    gateway_rules(&g, "inference", &mut err);
                } else if inf.api_key.is_some() {
                    err(
                        Code::ManifestGateway,
                        "inference.api_key".into(),
                        "`api_key` is set without `endpoint`".into(),
                        "add `inference.endpoint` or move both into the driver's `gateway:`",
                    );
                }
            }
        }
    }
    if inf.max_turns == 0 {
        err(
            Code::ManifestInvalid,
            "inference.max_turns".into(),
            "max_turns must be at least 1".into(),
            "set max_turns to 1 or more, or remove it for the default 10",
        );
    }
    if let Some(e) = &m.observability.otel_endpoint {
        let ok = (e.starts_with("http://") || e.starts_with("https://"))
            && e.split("://").nth(1).is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
        if !ok {
            err(
                Code::ManifestInvalid,
                "observability.otel_endpoint".into(),
                format!("`{e}` is not an http(s) URL with a host"),
                "write the collector's OTLP/HTTP base URL, e.g. http://127.0.0.1:4318 (spans go to its /v1/traces)",
            );
        }
    }
    if m.observability.eval.is_some() {
        err(
            Code::ManifestKeyNotHonoured,
            "observability.eval".into(),
            "Murmur's `eval` has no effect in this runtime".into(),
            "remove it, or keep it for Murmur; the capsule runs either way",
        );
    }
    let c = &inf.compaction;
    if !(c.threshold > 0.0 && c.threshold <= 1.0) {
        err(
            Code::ManifestInvalid,
            "inference.compaction.threshold".into(),
            format!("the threshold is {}; it is a fraction of the context window, above 0 and at most 1", c.threshold),
            "set it between 0 and 1 (e.g. 0.85), or remove it for the default 0.98",
        );
    }
    if c.system_prompt.is_some() && c.system_prompt_file.is_some() {
        err(
            Code::ManifestInvalid,
            "inference.compaction.system_prompt_file".into(),
            "both system_prompt and system_prompt_file are set".into(),
            "keep one of them",
        );
    }
    if c.dump_summaries {
        err(
            Code::ManifestKeyNotHonoured,
            "inference.compaction.dump_summaries".into(),
            "Murmur's `dump_summaries` has no effect in this runtime: every committed compaction is in trace.jsonl (`compaction`) and the new context in conversation.jsonl".into(),
            "remove it, or keep it for Murmur; the capsule runs either way",
        );
    }
    if inf.max_retries > 10 {
        err(
            Code::ManifestInvalid,
            "inference.max_retries".into(),
            format!("max_retries is {}; at most 10 resends of a refused call are allowed", inf.max_retries),
            "set max_retries between 0 (never resend) and 10, or remove it for the default 2",
        );
    }
    if inf.max_tokens == Some(0) {
        err(
            Code::ManifestInvalid,
            "inference.max_tokens".into(),
            "max_tokens must be at least 1".into(),
            "set a positive cap or remove it",
        );
    }
    if inf.system_prompt.is_some() && inf.system_prompt_file.is_some() {
        err(
            Code::ManifestInvalid,
            "inference.system_prompt".into(),
            "system_prompt and system_prompt_file are both set".into(),
            "keep one of them",
        );
    }
    for (i, alt) in inf.alternates.iter().enumerate() {
        let at = format!("inference.alternates[{i}]");
        if alt.name == "primary" || alt.name.is_empty() {
            err(
                Code::ManifestInvalid,
                format!("{at}.name"),
                format!("`{}` cannot name an alternate; `primary` is the primary choice", alt.name),
                "choose another name",
            );
        }
        if inf.alternates.iter().filter(|b| b.name == alt.name).count() > 1 {
            err(
                Code::ManifestInvalid,
                format!("{at}.name"),
                format!("alternate `{}` is named twice", alt.name),
                "give each alternate a unique name",
            );
        }
        match m.artifact(alt.driver.artifact()) {
            None => err(
                Code::ManifestArtifactRef,
                format!("{at}.driver"),
                format!("driver `{}` of alternate `{}` is not declared", alt.driver.artifact(), alt.name),
                "declare it under artifacts with `runtime: driver`",
            ),
            Some(a) if a.runtime != ArtifactRuntime::Driver => err(
                Code::ManifestArtifactRef,
                format!("{at}.driver"),
                format!("`{}` of alternate `{}` is a tool, not a driver", a.name, alt.name),
                "name a `runtime: driver` artifact",
            ),
            Some(_) => {}
        }
    }
    if m.context.max_tokens == Some(0) {
        err(
            Code::ManifestInvalid,
            "context.max_tokens".into(),
            "context.max_tokens must be at least 1".into(),
            "set a positive window or remove it",
        );
    }
    for (i, s) in m.control.settings.iter().enumerate() {
        if !KNOWN_SETTINGS.contains(&s.as_str()) {
            err(
                Code::ManifestInvalid,
                format!("control.settings[{i}]"),
                format!("`{s}` is not a setting this runtime knows"),
                "use inference.driver or inference.max_tokens",
            );
        }
    }
    for (i, s) in m.control.agent_settings.iter().enumerate() {
        if s != "inference.driver" {
            err(
                Code::ManifestInvalid,
                format!("control.agent_settings[{i}]"),
                format!("`{s}` cannot be given to the agent"),
                "only inference.driver may be listed",
            );
        }
    }
    for (i, s) in m.control.secrets.iter().enumerate() {
        if !valid_var_name(s) {
            err(
                Code::ManifestInvalid,
                format!("control.secrets[{i}]"),
                format!("`{s}` is not a valid secret name"),
                "use letters, digits and _ , starting with a letter",
            );
        }
    }
    Diagnostics(out)
}

#[cfg(test)]
mod tests {
    use super::super::grant_rules::scope_parts;
    use super::*;

    #[test]
    fn allow_rules_parse_the_three_forms_and_refuse_paths() {
        assert_eq!(AllowRule::parse("https://api.example.com").expect("ok").scheme.as_deref(), Some("https"));
        assert_eq!(AllowRule::parse("example.com:8443").expect("ok").port, Some(8443));
        assert!(AllowRule::parse("example.com").expect("ok").allows("http", "EXAMPLE.com", 1234));
        assert!(AllowRule::parse("https://x.com/path").is_err());
        assert!(AllowRule::parse("ftp://x.com").is_err());
        let https = AllowRule::parse("https://x.com").expect("ok");
        assert!(https.allows("https", "x.com", 443));
        assert!(!https.allows("http", "x.com", 80));
        assert!(!https.allows("https", "x.com", 8443));
    }

    #[test]
    fn a_scope_is_a_plain_folder_inside_the_workdir() {
        for ok in [".", "./", "", "data", "./data/in/", "a/b"] {
            assert!(scope_parts(ok).is_ok(), "{ok:?} refused");
        }
        for bad in ["/", "/etc", "..", "../x", "data/../..", "a//b", "a/./b", "a\\b"] {
            assert!(scope_parts(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn credential_shaped_names_are_recognised() {
        assert!(is_credential_shaped("ANTHROPIC_API_KEY"));
        assert!(is_credential_shaped("GITHUB_TOKEN"));
        assert!(is_credential_shaped("AWS_REGION"));
        assert!(!is_credential_shaped("HOME"));
    }
}
