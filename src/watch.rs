//! `capsule watch <url>`: follow a running capsule's event stream through its door
//! (`stream/watch`, CONTRACT §10) and print every frame, human-readable or as JSON lines.
//!
//! Guarantees:
//! - every id-bearing frame is printed at most once, in id order: after a dropped connection the
//!   watcher reconnects with `Last-Event-ID: <the last id it printed>`, so the door replays what
//!   was missed, and anything at or below that id is skipped; a frame cut off by the drop is
//!   never printed (only whole frames leave the parser);
//! - `connection-ack` is printed for the first connection only;
//! - a drop is a body that ends without `capsule-closed`, a read error, a 5xx answer, an `error`
//!   frame (the door could not subscribe, e.g. while its emitter restarts) or nothing at all
//!   (not even a heartbeat) for [`IDLE_LIMIT`]; each is retried after a backoff that starts at
//!   [`FIRST_BACKOFF`] and doubles up to [`MAX_BACKOFF`], at most [`MAX_RETRIES`] times in a
//!   row (a connection that printed a new frame, or stayed up [`STEADY_AFTER`], resets the
//!   count);
//! - exit 0 after `capsule-closed`; 1 after giving up (the message names the last id printed
//!   and how to resume); 2 when the URL or the answer shows it is not a capsule's door.
//!
//! In `--json` mode stdout carries only frames, one `{"id":…, "event":…, "data":…}` object per
//! line, exactly as `capsule run --json` prints them; reconnect notices go to stderr.
//!
//! Deliberately not here: resuming across a first connection that dropped before any
//! id-bearing frame arrived (with no id to send, the reconnect sees live frames only, unless
//! `--last-event-id` was given), and TLS (the door listens on loopback, plain HTTP).

use capsule_protocol::frame::{Frame, NumberedFrame};
use serde_json::{Value, json};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;
use tokio::time::Instant;

use crate::cli_run::chain;
use crate::printer::{self, Style};
use crate::sse_client::{SseEvent, SseParser};

/// Reconnect attempts in a row before giving up.
pub const MAX_RETRIES: u32 = 50;
/// The first backoff; each failed attempt doubles it.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A connection silent this long (three missed heartbeats) counts as dropped.
pub const IDLE_LIMIT: Duration = Duration::from_secs(45);
/// A connection that stayed up this long resets the retry count even if it printed nothing.
pub const STEADY_AFTER: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const WATCH_REQUEST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch"}"#;

/// Options of `capsule watch`.
#[derive(clap::Args, Debug, Clone)]
pub struct WatchArgs {
    /// The capsule's door URL, as `capsule run` prints it (http://127.0.0.1:PORT).
    pub url: String,
    /// Print one JSON object per frame: {"id", "event", "data"}.
    #[arg(long)]
    pub json: bool,
    /// The door's bearer token file (`<session folder>/door.token`), for a capsule with
    /// `network.authentication: bearer`.
    #[arg(long)]
    pub token_file: Option<std::path::PathBuf>,
    /// First replay the frames after this id (sent as `Last-Event-ID`); 0 replays all the door
    /// still holds.
    #[arg(long)]
    pub last_event_id: Option<u64>,
    /// Follow this session of a cluster through the host API at URL (any host's; give that
    /// host's API token file as `--token-file`): the same as watching `URL/sessions/<id>`. It
    /// goes on across a failover.
    #[arg(long)]
    pub session: Option<String>,
}

/// One frame to print.
#[derive(Debug, Clone, PartialEq)]
struct Shown {
    id: Option<u64>,
    event: String,
    data: Value,
}

/// What to do with one event.
#[derive(Debug, PartialEq)]
enum Step {
    /// Print it.
    Print(Shown),
    /// Already printed, or a repeated `connection-ack`.
    Skip,
    /// `capsule-closed`: print it and stop.
    Closed(Shown),
    /// An `error` frame: the door could not serve this watch.
    Refused(String),
}

/// What has been printed so far, across connections.
#[derive(Debug, Default)]
struct Seen {
    last_id: Option<u64>,
    acked: bool,
}

