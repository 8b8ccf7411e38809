//! A2A request params, read leniently (unknown fields are ignored, as A2A asks) and checked
//! into what the session needs, with the A2A error code for what is wrong.

use serde::Deserialize;
use serde_json::Value;

use super::shape::Dialect;
use crate::door::rpc::code;

/// A refusal: the JSON-RPC code and the sentence.
pub type Refusal = (i64, String);

/// A part of a sent message (only text is taken).
#[derive(Debug, Deserialize)]
pub struct Part {
    /// The text, for a text part.
    pub text: Option<String>,
}

/// A sent message.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// The sender's role; must be the user's when given.
    pub role: Option<String>,
    /// The parts.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// The context to continue.
    pub context_id: Option<String>,
    /// The task this message answers (only a task waiting for input takes one).
    pub task_id: Option<String>,
}

/// `configuration` of a send.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    /// v1.0: answer as soon as the task is accepted.
    #[serde(default)]
    pub return_immediately: bool,
    /// v0.3: `false` answers as soon as the task is accepted.
    pub blocking: Option<bool>,
}

/// `SendMessage` / `message/send` (and the streaming forms) params.
#[derive(Debug, Deserialize)]
pub struct Send {
    /// The message.
    pub message: Message,
    /// How to answer.
    #[serde(default)]
    pub configuration: Option<Configuration>,
    /// The request's W3C `traceparent` header (not part of the body).
    #[serde(skip)]
    pub traceparent: Option<String>,
}

impl Send {
    /// With the request's `traceparent`.
    pub fn traced(mut self, req: &crate::door::rpc::Request) -> Self {
        self.traceparent = req.traceparent.clone();
        self
    }

    /// The task text: the text parts joined by newlines.
    pub fn text(&self, d: Dialect) -> Result<String, Refusal> {
        if let Some(role) = &self.message.role
            && role != d.user_role()
        {
            return Err((
                code::INVALID_PARAMS,
                format!("message.role is `{role}`; only `{}` messages become tasks", d.user_role()),
            ));
        }
        if self.message.parts.is_empty() {
            return Err((code::INVALID_PARAMS, "message.parts is empty; send at least one text part".into()));
        }
        let text: Vec<&str> = self.message.parts.iter().filter_map(|p| p.text.as_deref()).collect();
        if text.is_empty() {
            return Err((
                code::CONTENT_TYPE_NOT_SUPPORTED,
                "message.parts has no text part; this agent takes text parts only".into(),
            ));
        }
        Ok(text.join("\n"))
    }

    /// Whether the client asked for an answer before the task ends.
    pub fn return_immediately(&self) -> bool {
        self.configuration.as_ref().is_some_and(|c| c.return_immediately || c.blocking == Some(false))
    }
}

/// `GetTask`, `CancelTask`, `SubscribeToTask` and their v0.3 forms.
#[derive(Debug, Deserialize)]
pub struct TaskId {
    /// The task id.
    pub id: String,
}

/// `ListTasks` params.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct List {
    /// Only this context's tasks.
    pub context_id: Option<String>,
    /// Only tasks in this state.
    pub status: Option<String>,
    /// At most this many (1..=100; 50 when absent).
    pub page_size: Option<i64>,
    /// Where the previous page ended.
    pub page_token: Option<String>,
}

/// The largest `pageSize` a `ListTasks` may ask for.
pub const MAX_PAGE: usize = 100;
/// The page size when none is asked for.
pub const DEFAULT_PAGE: usize = 50;

impl List {
    /// The checked page size and start offset.
    pub fn page(&self) -> Result<(usize, usize), Refusal> {
        let size = match self.page_size {
            None => DEFAULT_PAGE,
            Some(n) if (1..=MAX_PAGE as i64).contains(&n) => n as usize,
            Some(n) => return Err((code::INVALID_PARAMS, format!("pageSize {n} is outside 1..={MAX_PAGE}"))),
        };
        let start = match self.page_token.as_deref() {
            None | Some("") => 0,
            Some(t) => t.parse::<usize>().map_err(|_| {
                (code::INVALID_PARAMS, format!("pageToken `{t}` is not one this agent gave; start without it"))
            })?,
        };
        Ok((size, start))
    }
}

/// Params of type `T`, or the invalid-params refusal naming the method.
pub fn parse<T: serde::de::DeserializeOwned>(method: &str, params: &Value) -> Result<T, Refusal> {
    serde_json::from_value(params.clone())
        .map_err(|e| (code::INVALID_PARAMS, format!("invalid params for {method}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_message_without_text_or_with_the_wrong_role_is_refused_with_its_a2a_code() {
        let send = |m: Value| parse::<Send>("SendMessage", &json!({"message": m})).expect("parses");
        let only_data = send(json!({"role": "ROLE_USER", "parts": [{"data": {"a": 1}}]}));
        assert_eq!(only_data.text(Dialect::V1).map_err(|e| e.0), Err(code::CONTENT_TYPE_NOT_SUPPORTED));
        let agent = send(json!({"role": "ROLE_AGENT", "parts": [{"text": "x"}]}));
        assert_eq!(agent.text(Dialect::V1).map_err(|e| e.0), Err(code::INVALID_PARAMS));
        let v03 =
            send(json!({"role": "user", "parts": [{"kind": "text", "text": "a"}, {"kind": "text", "text": "b"}]}));
        assert_eq!(v03.text(Dialect::V03), Ok("a\nb".to_string()));
        assert!(parse::<Send>("SendMessage", &json!({"message": "hi"})).is_err());
    }

    #[test]
    fn page_sizes_and_tokens_outside_what_the_agent_gives_are_refused() {
        let list = |v: Value| parse::<List>("ListTasks", &v).expect("parses");
        assert_eq!(list(json!({})).page(), Ok((DEFAULT_PAGE, 0)));
        assert_eq!(list(json!({"pageSize": 3, "pageToken": "6"})).page(), Ok((3, 6)));
        for bad in [json!({"pageSize": 0}), json!({"pageSize": 101}), json!({"pageToken": "abc"})] {
            assert_eq!(list(bad.clone()).page().map_err(|e| e.0), Err(code::INVALID_PARAMS), "{bad}");
        }
    }
}
