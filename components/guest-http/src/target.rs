//! Where a driver's request goes: `MURMUR_INFERENCE_ENDPOINT` plus the
//! provider's path.
//!
//! [`endpoint_target`] splits an `http://` or `https://` endpoint (scheme
//! matched in any case, surrounding whitespace ignored) into scheme,
//! authority and path, and appends the driver's own path to the endpoint's
//! path prefix after removing every trailing slash of it. Each driver picks
//! the suffix: `driver-anthropic` and `driver-legacy` append `/v1/messages`,
//! `driver-openai` appends `/chat/completions` (its endpoint carries its own
//! `/v1`).
//!
//! Guarantees: every refusal is a `String` naming the endpoint as given
//! (trimmed) and why: `must start with http:// or https://`, `must not carry
//! a query or fragment`, `has no host`.
//!
//! Deliberately not done: no further URL validation (the authority is passed
//! on as written, the host resolves and polices it), no percent-decoding, no
//! query strings.

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    pub authority: String,
    pub path: String,
}

/// `{endpoint}{suffix}`, with one or more trailing slashes of the endpoint
/// removed. The endpoint may carry a path prefix, not a query.
pub fn endpoint_target(endpoint: &str, suffix: &str) -> Result<Target, String> {
    let endpoint = endpoint.trim();
    let bad = |why: &str| Err(format!("MURMUR_INFERENCE_ENDPOINT `{endpoint}` {why}"));
    let (https, rest) = if let Some(rest) = strip_prefix_ignore_case(endpoint, "https://") {
        (true, rest)
    } else if let Some(rest) = strip_prefix_ignore_case(endpoint, "http://") {
        (false, rest)
    } else {
        return bad("must start with http:// or https://");
    };
    if rest.contains(['?', '#']) {
        return bad("must not carry a query or fragment");
    }
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return bad("has no host");
    }
    let path = format!("{}{suffix}", prefix.trim_end_matches('/'));
    Ok(Target { https, authority: authority.to_string(), path })
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGES: &str = "/v1/messages";
    const CHAT: &str = "/chat/completions";

    fn messages_target(endpoint: &str) -> Result<Target, String> {
        endpoint_target(endpoint, MESSAGES)
    }

    fn chat_completions_target(endpoint: &str) -> Result<Target, String> {
        endpoint_target(endpoint, CHAT)
    }

    /// From `driver-anthropic`.
    #[test]
    fn targets() {
        let t = messages_target("https://api.example.com/").unwrap();
        assert_eq!(t, Target { https: true, authority: "api.example.com".into(), path: "/v1/messages".into() });
        let t = messages_target("http://127.0.0.1:8080/gw/anthropic//").unwrap();
        assert_eq!(
            t,
            Target { https: false, authority: "127.0.0.1:8080".into(), path: "/gw/anthropic/v1/messages".into() }
        );
        assert!(messages_target("ftp://x").is_err());
        assert!(messages_target("http:///x").is_err());
        assert!(messages_target("http://x/?a=1").is_err());
    }

    /// From `driver-openai`.
    #[test]
    fn chat_completions_targets() {
        let t = chat_completions_target("https://api.openai.com/v1/").unwrap();
        assert_eq!(t, Target { https: true, authority: "api.openai.com".into(), path: "/v1/chat/completions".into() });
        let t = chat_completions_target("http://127.0.0.1:11434/v1").unwrap();
        assert_eq!(
            t,
            Target { https: false, authority: "127.0.0.1:11434".into(), path: "/v1/chat/completions".into() }
        );
        let t = chat_completions_target("HTTP://127.0.0.1:9/").unwrap();
        assert_eq!(t, Target { https: false, authority: "127.0.0.1:9".into(), path: "/chat/completions".into() });
        assert!(chat_completions_target("ftp://x").is_err());
        assert!(chat_completions_target("http:///v1").is_err());
        assert!(chat_completions_target("http://x/v1?a=1").is_err());
    }

    /// From `driver-legacy` (which had its own parser; same results).
    #[test]
    fn legacy_targets() {
        let t = messages_target("http://127.0.0.1:9/").unwrap();
        assert_eq!(t, Target { https: false, authority: "127.0.0.1:9".into(), path: "/v1/messages".into() });
        let t = messages_target("HTTPS://api.example.com/gw//").unwrap();
        assert_eq!(t, Target { https: true, authority: "api.example.com".into(), path: "/gw/v1/messages".into() });
        assert!(messages_target("ftp://x").is_err());
        assert!(messages_target("http:///x").is_err());
        assert!(messages_target("http://x/?a=1").is_err());
        assert!(messages_target("httpé").is_err());
    }

    #[test]
    fn refusals_name_the_endpoint_and_the_reason() {
        assert_eq!(
            messages_target("  ftp://x ").unwrap_err(),
            "MURMUR_INFERENCE_ENDPOINT `ftp://x` must start with http:// or https://"
        );
        assert_eq!(
            messages_target("http://x/#f").unwrap_err(),
            "MURMUR_INFERENCE_ENDPOINT `http://x/#f` must not carry a query or fragment"
        );
        assert_eq!(messages_target("https://").unwrap_err(), "MURMUR_INFERENCE_ENDPOINT `https://` has no host");
    }
}
