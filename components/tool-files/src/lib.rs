//! `tool-files`: read, write and list files inside the tool's scope.
//!
//! Input (`tool-input.data`): `{"op": "read"|"write"|"append"|"list", "path":
//! "...", "content": "..."}` (`content` only for `write` and `append`, which
//! adds it at the end of the file, creating it; `path` may be omitted or
//! `"."` for `list`). Paths are relative to the one folder the host preopens
//! for tools (guest path `.`).
//!
//! Output: `passed` with `data` = the file's text (read), a JSON array of
//! sorted entry names with `/` after directories (list), or nothing (write,
//! summary `wrote N bytes to PATH`); `failed` with a summary naming the path
//! and the OS error otherwise. Metadata `state_effect` (`read`|`mutate`) and
//! `resource_id` (the path) are set on every call that names a valid op.
//!
//! Deliberately not done: this module refuses absolute paths and `..`
//! components itself, but the sandbox is the host's preopen, not this check;
//! symlinks are not inspected. No binary reads (text only), no deletes.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use serde_json::Value;
use std::path::{Component as PathPart, Path};

struct Component;

impl Guest for Component {
    fn run(input: ToolInput) -> ToolResult {
        let request = match parse(input.data.as_deref()) {
            Ok(r) => r,
            Err(message) => return failed(message, Vec::new()),
        };
        let path = if request.path.is_empty() { "." } else { request.path.as_str() };
        let effect = if matches!(request.op, Op::Write | Op::Append) { "mutate" } else { "read" };
        let metadata =
            vec![("state_effect".to_string(), effect.to_string()), ("resource_id".to_string(), path.to_string())];
        if let Err(message) = check_path(path) {
            return failed(message, metadata);
        }
        let outcome = match request.op {
            Op::Read => read(path),
            Op::List => list(path),
            Op::Write => write(path, request.content.as_deref()),
            Op::Append => append(path, request.content.as_deref()),
        };
        match outcome {
            Ok((summary, data)) => ToolResult {
                status: Status::Passed,
                summary: Some(summary),
                data,
                data_path: None,
                truncated: false,
                metadata,
            },
            Err(message) => failed(message, metadata),
        }
    }
}

export!(Component);

#[derive(Debug, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    Append,
    List,
}

#[derive(Debug)]
struct Request {
    op: Op,
    path: String,
    content: Option<String>,
}

fn parse(data: Option<&str>) -> Result<Request, String> {
    let data = data
        .filter(|d| !d.trim().is_empty())
        .ok_or(r#"no input: expected {"op": "read"|"write"|"append"|"list", "path": "...", "content"?: "..."}"#)?;
    let value: Value = serde_json::from_str(data).map_err(|e| format!("input is not valid JSON: {e}"))?;
    let op = match value.get("op").and_then(Value::as_str) {
        Some("read") => Op::Read,
        Some("write") => Op::Write,
        Some("append") => Op::Append,
        Some("list") => Op::List,
        Some(other) => return Err(format!("unknown op `{other}` (read, write, append or list)")),
        None => return Err("`op` must be a string: read, write, append or list".into()),
    };
    let path = match value.get("path") {
        Some(Value::String(p)) => p.clone(),
        None | Some(Value::Null) if op == Op::List => String::new(),
        _ => return Err("`path` must be a string".into()),
    };
    if path.is_empty() && op != Op::List {
        return Err("`path` must not be empty".into());
    }
    let content = match value.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.clone()),
        Some(_) => return Err("`content` must be a string".into()),
    };
    Ok(Request { op, path, content })
}

/// Refuse what could name something outside the scope.
fn check_path(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    if p.is_absolute() || path.starts_with('/') || path.starts_with('\\') {
        return Err(format!("refused `{path}`: absolute paths are not allowed; use a path relative to the scope"));
    }
    if p.components().any(|c| c == PathPart::ParentDir) {
        return Err(format!("refused `{path}`: `..` is not allowed; paths must stay inside the scope"));
    }
    Ok(())
}

