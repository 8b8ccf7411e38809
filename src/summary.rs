//! The line `capsule run` prints when a task ends: how it ended, its turns, tokens and time,
//! read from the session's trace (written and flushed before the task's final status).

use capsule_actors::TaskOutcome;

/// One line on how a task went: its end, turns, tokens and time, read from the trace (written
/// and flushed before its final status).
pub(crate) fn summary(dir: &std::path::Path, o: &TaskOutcome) -> String {
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap_or_default();
    let (end, input, output) = task_totals(&trace, &o.task_id);
    format!(
        "{} · {} turns · {} tokens in, {} out · {:.1} s",
        o.exit_status.as_str(),
        end.and_then(|e| e.turns).unwrap_or(0),
        input,
        output,
        end.and_then(|e| e.duration_ms).unwrap_or(0.0) / 1000.0
    )
}

/// The fields of a trace line [`summary`] reads; the others are skipped unread.
#[derive(serde::Deserialize, Clone, Copy)]
struct Totals<'a> {
    event_type: &'a str,
    task_id: Option<&'a str>,
    turns: Option<u64>,
    /// Whole milliseconds in `task_end`, a fraction in `inference`.
    duration_ms: Option<f64>,
    input_tokens_actual: Option<u64>,
    input_tokens_estimate: Option<u64>,
    output_tokens_actual: Option<u64>,
}

/// Task `task_id`'s last `task_end` line and its input and output tokens (the provider's
/// count, else the estimate) summed over its `inference` lines. Only those two kinds of line
/// are parsed, and only into the fields above: the trace of a long session is mostly other
/// lines (tool calls and their inputs), and this runs once the task is over, before the
/// process can exit.
fn task_totals<'a>(trace: &'a str, task_id: &str) -> (Option<Totals<'a>>, u64, u64) {
    let (mut end, mut input, mut output) = (None, 0, 0);
    for line in trace.lines() {
        // A line that names neither kind is neither (a kind is a whole JSON string).
        if !line.contains("\"inference\"") && !line.contains("\"task_end\"") {
            continue;
        }
        let Ok(e) = serde_json::from_str::<Totals<'_>>(line) else { continue };
        if e.task_id != Some(task_id) {
            continue;
        }
        match e.event_type {
            "task_end" => end = Some(e),
            "inference" => {
                input += e.input_tokens_actual.or(e.input_tokens_estimate).unwrap_or(0);
                output += e.output_tokens_actual.unwrap_or(0);
            }
            _ => {}
        }
    }
    (end, input, output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_adds_up_its_own_task_and_takes_its_last_end() {
        let trace = [
            r#"{"event_type":"session_start","session_id":"s","timestamp":1,"note":"inference"}"#,
            r#"{"event_type":"inference","session_id":"s","timestamp":2,"duration_ms":2.580743,"input_tokens_actual":10,"input_tokens_estimate":99,"output_tokens_actual":3,"task_id":"t1"}"#,
            r#"{"event_type":"tool_call_started","session_id":"s","timestamp":3,"input":{"text":"task_end"},"task_id":"t1"}"#,
            r#"{"event_type":"inference","session_id":"s","timestamp":4,"duration_ms":0.5,"input_tokens_actual":null,"input_tokens_estimate":40,"output_tokens_actual":null,"task_id":"t1"}"#,
            r#"{"event_type":"inference","session_id":"s","timestamp":5,"input_tokens_actual":1000,"output_tokens_actual":1000,"task_id":"t2"}"#,
            r#"{"event_type":"task_end","session_id":"s","timestamp":6,"duration_ms":5,"turns":1,"task_id":"t1"}"#,
            r#"{"event_type":"task_end","session_id":"s","timestamp":7,"duration_ms":2500,"turns":2,"task_id":"t1"}"#,
            r#"{"event_type":"task_end","session_id":"s","timestamp":8,"duration_ms":9,"turns":9,"task_id":"t2"}"#,
            r#"{"event_type":"inference","session_id":"s","timestamp":9,"#,
        ]
        .join("\n");
        let (end, input, output) = task_totals(&trace, "t1");
        let end = end.expect("t1 ended");
        assert_eq!((end.turns, end.duration_ms), (Some(2), Some(2500.0)));
        // 10 counted by the provider, 40 estimated where it gave none; t2's are not added.
        assert_eq!((input, output), (50, 3));
        assert_eq!(task_totals(&trace, "t3").1, 0);
        assert!(task_totals(&trace, "t3").0.is_none());
    }
}
