//! Test support for the drivers (feature `testing`, on only in their tests): the shared neutral
//! requests of `testdata/neutral_requests.jsonl` and the differential checks of a driver's
//! translation against a reference one (the old `Value`-based translation each driver keeps in
//! its tests).
//!
//! Guarantees: each check panics naming the request that differs, and fails when it compared
//! fewer requests than it should (so an emptied data file cannot make it pass).
//!
//! Deliberately not done: any provider rule; `normalize` is where a driver says which
//! differences do not matter to its provider.

use serde_json::{Value, json};

use crate::neutral::{Input, Messages, Transcode};

const REQUESTS: &str = include_str!("../testdata/neutral_requests.jsonl");

/// A translation of a request given as text: its body parsed back, or its error.
pub type Translation<'a> = &'a dyn Fn(&str) -> Result<Value, String>;

/// The shared requests (blank lines and `//` comments left out).
pub fn requests() -> impl Iterator<Item = &'static str> {
    REQUESTS.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("//"))
}

/// `translate` applied to `data` read as an [`Input`], its body parsed back.
pub fn parsed(data: &str, translate: fn(&Input) -> Result<Vec<u8>, String>) -> Result<Value, String> {
    let input = Input::parse(data).map_err(|e| format!("not JSON: {e}"))?;
    let body = translate(&input)?;
    Ok(serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&body))))
}

/// Every shared request the reference translates gives the same body (after `normalize`).
pub fn bodies_match(
    new: Translation,
    reference: Translation,
    normalize: fn(Result<Value, String>) -> Result<Value, String>,
) {
    let mut compared = 0;
    for data in requests() {
        if let Ok(expected) = reference(data) {
            assert_eq!(normalize(new(data)), normalize(Ok(expected)), "{data}");
            compared += 1;
        }
    }
    assert!(compared >= 25, "only {compared} requests compared");
}

/// Every shared request the reference refuses is refused with the same message.
pub fn errors_match(new: Translation, reference: Translation) {
    let mut compared = 0;
    for data in requests() {
        if let Err(expected) = reference(data) {
            assert_eq!(new(data), Err(expected), "{data}");
            compared += 1;
        }
    }
    assert!(compared >= 60, "only {compared} requests compared");
}

/// A repeatable pseudo-random index below `n` per call (xorshift), from `seed`.
fn pseudo_random(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    }
}

/// 300 requests made of the shared requests' messages, tools and params in pseudo-random order
/// and number (written by serde_json, as the runtime writes them): the same answer from both.
pub fn shuffled_match(new: Translation, reference: Translation) {
    let (mut messages, mut tools, mut params) = (Vec::new(), Vec::new(), vec![Value::Null]);
    for data in requests() {
        let Ok(Value::Object(req)) = serde_json::from_str::<Value>(data) else { continue };
        if reference(data).is_err() {
            continue;
        }
        messages.extend(req.get("messages").and_then(Value::as_array).into_iter().flatten().cloned());
        tools.extend(req.get("tools").and_then(Value::as_array).into_iter().flatten().cloned());
        params.extend(req.get("params").cloned());
    }
    assert!(!messages.is_empty() && !tools.is_empty(), "the shared requests hold messages and tools");
    let mut next = pseudo_random(0x2545_f491_4f6c_dd1d);
    for _ in 0..300 {
        let msgs: Vec<Value> = (0..next(12)).map(|_| messages[next(messages.len())].clone()).collect();
        let tls: Vec<Value> = (0..next(4)).map(|_| tools[next(tools.len())].clone()).collect();
        let system = ["", "s"][next(2)];
        let req = json!({"model": "m", "max_tokens": 5, "system": system, "messages": msgs,
                         "tools": tls, "params": params[next(params.len())]});
        let data = req.to_string();
        assert_eq!(new(&data), reference(&data), "{data}");
    }
}

