//! `capsule control show|set|secret|forget <session dir or url>`: the operator's client for a
//! capsule's control surface (CONTRACT §7).
//!
//! The target is a session folder (`<workdir>/<session id>`, which holds `control.token` and
//! `door.url`) or the door's URL with `--token-file`. A secret's value is read from standard
//! input (so it never appears in the process list or the shell history) unless `--value` is
//! given. Exit codes: 0 done, 1 refused (the door's one-sentence reason is printed), 2 usage.

use capsule_actors::session::DOOR_URL_FILE;
use capsule_runtime::{Beneath, FileMode};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

/// `capsule control …`.
#[derive(clap::Args, Debug, Clone)]
pub struct ControlArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand, Debug, Clone)]
enum Action {
    /// Print the settings, the driver choices and which secrets are set.
    Show(Target),
    /// Change a setting: `inference.driver <choice>` or `inference.max_tokens <n>`.
    Set {
        #[command(flatten)]
        target: Target,
        /// Setting name.
        name: String,
        /// The value (JSON; a bare word is taken as a string).
        value: String,
    },
    /// Inject a secret (memory only; read from stdin unless --value).
    Secret {
        #[command(flatten)]
        target: Target,
        /// Secret name.
        name: String,
        /// The value (prefer stdin).
        #[arg(long)]
        value: Option<String>,
    },
    /// Forget a secret.
    Forget {
        #[command(flatten)]
        target: Target,
        /// Secret name.
        name: String,
    },
}

#[derive(clap::Args, Debug, Clone)]
struct Target {
    /// A session folder, or the door's URL.
    target: String,
    /// The control token file (needed with a URL).
    #[arg(long)]
    token_file: Option<PathBuf>,
}

impl Target {
    fn resolve(&self) -> Result<(String, String), String> {
        let (url, token_file) = if self.target.starts_with("http://") || self.target.starts_with("https://") {
            let file = self
                .token_file
                .clone()
                .ok_or("with a URL, pass --token-file (the ready line names it as control_token_file)")?;
            (self.target.trim_end_matches('/').to_string(), file)
        } else {
            let dir = PathBuf::from(&self.target);
            let url = Beneath::open(&dir).and_then(|d| d.read_to_string(DOOR_URL_FILE)).map_err(|e| {
                format!(
                    "cannot read {DOOR_URL_FILE} in {} ({e}); is it the session folder of a running capsule?",
                    dir.display()
                )
            })?;
            let url = loopback_door(url.trim())?;
            (url, self.token_file.clone().unwrap_or_else(|| dir.join("control.token")))
        };
        let token = Beneath::file_at(&token_file, FileMode::Read)
            .map_err(|e| e.to_string())
            .and_then(|mut f| {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut f, &mut s).map_err(|e| e.to_string())?;
                Ok(s)
            })
            .map_err(|e| format!("cannot read the control token {}: {e}", token_file.display()))?;
        Ok((url, token.trim().to_string()))
    }
}

/// The door address recorded in a session folder, accepted only as `http://` to a loopback
/// address without user info: the token is never sent anywhere else, whoever wrote the file.
fn loopback_door(recorded: &str) -> Result<String, String> {
    let refuse = |why: &str| {
        format!(
            "refusing the recorded door address `{recorded}`: {why}; the control token is only sent to a loopback door (pass the URL and --token-file to override)"
        )
    };
    let url = reqwest::Url::parse(recorded).map_err(|e| refuse(&e.to_string()))?;
    if url.scheme() != "http" {
        return Err(refuse("not http"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("it carries user info"));
    }
    let host = url.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    };
    if !loopback {
        return Err(refuse("not a loopback address"));
    }
    Ok(recorded.trim_end_matches('/').to_string())
}

/// Run `capsule control`.
pub async fn control(args: ControlArgs) -> ExitCode {
    match run(args).await {
        Ok(body) => {
            println!("{body}");
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
    }
}

async fn run(args: ControlArgs) -> Result<String, (u8, String)> {
    let usage = |m: String| (2u8, m);
    let client = reqwest::Client::new();
    let request = match &args.action {
        Action::Show(t) => {
            let (url, token) = t.resolve().map_err(usage)?;
            client.get(format!("{url}/control")).bearer_auth(token)
        }
        Action::Set { target, name, value } => {
            let (url, token) = target.resolve().map_err(usage)?;
            let v: serde_json::Value =
                serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.clone()));
            client
                .put(format!("{url}/control/settings/{name}"))
                .bearer_auth(token)
                .json(&serde_json::json!({"value": v}))
        }
        Action::Secret { target, name, value } => {
            let (url, token) = target.resolve().map_err(usage)?;
            let v = match value {
                Some(v) => v.clone(),
                None => {
                    let mut s = String::new();
                    std::io::stdin()
                        .read_to_string(&mut s)
                        .map_err(|e| usage(format!("cannot read the secret from stdin: {e}")))?;
                    s.trim_end_matches(['\n', '\r']).to_string()
                }
            };
            client
                .put(format!("{url}/control/secrets/{name}"))
                .bearer_auth(token)
                .header("content-type", "text/plain")
                .body(v)
        }
        Action::Forget { target, name } => {
            let (url, token) = target.resolve().map_err(usage)?;
            client.delete(format!("{url}/control/secrets/{name}")).bearer_auth(token)
        }
    };
    let resp = request.send().await.map_err(|e| (1, format!("cannot reach the door: {e}")))?;
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    if status.is_success() {
        Ok(body)
    } else {
        let error = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or(body);
        Err((1, format!("{} {error}", status.as_u16())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loopback_http_door_is_accepted_from_a_session_folder() {
        assert!(loopback_door("http://127.0.0.1:4000").is_ok());
        assert!(loopback_door("http://127.9.9.9:4000/").is_ok());
        assert!(loopback_door("http://[::1]:4000").is_ok());
        assert!(loopback_door("http://localhost:4000").is_ok());
        for bad in
            ["http://10.1.2.3:80", "https://127.0.0.1:4000", "http://evil.example", "http://x@127.0.0.1:1", "nonsense"]
        {
            assert!(loopback_door(bad).is_err(), "{bad} accepted");
        }
    }
}
