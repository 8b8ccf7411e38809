//! Budgets for what a guest can make the host hold or do beyond its own linear memory:
//! bytes written to files (per session, `limits.disk_bytes`), and which host-side limit a call
//! ran into, so the error names it.
//!
//! File writes are metered by shadowing the three `wasi:filesystem/types` functions that write
//! (`descriptor.write`, `write-via-stream`, `append-via-stream`): the first checks the budget
//! before delegating to wasmtime-wasi, the other two wrap the stream they return in a
//! [`MeteredStream`] that checks it on every write. A write past the budget traps the guest,
//! and the call ends with `E-RUN-033` naming `disk_bytes`.

use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{WasiFilesystemCtxView, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{Descriptor, ErrorCode, HostDescriptor};
use wasmtime_wasi::p2::{DynOutputStream, FsError, OutputStream, Pollable, StreamError, StreamResult};

use crate::state::StoreState;

/// The `wasi:filesystem/types` instance wasmtime-wasi 48 defines (guests importing any 0.2.x
/// link to it).
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Bytes written to files by a session's calls, shared by every call of the session.
#[derive(Debug, Clone, Default)]
pub struct DiskMeter(Arc<AtomicU64>);

impl DiskMeter {
    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One call's view of the disk budget: the session's meter, this artifact's limit, and
/// whether this call was refused.
#[derive(Debug, Clone)]
pub(crate) struct CallDisk {
    meter: DiskMeter,
    limit: u64,
    refused: Arc<AtomicBool>,
}

impl CallDisk {
    pub(crate) fn new(meter: DiskMeter, limit: u64) -> Self {
        CallDisk { meter, limit, refused: Arc::new(AtomicBool::new(false)) }
    }

    /// Charge `n` bytes; false (and remembered) when that would pass the limit.
    fn take(&self, n: usize) -> bool {
        let n = n as u64;
        let ok = self
            .meter
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| w.checked_add(n).filter(|t| *t <= self.limit))
            .is_ok();
        if !ok {
            self.refused.store(true, Ordering::SeqCst);
        }
        ok
    }

    pub(crate) fn refused(&self) -> bool {
        self.refused.load(Ordering::SeqCst)
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }
}

fn over_budget() -> wasmtime::Error {
    wasmtime::Error::msg("the session's disk_bytes budget is spent")
}

/// A file output stream that charges every write to the call's disk budget.
pub(crate) struct MeteredStream {
    inner: DynOutputStream,
    disk: CallDisk,
}

impl MeteredStream {
    fn charge(&self, n: usize) -> StreamResult<()> {
        if self.disk.take(n) { Ok(()) } else { Err(StreamError::Trap(over_budget())) }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for MeteredStream {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for MeteredStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.charge(bytes.len())?;
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }

    async fn blocking_write_and_flush(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.charge(bytes.len())?;
        self.inner.blocking_write_and_flush(bytes).await
    }

    fn write_zeroes(&mut self, nelem: usize) -> StreamResult<()> {
        self.charge(nelem)?;
        self.inner.write_zeroes(nelem)
    }

    async fn write_ready(&mut self) -> StreamResult<usize> {
        self.inner.write_ready().await
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}

fn guest_result<T>(r: Result<T, FsError>) -> wasmtime::Result<Result<T, ErrorCode>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Ok(Err(e.downcast()?)),
    }
}

fn wrap_stream(
    state: &mut StoreState,
    opened: Result<Resource<DynOutputStream>, FsError>,
) -> wasmtime::Result<Result<Resource<DynOutputStream>, ErrorCode>> {
    let stream = match guest_result(opened)? {
        Ok(s) => s,
        Err(code) => return Ok(Err(code)),
    };
    let inner = state.table.delete(stream)?;
    let metered: DynOutputStream = Box::new(MeteredStream { inner, disk: state.disk.clone() });
    Ok(Ok(state.table.push(metered)?))
}

/// Replace the file-writing functions of `wasi:filesystem/types` with metered ones.
pub(crate) fn meter_file_writes(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.write",
        |mut store, (fd, buf, offset): (Resource<Descriptor>, Vec<u8>, u64)| {
            Box::new(async move {
                let state = store.data_mut();
                if !state.disk.take(buf.len()) {
                    return Err(over_budget());
                }
                let mut fs: WasiFilesystemCtxView<'_> = state.filesystem();
                Ok((guest_result(HostDescriptor::write(&mut fs, fd, buf, offset).await)?,))
            })
        },
    )?;
    types.func_wrap(
        "[method]descriptor.write-via-stream",
        |mut store, (fd, offset): (Resource<Descriptor>, u64)| {
            let state = store.data_mut();
            let opened = HostDescriptor::write_via_stream(&mut state.filesystem(), fd, offset);
            Ok((wrap_stream(state, opened)?,))
        },
    )?;
    types.func_wrap("[method]descriptor.append-via-stream", |mut store, (fd,): (Resource<Descriptor>,)| {
        let state = store.data_mut();
        let opened = HostDescriptor::append_via_stream(&mut state.filesystem(), fd);
        Ok((wrap_stream(state, opened)?,))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}
