//! Tests of [`super`]: the same documents as `serde_json::Value` accepted and
//! refused (with the same message), leniency on types, duplicate keys, the
//! accessors' messages.

use super::*;
use serde_json::Value;

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Every document either both readers accept or both refuse with the same
/// message.
fn same_verdict(data: &str) {
    let typed = Input::parse(data).map(drop).map_err(|e| e.to_string());
    let value = serde_json::from_str::<Value>(data).map(drop).map_err(|e| e.to_string());
    assert_eq!(typed, value, "{data}");
}

#[test]
fn refuses_what_value_refuses_with_the_same_message() {
    let lone = "\"a\\ud800b\"";
    let places = [
        // (prefix, suffix) around a value, from the top level down.
        ("", ""),
        ("{\"model\":", "}"),
        ("{\"max_tokens\":", "}"),
        ("{\"params\":{\"x\":", "}}"),
        ("{\"produced\":", ",\"model\":\"m\"}"),
        ("{\"messages\":[{\"role\":", "}]}"),
        ("{\"messages\":[{\"role\":\"tool\",\"content\":", "}]}"),
        ("{\"messages\":[{\"content\":[{\"type\":\"text\",\"text\":", "}]}]}"),
        ("{\"messages\":[{\"content\":[{\"type\":\"tool_call\",\"input\":", "}]}]}"),
        ("{\"messages\":[{\"content\":[{\"future\":", "}]}]}"),
        ("{\"messages\":[{\"content\":[{\"type\":\"image\",\"source\":{\"data\":", "}}]}]}"),
        ("{\"messages\":[{\"content\":[[", "]]}]}"),
        ("{\"tools\":[{\"parameters\":", "}]}"),
        ("{\"tools\":[{\"parameters\":{\"properties\":", "}}]}"),
        ("{\"tools\":7,\"x\":[", "]}"),
    ];
    for (before, after) in places {
        for value in [
            lone.to_string(),
            "\"\\udc00\"".into(),
            "\"\\ud83d\\ude00 ok\"".into(),
            "\"\\u00e9\"".into(),
            "1e400".into(),
            "-1e400".into(),
            "1e-400".into(),
            format!("1{}", "0".repeat(400)),
            "123456789012345678901234567890".into(),
            "[1,2,]".into(),
            "{\"a\":\"\\x\"}".into(),
            "\"tab\there\"".into(),
            "tru".into(),
            "{\"k\\ud800\":1}".into(),
            format!("{{\"a\":{lone}}}"),
            "[{\"b\":[1e999]}]".into(),
        ] {
            same_verdict(&format!("{before}{value}{after}"));
        }
        for depth in [1, 100, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 200] {
            same_verdict(&format!("{before}{}{after}", nested(depth)));
            same_verdict(&format!("{before}{{\"a\":{}}}{after}", nested(depth)));
        }
    }
    for data in ["", " ", "{", "{}}", "{} {}", "[", "nul", "{\"a\" 1}", "{\"a\":1,}", "{1:2}", "\"\\u12\""] {
        same_verdict(data);
    }
}

#[test]
fn accepts_any_types_and_reads_them_as_value_would() {
    let data = r#"{"model": 5, "max_tokens": "3", "system": [], "params": "x", "messages": {"a": 1},
                   "tools": true, "prompt_cache_key": {"x": [null]}}"#;
    let input = Input::parse(data).unwrap();
    let req = input.request().unwrap();
    assert_eq!(req.model().unwrap_err(), "`model` must be a non-empty string");
    assert_eq!(req.max_tokens().unwrap_err(), "`max_tokens` must be a positive integer");
    assert_eq!(req.system().unwrap_err(), "`system` must be a string");
    assert_eq!(req.params().unwrap_err(), "`params` must be an object");
    assert_eq!(req.messages().unwrap_err(), "`messages` must be an array");
    assert_eq!(req.tools().unwrap_err(), "`tools` must be an array");
    for data in ["[]", "null", "3", "\"s\""] {
        assert_eq!(Input::parse(data).unwrap().request().unwrap_err(), "the request must be a JSON object");
    }
}

#[test]
fn max_tokens_is_value_as_u64() {
    for (json, n) in [
        ("1", Some(1)),
        ("100", Some(100)),
        ("0", None),
        ("-0", None),
        ("-1", None),
        ("1.0", None),
        ("1e2", None),
        ("18446744073709551615", Some(u64::MAX)),
        ("18446744073709551616", None),
        ("\"5\"", None),
        ("null", None),
        ("true", None),
    ] {
        let data = format!("{{\"max_tokens\":{json}}}");
        let input = Input::parse(&data).unwrap();
        assert_eq!(input.request().unwrap().max_tokens().ok(), n, "{json}");
    }
}

#[test]
fn the_last_of_duplicate_keys_wins() {
    let data = r#"{"model":"a","model":"b","params":{"t":1,"u":2,"t":3},"params":{"t":4,"v":5,"t":6},
                   "messages":[{"role":"x","role":"user","content":"a","content":[{"type":"text","type":"image"}]}]}"#;
    let input = Input::parse(data).unwrap();
    let req = input.request().unwrap();
    assert_eq!(req.model().unwrap().json(), "\"b\"");
    let params: Vec<_> = req.params().unwrap().iter().map(|(k, v)| (k.to_string(), v.json().to_string())).collect();
    assert_eq!(params, [("t".to_string(), "6".to_string()), ("v".to_string(), "5".to_string())]);
    let msg = &read(req)[0].fields;
    assert_eq!(msg.role(0).unwrap(), "user");
    assert_eq!(msg.blocks(0).unwrap()[0].fields.kind(), Kind::Image);
}

