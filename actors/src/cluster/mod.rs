//! The cluster's storage and ownership on NATS JetStream (issue #13): connecting, a session's
//! journal records as JetStream subjects with fenced appends ([`StreamLog`]), and one lease per
//! session in a KV bucket ([`Lease`]). Ordering, replication and fencing are JetStream's: a
//! stream with a subject per session and record, appends that name the subject's last
//! sequence, and KV revisions. Nothing here is a consensus of our own.
//!
//! A single host (`capsule run`, `capsule host` without `--cluster`) uses none of this.

mod capsules;
mod connect;
mod error;
pub mod frames;
mod host;
mod hosts;
mod kv_read;
mod lease;
mod log;
mod sessions;
mod spend;

pub use capsules::{CapsuleFiles, CapsuleSpec, FILES_BUCKET, FileRef};
pub use connect::{connect, near_journal_leader, split_urls};
pub use error::{ClusterError, wrong_last_sequence};
pub use host::ClusterHost;
pub use hosts::{HOSTS_BUCKET, HostDoor, HostEntry, Hosts};
pub use lease::{DEFAULT_TTL, LEASE_BUCKET, Lease, LeaseRecord, Leases};
pub use log::{JOURNAL_STREAM, Record, StreamLog, ensure_journal, records_of, subject, valid_session_id};
pub use sessions::{SESSIONS_BUCKET, SessionEntry, Sessions};
pub use spend::{ClusterSpend, DayTotals, SPEND_BUCKET};
