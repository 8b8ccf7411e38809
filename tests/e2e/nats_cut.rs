//! A TCP relay in front of one NATS server that, once armed, cuts the connection of the next
//! client that writes a session lease, right after the server answered that write and before
//! the answer reaches the client: the write is stored, and its writer never hears so. A
//! connection dropped at the wrong moment does exactly this.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The subject prefix of a lease write (`capsule_actors::cluster::LEASE_BUCKET`).
const LEASE_WRITE: &[u8] = b"PUB $KV.CAPSULE_LEASES.";

pub struct LeaseCut {
    /// The URL clients connect to.
    pub url: String,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseCut {
    /// Relay to `upstream` (`nats://host:port`).
    pub async fn start(upstream: &str) -> LeaseCut {
        let upstream = upstream.trim_start_matches("nats://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the relay");
        let url = format!("nats://{}", listener.local_addr().expect("address"));
        let (armed, cuts) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let (a, c) = (armed.clone(), cuts.clone());
        let task = tokio::spawn(async move {
            // Dropped with this task: every relayed connection ends with the relay.
            let mut relays = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                relays.spawn(relay(client, upstream.clone(), a.clone(), c.clone()));
            }
        });
        LeaseCut { url, armed, cuts, task }
    }

    /// Cut the next lease write's connection once the server has answered it.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Connections cut so far.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }

    /// Wait until `n` connections were cut, for at most `within`.
    pub async fn wait_cuts(&self, n: usize, within: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.cuts() < n {
            assert!(tokio::time::Instant::now() < deadline, "no lease write was cut within {within:?}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

impl Drop for LeaseCut {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Relay one connection until either side closes, or until the server answers the lease
/// write this relay was armed for: then both sides are dropped, and the answer with them.
async fn relay(client: TcpStream, upstream: String, armed: Arc<AtomicBool>, cuts: Arc<AtomicUsize>) {
    let Ok(server) = TcpStream::connect(&upstream).await else { return };
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    // The reply subject of the armed write, set by the client side, watched by the server side.
    let (reply_tx, mut reply_rx) = tokio::sync::watch::channel(None::<Vec<u8>>);
    let to_server = async move {
        let (mut buf, mut seen) = (vec![0u8; 16 * 1024], Vec::new());
        while let Some(n) = read_more(&mut client_in, &mut buf, &mut seen).await {
            if let Some(reply) = lease_write_reply(&mut seen)
                && armed.swap(false, Ordering::SeqCst)
            {
                let _ = reply_tx.send(Some(reply));
            }
            if server_out.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let to_client = async move {
        let (mut buf, mut seen) = (vec![0u8; 16 * 1024], Vec::new());
        while let Some(n) = read_more(&mut server_in, &mut buf, &mut seen).await {
            let reply = reply_rx.borrow_and_update().clone();
            if let Some(reply) = reply {
                // `MSG <reply> ` (or `HMSG`): the server's answer to the armed write.
                let answer = [b"MSG ".as_slice(), &reply, b" "].concat();
                if find(&seen, &answer).is_some() {
                    cuts.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
            keep_tail(&mut seen, 512);
            if client_out.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = to_server => {}
        () = to_client => {}
    }
}

/// Read into `buf`, and add what was read to `seen`; `None` once the side is closed.
async fn read_more(from: &mut tokio::net::tcp::OwnedReadHalf, buf: &mut [u8], seen: &mut Vec<u8>) -> Option<usize> {
    match from.read(buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            seen.extend_from_slice(&buf[..n]);
            Some(n)
        }
    }
}

/// The reply subject of a whole lease-write line in `seen` (`PUB`/`HPUB <subject> <reply> …`),
/// consuming what was read; keeps an unfinished line for the next read.
fn lease_write_reply(seen: &mut Vec<u8>) -> Option<Vec<u8>> {
    let found = match find(seen, LEASE_WRITE) {
        None => {
            keep_tail(seen, LEASE_WRITE.len() + 1);
            return None;
        }
        Some(at) => at,
    };
    let Some(end) = find(&seen[found..], b"\r\n") else {
        seen.drain(..found);
        return None;
    };
    let line = seen[found..found + end].to_vec();
    seen.drain(..found + end);
    line.split(|b| *b == b' ').nth(2).map(<[u8]>::to_vec)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn keep_tail(seen: &mut Vec<u8>, n: usize) {
    if seen.len() > n {
        seen.drain(..seen.len() - n);
    }
}
