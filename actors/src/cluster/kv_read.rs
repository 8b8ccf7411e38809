//! The cluster's KV buckets: opening one (made when missing, waiting out a forming cluster),
//! and reading a key from its stream's leader. The client's own KV reads may be answered by
//! any replica and so be behind; a lease holder or a day total read to decide or report must
//! be the latest one acknowledged.

use async_nats::jetstream;

use super::ClusterError;

/// The latest value of `key` in `bucket` and its revision; `None` when there is none (never
/// written, deleted or purged).
pub(crate) async fn latest(
    js: &jetstream::Context,
    bucket: &str,
    key: &str,
) -> Result<Option<(bytes::Bytes, u64)>, ClusterError> {
    latest_in(&stream_of(js, bucket, || format!("read {bucket}/{key}")).await?, bucket, key).await
}

/// `bucket`'s stream, to read several keys from its leader with [`latest_in`]; `what` names the
/// read in an error.
pub(crate) async fn stream_of(
    js: &jetstream::Context,
    bucket: &str,
    what: impl Fn() -> String,
) -> Result<jetstream::stream::Stream, ClusterError> {
    js.get_stream(format!("KV_{bucket}")).await.map_err(|e| ClusterError::js(what(), e))
}

/// [`latest`], in `bucket`'s stream already at hand.
pub(crate) async fn latest_in(
    stream: &jetstream::stream::Stream,
    bucket: &str,
    key: &str,
) -> Result<Option<(bytes::Bytes, u64)>, ClusterError> {
    use jetstream::stream::LastRawMessageErrorKind as Kind;
    let what = || format!("read {bucket}/{key}");
    match stream.get_last_raw_message_by_subject(&format!("$KV.{bucket}.{key}")).await {
        Ok(m) => {
            let removed = m.headers.get("KV-Operation").is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"));
            Ok((!removed).then_some((m.payload, m.sequence)))
        }
        Err(e) if e.kind() == Kind::NoMessageFound => Ok(None),
        Err(e) => Err(ClusterError::js(what(), e)),
    }
}

/// Every key of `kv`; `what` names the listing in an error (e.g. "list the hosts").
pub(crate) async fn keys(kv: &jetstream::kv::Store, what: &str) -> Result<Vec<String>, ClusterError> {
    use futures::TryStreamExt;
    let listed = kv.keys().await.map_err(|e| ClusterError::js(what, e))?;
    listed.try_collect().await.map_err(|e| ClusterError::js(what, e))
}

/// The bucket `bucket` (one revision per key, `replicas` copies, entries expiring after
/// `max_age` when given), made if it does not exist.
pub(crate) async fn bucket(
    js: &jetstream::Context,
    bucket: &str,
    replicas: usize,
    max_age: Option<std::time::Duration>,
) -> Result<jetstream::kv::Store, ClusterError> {
    super::log::patiently(|| async {
        match js.get_key_value(bucket).await {
            Ok(kv) => Ok(kv),
            Err(_) => js
                .create_key_value(jetstream::kv::Config {
                    bucket: bucket.to_string(),
                    history: 1,
                    max_age: max_age.unwrap_or_default(),
                    num_replicas: replicas,
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| ClusterError::js(format!("create the bucket {bucket}"), e)),
        }
    })
    .await
}
