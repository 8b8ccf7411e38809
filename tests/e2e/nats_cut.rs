//! A TCP relay in front of one NATS server that, once armed with a subject, cuts the connection
//! of the next client that publishes to it (a lease write, a journal append), right after the
//! server answered and before the answer reaches the client: the write is stored, and its
//! writer never hears so. A connection dropped at the wrong moment does exactly this.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The subject of a lease write (`capsule_actors::cluster::LEASE_BUCKET`), to arm with.
pub const LEASE_WRITE: &str = "$KV.CAPSULE_LEASES.";
/// The subject of a journal append (`capsule_actors::cluster::JOURNAL_STREAM`'s subjects).
pub const JOURNAL_APPEND: &str = "capsule.journal.";

/// The subject prefix the relay is armed with, taken by the first publish to it.
type Armed = Arc<Mutex<Option<&'static str>>>;

pub struct AnswerCut {
    /// The URL clients connect to.
    pub url: String,
    armed: Armed,
    cuts: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl AnswerCut {
    /// Relay to `upstream` (`nats://host:port`).
    pub async fn start(upstream: &str) -> AnswerCut {
        let upstream = upstream.trim_start_matches("nats://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the relay");
        let url = format!("nats://{}", listener.local_addr().expect("address"));
        let (armed, cuts): (Armed, _) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
        let (a, c) = (armed.clone(), cuts.clone());
        let task = tokio::spawn(async move {
            // Dropped with this task: every relayed connection ends with the relay.
            let mut relays = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                relays.spawn(relay(client, upstream.clone(), a.clone(), c.clone()));
            }
        });
        AnswerCut { url, armed, cuts, task }
    }

    /// Cut the connection of the next publish to a subject starting with `subject` once the
    /// server has answered it ([`LEASE_WRITE`], [`JOURNAL_APPEND`]).
    pub fn arm(&self, subject: &'static str) {
        *self.armed.lock().expect("armed") = Some(subject);
    }

    /// Connections cut so far.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }

    /// Wait until `n` connections were cut, for at most `within`.
    pub async fn wait_cuts(&self, n: usize, within: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.cuts() < n {
            assert!(tokio::time::Instant::now() < deadline, "no answer was cut within {within:?}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

impl Drop for AnswerCut {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Relay one connection until either side closes, or until the server answers the publish
/// this relay was armed for: then both sides are dropped, and the answer with them.
async fn relay(client: TcpStream, upstream: String, armed: Armed, cuts: Arc<AtomicUsize>) {
    let Ok(server) = TcpStream::connect(&upstream).await else { return };
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    // The reply subject of the armed write, set by the client side, watched by the server side.
    let (reply_tx, mut reply_rx) = tokio::sync::watch::channel(None::<Vec<u8>>);
    let to_server = async move {
        let (mut buf, mut seen) = (vec![0u8; 16 * 1024], Vec::new());
        while let Some(n) = read_more(&mut client_in, &mut buf, &mut seen).await {
            let subject = *armed.lock().expect("armed");
            if let Some(subject) = subject {
                if let Some(reply) = publish_reply(&mut seen, subject.as_bytes())
                    && armed.lock().expect("armed").take().is_some()
                {
                    let _ = reply_tx.send(Some(reply));
                }
            } else {
                keep_tail(&mut seen, 512);
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

/// The reply subject of a whole line `PUB`/`HPUB <subject…> <reply> …` in `seen` whose subject
/// starts with `subject`, consuming what was read; keeps an unfinished line for the next read.
fn publish_reply(seen: &mut Vec<u8>, subject: &[u8]) -> Option<Vec<u8>> {
    let line_start = [b"PUB ".as_slice(), subject].concat();
    let found = match find(seen, &line_start) {
        None => {
            keep_tail(seen, line_start.len() + 1);
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