impl Seen {
    /// Decide about one event; an error when it cannot be a door frame.
    fn step(&mut self, ev: SseEvent) -> Result<Step, String> {
        let id = match &ev.id {
            None => None,
            Some(raw) => Some(raw.trim().parse::<u64>().map_err(|_| {
                format!("the stream sent id `{raw}`, which is not a frame id; is this a capsule's door?")
            })?),
        };
        let data = serde_json::from_str(&ev.data).unwrap_or(Value::String(ev.data));
        let shown = Shown { id, event: ev.event, data };
        if let Some(id) = id {
            if self.last_id.is_some_and(|last| id <= last) {
                return Ok(Step::Skip);
            }
            self.last_id = Some(id);
            return Ok(Step::Print(shown));
        }
        Ok(match shown.event.as_str() {
            "connection-ack" if self.acked => Step::Skip,
            "connection-ack" => {
                self.acked = true;
                Step::Print(shown)
            }
            "capsule-closed" => Step::Closed(shown),
            "error" => Step::Refused(
                shown
                    .data
                    .get("error")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| shown.data.to_string()),
            ),
            _ => Step::Print(shown),
        })
    }
}

/// How one connection ended.
enum Ended {
    /// `capsule-closed` arrived.
    Closed,
    /// Try again: why it dropped.
    Dropped(String),
    /// Nothing answered at the URL: retried only once a connection has worked before.
    Unreachable(String),
    /// Not worth retrying.
    Fatal(String),
}

fn print(shown: &Shown, json_mode: bool) {
    if json_mode {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", json!({"id": shown.id, "event": shown.event, "data": shown.data}));
        let _ = out.flush();
        return;
    }
    let dim = |s: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "\x1b[2m{s}\x1b[0m");
        let _ = out.flush();
    };
    let frame: Option<Frame> = serde_json::from_value(json!({"event": shown.event, "data": shown.data})).ok();
    match frame {
        Some(Frame::ConnectionAck { role, conversation_mode }) => {
            eprintln!("watching as {role} (conversation mode {conversation_mode})")
        }
        Some(Frame::CapsuleClosed {}) => eprintln!("capsule closed"),
        Some(Frame::Gap { first_available_id }) => {
            dim(format!("[frames before {first_available_id} are no longer kept; the replay starts there]"))
        }
        Some(Frame::Lagged { missed }) => dim(format!("[{missed} frames lost: this watcher fell behind]")),
        Some(frame) => printer::print_frame(&NumberedFrame { id: shown.id, frame }, Style::Human, None),
        None => dim(format!("[{}] {}", shown.event, shown.data)),
    }
}

/// The delay before reconnect attempt `attempt` (1-based).
fn backoff(attempt: u32) -> Duration {
    let doubled = FIRST_BACKOFF.saturating_mul(1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX));
    doubled.min(MAX_BACKOFF)
}

/// One connection: subscribe, print until it ends. Returns how it ended and whether it printed
/// a new frame.
async fn connect_once(
    client: &reqwest::Client,
    url: &reqwest::Url,
    token: Option<&str>,
    seen: &mut Seen,
    json_mode: bool,
) -> (Ended, bool) {
    let mut req = client
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .body(WATCH_REQUEST);
    if let Some(last) = seen.last_id {
        req = req.header("Last-Event-ID", last.to_string());
    }
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let mut resp = match req.send().await {
        Ok(r) => r,
        Err(e) => return (Ended::Unreachable(format!("cannot reach {url}: {}", chain(&e))), false),
    };
    let status = resp.status();
    let content_type =
        resp.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    if !status.is_success() || !content_type.starts_with("text/event-stream") {
        let body = resp.text().await.unwrap_or_default();
        let body: String = body.chars().take(300).collect();
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return (
                Ended::Fatal(format!(
                    "{url} requires a door token (network.authentication: bearer); pass --token-file <session folder>/door.token"
                )),
                false,
            );
        }
        if status.is_server_error() {
            return (Ended::Dropped(format!("the door answered {status}: {body}")), false);
        }
        return (
            Ended::Fatal(format!(
                "{url} answered {status} with `{content_type}`, not an event stream: {body}; is it a capsule's door (the URL `capsule run` prints)?"
            )),
            false,
        );
    }
    let mut parser = SseParser::new();
    let mut printed = false;
    loop {
        let chunk = match tokio::time::timeout(IDLE_LIMIT, resp.chunk()).await {
            Err(_) => {
                return (
                    Ended::Dropped(format!("nothing arrived for {} s, not even a heartbeat", IDLE_LIMIT.as_secs())),
                    printed,
                );
            }
            Ok(Err(e)) => return (Ended::Dropped(format!("the connection broke: {}", chain(&e))), printed),
            Ok(Ok(None)) => {
                let why = if parser.has_partial() {
                    "the stream ended in the middle of a frame"
                } else {
                    "the stream ended without capsule-closed"
                };
                return (Ended::Dropped(why.to_string()), printed);
            }
            Ok(Ok(Some(bytes))) => bytes,
        };
        for ev in parser.push(&chunk) {
            match seen.step(ev) {
                Err(why) => return (Ended::Fatal(why), printed),
                Ok(Step::Skip) => {}
                Ok(Step::Print(shown)) => {
                    printed |= shown.id.is_some();
                    print(&shown, json_mode);
                }
                Ok(Step::Closed(shown)) => {
                    print(&shown, json_mode);
                    return (Ended::Closed, printed);
                }
                Ok(Step::Refused(why)) => {
                    return (Ended::Dropped(format!("the door refused the watch: {why}")), printed);
                }
            }
        }
    }
}

