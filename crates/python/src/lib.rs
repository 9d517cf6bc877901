//! `zshard._zshard`, the extension behind the Python package `zshard` (see `python/zshard`).
//!
//! It takes a `zshard` command line (the Python side turns keyword arguments into the command's
//! flags), so options are parsed, defaulted and checked in one place, the command's
//! (`zshard_cli::request`), and runs it with the GIL released. A conversion runs on a thread of its
//! own while the calling thread polls: it checks Python's signals (Ctrl-C cancels the conversion,
//! which stops cleanly and resumes on the next call), hands the progress to the Python callback and
//! raises the library's warnings as Python warnings. Results go back as JSON documents that the
//! Python side turns into its result types.

use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::json;
use zshard_cli::{Request, RequestError};
use zshard_convert::{one_line, Conversion, Observer, ShardOutcome};

/// How often the calling thread looks at Python's signals while a conversion runs.
const POLL: Duration = Duration::from_millis(20);

/// The progress callback is called at most this often (and once more at the end).
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// The figures of a running conversion, updated by the conversion's threads and read by the polling
/// thread.
#[derive(Debug, Default)]
struct Counters {
    shards_total: AtomicU64,
    shards_done: AtomicU64,
    chunks_read: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    /// Warnings not yet handed to Python.
    warnings: Mutex<Vec<String>>,
}

/// One reading of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Figures {
    shards_done: u64,
    shards_total: u64,
    chunks_read: u64,
    bytes_read: u64,
    bytes_written: u64,
}

impl Counters {
    fn figures(&self) -> Figures {
        Figures {
            shards_done: self.shards_done.load(Ordering::Relaxed),
            shards_total: self.shards_total.load(Ordering::Relaxed),
            chunks_read: self.chunks_read.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
        }
    }

    fn take_warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default()
    }
}

impl Observer for Counters {
    fn started(&self, pending_shards: u64) {
        self.shards_total.store(pending_shards, Ordering::Relaxed);
    }

    fn shard_done(&self, outcome: &ShardOutcome) {
        self.chunks_read
            .fetch_add(outcome.chunks_read, Ordering::Relaxed);
        self.bytes_read
            .fetch_add(outcome.bytes_read, Ordering::Relaxed);
        self.bytes_written
            .fetch_add(outcome.bytes_written, Ordering::Relaxed);
        self.shards_done.fetch_add(1, Ordering::Relaxed);
    }

    fn warning(&self, message: &str) {
        if let Ok(mut warnings) = self.warnings.lock() {
            warnings.push(message.to_string());
        }
    }
}

/// The Python exception for a failure of kind `kind` (see `zshard._errors`), carrying the array and
/// key it is about.
fn python_error(
    py: Python<'_>,
    kind: &str,
    message: String,
    array: Option<&str>,
    key: Option<&str>,
) -> PyErr {
    let made = py
        .import("zshard._errors")
        .and_then(|m| m.getattr("from_kind"))
        .and_then(|from_kind| from_kind.call1((kind, message.clone(), array, key)));
    match made {
        Ok(exception) => PyErr::from_value(exception),
        Err(e) => PyRuntimeError::new_err(format!("{message} (and zshard._errors failed: {e})")),
    }
}

fn conversion_error(py: Python<'_>, e: &zshard_convert::Error) -> PyErr {
    python_error(py, e.kind(), one_line(e), e.array(), e.key())
}

fn request_error(py: Python<'_>, e: &RequestError) -> PyErr {
    match e {
        RequestError::Options(e) => conversion_error(py, e),
        RequestError::Usage(message) => python_error(py, "options", message.clone(), None, None),
        other => python_error(py, "internal", format!("{other:?}"), None, None),
    }
}

/// Runs the `zshard` command line `args` (without the program name) as the command does, with the
/// GIL released, and returns its exit status.
#[pyfunction]
fn cli_main(py: Python<'_>, args: Vec<String>) -> u8 {
    let args: Vec<OsString> = std::iter::once("zshard".to_string())
        .chain(args)
        .map(OsString::from)
        .collect();
    let status = py.detach(|| zshard_cli::main(args));
    // The command spells settings as flags; this module's functions, as keywords again.
    zshard_convert::set_spelling(zshard_convert::Spelling::Keyword);
    status
}

