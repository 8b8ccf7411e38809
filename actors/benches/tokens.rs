//! Spend-meter benchmarks. Run: `cargo bench -p capsule-actors --bench tokens`
//!
//! Prints, in one run so ratios are comparable on a noisy machine:
//! 1. the cl100k counters compared: ours (`capsule_actors::spend::cl100k`, what the meter uses)
//!    against `bpe-openai` 0.3 and `tiktoken-rs` 0.12: build time (first use), a large payload, one turn's new content;
//! 2. the counting cost per turn at turns 1, 50 and 100 of a growing session (push the turn's
//!    new messages + estimate the request), against recounting the whole payload;
//! 3. the admission + settle round trip (`Admit` call + `Settle` cast) on the multi-thread
//!    runtime the CLI uses, and on a current-thread runtime, with and without a machine meter.
//!
//! Budgets from the issue: round trip ≤ 20 µs; turn 100 ≤ 1.2 × turn 1.

use capsule_actors::spend::cl100k;
use capsule_actors::spend::machine::{MachineArgs, MachineMeter, MachineMsg};
use capsule_actors::spend::tokens::{self, TokenCounter};
use capsule_actors::spend::{SpendArgs, SpendMeter, SpendMsg};
use capsule_protocol::neutral::{Block, DriverRequest, Message, Role, ToolSpec};
use ractor::{Actor, ActorRef};
use serde_json::json;
use std::hint::black_box;
use std::time::{Duration, Instant};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn text(&mut self, words: usize) -> String {
        const W: &[&str] = &[
            "the",
            "agent",
            "reads",
            "the",
            "file",
            "src/main.rs",
            "and",
            "then",
            "fn",
            "main()",
            "{",
            "}",
            "let",
            "x",
            "=",
            "42;",
            "token",
            "budget",
            "is",
            "spent",
            "when",
            "a",
            "call",
            "ends.",
            "\n",
            "    ",
            "println!(\"{x}\");",
            "// comment",
            "naïve",
            "日本語",
            "ceiling",
            "UTC",
            "it's",
            "Error:",
            "404",
            "0x7f3a",
            "{\"k\": [1, 2]}",
        ];
        (0..words).map(|_| W[(self.next() % W.len() as u64) as usize]).collect::<Vec<_>>().join(" ")
    }
}

/// One tool-call turn's new messages (~1.6 KB of JSON).
fn turn(rng: &mut Rng, n: usize) -> Vec<Message> {
    let call = Message {
        role: Role::Assistant,
        content: vec![
            Block::Text { text: rng.text(40) },
            Block::ToolCall {
                id: format!("call_{n}"),
                name: "read_file".into(),
                input: json!({"path": "src/lib.rs", "line": n}),
            },
        ],
        tool_call_id: None,
        is_error: None,
        produced_by: None,
    };
    vec![call, Message::tool_result(format!("call_{n}"), rng.text(220), false)]
}

fn request(messages: Vec<Message>) -> DriverRequest {
    let tools = (0..8)
        .map(|i| ToolSpec { name: format!("tool_{i}"), description: Some("Does one thing in the capsule's folder and reports it.".into()), parameters: json!({"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["path"]}) })
        .collect();
    DriverRequest {
        model: "claude-sonnet-4".into(),
        max_tokens: 4096,
        system: "You are a careful coding agent working in a sandbox. Use the tools; answer briefly.".repeat(8),
        messages,
        tools,
        params: Default::default(),
        continuation_id: None,
        prompt_cache_key: "bench:0.1.0:ctx_1".into(),
    }
}

fn median_ns(mut samples: Vec<u128>) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2] as f64
}

fn time<F: FnMut()>(reps: usize, mut f: F) -> f64 {
    median_ns(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_nanos()
            })
            .collect(),
    )
}

fn encoders() {
    println!("## 1. cl100k encoders\n");
    let rss = || {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<f64>().ok())
            })
            .unwrap_or(0.0)
            / 1024.0
    };
    let mut rng = Rng(1);
    let history: Vec<Message> = (1..=100).flat_map(|n| turn(&mut rng, n)).collect();
    let big = serde_json::to_string(&request(history)).unwrap_or_default();
    let small = serde_json::to_string(&turn(&mut rng, 101)).unwrap_or_default();
    // Ours first: its resident cost is read before the others are loaded.
    let r0 = rss();
    let t = Instant::now();
    let _ = black_box(cl100k::count("warm up"));
    let ours_build = t.elapsed();
    let _ = black_box(cl100k::count(big.as_str()));
    let r1 = rss();
    let t = Instant::now();
    let bpe = bpe_openai::cl100k_base();
    let _ = black_box(bpe.count("warm up"));
    let bpe_build = t.elapsed();
    let _ = black_box(bpe.count(big.as_str()));
    let r2 = rss();
    let t = Instant::now();
    let tik = tiktoken_rs::cl100k_base_singleton();
    let _ = black_box(tik.encode_ordinary("warm up"));
    let tik_build = t.elapsed();
    let _ = black_box(tik.encode_ordinary(&big));
    let r3 = rss();
    let nt = tik.encode_ordinary(&big).len();
    assert_eq!(bpe.count(big.as_str()), nt, "bpe-openai disagrees with tiktoken");
    assert_eq!(cl100k::count(&big) as usize, nt, "ours disagrees with tiktoken");
    assert_eq!(cl100k::count(&small) as usize, tik.encode_ordinary(&small).len());
    type Counter<'a> = (&'a str, std::time::Duration, f64, Box<dyn Fn(&str) -> usize + 'a>);
    let encoders: [Counter; 3] = [
        ("ours (`spend::cl100k`)", ours_build, r1 - r0, Box::new(|s| cl100k::count(s) as usize)),
        ("bpe-openai 0.3", bpe_build, r2 - r1, Box::new(|s| bpe.count(s))),
        ("tiktoken-rs 0.12", tik_build, r3 - r2, Box::new(|s| tik.encode_ordinary(s).len())),
    ];
    println!(
        "| encoder | build (first use) | RSS added MiB | {} KB payload ({nt} tokens) | MB/s | one turn, {} B |",
        big.len() / 1024,
        small.len()
    );
    println!("|---|---|---|---|---|---|");
    for (name, build, added, f) in &encoders {
        let big_ns = time(15, || {
            let _ = black_box(f(black_box(big.as_str())));
        });
        let small_ns = time(301, || {
            let _ = black_box(f(black_box(small.as_str())));
        });
        println!(
            "| {name} | {:.1} ms | {added:.1} | {:.2} ms | {:.1} | {:.1} µs |",
            build.as_secs_f64() * 1e3,
            big_ns / 1e6,
            big.len() as f64 / big_ns * 1e3,
            small_ns / 1e3
        );
    }
    println!("\nCounts equal on both payloads.\n");
}

