//! Adversarial guest `guest-escape` (world `tool`): one probe per call.
//!
//! The input is a JSON object `{"op": …, …}`. Every probe works on the raw
//! `wasi:filesystem` API of its one preopen (`.`), so the host sees exactly
//! the paths written here. The result is `passed` when the operation
//! succeeded (for an escape probe, that is the escape the host's tests assert
//! never happens), `failed` with the WASI error in `summary` otherwise; `data`
//! holds what was read or counted.
//!
//! Probes:
//! - `read {path}`: read a whole file.
//! - `write {path, text}`: create or replace a file.
//! - `list {path}`: the names in a folder, one per line.
//! - `symlink {target, link}`, `hardlink {old, new}`, `rename {old, new}`,
//!   `mkdir {path}`, `remove {path}`, `rmdir {path}`.
//! - `open_many {count}`: open the preopen `count` times and hold every
//!   descriptor; `data` is how many opened.
//! - `fill {path, bytes, chunk, pwrite}`: write `bytes` zero bytes in chunks
//!   through a stream (or `descriptor.write` with `pwrite: true`).
//! - `fields {count, size}`: create `count` header-field maps each holding a
//!   `size`-byte value, and hold them all.
//! - `residue {pages}`: report what an earlier call could have left in this
//!   instance's memory, then leave some: a static with an initial value (kept in
//!   the image), a zero-initialised static, and `pages` 64 KiB pages grown past
//!   the heap. `data` is `data=<hex> bss=<n> grown_nonzero=<bytes>`; a fresh
//!   instance reports `data=5eed bss=0 grown_nonzero=0` on every call. The one
//!   probe that needs no preopen (so a store without a folder can be probed).

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use serde_json::Value;
use wasip2::filesystem::preopens::get_directories;
use wasip2::filesystem::types::{Descriptor, DescriptorFlags, ErrorCode, OpenFlags, PathFlags};

struct Component;

type Probe = Result<String, String>;

impl Guest for Component {
    fn run(input: ToolInput) -> ToolResult {
        let v: Value = input.data.as_deref().and_then(|d| serde_json::from_str(d).ok()).unwrap_or(Value::Null);
        let outcome = match (s(&v, "op"), root()) {
            ("residue", _) => Ok(residue(n(&v, "pages") as usize)),
            (_, Some(dir)) => probe(&dir, &v),
            (_, None) => Err("no preopen".to_string()),
        };
        match outcome {
            Ok(data) => result(Status::Passed, "done".into(), Some(data)),
            Err(why) => result(Status::Failed, why, None),
        }
    }
}

fn root() -> Option<Descriptor> {
    get_directories().into_iter().find(|(_, name)| name == ".").map(|(d, _)| d)
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or_default()
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_default()
}

fn err(e: ErrorCode) -> String {
    format!("{e:?}")
}

fn probe(dir: &Descriptor, v: &Value) -> Probe {
    match s(v, "op") {
        "read" => read(dir, s(v, "path")),
        "write" => write(dir, s(v, "path"), s(v, "text").as_bytes()),
        "list" => list(dir, s(v, "path")),
        "symlink" => dir.symlink_at(s(v, "target"), s(v, "link")).map(|()| String::new()).map_err(err),
        "hardlink" => {
            dir.link_at(PathFlags::empty(), s(v, "old"), dir, s(v, "new")).map(|()| String::new()).map_err(err)
        }
        "rename" => dir.rename_at(s(v, "old"), dir, s(v, "new")).map(|()| String::new()).map_err(err),
        "mkdir" => dir.create_directory_at(s(v, "path")).map(|()| String::new()).map_err(err),
        "remove" => dir.unlink_file_at(s(v, "path")).map(|()| String::new()).map_err(err),
        "rmdir" => dir.remove_directory_at(s(v, "path")).map(|()| String::new()).map_err(err),
        "open_many" => open_many(dir, n(v, "count")),
        "fill" => fill(dir, s(v, "path"), n(v, "bytes"), n(v, "chunk").max(1), v["pwrite"].as_bool() == Some(true)),
        "fields" => fields(n(v, "count"), n(v, "size") as usize),
        other => Err(format!("unknown op `{other}`")),
    }
}