fn door_url(raw: &str) -> Result<reqwest::Url, String> {
    let hint = "give the door URL `capsule run` prints, like http://127.0.0.1:PORT";
    let url = reqwest::Url::parse(raw).map_err(|e| format!("`{raw}` is not a URL ({e}); {hint}"))?;
    if url.scheme() != "http" {
        return Err(format!("`{raw}` is not an http:// URL; the door serves plain HTTP on loopback; {hint}"));
    }
    Ok(url)
}

/// What `capsule watch` connects to: the door URL, or with `--session` that session through
/// the host API at `raw`.
fn watch_url(raw: &str, session: Option<&str>) -> Result<reqwest::Url, String> {
    let Some(session) = session else { return door_url(raw) };
    door_url(raw)?;
    if !capsule_actors::cluster::valid_session_id(session) {
        return Err(format!(
            "`{session}` is not a session id (letters, digits, `_` and `-`); give an id that `GET /capsules` lists, like ses_01a2…"
        ));
    }
    door_url(&format!("{}/sessions/{session}", raw.trim_end_matches('/')))
}

/// Watch until the capsule closes or the door stays unreachable.
pub async fn watch(args: WatchArgs) -> ExitCode {
    let url = match watch_url(&args.url, args.session.as_deref()) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let client = match reqwest::Client::builder().no_proxy().connect_timeout(CONNECT_TIMEOUT).build() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot start an HTTP client: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    let token = match &args.token_file {
        None => None,
        Some(f) => match std::fs::read_to_string(f) {
            Ok(t) => Some(t.trim().to_string()),
            Err(e) => {
                eprintln!("error: cannot read the door token file {}: {e}", f.display());
                return ExitCode::from(2);
            }
        },
    };
    let mut seen = Seen { last_id: args.last_event_id, acked: false };
    let mut failures: u32 = 0;
    let mut ever_connected = false;
    eprintln!("watch: connecting to {url} …");
    loop {
        let started = Instant::now();
        let (ended, printed) = connect_once(&client, &url, token.as_deref(), &mut seen, args.json).await;
        let why = match ended {
            Ended::Closed => return ExitCode::SUCCESS,
            Ended::Fatal(why) => {
                eprintln!("error: {why}");
                return ExitCode::from(2);
            }
            // A first connection that finds nobody is a wrong URL or a capsule that is not
            // running: say so at once instead of retrying for a minute.
            Ended::Unreachable(why) if !ever_connected => {
                eprintln!(
                    "error: {why}; is the capsule running? Use the door URL `capsule run` prints (also in its session folder's door.url, and in `capsule ps`)"
                );
                return ExitCode::from(2);
            }
            Ended::Unreachable(why) | Ended::Dropped(why) => {
                ever_connected = true;
                why
            }
        };
        if printed || started.elapsed() >= STEADY_AFTER {
            failures = 0;
        }
        failures += 1;
        let resume = match seen.last_id {
            Some(id) => format!("frame {id}"),
            None => "none yet".to_string(),
        };
        if failures > MAX_RETRIES {
            let how = match seen.last_id {
                Some(id) => format!("; `capsule watch {url} --last-event-id {id}` resumes after it"),
                None => String::new(),
            };
            eprintln!(
                "error: gave up watching {url} after {MAX_RETRIES} reconnect attempts in a row; last failure: {why}. Last frame printed: {resume}{how}"
            );
            return ExitCode::from(1);
        }
        let wait = backoff(failures);
        eprintln!(
            "watch: {why}; reconnecting in {} ms (attempt {failures} of {MAX_RETRIES}; last frame printed: {resume})",
            wait.as_millis()
        );
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: Option<&str>, event: &str, data: &str) -> SseEvent {
        SseEvent { id: id.map(str::to_string), event: event.to_string(), data: data.to_string() }
    }

    #[test]
    fn frames_at_or_below_the_last_printed_id_are_skipped() {
        let mut seen = Seen::default();
        assert!(matches!(seen.step(ev(Some("1"), "text", "{}")), Ok(Step::Print(Shown { id: Some(1), .. }))));
        assert!(matches!(seen.step(ev(Some("2"), "text", "{}")), Ok(Step::Print(_))));
        assert_eq!(seen.step(ev(Some("2"), "text", "{}")), Ok(Step::Skip), "a replayed frame");
        assert_eq!(seen.step(ev(Some("1"), "text", "{}")), Ok(Step::Skip));
        assert!(matches!(seen.step(ev(Some("3"), "status", "{}")), Ok(Step::Print(_))));
        assert_eq!(seen.last_id, Some(3));
    }

    #[test]
    fn a_given_last_event_id_counts_as_printed() {
        let mut seen = Seen { last_id: Some(5), acked: false };
        assert_eq!(seen.step(ev(Some("5"), "text", "{}")), Ok(Step::Skip));
        assert!(matches!(seen.step(ev(Some("6"), "text", "{}")), Ok(Step::Print(_))));
    }

    #[test]
    fn connection_ack_is_printed_once_and_per_connection_frames_pass() {
        let mut seen = Seen::default();
        let ack = r#"{"role":"observer","conversation_mode":"single"}"#;
        assert!(matches!(seen.step(ev(None, "connection-ack", ack)), Ok(Step::Print(_))));
        assert_eq!(seen.step(ev(None, "connection-ack", ack)), Ok(Step::Skip), "a reconnect's ack");
        assert!(matches!(seen.step(ev(None, "gap", r#"{"first_available_id":9}"#)), Ok(Step::Print(_))));
        assert!(matches!(seen.step(ev(None, "lagged", r#"{"missed":3}"#)), Ok(Step::Print(_))));
        assert!(matches!(seen.step(ev(None, "capsule-closed", "{}")), Ok(Step::Closed(_))));
        assert_eq!(
            seen.step(ev(None, "error", r#"{"error":"the stream emitter is not running"}"#)),
            Ok(Step::Refused("the stream emitter is not running".into()))
        );
    }

    #[test]
    fn a_non_numeric_id_is_not_a_door_frame() {
        let err = Seen::default().step(ev(Some("abc"), "text", "{}")).expect_err("not a frame id");
        assert!(err.contains("`abc`"), "{err}");
    }

    #[test]
    fn data_that_is_not_json_is_kept_as_a_string() {
        let Ok(Step::Print(shown)) = Seen::default().step(ev(None, "message", "plain")) else { panic!("printed") };
        assert_eq!(shown.data, Value::String("plain".into()));
    }

    #[test]
    fn backoff_starts_at_50_ms_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(50));
        assert_eq!(backoff(2), Duration::from_millis(100));
        assert_eq!(backoff(5), Duration::from_millis(800));
        assert_eq!(backoff(6), MAX_BACKOFF);
        assert_eq!(backoff(50), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn only_http_urls_are_doors() {
        assert!(door_url("http://127.0.0.1:8080").is_ok());
        let via_host = |raw: &str, s: &str| watch_url(raw, Some(s)).map(|u| u.to_string());
        assert_eq!(
            via_host("http://127.0.0.1:8700", "ses_01a-b").as_deref(),
            Ok("http://127.0.0.1:8700/sessions/ses_01a-b")
        );
        assert_eq!(via_host("http://127.0.0.1:8700/", "ses_1").as_deref(), Ok("http://127.0.0.1:8700/sessions/ses_1"));
        assert!(via_host("http://127.0.0.1:8700", "../capsules").is_err_and(|e| e.contains("not a session id")));
        assert!(via_host("http://127.0.0.1:8700", "").is_err());
        assert!(via_host("127.0.0.1:8700", "ses_1").is_err());
        assert!(door_url("https://127.0.0.1:8080").is_err());
        assert!(door_url("127.0.0.1:8080").is_err());
    }
}
