//! What a bench host's capsules share: the bench's engine and cache, no host config, no machine
//! meter, doors on loopback without TLS.

use capsule_actors::host::Shared;
use capsule_actors::shards::Shards;
use capsule_runtime::Host;
use std::sync::Arc;

/// The host's shared state; `shards`: each capsule on a shard, as `capsule host` runs them
/// (one per core), or all on the runtime the host's actors run on.
pub fn loopback(host: &Host, shards: bool) -> Shared {
    Shared {
        shards: shards.then(|| Arc::new(Shards::per_core().expect("shards"))),
        cluster: None,
        host: host.clone(),
        env: Default::default(),
        host_config: None,
        machine: None,
        bind: [127, 0, 0, 1].into(),
        tls: None,
    }
}