fn per_turn() {
    println!("## 2. Counting cost per turn (push the turn's new messages + estimate the request)\n");
    let mut rng = Rng(2);
    let same_turn = turn(&mut rng, 0);
    println!("| turn | incremental | whole payload recounted | estimate | whole count |");
    println!("|---|---|---|---|---|");
    let mut first = 0.0;
    for at in [1usize, 50, 100] {
        let mut base = TokenCounter::new();
        let mut history = Vec::new();
        for n in 1..at {
            for m in turn(&mut rng, n) {
                base.push(&m);
                history.push(m);
            }
        }
        base.estimate(&request(history.clone()));
        history.extend(same_turn.iter().cloned());
        let req = request(history);
        let mut estimate = 0;
        let mut samples = Vec::new();
        for _ in 0..301 {
            let mut c = base.clone();
            let t = Instant::now();
            for m in &same_turn {
                c.push(m);
            }
            estimate = black_box(c.estimate(&req));
            samples.push(t.elapsed().as_nanos());
        }
        let inc = median_ns(samples);
        let whole = time(31, || {
            let _ = black_box(tokens::count_json(black_box(&req)));
        });
        if at == 1 {
            first = inc;
        }
        println!(
            "| {at} | {:.1} µs ({:.2}× turn 1) | {:.1} µs | {estimate} | {} |",
            inc / 1e3,
            inc / first,
            whole / 1e3,
            tokens::count_json(&req)
        );
    }
    println!();
}

async fn round_trips(machine: bool, journal: bool, n: usize) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = if machine {
        Some(
            Actor::spawn(None, MachineMeter, MachineArgs::new(dir.path(), Some(u64::MAX / 4)))
                .await
                .expect("machine")
                .0,
        )
    } else {
        None
    };
    let args = SpendArgs {
        journal: journal.then(|| dir.path().join("spend.jsonl")),
        ..SpendArgs::new("ses_bench", Some(u64::MAX / 4), host.clone())
    };
    let (m, _) = Actor::spawn(None, SpendMeter, args).await.expect("meter");
    let once = |m: ActorRef<SpendMsg>| async move {
        let r = m
            .call(|reply| SpendMsg::Admit { estimated_input: 1200, max_output: 4096, reply }, None)
            .await
            .expect("admit")
            .expect("answer")
            .expect("admitted");
        m.cast(SpendMsg::Settle { reservation: r.id, input: 1200, output: 300, actual: None }).expect("settle");
    };
    for _ in 0..200 {
        once(m.clone()).await;
    }
    let t = Instant::now();
    for _ in 0..n {
        once(m.clone()).await;
    }
    // The last settle is processed before this answer (per-sender order).
    let totals = m.call(SpendMsg::Totals, None).await.expect("totals").expect("answer");
    let per = t.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(totals.open, 0);
    if let Some(h) = host {
        let health = h.call(MachineMsg::Flush, None).await.expect("flush").expect("answer");
        assert_eq!(health.written as usize, n + 200);
    }
    per
}

fn admission() {
    println!("## 3. Admission + settle round trip (`Admit` call + `Settle` cast)\n");
    println!(
        "| runtime | session meter only | + session spend journal | + machine meter (ledger under the cross-process lock) |"
    );
    println!("|---|---|---|---|");
    let multi = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let current = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    for (name, rt) in [("multi-thread (CLI)", &multi), ("current-thread", &current)] {
        let (mut alone, mut journal, mut shared) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..5 {
            alone.push(rt.block_on(round_trips(false, false, 5000)) as u128);
            journal.push(rt.block_on(round_trips(false, true, 5000)) as u128);
            shared.push(rt.block_on(round_trips(true, true, 5000)) as u128);
        }
        println!(
            "| {name} | {:.1} µs | {:.1} µs | {:.1} µs |",
            median_ns(alone) / 1e3,
            median_ns(journal) / 1e3,
            median_ns(shared) / 1e3
        );
    }
    multi.shutdown_timeout(Duration::from_secs(1));
    println!();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    encoders();
    per_turn();
    admission();
}
