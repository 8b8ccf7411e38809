//! The fast list reader against the general one: same list and same end whenever the fast
//! one answers, and no answer where the general one refuses.

use super::super::{List, Message, Obj, Read};
use super::messages;
use crate::scan::Scan;

const REQUESTS: &str = include_str!("../testdata/neutral_requests.jsonl");

/// Both readers on `text` (a message list) inside `depth` containers; panics when the fast
/// one answers differently. Whether the fast one answered.
fn agree(text: &str, depth: u32) -> bool {
    let mut general_scan = Scan::resume(text, 0, depth);
    let general = List::<Obj<Message>>::read(&mut general_scan);
    let mut fast_scan = Scan::resume(text, 0, depth);
    let Some(fast) = messages(&mut fast_scan) else {
        assert_eq!(fast_scan.position(), 0, "a refusal leaves the scan where it was: {text}");
        return false;
    };
    match general {
        Ok(List::Items(items)) => {
            assert_eq!(format!("{fast:?}"), format!("{items:?}"), "{text}");
            assert_eq!(fast_scan.position(), general_scan.position(), "{text}");
        }
        other => panic!("the fast reader read a list the general one reads as {other:?}: {text}"),
    }
    true
}

/// A history with every kind of value the runtime writes and a few it does not.
fn history() -> String {
    let mut m = vec![
        r#"{"role":"user","content":[{"type":"text","text":"go \"now\"\n\ttab \\ é 😀 </x>"}]}"#.to_string(),
        r#"{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}"#.into(),
        r#"{"role":"assistant","content":[{"type":"thinking","text":"hm","signature":"sig"},{"type":"redacted_thinking","data":"xx"}],"produced_by":{"driver":"anthropic","model":"m"}}"#.into(),
        r#"{"role":"user","content":"a bare string"}"#.into(),
        r#"{"role":"user","content":null}"#.into(),
        r#"{"role":"user","content":[]}"#.into(),
        r#"{}"#.into(),
        r#"{"role":"assistant","content":[{"type":"text","text":"ctl \u0001 escaped"}]}"#.into(),
        r#"{"role":"tool","content":[{"type":"text","text":"x"}],"tool_call_id":"c1","is_error":true,"is_error":false,"role":"tool"}"#.into(),
        r#"{"role":7,"content":[{"type":null,"text":12.5e3,"extra":[1,{"a":[]}]},{}]}"#.into(),
    ];
    for i in 0..4 {
        m.push(format!(
            r#"{{"role":"assistant","content":[{{"type":"text","text":"step {i}"}},{{"type":"tool_call","id":"c{i}","name":"files","input":{{"op":"list","path":".","n":[{i},-1.5,true,null]}}}}]}}"#
        ));
        m.push(format!(r#"{{"role":"tool","content":[{{"type":"text","text":"[\"a{i}.txt\"]"}}],"tool_call_id":"c{i}","is_error":false}}"#));
    }
    format!("[{}]", m.join(","))
}

#[test]
fn the_corpus_reads_the_same_either_way() {
    let mut answered = 0;
    for line in REQUESTS.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("//")) {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let Some(list) = value.get("messages") else { continue };
        // As the runtime writes it, and as the corpus spells it.
        answered += usize::from(agree(&list.to_string(), 1));
        if let Some(at) = line.find("\"messages\"") {
            let rest = &line[at + "\"messages\"".len()..];
            let rest = rest.trim_start().trim_start_matches(':').trim_start();
            agree(rest, 1);
        }
    }
    assert!(answered > 20, "the fast reader answered only {answered} corpus lists");
}

/// [`history`] without what the fast reader leaves to the general one (an image's source,
/// bare-string and `null` content, a `\u` escape).
fn plain_history() -> String {
    let text = history();
    let plain: Vec<&str> = text[1..text.len() - 1]
        .split(",{\"role\"")
        .filter(|m| !m.contains("source") && !m.contains("bare") && !m.contains("null}") && !m.contains("\\u"))
        .collect();
    format!("[{}]", plain.join(",{\"role\""))
}

#[test]
fn a_generated_history_reads_the_same_and_the_fast_reader_answers_it() {
    assert!(!agree(&history(), 1));
    assert!(agree(&plain_history(), 1), "{}", plain_history());
    assert!(agree("[]", 1));
    assert!(!agree("[ ]", 1), "whitespace is the general reader's");
}

#[test]
fn every_cut_and_one_byte_change_reads_the_same_or_falls_back() {
    for text in [plain_history(), history()] {
        let mut answered = 0;
        for end in 0..=text.len() {
            if text.is_char_boundary(end) {
                answered += usize::from(agree(&text[..end], 1));
            }
        }
        let bytes = text.as_bytes();
        let mut tried = 0;
        for at in 0..bytes.len() {
            if !bytes[at].is_ascii() {
                continue;
            }
            for with in [b'"', b'\\', b',', b'}', b']', b'{', b'[', b':', b' ', 0x01, b'x', b'0', b'-', b'n'] {
                let mut changed = bytes.to_vec();
                changed[at] = with;
                if let Ok(changed) = String::from_utf8(changed) {
                    tried += 1;
                    answered += usize::from(agree(&changed, 1));
                }
            }
        }
        // Most changes inside a text keep the list valid and compact: the fast reader must
        // have answered for many of them, or this test checks nothing.
        if text == plain_history() {
            assert!(answered > tried / 10, "the fast reader answered {answered} of {tried}");
        }
    }
}

#[test]
fn nesting_limits_are_the_general_readers() {
    let nested = |levels: usize| {
        format!(
            r#"[{{"role":"assistant","content":[{{"type":"tool_call","id":"c","name":"n","input":{}{}}}]}}]"#,
            "[".repeat(levels),
            "]".repeat(levels)
        )
    };
    // A block's values sit inside five containers: 122 more is the deepest serde_json takes.
    for levels in [1, 121, 122, 123, 130] {
        agree(&nested(levels), 1);
    }
    assert!(agree(&nested(122), 1));
    for depth in [120, 122, 123, 124, 126] {
        agree(&nested(1), depth);
    }
}
