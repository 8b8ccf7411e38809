//! Coalescer throughput: `ProgressRules` called directly, and the `Coalescer` actor.

use super::*;

/// Reports/s through `ProgressRules`, `calls` calls written at once (round-robin reports), with
/// `Instant::now()` taken per report as the actor does. Returns (reports/s, frames it would write).
pub(crate) fn rules_rate(reports: u64, calls: usize) -> (f64, u64) {
    let ids: Vec<String> = (0..calls).map(|i| format!("toolu_{i:024}")).collect();
    let mut rules = ProgressRules::default();
    let t0 = Instant::now();
    let mut frames = 0u64;
    for id in &ids {
        frames += u64::from(rules.start("tsk_bench", id));
    }
    for i in 0..reports {
        let id = &ids[(i % calls as u64) as usize];
        let bytes = (i / calls as u64 + 1) * 16;
        frames += u64::from(rules.report(black_box(id), bytes, tokio::time::Instant::now()).is_some());
    }
    frames += rules.complete_all().len() as u64;
    let secs = t0.elapsed().as_secs_f64();
    (reports as f64 / secs, black_box(frames))
}

/// Reports/s through the actor: `Started` per call, then one `Progress` cast per report (each
/// with its own task-id and call-id `String`s, as the driver sink sends them), then one
/// `CompleteAll` call, which returns after every earlier cast was handled. Returns (reports/s,
/// frames the emitter numbered).
pub(crate) async fn actor_rate(
    coalescer: &ActorRef<CoalescerMsg>,
    emitter: &ActorRef<EmitterMsg>,
    reports: u64,
    calls: usize,
) -> (f64, u64) {
    let ids: Vec<String> = (0..calls).map(|i| format!("toolu_{i:024}")).collect();
    let last = |e: &ActorRef<EmitterMsg>| {
        let e = e.clone();
        async move {
            e.call(EmitterMsg::LastId, Some(Duration::from_secs(60))).await.expect("emitter answers").expect("success")
        }
    };
    coalescer.cast(CoalescerMsg::Reset).expect("cast");
    let before = last(emitter).await;
    let t0 = Instant::now();
    for id in &ids {
        coalescer
            .cast(CoalescerMsg::Started { task_id: "tsk_bench".into(), id: id.clone(), name: "files".into() })
            .expect("cast");
    }
    for i in 0..reports {
        let id = &ids[(i % calls as u64) as usize];
        let bytes = (i / calls as u64 + 1) * 16;
        coalescer.cast(CoalescerMsg::Progress { task_id: "tsk_bench".into(), id: id.clone(), bytes }).expect("cast");
    }
    coalescer
        .call(CoalescerMsg::CompleteAll, Some(Duration::from_secs(300)))
        .await
        .expect("coalescer answers")
        .expect("success");
    let secs = t0.elapsed().as_secs_f64();
    let frames = last(emitter).await - before;
    (reports as f64 / secs, frames)
}

pub(crate) async fn coalescer() {
    const DIRECT: u64 = 5_000_000;
    const VIA_ACTOR: u64 = 1_000_000;
    let mut rows = Vec::new();
    for calls in [1usize, 100] {
        let runs: Vec<(f64, u64)> = (0..3).map(|_| rules_rate(DIRECT, calls)).collect();
        let rates: Vec<f64> = runs.iter().map(|r| r.0).collect();
        rows.push(("`ProgressRules` direct", calls, DIRECT, pct(&rates, 50.0), runs[0].1));
    }
    let emitter_name = "bench-coalescer/emitter".to_string();
    let (emitter, eh) = Actor::spawn(
        Some(emitter_name.clone()),
        Emitter,
        EmitterArgs { next_id: Arc::new(AtomicU64::new(1)), frames_path: None, cluster: None },
    )
    .await
    .expect("emitter");
    let (coal, ch) = Actor::spawn(
        Some("bench-coalescer/coalescer".into()),
        Coalescer,
        capsule_actors::peer::Peer::of("bench-coalescer", "emitter"),
    )
    .await
    .expect("coalescer");
    for calls in [1usize, 100] {
        let mut runs = Vec::new();
        for _ in 0..3 {
            runs.push(actor_rate(&coal, &emitter, VIA_ACTOR, calls).await);
        }
        let rates: Vec<f64> = runs.iter().map(|r| r.0).collect();
        rows.push((
            "`Coalescer` actor: casts + final `CompleteAll` call",
            calls,
            VIA_ACTOR,
            pct(&rates, 50.0),
            runs[0].1,
        ));
    }
    coal.stop(None);
    emitter.stop(None);
    let _ = ch.await;
    let _ = eh.await;
    println!("\n## Coalescer throughput (median of 3 runs)\n");
    println!(
        "Direct: `start` per call, then `report(id, bytes, Instant::now())` per report (cumulative sizes rising by 16 bytes, calls in round-robin), then `complete_all`; time over all of it. Actor: the same reports as `Progress` casts to a spawned `Coalescer` (with a spawned `Emitter` behind it), timed from the first cast to the answer of one final `CompleteAll` call (mailbox order: every report was handled). Frames = progress/started frames the rules let through (first report, one per call per 250 ms, the flush).\n"
    );
    println!("| path | calls being written | reports | reports/s (M) | frames written |");
    println!("|---|---|---|---|---|");
    for (path, calls, n, rate, frames) in rows {
        println!("| {path} | {calls} | {n} | {:.2} | {frames} |", rate / 1e6);
    }
}
