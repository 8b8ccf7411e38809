//! The journal under damage: every journal file of a real session is truncated, bit-flipped,
//! given a bad UTF-8 byte, reordered, given a duplicate or missing line, and then resumed.
//! Each case is either resumed from a state the session really had (a valid prefix of every
//! file, with whatever was cut reported), or refused with `E-RUN-063` naming the file and the
//! line. It is never continued silently with less, and no frame id is ever used twice.

use crate::common::*;
use capsule_actors::JOURNAL_FILES;
use capsule_actors::Session;
use capsule_protocol::Code;
use capsule_protocol::journal_line::scan;
use capsule_stub::Turn;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;

/// A small deterministic generator (no dependency, same cases every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % below.max(1)
    }
}

fn lines_of(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes.split_inclusive(|b| *b == b'\n').map(<[u8]>::to_vec).collect()
}

/// One mutation of `bytes`, and its name.
fn mutate(bytes: &[u8], rng: &mut Lcg) -> (Vec<u8>, &'static str) {
    let mut b = bytes.to_vec();
    let lines = lines_of(bytes);
    match rng.next(6) {
        0 => {
            b.truncate(rng.next(bytes.len()));
            (b, "truncate")
        }
        1 => {
            let i = rng.next(b.len());
            b[i] ^= 1 << rng.next(8);
            (b, "flip a bit")
        }
        2 => {
            let i = rng.next(b.len());
            b.insert(i, 0xff);
            (b, "insert invalid UTF-8")
        }
        3 if lines.len() >= 2 => {
            let i = rng.next(lines.len() - 1);
            let mut l = lines.clone();
            l.swap(i, i + 1);
            (l.concat(), "swap two lines")
        }
        4 if !lines.is_empty() => {
            let i = rng.next(lines.len());
            let mut l = lines.clone();
            l.insert(i, lines[i].clone());
            (l.concat(), "duplicate a line")
        }
        _ if lines.len() >= 2 => {
            let i = rng.next(lines.len() - 1);
            let mut l = lines.clone();
            l.remove(i);
            (l.concat(), "delete a line")
        }
        _ => {
            b.truncate(b.len() / 2);
            (b, "truncate")
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("out")).expect("mkdir");
    for e in std::fs::read_dir(from).expect("dir").flatten() {
        if e.path().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
}

fn frame_ids(bytes: &[u8]) -> Vec<u64> {
    scan(bytes)
        .records
        .iter()
        .filter_map(|r| serde_json::from_slice::<serde_json::Value>(r).ok()?["id"].as_u64())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damaged_journal_is_resumed_from_a_real_state_or_refused_with_a_code() {
    let stub = stub(
        (0..400)
            .flat_map(|i| {
                [
                    Turn::tool_call("files", json!({"op": "write", "path": format!("f{i}.txt"), "content": "x"})),
                    Turn::text("done"),
                ]
            })
            .collect(),
    );
    let cap = anthropic_capsule(&stub.url(), &[("files", "{DIST}/tool-files.wasm")], "");
    let session = cap.launch().await.expect("launch");
    run_task(&session, "write a file").await;
    let original = session.dir.clone();
    session.shutdown().await;
    // As if the process was killed before its `session_end`: an ended session has nothing to
    // resume (that refusal is tested in resume.rs), and this test is about resuming.
    let trace = std::fs::read_to_string(original.join("trace.jsonl")).expect("trace");
    let kept: Vec<&str> = trace.lines().filter(|l| !l.contains("\"session_end\"")).collect();
    std::fs::write(original.join("trace.jsonl"), kept.join("\n") + "\n").expect("rewrite");
    let originals: HashMap<&str, Vec<u8>> =
        JOURNAL_FILES.iter().map(|f| (*f, std::fs::read(original.join(f)).unwrap_or_default())).collect();
    let original_max_frame = frame_ids(&originals["frames.jsonl"]).into_iter().max().expect("frames");

    let mut rng = Lcg(0x5eed);
    let (mut resumed, mut refused, mut cut) = (0, 0, 0);
    for case in 0..160 {
        let file = JOURNAL_FILES[rng.next(JOURNAL_FILES.len())];
        if originals[file].is_empty() {
            continue;
        }
        let (bytes, how) = mutate(&originals[file], &mut rng);
        let work = tempfile::tempdir().expect("tempdir");
        let dir = work.path().join(original.file_name().expect("name"));
        copy_dir(&original, &dir);
        std::fs::write(dir.join(file), &bytes).expect("mutate");
        let expected = scan(&bytes);
        let what = format!("case {case}: {how} in {file}");
        let mut opts = cap.options(HashMap::new());
        opts.workdir = work.path().to_path_buf();
        match Session::resume_with(opts, &dir, false).await {
            Err(e) => {
                assert_eq!(e.code(), Code::JournalDamaged, "{what}: refused with another code: {e}");
                assert!(expected.damaged(), "{what}: refused although nothing was damaged: {e}");
                let line = expected.damaged_line.expect("line");
                assert!(e.to_string().contains(&format!("{file} is damaged at line {line}")), "{what}: {e}");
                refused += 1;
            }
            Ok((s, reports)) => {
                s.shutdown().await;
                assert!(!expected.damaged(), "{what}: damage at line {:?} was resumed", expected.damaged_line);
                // What was kept is a prefix of what the session really wrote.
                let kept = &expected.records;
                let real = scan(&originals[file]).records;
                assert!(
                    kept.len() <= real.len() && real[..kept.len()] == kept[..],
                    "{what}: kept lines it never wrote"
                );
                let after = scan(&std::fs::read(dir.join(file)).expect("read")).records;
                assert!(
                    after.len() >= kept.len() && after[..kept.len()] == kept[..],
                    "{what}: the kept prefix changed"
                );
                if expected.torn_bytes > 0 {
                    assert!(reports.iter().any(|r| r.starts_with(file)), "{what}: a cut was not reported: {reports:?}");
                    cut += 1;
                }
                let ids = frame_ids(&std::fs::read(dir.join("frames.jsonl")).expect("frames"));
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "{what}: frame ids not increasing: {ids:?}");
                let new_ids: Vec<u64> = ids.iter().copied().filter(|id| *id > original_max_frame).collect();
                let reused =
                    ids.len() - new_ids.len() > frame_ids(&bytes_if(file, "frames.jsonl", &bytes, &originals)).len();
                assert!(!reused, "{what}: a frame id was used twice: {ids:?}");
                resumed += 1;
            }
        }
    }
    println!("{resumed} resumed ({cut} with a torn tail cut and reported), {refused} refused with E-RUN-063");
    assert!(resumed > 10 && refused > 10, "both outcomes were exercised: {resumed} resumed, {refused} refused");
}

/// The frames file as the case left it.
fn bytes_if(file: &str, frames: &str, mutated: &[u8], originals: &HashMap<&str, Vec<u8>>) -> Vec<u8> {
    if file == frames { mutated.to_vec() } else { originals[frames].clone() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_keeps_the_valid_prefix_and_says_what_it_dropped() {
    let stub = stub(vec![Turn::text("first"), Turn::text("second")]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = cap.launch().await.expect("launch");
    run_task(&session, "one").await;
    run_task(&session, "two").await;
    let dir = session.dir.clone();
    session.shutdown().await;
    // As if killed before `session_end` (an ended session has nothing to resume).
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace");
    let kept: Vec<&str> = trace.lines().filter(|l| !l.contains("\"session_end\"")).collect();
    std::fs::write(dir.join("trace.jsonl"), kept.join("\n") + "\n").expect("rewrite");
    let path = dir.join("conversation.jsonl");
    let mut bytes = std::fs::read(&path).expect("conversation");
    let good = scan(&bytes).records.len();
    assert!(good >= 4, "two tasks, two messages each");
    // Damage line 3 of the conversation.
    let third = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).map(|(i, _)| i + 2).expect("line 3");
    bytes[third] ^= 0x20;
    std::fs::write(&path, &bytes).expect("damage");

    let refused = Session::resume_with(cap.options(HashMap::new()), &dir, false).await.err().expect("refused");
    assert_eq!(refused.code(), Code::JournalDamaged);
    assert!(refused.to_string().contains("conversation.jsonl is damaged at line 3"), "{refused}");
    assert!(refused.to_string().contains("--repair"), "the message says what to do: {refused}");

    let (s, reports) = Session::resume_with(cap.options(HashMap::new()), &dir, true).await.expect("repaired");
    s.shutdown().await;
    assert!(
        reports
            .iter()
            .any(|r| r.starts_with("conversation.jsonl")
                && r.contains(&format!("dropped {} lines from line 3", good - 2))),
        "{reports:?}"
    );
    let after = scan(&std::fs::read(&path).expect("read")).records;
    assert_eq!(after.len(), 2, "the two lines before the damage are kept, nothing after them");
}
