//! The rules of what a capsule grants its artifacts: the gateway's endpoint (also given on the
//! command line as `--endpoint`), and each artifact's capabilities (filesystem scopes, network
//! and environment).

use super::types::{Capabilities, Gateway};
use super::validate::{AllowRule, interpolated_name, is_credential_shaped, is_loopback_host, valid_var_name};
use crate::diagnostics::{Code, Diagnostic, Diagnostics};

/// An endpoint given on the command line (`--endpoint`), checked by the manifest's endpoint
/// rules: `https://…`, or `http://` to a loopback host only, never `${…}`.
pub fn endpoint_override_rules(endpoint: &str) -> Diagnostics {
    let mut out = Vec::new();
    let g = Gateway { endpoint: endpoint.to_string(), api_key: None, keyless: true };
    gateway_rules(&g, "--endpoint", &mut |code, _at: String, rule: String, fix: &str| {
        out.push(Diagnostic::new(code, "--endpoint", rule, fix))
    });
    Diagnostics(out)
}

pub(super) fn gateway_rules(g: &Gateway, at: &str, err: &mut impl FnMut(Code, String, String, &str)) {
    match g.endpoint.split_once("://") {
        Some(("https", rest)) if !rest.is_empty() => {}
        Some(("http", rest)) => {
            let host = rest.split(['/', '?']).next().unwrap_or("");
            let host = match host.rsplit_once(':') {
                Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
                _ => host,
            };
            if !is_loopback_host(host) {
                err(
                    Code::ManifestGateway,
                    format!("{at}.endpoint"),
                    format!("`{}` is plain http to a host that is not loopback", g.endpoint),
                    "use https, or http only to 127.0.0.1/localhost",
                );
            }
        }
        _ => err(
            Code::ManifestGateway,
            format!("{at}.endpoint"),
            format!("`{}` is not an http(s) URL", g.endpoint),
            "write the endpoint as https://host[:port][/path]",
        ),
    }
    if g.endpoint.contains("${") {
        err(
            Code::ManifestGateway,
            format!("{at}.endpoint"),
            "`${…}` interpolation is only allowed in api_key".into(),
            "write the endpoint literally",
        );
    }
    match (&g.api_key, g.keyless) {
        (Some(_), true) => err(
            Code::ManifestGateway,
            at.to_string(),
            "both `api_key` and `keyless: true` are set".into(),
            "keep one: a credential or `keyless: true`",
        ),
        (None, false) => err(
            Code::ManifestGateway,
            at.to_string(),
            "neither `api_key` nor `keyless: true` is set".into(),
            "add `api_key: ${NAME}` or `keyless: true`",
        ),
        (Some(k), false) => {
            if let Some(name) = interpolated_name(k) {
                if !valid_var_name(name) {
                    err(
                        Code::ManifestGateway,
                        format!("{at}.api_key"),
                        format!("`${{{name}}}` is not a valid variable name"),
                        "use ${NAME} with letters, digits and _",
                    );
                }
            } else if k.contains("${") {
                err(
                    Code::ManifestGateway,
                    format!("{at}.api_key"),
                    "api_key holds `${` but is not exactly `${NAME}`".into(),
                    "write `${NAME}` alone, or a literal",
                );
            }
        }
        (None, true) => {}
    }
}

/// The components of a `filesystem.scope`: `.` (or empty) is the workdir itself; otherwise
/// plain names separated by `/`. Absolute paths, `..`, `.` inside, empty parts, backslashes and
/// NUL are refused: a scope can only name a folder inside the workdir.
pub fn scope_parts(scope: &str) -> Result<Vec<&str>, &'static str> {
    if scope.starts_with('/') {
        return Err("is absolute; a scope is a folder inside the workdir");
    }
    let s = scope.strip_prefix("./").unwrap_or(scope).trim_end_matches('/');
    if s.is_empty() || s == "." {
        return Ok(Vec::new());
    }
    if s.contains(['\\', '\0']) {
        return Err("holds a backslash or NUL");
    }
    let parts: Vec<&str> = s.split('/').collect();
    if parts.contains(&"..") {
        return Err("leaves the workdir (`..`)");
    }
    if parts.iter().any(|p| p.is_empty() || *p == ".") {
        return Err("has an empty or `.` part");
    }
    Ok(parts)
}

/// The rules for an artifact folder's own `capabilities` (the same as the capsule's, with the
/// capsule-level codes): its scope can only narrow, so it must be a plain relative folder.
pub fn artifact_capability_rules(c: &Capabilities, at: &str) -> Diagnostics {
    let mut out = Vec::new();
    let mut err = |code: Code, at: String, rule: String, fix: &str| out.push(Diagnostic::new(code, at, rule, fix));
    capability_rules(c, at, &mut err);
    Diagnostics(out)
}

pub(super) fn capability_rules(c: &Capabilities, at: &str, err: &mut impl FnMut(Code, String, String, &str)) {
    for (i, entry) in c.network.allow.iter().enumerate() {
        if let Err(why) = AllowRule::parse(entry) {
            err(
                Code::ManifestCapability,
                format!("{at}.network.allow[{i}]"),
                format!("`{entry}`: {why}"),
                "write https://host[:port], host or host:port",
            );
        }
    }
    if let Err(why) = scope_parts(&c.filesystem.scope) {
        err(
            Code::ManifestCapability,
            format!("{at}.filesystem.scope"),
            format!("`{}` {why}", c.filesystem.scope),
            "use a plain folder relative to the workdir, e.g. `.` or `data/in`",
        );
    }
    for (i, name) in c.env.allow.iter().enumerate() {
        if is_credential_shaped(name) {
            err(
                Code::CredentialEnvDropped,
                format!("{at}.env.allow[{i}]"),
                format!("`{name}` looks like a credential and is never passed to a guest"),
                "remove it; give drivers a gateway credential instead",
            );
        }
    }
    let l = &c.limits;
    if l.memory_bytes == 0
        || l.deadline_seconds == 0
        || l.table_elements == 0
        || l.instances == 0
        || l.resources == 0
        || l.output_bytes == 0
        || l.disk_bytes == 0
        || l.response_bytes == 0
    {
        err(
            Code::ManifestCapability,
            format!("{at}.limits"),
            "a limit is 0".into(),
            "give each limit a positive value, or remove it for its default",
        );
    }
}
