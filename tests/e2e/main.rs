//! End-to-end tests: real components from `components/dist`, real loopback HTTP to the provider
//! stub, the real actor tree, and the real `capsule` binary where the claim is about a process.
//!
//! One test binary with modules (each integration-test binary relinks wasmtime).

mod a2a;
mod a2a_sdk;
mod adversarial;
mod ahead;
mod background_compile;
mod bad_input;
mod cluster;
mod cluster_door_token;
mod cluster_failover;
mod cluster_fencing;
mod cluster_host;
mod cluster_lease_cut;
mod cluster_outage;
mod cluster_place;
mod cluster_session;
mod cluster_spend;
mod cluster_spend_hosts;
mod cluster_support;
mod cluster_watch;
mod common;
mod compaction;
mod component_cache;
mod control;
mod control_choices;
mod demo;
mod door;
mod gateway;
mod hooks;
mod host;
mod host_shards;
mod http_support;
mod inspect;
mod journal_fuzz;
mod loop_rules;
mod murmur_artifacts;
mod murmur_project;
mod nats;
mod nats_cut;
mod otel;
mod packages;
mod progress;
mod python;
mod resume;
mod run_worker;
mod spend;
mod supervision;
mod tls;
mod watch;
mod write_before_act;
