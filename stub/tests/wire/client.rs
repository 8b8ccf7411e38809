//! A deliberately plain HTTP/1.1 client over a tokio `TcpStream`, so the tests see the bytes the
//! stub really sends, chunk framing included.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP answer, read until the server closed the connection.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body with any chunk framing removed.
    pub body: Vec<u8>,
    /// The body's chunks as framed on the wire (empty when not chunked).
    pub chunks: Vec<Vec<u8>>,
    /// Whether the body ended properly (terminal chunk, or full content-length).
    pub complete: bool,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("the stub sends UTF-8")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("the body is JSON")
    }

    /// The SSE events: (event name, data) pairs.
    pub fn events(&self) -> Vec<(Option<String>, String)> {
        self.text()
            .split("\n\n")
            .filter(|block| !block.is_empty())
            .map(|block| {
                let mut name = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(rest) = line.strip_prefix("event: ") {
                        name = Some(rest.to_owned());
                    } else if let Some(rest) = line.strip_prefix("data: ") {
                        data.push_str(rest);
                    } else {
                        panic!("unexpected SSE line {line:?}");
                    }
                }
                (name, data)
            })
            .collect()
    }

    /// The data of every event, parsed as JSON (skipping `[DONE]`).
    pub fn event_json(&self) -> Vec<serde_json::Value> {
        self.events()
            .into_iter()
            .filter(|(_, data)| data != "[DONE]")
            .map(|(_, data)| serde_json::from_str(&data).expect("event data is JSON"))
            .collect()
    }
}

pub async fn post(addr: SocketAddr, path: &str, body: &str) -> Reply {
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-Test: yes\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(addr, request).await
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    exchange(addr, format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")).await
}

async fn exchange(addr: SocketAddr, request: String) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("the stub accepts");
    stream.write_all(request.as_bytes()).await.expect("the request is sent");
    let mut raw = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
        }
    }
    parse(&raw)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse(raw: &[u8]) -> Reply {
    let head_end = find(raw, b"\r\n\r\n").expect("a complete response head");
    let head = std::str::from_utf8(&raw[..head_end]).expect("the head is ASCII");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("a status line");
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &raw[head_end + 4..];
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());

    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut body = Vec::new();
        let mut chunks = Vec::new();
        let mut complete = false;
        let mut at = rest;
        while let Some(line_end) = find(at, b"\r\n") {
            let size_text = std::str::from_utf8(&at[..line_end]).expect("a chunk size line");
            let size = usize::from_str_radix(size_text.trim(), 16).expect("a hex chunk size");
            let data_start = line_end + 2;
            if size == 0 {
                complete = true;
                break;
            }
            if at.len() < data_start + size + 2 {
                break;
            }
            let chunk = &at[data_start..data_start + size];
            body.extend_from_slice(chunk);
            chunks.push(chunk.to_vec());
            at = &at[data_start + size + 2..];
        }
        Reply { status, headers, body, chunks, complete }
    } else if let Some(length) = header("content-length") {
        let length: usize = length.parse().expect("a numeric content-length");
        let complete = rest.len() >= length;
        let body = rest[..length.min(rest.len())].to_vec();
        Reply { status, headers, body, chunks: Vec::new(), complete }
    } else {
        Reply { status, headers, body: rest.to_vec(), chunks: Vec::new(), complete: true }
    }
}