#[test]
fn messages_blocks_and_tools() {
    let data = r#"{"messages":[
        7,
        {"role":"us\u0065r","content":"h\u00e9\n\"q\""},
        {"role":"tool","content":null,"tool_call_id":"","is_error":"yes"},
        {"role":"tool","content":{},"tool_call_id":"c","is_error":true},
        {"role":"assistant","content":[5,{"type":"tool_call","id":1,"input":null},{"type":"image"},
            {"type":"image","source":null},{"type":"image","source":{"media_type":"m","data":2}},
            {"type":"thinking","text":"t","signature":""},{"type":"thinking","signature":"s"},
            {"type":"t\u0065xt","text":"x"},{"type":7}]}],
        "tools":[{"name":"n","description":"","parameters":{"type":"string","properties":{}}},
                 {"parameters":[]},{"name":"m","description":"d","parameters":null},3]}"#;
    let input = Input::parse(data).unwrap();
    let req = input.request().unwrap();
    let m = read(req);
    assert_eq!(m[0].shape, Shape::Other);
    assert_eq!(m[0].fields.role(0).unwrap_err(), "messages[0].role must be a string");
    assert_eq!(m[1].fields.role(1).unwrap(), "user");
    let text = &m[1].fields.blocks(1).unwrap()[0].fields;
    assert_eq!(text.kind(), Kind::Text);
    assert_eq!(text.text(At::Block(1, 0)).unwrap().decoded().unwrap(), "h\u{e9}\n\"q\"");
    assert!(m[2].fields.blocks(2).unwrap().is_empty());
    assert_eq!(
        m[2].fields.tool_call_id(2).unwrap_err(),
        "messages[2]: a tool message needs a non-empty `tool_call_id`"
    );
    assert!(!m[2].fields.is_error());
    assert_eq!(m[3].fields.blocks(3).unwrap_err(), "messages[3].content must be an array of blocks");
    assert!(m[3].fields.is_error());
    let b = m[4].fields.blocks(4).unwrap();
    let at = |j| At::Block(4, j);
    assert_eq!(b[0].fields.kind(), Kind::Other);
    assert_eq!(b[1].fields.id(at(1)).unwrap_err(), "messages[4].content[1].id must be a string");
    assert!(b[1].fields.input().is_none());
    assert_eq!(b[2].fields.source(at(2)).unwrap_err(), "messages[4].content[2].source is missing");
    assert_eq!(b[3].fields.source(at(3)).unwrap_err(), "messages[4].content[3].source.media_type must be a string");
    assert_eq!(b[4].fields.source(at(4)).unwrap_err(), "messages[4].content[4].source.data must be a string");
    assert!(b[5].fields.signature().is_none());
    assert_eq!(b[6].fields.text(at(6)).unwrap_err(), "messages[4].content[6].text must be a string");
    assert_eq!(b[7].fields.kind(), Kind::Text);
    assert_eq!(b[8].fields.kind(), Kind::Other);
    let t = req.tools().unwrap();
    let schema = t[0].fields.parameters(0).unwrap();
    assert_eq!(schema.kind.unwrap().json(), "\"string\"");
    assert!(schema.has_properties);
    assert!(t[0].fields.description().is_none());
    assert_eq!(t[1].fields.name(1).unwrap_err(), "tools[1].name must be a string");
    assert_eq!(t[1].fields.parameters(1).unwrap_err(), "tools[1].parameters must be a JSON Schema object");
    let schema = t[2].fields.parameters(2).unwrap();
    assert_eq!((schema.json, schema.kind.is_none(), schema.has_properties), ("{}", true, false));
    assert_eq!(t[2].fields.description().unwrap().json(), "\"d\"");
    assert_eq!(t[3].fields.name(3).unwrap_err(), "tools[3].name must be a string");
}

#[test]
fn raw_values_are_borrowed_verbatim() {
    let data = "{\"system\": \"a\\u00e9\\n\" , \"params\": {\"k\\\"\": { \"x\" : [1, 2.50] }}}";
    let input = Input::parse(data).unwrap();
    let req = input.request().unwrap();
    let system = req.system().unwrap().unwrap();
    assert_eq!(system.json(), "\"a\\u00e9\\n\"");
    assert_eq!(system.escaped(), Some("a\\u00e9\\n"));
    assert_eq!(system.decoded().unwrap(), "a\u{e9}\n");
    let (k, v) = &req.params().unwrap()[0];
    assert_eq!((&**k, v.json()), ("k\"", "{ \"x\" : [1, 2.50] }"));
}

/// The message list read the general way (no transcoder was given).
fn read<'r, 'a>(req: &'r Request<'a>) -> &'r [Obj<Message<'a>>] {
    match req.messages() {
        Ok(Messages::Read(list)) => list,
        other => panic!("expected a list read, got {other:?}"),
    }
}
