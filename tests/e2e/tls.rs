//! Doors and the host API beyond loopback: allowed only over TLS, and for a door only with its
//! token required. Real sockets bound to 0.0.0.0, a real TLS handshake against a certificate made
//! for the test, and a client that trusts only that certificate.

use crate::common::*;
use capsule_actors::door::{self, DoorError, DoorOptions};
use capsule_actors::tls::{TlsAcceptor, TlsFiles, acceptor};
use capsule_stub::Turn;
use rustls_pki_types::ServerName;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A self-signed certificate for `localhost` and 127.0.0.1, written as PEM files; the acceptor
/// that serves it; and a client config that trusts only it.
fn certificate(dir: &std::path::Path) -> (TlsFiles, TlsAcceptor, Arc<rustls::ClientConfig>) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).expect("certificate");
    let files = TlsFiles { cert: dir.join("cert.pem"), key: dir.join("key.pem") };
    std::fs::write(&files.cert, made.cert.pem()).expect("cert");
    std::fs::write(&files.key, made.signing_key.serialize_pem()).expect("key");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(made.cert.der().clone()).expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    (files.clone(), acceptor(&files).expect("acceptor"), Arc::new(client))
}

/// One HTTP/1.1 request over TLS to `port` on loopback; the status and body.
async fn https(
    client: &Arc<rustls::ClientConfig>,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let connector = tokio_rustls::TlsConnector::from(client.clone());
    let mut tls = connector.connect(ServerName::try_from("localhost").expect("name"), tcp).await.expect("handshake");
    let mut req = format!("{method} {path} HTTP/1.1\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("host: 127.0.0.1:{port}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    tls.write_all(req.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn any_port() -> SocketAddr {
    "0.0.0.0:0".parse().expect("addr")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_beyond_loopback_serves_only_over_tls_and_only_with_its_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_files, tls, client) = certificate(dir.path());
    let stub = stub(vec![Turn::text("over tls")]);

    // Without a token required, or without TLS, the door does not open beyond loopback.
    let open = anthropic_capsule(&stub.url(), &[], "");
    let s = Arc::new(open.launch().await.expect("launch"));
    let e =
        door::serve_with(s.clone(), any_port(), DoorOptions { tls: Some(tls.clone()) }).await.err().expect("refused");
    assert!(matches!(e, DoorError::Exposed { .. }) && e.to_string().contains("network.authentication: bearer"), "{e}");
    s.shutdown().await;
    let guarded = anthropic_capsule(&stub.url(), &[], "network: {authentication: bearer}\n");
    let s = Arc::new(guarded.launch().await.expect("launch"));
    let e = door::serve(s.clone(), any_port()).await.err().expect("refused");
    assert!(e.to_string().starts_with("E-RUN-061") && e.to_string().contains("TLS"), "{e}");

    // With both it opens, serves https, and takes the client's public host name.
    let d = door::serve_with(s.clone(), any_port(), DoorOptions { tls: Some(tls) }).await.expect("door opens");
    assert!(d.url().starts_with("https://0.0.0.0:"), "{}", d.url());
    let port = d.addr.port();
    let host = format!("capsule.example:{port}");
    let (status, card) = https(&client, port, "GET", "/.well-known/agent-card.json", &[("host", &host)], "").await;
    assert_eq!(status, 200, "{card}");
    let card: Value = serde_json::from_str(&card).expect("card");
    assert_eq!(card["supportedInterfaces"][0]["url"], format!("https://{host}/a2a"));

    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"role": "user", "parts": [{"text": "hi"}]}}}).to_string();
    let ct = ("content-type", "application/json");
    let (status, _) = https(&client, port, "POST", "/", &[ct], &send).await;
    assert_eq!(status, 401, "no token, no task");
    let token = std::fs::read_to_string(s.door_auth.as_ref().expect("auth").token_file.as_ref().expect("minted here"))
        .expect("token");
    let bearer = format!("Bearer {}", token.trim());
    let (status, answer) = https(&client, port, "POST", "/", &[ct, ("authorization", &bearer)], &send).await;
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("json");
    assert_eq!(answer["result"]["status"]["response"], "over tls");

    // Plain HTTP to the TLS port gets no HTTP answer.
    let mut plain = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    plain.write_all(b"GET /.well-known/agent-card.json HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").await.expect("write");
    let mut out = Vec::new();
    let _ = plain.read_to_end(&mut out).await;
    assert!(!out.starts_with(b"HTTP/1.1 200"), "no plaintext answer");
    d.close();
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_api_beyond_loopback_needs_tls_and_still_its_token() {
    use capsule_actors::host::{HostHandle, RestartPolicy};
    let dir = tempfile::tempdir().expect("tempdir");
    let (_files, tls, client) = certificate(dir.path());
    let shared = loopback_shared();
    let handle = HostHandle::start(Vec::new(), shared, RestartPolicy::default()).await.expect("host");
    let token_file = dir.path().join("api.token");
    let key = || capsule_actors::control::TokenKey::mint(&token_file).expect("mint");
    let e = capsule_actors::host::api::serve(handle.clone(), any_port(), key(), None).await.err().expect("refused");
    assert!(e.to_string().contains("TLS"), "{e}");
    let api = capsule_actors::host::api::serve(handle.clone(), any_port(), key(), Some(tls)).await.expect("opens");
    let port = api.addr.port();
    let token = std::fs::read_to_string(&token_file).expect("token");
    let (status, _) = https(&client, port, "GET", "/capsules", &[("host", "capsule.example")], "").await;
    assert_eq!(status, 401, "TLS does not replace the token");
    let bearer = format!("Bearer {}", token.trim());
    let (status, body) =
        https(&client, port, "GET", "/capsules", &[("host", "capsule.example"), ("authorization", &bearer)], "").await;
    assert_eq!((status, body.as_str()), (200, "[]"));
    api.close();
    handle.shutdown().await.expect("shutdown");
}
