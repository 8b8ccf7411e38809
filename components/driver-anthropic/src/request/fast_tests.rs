//! The one-pass writer against the general reading: the same body, byte for byte, or the same
//! error, and the writer answering for the lists the runtime writes.

use super::super::translate;
use super::messages;
use guest_http::differential;

#[test]
fn the_corpus_and_shuffled_lists_translate_the_same_either_way() {
    differential::transcoded_corpus_matches(translate, messages);
}

#[test]
fn every_cut_and_one_byte_change_translates_the_same_either_way() {
    differential::transcoded_changes_match(translate, messages);
}

#[test]
fn nesting_limits_are_the_general_readers() {
    differential::transcoded_nesting_matches(translate, messages);
}

#[test]
fn the_depth_limit_is_the_general_readers() {
    differential::transcoder_keeps_the_depth_limit(messages);
}

#[test]
fn a_runtime_history_is_written_in_one_pass() {
    let list = differential::runtime_history();
    let data = format!(r#"{{"model":"m","max_tokens":5,"messages":{list}}}"#);
    assert!(differential::transcoded_agrees(&data, translate, messages));
    // What the runtime never writes is left to the general reading.
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
        assert!(!differential::transcoded_agrees(&data, translate, messages), "{list}");
    }
}