/// Runs the `convert`, `plan`, `finalize`, `verify` or `ls` command line `args` (without the
/// program name) and returns its result as JSON. `progress` is called with a dict of figures while a
/// conversion runs.
#[pyfunction]
#[pyo3(signature = (args, progress=None))]
fn run(py: Python<'_>, args: Vec<String>, progress: Option<Py<PyAny>>) -> PyResult<String> {
    let command = std::iter::once("zshard".to_string()).chain(args);
    let request = zshard_cli::request(command).map_err(|e| request_error(py, &e))?;
    let fail = |e: zshard_convert::Error| conversion_error(py, &e);
    let result = match request {
        Request::Convert(conversion) => return convert(py, &conversion, progress.as_ref()),
        Request::Plan(conversion) => py.detach(|| conversion.plan()).map_err(fail)?.to_json(),
        Request::Finalize(conversion) => {
            let finalized = py.detach(|| conversion.finalize()).map_err(fail)?;
            json!({
                "destination": finalized.destination,
                "arrays": finalized.arrays,
                "groups": finalized.groups,
                "already_finalized": finalized.already_finalized,
            })
        }
        Request::Verify(verification) => {
            let verified = py.detach(|| verification.run()).map_err(fail)?;
            json!({
                "destination": verified.destination,
                "shards_checked": verified.shards_checked,
                "arrays": verified.arrays,
                "mismatch_count": verified.mismatches.count,
                "mismatches": verified.mismatches.first,
            })
        }
        Request::List(list) => {
            let listing = py.detach(|| list.list()).map_err(fail)?;
            serde_json::to_value(&listing)
                .map_err(|e| python_error(py, "internal", e.to_string(), None, None))?
        }
        other => {
            return Err(python_error(
                py,
                "internal",
                format!("not a request the module runs: {other:?}"),
                None,
                None,
            ))
        }
    };
    Ok(result.to_string())
}

/// Converts on a thread of its own while this one, without the GIL, polls Python: a signal handler
/// that raises (Ctrl-C's `KeyboardInterrupt`) or a progress callback that raises cancels the
/// conversion, which then stops cleanly; that exception is raised once it has.
fn convert(
    py: Python<'_>,
    conversion: &Conversion,
    progress: Option<&Py<PyAny>>,
) -> PyResult<String> {
    let counters = Counters::default();
    let mut poller = Poller {
        counters: &counters,
        progress,
        last_call: None,
        last_figures: None,
    };
    let mut interrupted: Option<PyErr> = None;
    let joined = py.detach(|| {
        std::thread::scope(|scope| {
            let handle = scope.spawn(|| conversion.convert(&counters));
            while !handle.is_finished() {
                std::thread::sleep(POLL);
                if interrupted.is_none() {
                    if let Err(e) = Python::attach(|py| poller.poll(py, false)) {
                        conversion.cancel.cancel();
                        interrupted = Some(e);
                    }
                }
            }
            handle.join()
        })
    });
    if let Some(e) = interrupted {
        return Err(e);
    }
    let converted = joined.map_err(|_| {
        python_error(
            py,
            "internal",
            "the conversion thread panicked".into(),
            None,
            None,
        )
    })?;
    poller.poll(py, true)?;
    let report = converted.map_err(|e| conversion_error(py, &e))?;
    serde_json::to_string(&report)
        .map_err(|e| python_error(py, "internal", e.to_string(), None, None))
}

/// What the polling thread hands to Python.
struct Poller<'a> {
    counters: &'a Counters,
    progress: Option<&'a Py<PyAny>>,
    last_call: Option<Instant>,
    last_figures: Option<Figures>,
}

impl Poller<'_> {
    /// Runs Python's signal handlers, raises the warnings, and calls the progress callback when the
    /// figures changed (at most every [`PROGRESS_INTERVAL`], unless `last`).
    fn poll(&mut self, py: Python<'_>, last: bool) -> PyResult<()> {
        py.check_signals()?;
        for message in self.counters.take_warnings() {
            let category = py.import("zshard._errors")?.getattr("ZshardWarning")?;
            PyErr::warn(py, &category, &std::ffi::CString::new(message)?, 1)?;
        }
        let Some(progress) = self.progress else {
            return Ok(());
        };
        let due = self
            .last_call
            .is_none_or(|at| at.elapsed() >= PROGRESS_INTERVAL);
        let figures = self.counters.figures();
        let changed = self.last_figures != Some(figures);
        let never_called = self.last_call.is_none();
        // Nothing to tell before the run has started (all zeros), except at the end.
        let started = figures != Figures::default();
        if (changed && due && started) || (last && (changed || never_called)) {
            self.last_call = Some(Instant::now());
            self.last_figures = Some(figures);
            progress.call1(py, (figures_dict(py, figures)?,))?;
        }
        Ok(())
    }
}

fn figures_dict(py: Python<'_>, f: Figures) -> PyResult<Bound<'_, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("shards_done", f.shards_done)?;
    dict.set_item("shards_total", f.shards_total)?;
    dict.set_item("chunks_read", f.chunks_read)?;
    dict.set_item("bytes_read", f.bytes_read)?;
    dict.set_item("bytes_written", f.bytes_written)?;
    Ok(dict)
}

/// The extension module `zshard._zshard`.
#[pymodule]
fn _zshard(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Messages of the library name settings as this module's keyword arguments (`memory_limit=`).
    zshard_convert::set_spelling(zshard_convert::Spelling::Keyword);
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