/// A driver's translation of `data` read with and without its transcoder
/// ([`Input::parse_with`]): the same body, byte for byte, or the same error. Whether the
/// transcoder answered.
pub fn transcoded_agrees(data: &str, translate: Translate, transcode: Transcode) -> bool {
    let general = Input::parse(data).map_err(|e| e.to_string()).and_then(|input| translate(&input));
    let fast = Input::parse_with(data, transcode).map_err(|e| e.to_string());
    let answered = fast
        .as_ref()
        .is_ok_and(|input| input.request().is_ok_and(|req| matches!(req.messages(), Ok(Messages::Written(_)))));
    let fast = fast.and_then(|input| translate(&input));
    assert_eq!(fast.as_deref().map(String::from_utf8_lossy), general.as_deref().map(String::from_utf8_lossy), "{data}");
    answered
}

/// A translation of a request read as an [`Input`].
pub type Translate = fn(&Input) -> Result<Vec<u8>, String>;

/// `list` (a message list) as the runtime writes it: compact, each message's `role` first.
pub fn runtime_form(list: &Value) -> String {
    let Some(messages) = list.as_array() else { return list.to_string() };
    let written: Vec<String> = messages
        .iter()
        .map(|m| match m.as_object() {
            Some(fields) if fields.contains_key("role") => {
                let rest = fields.iter().filter(|(k, _)| *k != "role");
                let rest: Vec<String> = rest.map(|(k, v)| format!("{}:{v}", Value::from(k.as_str()))).collect();
                let role = format!("\"role\":{}", fields["role"]);
                format!("{{{}}}", std::iter::once(role).chain(rest).collect::<Vec<_>>().join(","))
            }
            _ => m.to_string(),
        })
        .collect();
    format!("[{}]", written.join(","))
}

/// A history as the runtime writes it, with every kind of block and message a transcoder
/// writes or leaves out: texts with escapes and non-ASCII, an empty text, tool calls with an
/// object, `null` or no input, tool results in runs, signed and unsigned thinking, redacted
/// thinking, unknown block types and keys, a message left empty, blocks a role cannot carry.
pub fn runtime_history() -> String {
    let mut m = vec![
        r#"{"role":"user","content":[{"type":"text","text":"go \"now\"\n\ttab \\ é 😀 </x>"},{"type":"tool_call","id":"u","name":"n","input":{}}]}"#.to_string(),
        r#"{"role":"assistant","content":[{"type":"thinking","text":"hm","signature":"sig"},{"type":"thinking","text":"no sig"},{"type":"redacted_thinking","data":"xx"},{"type":"text","text":""}],"produced_by":{"driver":"anthropic","model":"m"}}"#.into(),
        r#"{"role":"assistant","content":[{"type":"text","text":""},{"type":"weird","x":[1,2]}]}"#.into(),
        r#"{"role":"user","content":[]}"#.into(),
        r#"{"role":"assistant","content":[{"text":"typeless"},{"type":3},{"type":"tool_call","id":"c","name":"n"},{"type":"tool_call","id":"d","name":"n","input":null}]}"#.into(),
        r#"{"role":"tool","content":[{"type":"text","text":"x"},{"type":"thinking","text":"t","signature":"s"}],"tool_call_id":"c","is_error":true}"#.into(),
        r#"{"role":"tool","content":[],"tool_call_id":"d","is_error":"yes"}"#.into(),
        r#"{"role":"tool","tool_call_id":"e"}"#.into(),
        r#"{"role":"user","content":[{"type":"text","text":"after"}],"_n":7,"tool_call_id":"ignored"}"#.into(),
        r#"{"role":"assistant","content":[{"type":"text","text":"a","extra":1},{"type":"tool_call","id":"f","name":"n","input":{},"extra":true}]}"#.into(),
        r#"{"role":"tool","content":[{"type":"text","text":"failed"}],"tool_call_id":"f","is_error":true}"#.into(),
        r#"{"role":"tool","content":[{"type":"text","text":""}],"tool_call_id":"g","is_error":false}"#.into(),
        r#"{"role":"tool","content":[{"type":"text","text":"late"}],"tool_call_id":"h","is_error":false,"_n":9}"#.into(),
    ];
    for i in 0..4 {
        m.push(format!(
            r#"{{"role":"assistant","content":[{{"type":"text","text":"step {i}"}},{{"type":"tool_call","id":"c{i}","name":"files","input":{{"op":"list","path":".","n":[{i},-1.5,true,null]}}}}]}}"#
        ));
        m.push(format!(
            r#"{{"role":"tool","content":[{{"type":"text","text":"[\"a{i}.txt\"]"}}],"tool_call_id":"c{i}","is_error":false}}"#
        ));
    }
    format!("[{}]", m.join(","))
}

