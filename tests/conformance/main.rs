//! Driver conformance: every recorded provider response under `tests/fixtures/providers/` is
//! replayed by the provider stub over real loopback HTTP into the real, committed driver
//! component, and the driver's result and its live events must be exactly what the fixture
//! expects. The fixture format and the rules the expectations encode are in
//! `tests/fixtures/providers/README.md`.
//!
//! Run: `cargo nextest run --test conformance` (or `cargo test --test conformance`).
//!
//! Each provider has its own test, so one driver's failures never hide the other's results. A
//! test replays every case, then fails once, listing each mismatching fixture with its first
//! difference. A driver component that is absent fails its test, saying so: nothing is skipped.

mod compare;
mod fixture;
mod replay;

use fixture::Fixture;
use replay::Driver;

/// Replays every fixture of `provider` and fails listing every mismatch.
async fn conforms(provider: &str) {
    let fixtures =
        fixture::load_all(provider).unwrap_or_else(|why| panic!("the {provider} fixtures do not load: {why}"));
    assert!(!fixtures.is_empty(), "no fixtures under {}", fixture::folder(provider).display());
    if let Some(why) = absent_component(provider, fixtures.len()) {
        panic!("{why}");
    }
    let driver = Driver::load(provider).unwrap_or_else(|why| panic!("{why}"));
    let mut mismatches = Vec::new();
    for fixture in &fixtures {
        if let Some(why) = check(&driver, fixture).await {
            mismatches.push(format!("  {}: {why}", fixture.name));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} {provider} fixtures do not match the driver:\n{}",
        mismatches.len(),
        fixtures.len(),
        mismatches.join("\n")
    );
}

/// Why `provider` cannot be checked at all, when its committed component is missing.
fn absent_component(provider: &str, cases: usize) -> Option<String> {
    let component = replay::component(provider);
    (!component.exists()).then(|| format!("{} is absent: the {provider} driver component has not landed, so none of its {cases} recorded responses was checked", component.display()))
}

async fn check(driver: &Driver, fixture: &Fixture) -> Option<String> {
    match replay::replay(driver, fixture).await {
        Ok(observed) => compare::differences(fixture, &observed),
        Err(why) => Some(why),
    }
}

/// Proves the suite cannot quietly shrink: every case loads strictly, and a failure names its error.
#[test]
fn every_fixture_has_one_recording_and_a_well_formed_expectation() {
    for provider in ["anthropic", "openai"] {
        let fixtures = fixture::load_all(provider).unwrap_or_else(|why| panic!("{why}"));
        assert!(fixtures.len() >= 9, "{provider} has only {} fixtures", fixtures.len());
        for f in &fixtures {
            let failed =
                f.tool_status != "passed" || f.response.get("stop_reason").and_then(|s| s.as_str()) == Some("error");
            assert_eq!(
                failed,
                !f.error_contains.is_empty() || f.response.get("error").is_some(),
                "{}: a failure names its error, a success has none",
                f.name
            );
        }
    }
}

/// Proves a missing driver is a named failure, not a skip (checked without removing a real one).
#[test]
fn a_driver_component_that_is_absent_fails_its_test_by_name_instead_of_being_skipped() {
    let why = absent_component("not-yet-written", 4).expect("there is no such component");
    assert!(why.contains("driver-not-yet-written.wasm is absent"), "{why}");
    assert!(why.contains("none of its 4 recorded responses was checked"), "{why}");
    assert_eq!(absent_component("anthropic", 1), None, "the Anthropic driver is committed");
}

/// Proves the committed output of gen_large.py is as large and as finely cut as the case claims.
#[test]
fn the_generated_large_tool_input_is_at_least_200_kb_in_small_deltas() {
    let fixtures = fixture::load_all("anthropic").unwrap_or_else(|why| panic!("{why}"));
    let large = fixtures
        .iter()
        .find(|f| f.name == "anthropic/large_tool_input")
        .expect("the generated case exists (tests/fixtures/providers/gen_large.py)");
    let input = large.response.pointer("/content/1/input").expect("the tool call's input");
    assert!(input.to_string().len() >= 200 * 1024, "the input is {} bytes", input.to_string().len());
    let deltas = large.events.iter().filter(|e| e[0] == "tool_call_input_bytes").count();
    assert!(deltas > 1000, "only {deltas} input deltas");
}

/// Proves driver-anthropic.wasm turns each recorded Anthropic response into exactly the expected result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_driver_turns_every_recorded_anthropic_response_into_the_expected_result() {
    conforms("anthropic").await;
}

/// Proves driver-openai.wasm does the same for OpenAI; fails, naming the file, while it is absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_driver_turns_every_recorded_openai_response_into_the_expected_result() {
    conforms("openai").await;
}
