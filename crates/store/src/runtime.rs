use std::future::Future;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The tokio runtime that runs all storage requests. It is separate from the CPU workers: pipeline
/// threads call into it and wait, so network latency never occupies a compute thread's core.
#[derive(Debug)]
pub struct IoRuntime {
    runtime: tokio::runtime::Runtime,
}

impl IoRuntime {
    pub fn new(threads: usize) -> Result<Arc<Self>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("zshard-io")
            .enable_all()
            .build()
            .map_err(|source| Error::Runtime { source })?;
        Ok(Arc::new(IoRuntime { runtime }))
    }

    /// Runs a future to completion from a thread outside the runtime.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }
}