/// The shared requests' message lists in the runtime's form, and 300 lists shuffled from their
/// messages, each in a request: both readings agree, and the transcoder answered for most.
pub fn transcoded_corpus_matches(translate: Translate, transcode: Transcode) {
    let mut messages = Vec::new();
    let (mut tried, mut answered) = (0, 0);
    let mut check = |list: &str| {
        let data = format!(r#"{{"model":"m","max_tokens":5,"messages":{list},"tools":[]}}"#);
        tried += 1;
        answered += usize::from(transcoded_agrees(&data, translate, transcode));
    };
    for data in requests() {
        let Ok(Value::Object(req)) = serde_json::from_str::<Value>(data) else { continue };
        if let Some(list) = req.get("messages") {
            check(&runtime_form(list));
            messages.extend(list.as_array().into_iter().flatten().cloned());
        }
    }
    let mut next = pseudo_random(0x9e37_79b9_7f4a_7c15);
    for _ in 0..300 {
        let list: Vec<Value> = (0..next(8)).map(|_| messages[next(messages.len())].clone()).collect();
        check(&runtime_form(&Value::Array(list)));
    }
    assert!(tried > 350 && answered > tried / 4, "the transcoder answered {answered} of {tried}");
}

/// [`runtime_history`] in a request, cut at every byte and with every ASCII byte changed to
/// each of a set of JSON-significant ones: both readings agree every time.
pub fn transcoded_changes_match(translate: Translate, transcode: Transcode) {
    let list = runtime_history();
    let data = format!(r#"{{"model":"m","max_tokens":5,"messages":{list},"system":"s"}}"#);
    assert!(transcoded_agrees(&data, translate, transcode), "the transcoder answers the runtime's history");
    for end in (0..=data.len()).filter(|&end| data.is_char_boundary(end)) {
        transcoded_agrees(&data[..end], translate, transcode);
    }
    let bytes = data.as_bytes();
    let (mut tried, mut answered) = (0, 0);
    for at in (0..bytes.len()).filter(|&at| bytes[at].is_ascii()) {
        for with in [b'"', b'\\', b',', b'}', b']', b'{', b'[', b':', b' ', 0x01, b'x', b'0', b'-', b'n', b't'] {
            let mut changed = bytes.to_vec();
            changed[at] = with;
            if let Ok(changed) = String::from_utf8(changed) {
                tried += 1;
                answered += usize::from(transcoded_agrees(&changed, translate, transcode));
            }
        }
    }
    // Most changes inside a text keep the list valid and compact: the transcoder must have
    // answered for many of them, or this checks nothing.
    assert!(answered > tried / 10, "the transcoder answered {answered} of {tried}");
}

/// Tool inputs nested up to and past serde_json's limit: both readings agree, and the
/// transcoder answers up to the limit.
pub fn transcoded_nesting_matches(translate: Translate, transcode: Transcode) {
    let request = |levels: usize| {
        format!(
            r#"{{"model":"m","max_tokens":5,"messages":[{{"role":"assistant","content":[{{"type":"tool_call","id":"c","name":"n","input":{}{}}}]}}]}}"#,
            "[".repeat(levels),
            "]".repeat(levels)
        )
    };
    // A block's values sit inside five containers: 122 more is the deepest serde_json takes.
    for levels in [1, 121, 122, 123, 130] {
        transcoded_agrees(&request(levels), translate, transcode);
    }
    assert!(transcoded_agrees(&request(122), translate, transcode));
    assert!(!transcoded_agrees(&request(123), translate, transcode));
}

/// The transcoder on a list of one text block inside `depth` containers: a block sits four
/// levels below the list's start, so it must answer up to 123 and give up from 124.
pub fn transcoder_keeps_the_depth_limit(transcode: Transcode) {
    let list = r#"[{"role":"user","content":[{"type":"text","text":"t"}]}]"#;
    for (depth, answers) in [(1, true), (122, true), (123, true), (124, false), (127, false)] {
        let mut out = Vec::new();
        let answered = transcode(&mut crate::cursor::Cursor::new(list, 0, depth), &mut out).is_some();
        assert_eq!(answered, answers, "at depth {depth}");
    }
}

/// The lists a transcoder must leave to the general reading (the runtime never writes them):
/// both readings agree on each, and the transcoder did not answer.
pub fn transcoder_leaves_the_rest(translate: Translate, transcode: Transcode) {
    let list = runtime_history();
    let data = format!(r#"{{"model":"m","max_tokens":5,"messages":{list}}}"#);
    assert!(transcoded_agrees(&data, translate, transcode), "the transcoder answers the runtime's history");
    for list in [
        r#"[{"content":[],"role":"user"}]"#,
        r#"[{"role":"user","content":[{"type":"image","source":{"media_type":"image/png","data":"AA"}}]}]"#,
        r#"[{"role":"user","content":"bare"}]"#,
        r#"[{"role":"system","content":[]}]"#,
        r#"[{"role":"user","content":[],"role":"assistant"}]"#,
        r#"[{"role":"user","content":[{"type":"text","text":"a"}],"content":[]}]"#,
        r#"[{"role":"tool","content":[{"type":"text","text":"a"}],"tool_call_id":"c","content":[]}]"#,
        r#"[{"role":"assistant","content":[{"type":"tool_call","id":"c","name":"n","input":"{\"a\":1}"}]}]"#,
        r#"[{"role":"assistant","content":[{"type":"te\/xt","text":"t"}]}]"#,
        r#"[{"role":"tool","content":[]}]"#,
        r#"[ ]"#,
    ] {
        let data = format!(r#"{{"model":"m","max_tokens":5,"messages":{list}}}"#);
        assert!(!transcoded_agrees(&data, translate, transcode), "{list}");
    }
}

/// The tests of a driver's transcoder against its general translation, one `#[test]` each:
/// `transcoder_tests!(translate, transcode)` in the driver's test module.
#[macro_export]
macro_rules! transcoder_tests {
    ($translate:path, $transcode:path) => {
        #[test]
        fn the_corpus_and_shuffled_lists_translate_the_same_either_way() {
            $crate::differential::transcoded_corpus_matches($translate, $transcode);
        }

        #[test]
        fn every_cut_and_one_byte_change_translates_the_same_either_way() {
            $crate::differential::transcoded_changes_match($translate, $transcode);
        }

        #[test]
        fn nesting_limits_are_the_general_readers() {
            $crate::differential::transcoded_nesting_matches($translate, $transcode);
        }

        #[test]
        fn the_depth_limit_is_the_general_readers() {
            $crate::differential::transcoder_keeps_the_depth_limit($transcode);
        }

        #[test]
        fn a_runtime_history_is_written_in_one_pass_and_the_rest_left_to_the_general_reading() {
            $crate::differential::transcoder_leaves_the_rest($translate, $transcode);
        }
    };
}