fn open(dir: &Descriptor, path: &str, write: bool) -> Result<Descriptor, String> {
    let (open_flags, flags) = if write {
        (OpenFlags::CREATE | OpenFlags::TRUNCATE, DescriptorFlags::WRITE)
    } else {
        (OpenFlags::empty(), DescriptorFlags::READ)
    };
    dir.open_at(PathFlags::SYMLINK_FOLLOW, path, open_flags, flags).map_err(err)
}

fn read(dir: &Descriptor, path: &str) -> Probe {
    let f = open(dir, path, false)?;
    let mut out = Vec::new();
    loop {
        let (chunk, end) = f.read(64 * 1024, out.len() as u64).map_err(err)?;
        out.extend_from_slice(&chunk);
        if end || chunk.is_empty() {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn write(dir: &Descriptor, path: &str, bytes: &[u8]) -> Probe {
    let f = open(dir, path, true)?;
    f.write(bytes, 0).map_err(err)?;
    Ok(String::new())
}

fn list(dir: &Descriptor, path: &str) -> Probe {
    let d = if path.is_empty() || path == "." {
        dir.open_at(PathFlags::empty(), ".", OpenFlags::DIRECTORY, DescriptorFlags::READ).map_err(err)?
    } else {
        dir.open_at(PathFlags::SYMLINK_FOLLOW, path, OpenFlags::DIRECTORY, DescriptorFlags::READ).map_err(err)?
    };
    let entries = d.read_directory().map_err(err)?;
    let mut names = Vec::new();
    while let Some(e) = entries.read_directory_entry().map_err(err)? {
        names.push(e.name);
    }
    names.sort();
    Ok(names.join("\n"))
}

fn open_many(dir: &Descriptor, count: u64) -> Probe {
    let mut held = Vec::new();
    for _ in 0..count {
        match dir.open_at(PathFlags::empty(), ".", OpenFlags::DIRECTORY, DescriptorFlags::READ) {
            Ok(d) => held.push(d),
            Err(e) => return Err(format!("opened {} then {}", held.len(), err(e))),
        }
    }
    Ok(held.len().to_string())
}

fn fill(dir: &Descriptor, path: &str, bytes: u64, chunk: u64, pwrite: bool) -> Probe {
    let f = open(dir, path, true)?;
    let buf = vec![0u8; chunk as usize];
    let mut written = 0u64;
    if pwrite {
        while written < bytes {
            let n = f.write(&buf, written).map_err(|e| format!("wrote {written} then {}", err(e)))?;
            written += n;
        }
    } else {
        let stream = f.write_via_stream(0).map_err(err)?;
        while written < bytes {
            for piece in buf.chunks(4096) {
                stream.blocking_write_and_flush(piece).map_err(|e| format!("wrote {written} then {e:?}"))?;
                written += piece.len() as u64;
            }
        }
    }
    Ok(written.to_string())
}

fn fields(count: u64, size: usize) -> Probe {
    let value = vec![b'a'; size];
    let mut held = Vec::new();
    for i in 0..count {
        let f = wasip2::http::types::Fields::new();
        if let Err(e) = f.append("x-bloat", &value) {
            return Err(format!("field map {i}: {e:?}"));
        }
        held.push(f);
    }
    Ok(held.len().to_string())
}

static INITIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0x5eed);
static ZEROED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// See `residue` above. The grown pages are memory no allocator hands out, read and written
/// directly: what a fresh instance's `memory.grow` returns must be zero.
fn residue(pages: usize) -> String {
    use std::sync::atomic::Ordering;
    let data = INITIAL.swap(0xdead_beef, Ordering::SeqCst);
    let bss = ZEROED.fetch_add(1, Ordering::SeqCst);
    let mut nonzero = 0usize;
    #[cfg(target_arch = "wasm32")]
    {
        const PAGE: usize = 65536;
        let old = core::arch::wasm32::memory_grow(0, pages);
        if old != usize::MAX {
            let base = (old * PAGE) as *mut u8;
            for i in 0..pages * PAGE {
                // SAFETY: the pages were just grown by this call and nothing else uses them.
                unsafe {
                    let p = base.add(i);
                    if core::ptr::read_volatile(p) != 0 {
                        nonzero += 1;
                    }
                    core::ptr::write_volatile(p, 0xa5);
                }
            }
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    let _ = pages;
    format!("data={data:x} bss={bss} grown_nonzero={nonzero}")
}

fn result(status: Status, summary: String, data: Option<String>) -> ToolResult {
    ToolResult { status, summary: Some(summary), data, data_path: None, truncated: false, metadata: Vec::new() }
}

export!(Component);
