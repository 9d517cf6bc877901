use std::future::Future;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::options::StoreOptions;

/// The tokio runtime that runs all storage requests. It is separate from the CPU workers: pipeline
/// threads call into it and wait, so network latency never occupies a compute thread's core.
#[derive(Debug)]
pub struct IoRuntime {
    runtime: tokio::runtime::Runtime,
    options: StoreOptions,
    retries: std::sync::atomic::AtomicU64,
    listed: ListedCount,
}

/// The objects the listings of a runtime's stores have named so far, object by object (see
/// [`crate::Store::visit_objects_split`]): what a display shows while a run lists its source, before
/// it has any other figure. Clones count together; [`ListedCount::since_now`] counts from a moment.
#[derive(Debug, Clone, Default)]
pub struct ListedCount {
    listed: Arc<std::sync::atomic::AtomicU64>,
    base: u64,
}

impl ListedCount {
    /// Objects listed since this count was taken.
    pub fn get(&self) -> u64 {
        self.listed
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(self.base)
    }

    /// This count from now on.
    pub fn since_now(&self) -> ListedCount {
        ListedCount {
            listed: Arc::clone(&self.listed),
            base: self.listed.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    pub(crate) fn add(&self, objects: u64) {
        self.listed
            .fetch_add(objects, std::sync::atomic::Ordering::Relaxed);
    }
}

impl IoRuntime {
    /// A runtime of `threads` worker threads (at least one) whose stores use the default [`StoreOptions`].
    pub fn new(threads: usize) -> Result<Arc<Self>> {
        Self::with_options(threads, StoreOptions::default())
    }

    /// A runtime whose stores are opened with `options`.
    pub fn with_options(threads: usize, options: StoreOptions) -> Result<Arc<Self>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("zshard-io")
            .enable_all()
            .build()
            .map_err(|source| Error::Runtime { source })?;
        Ok(Arc::new(IoRuntime {
            runtime,
            options,
            retries: Default::default(),
            listed: ListedCount::default(),
        }))
    }

    /// Retries of transient failures made so far by zshard's own retry layer (object_store's internal
    /// retries of status codes are not seen here).
    pub fn retries(&self) -> u64 {
        self.retries.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The objects this runtime's listings name from now on (see [`ListedCount`]).
    pub fn listed_count(&self) -> ListedCount {
        self.listed.since_now()
    }

    pub(crate) fn listed(&self) -> &ListedCount {
        &self.listed
    }

    pub(crate) fn retry_counter(&self) -> &std::sync::atomic::AtomicU64 {
        &self.retries
    }

    /// The options every store opened on this runtime uses.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// The runtime's handle, to spawn tasks on its worker threads.
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    /// Runs a future to completion from a thread outside the runtime.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }
}
