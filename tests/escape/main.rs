//! The escape suite: every finding of the security review, and the classic probe list, as a
//! named test with the hostile component that does it (`components/guest-escape`, one probe
//! per call). A probe is *contained* when the sandbox held; an *escape* is a failing test.
//! `the_suite_prints_its_table` runs every probe once more and prints how many were tried,
//! how many escaped, and how many ended in a coded resource failure.

mod ahead_probes;
#[path = "../e2e/common.rs"]
mod common;
#[path = "../e2e/http_support.rs"]
#[allow(dead_code, reason = "the suite uses part of the shared test support")]
mod http_support;
mod later_probes;
mod probes;
mod session_probes;

use probes::{PROBES, Verdict};

macro_rules! probe_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let v = probes::run(stringify!($name)).await;
                assert!(!v.escaped, "ESCAPE in {}: {}", stringify!($name), v.detail);
            }
        )*
        /// Every probe above, by name, so the table cannot forget one.
        const NAMED: &[&str] = &[$(stringify!($name)),*];
    };
}

probe_tests! {
    artifact_scope_with_dotdot_is_refused_at_launch,
    artifact_scope_absolute_is_refused_at_launch,
    capsule_scope_with_dotdot_inside_is_refused_at_launch,
    a_dot_scoped_tool_sees_no_session_files,
    a_dot_scoped_tool_cannot_reach_the_control_token_by_any_path,
    a_planted_result_symlink_is_never_written_through,
    resume_refuses_a_session_folder_with_a_symlinked_journal,
    resume_refuses_a_hard_linked_journal,
    a_planted_door_url_is_refused_and_never_followed,
    a_guest_symlink_swapped_for_another_tools_scope_is_refused,
    a_host_side_symlink_scope_is_refused_at_launch,
    capsule_control_refuses_a_non_loopback_door_url,
    read_etc_shadow,
    read_an_absolute_host_path,
    read_the_parent_of_the_scope,
    write_outside_the_workdir_by_dotdot,
    write_outside_the_workdir_by_absolute_path,
    guest_symlink_to_an_absolute_target_is_not_followed,
    guest_symlink_to_the_parent_is_not_followed,
    guest_hardlink_to_the_parent_is_refused,
    rename_across_the_boundary_is_refused,
    dotdot_in_every_guest_path,
    descriptor_exhaustion_is_a_coded_limit,
    disk_fill_in_one_file_is_a_coded_limit,
    disk_fill_with_pwrite_is_a_coded_limit,
    disk_fill_in_aggregate_across_calls_is_a_coded_limit,
    header_field_bloat_is_a_coded_limit_and_the_host_stays_small,
    memory_hog_is_a_coded_limit,
    session_files_are_private,
    a_swapped_cwasm_is_recompiled_not_run,
    a_call_sees_nothing_an_earlier_call_left_in_memory,
    an_instance_made_ahead_sees_nothing_an_earlier_call_left_in_memory,
    a_tool_instance_made_ahead_sees_nothing_an_earlier_call_left_in_memory,
    a_scope_swapped_for_a_symlink_after_a_tool_instance_was_made_is_refused,
    a_scope_replaced_by_another_folder_after_a_tool_instance_was_made_gives_the_new_folder,
    a_tool_instance_made_with_a_folder_serves_no_call_without_one,
    disk_fill_in_aggregate_across_calls_made_ahead_is_a_coded_limit,
    a_tool_file_swapped_during_its_background_compile_is_not_run,
}

#[tokio::test]
async fn the_suite_prints_its_table() {
    assert_eq!(NAMED.len(), PROBES.len(), "every probe has a named test and every named test a probe");
    for name in NAMED {
        assert!(PROBES.contains(name), "named test {name} has no probe");
    }
    let mut escapes = Vec::new();
    let mut resource_failures = 0;
    println!("{:<75} {:<9} detail", "probe", "verdict");
    for name in PROBES {
        let v: Verdict = probes::run(name).await;
        if v.escaped {
            escapes.push(*name);
        }
        if v.resource_failure {
            resource_failures += 1;
        }
        let verdict = if v.escaped { "ESCAPED" } else { "contained" };
        println!("{name:<75} {verdict:<9} {}", v.detail.chars().take(120).collect::<String>());
    }
    println!(
        "probes tried: {}, escapes: {}, resource failures (coded): {resource_failures}",
        PROBES.len(),
        escapes.len()
    );
    assert!(escapes.is_empty(), "escapes: {escapes:?}");
}