type Outcome = Result<(String, Option<String>), String>;

fn read(path: &str) -> Outcome {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read `{path}`: {e}"))?;
    let n = bytes.len();
    let text = String::from_utf8(bytes).map_err(|_| format!("cannot read `{path}`: it is not UTF-8 text"))?;
    Ok((format!("read {n} bytes from {path}"), Some(text)))
}

fn list(path: &str) -> Outcome {
    let entries = std::fs::read_dir(path).map_err(|e| format!("cannot list `{path}`: {e}"))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list `{path}`: {e}"))?;
        let mut name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = match entry.file_type() {
            Ok(t) => t.is_dir(),
            Err(_) => entry.metadata().map(|m| m.is_dir()).unwrap_or(false),
        };
        if is_dir {
            name.push('/');
        }
        names.push(name);
    }
    names.sort();
    let data = Value::from(names.clone()).to_string();
    Ok((format!("{} entries in {path}", names.len()), Some(data)))
}

fn write(path: &str, content: Option<&str>) -> Outcome {
    let content = content.ok_or(format!("cannot write `{path}`: `content` is required for write"))?;
    if let Some(parent) = Path::new(path).parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create the folders of `{path}`: {e}"))?;
    }
    std::fs::write(path, content).map_err(|e| format!("cannot write `{path}`: {e}"))?;
    Ok((format!("wrote {} bytes to {path}", content.len()), None))
}

fn append(path: &str, content: Option<&str>) -> Outcome {
    use std::io::Write;
    let content = content.ok_or(format!("cannot append to `{path}`: `content` is required for append"))?;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| format!("cannot open `{path}` to append: {e}"))?;
    file.write_all(content.as_bytes()).map_err(|e| format!("cannot append to `{path}`: {e}"))?;
    Ok((format!("appended {} bytes to {path}", content.len()), None))
}

fn failed(summary: String, metadata: Vec<(String, String)>) -> ToolResult {
    ToolResult {
        status: Status::Failed,
        summary: Some(summary),
        data: None,
        data_path: None,
        truncated: false,
        metadata,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert!(check_path("a/b.txt").is_ok());
        assert!(check_path("./a").is_ok());
        assert!(check_path("a..b").is_ok());
        assert!(check_path("/etc/passwd").unwrap_err().contains("absolute"));
        assert!(check_path("../x").unwrap_err().contains(".."));
        assert!(check_path("a/../../x").unwrap_err().contains(".."));
    }

    #[test]
    fn inputs() {
        assert!(parse(Some(r#"{"op":"list"}"#)).is_ok());
        assert!(parse(Some(r#"{"op":"read"}"#)).unwrap_err().contains("path"));
        assert!(parse(Some(r#"{"op":"zap","path":"x"}"#)).unwrap_err().contains("zap"));
        assert!(parse(None).unwrap_err().contains("no input"));
    }

    #[test]
    fn roundtrip_in_a_temp_folder() {
        let dir = std::env::temp_dir().join(format!("tool-files-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let p = |s: &str| dir.join(s).to_string_lossy().into_owned();
        let (summary, _) = write(&p("sub/a.txt"), Some("héllo")).unwrap();
        assert!(summary.starts_with("wrote 6 bytes to "), "{summary}");
        assert_eq!(read(&p("sub/a.txt")).unwrap().1.unwrap(), "héllo");
        std::fs::write(dir.join("b.txt"), "x").unwrap();
        assert_eq!(list(&p("")).unwrap().1.unwrap(), r#"["b.txt","sub/"]"#);
        assert!(read(&p("missing")).unwrap_err().contains("missing"));
        append(&p("log.txt"), Some("one\n")).unwrap();
        append(&p("log.txt"), Some("two\n")).unwrap();
        assert_eq!(read(&p("log.txt")).unwrap().1.unwrap(), "one\ntwo\n");
        assert!(append(&p("log.txt"), None).unwrap_err().contains("content"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
