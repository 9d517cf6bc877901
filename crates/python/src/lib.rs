//! `zshard._zshard`, the extension behind the Python package `zshard` (see `python/zshard`).
//!
//! Its functions take the keyword arguments of `zshard.convert`, `plan`, `finalize`, `verify`, `ls`
//! and `status` as a dict and build the library's options model from them directly ([`lower`]: checked
//! values, then the model's serde), so the library resolves the defaults; each builds its
//! conversion or verification once and runs it with the GIL released. A conversion runs on a
//! thread of its own while the calling thread polls: it checks Python's signals (Ctrl-C cancels the
//! conversion, which stops cleanly and resumes on the next call), hands the progress to the Python
//! callback and raises the library's warnings as Python warnings. Results go back as Python dicts
//! (the library's documents, through serde) that the Python side turns into its dataclasses. The
//! wheel's `zshard` command is the command line's `main` ([`cli_main`]).

mod lower;

use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use zshard_convert::options::{Action, Options, StatusOptions, VerifyOptions};
use zshard_convert::{one_line, Conversion, Observer, Partition, ShardOutcome, Verification};

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
    /// The objects the listings have named, counted live until the work is known
    /// ([`Observer::listing`]), then as they stood then (`objects_listed`).
    listing: Mutex<Option<zshard_convert::ListedCount>>,
    objects_listed: AtomicU64,
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
    objects_listed: u64,
}

impl Counters {
    /// The objects listed so far, or when the work became known.
    fn objects_listed(&self) -> u64 {
        match self.listing.lock().ok().as_deref() {
            Some(Some(listing)) => listing.get(),
            _ => self.objects_listed.load(Ordering::Relaxed),
        }
    }

    fn figures(&self) -> Figures {
        Figures {
            objects_listed: self.objects_listed(),
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
    fn listing(&self, listed: &zshard_convert::ListedCount) {
        if let Ok(mut listing) = self.listing.lock() {
            *listing = Some(listed.clone());
        }
    }

    fn started(&self, pending_shards: u64) {
        // The listing is over: its count stays as it stands (later listings, of the destination's
        // records at the end, are not the source's).
        let listed = self.objects_listed();
        self.objects_listed.store(listed, Ordering::Relaxed);
        if let Ok(mut listing) = self.listing.lock() {
            *listing = None;
        }
        self.shards_total.store(pending_shards, Ordering::Relaxed);
    }

    /// The whole share from the start: shards earlier runs did count as done (issue 44).
    fn work(&self, work: &zshard_convert::Work) {
        self.shards_total
            .store(work.shards + work.done_shards, Ordering::Relaxed);
        self.shards_done.store(work.done_shards, Ordering::Relaxed);
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
pub(crate) fn python_error(
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

/// Runs the `zshard` command line `args` (without the program name) as the command does, with the
/// GIL released, and returns its exit status.
#[pyfunction]
fn cli_main(py: Python<'_>, args: Vec<String>) -> u8 {
    let args: Vec<OsString> = std::iter::once("zshard".to_string())
        .chain(args)
        .map(OsString::from)
        .collect();
    // The command spells settings as flags on this thread while it runs; this module's functions
    // keep their keywords.
    py.detach(|| zshard_cli::main(args))
}

/// The keys of the settings `command` (`convert`, `plan`, `finalize`, `verify` or `ls`) takes, in
/// the model's order (`source` and `destination` are the positional `src` and `dst`).
#[pyfunction]
fn settings(command: &str) -> PyResult<Vec<&'static str>> {
    let action = Action::from_name(command).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!("no command {command:?}"))
    })?;
    Ok(action.settings().into_iter().map(|s| s.key()).collect())
}

/// Converts `src` into `dst` with the settings `options` (keyword -> value) and returns the run's
/// report. `progress` is called with a dict of figures while it runs.
#[pyfunction]
#[pyo3(signature = (src, dst, options, progress=None))]
fn convert<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyAny>,
    dst: &Bound<'py, PyAny>,
    options: &Bound<'py, PyDict>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    // Messages name settings as this module's keyword arguments (`memory_limit=`).
    keywords(|| {
        let mut options: Options = lower::model(py, Action::Convert, src, Some(dst), options)?;
        // Without `worker`, the share of a SLURM job array or a Kubernetes Indexed Job, as the command's.
        let run = &mut options.run;
        // The worker's share is the destination protocol's (zshard-state), its error the library's.
        let worker = Partition::resolve(run.worker.as_deref(), run.workers, |k| {
            std::env::var(k).ok()
        })
        .map_err(zshard_convert::Error::from)
        .map(|partition| {
            if run.worker.is_none() && !partition.is_all() {
                run.worker = Some(partition.to_string());
            }
        });
        let (conversion, configured) = Conversion::configured(&options);
        if let Err(e) = worker.and(configured) {
            if let Err(report_error) = conversion.report_failure(&e) {
                let message = format!(
                    "the report could not be written: {}",
                    one_line(&report_error)
                );
                warn(py, &message)?;
            }
            return Err(conversion_error(py, &e));
        }
        let report = run_conversion(py, &conversion, progress.as_ref())?;
        Ok(pythonize::pythonize(py, &report)?)
    })
}

/// Runs every conversion of the job file `job` (TOML), as `zshard run JOB.toml` does, and returns
/// their report documents in the job's order; a conversion that fails raises its error (the reports of
/// those before it are written where the job says). `worker` (`I/N`) and `workers` are the command's
/// `--worker` and `--workers`.
#[pyfunction]
#[pyo3(signature = (job, worker=None, workers=None, progress=None))]
fn run<'py>(
    py: Python<'py>,
    job: std::path::PathBuf,
    worker: Option<String>,
    workers: Option<u64>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    keywords(|| {
        let conversions =
            zshard_cli::job_conversions(&job, worker, workers).map_err(|e| match e {
                zshard_cli::RequestError::Options(e) => conversion_error(py, &e),
                zshard_cli::RequestError::Usage(message) => {
                    python_error(py, "options", message, None, None)
                }
                other => python_error(py, "options", format!("{other:?}"), None, None),
            })?;
        let reports = PyList::empty(py);
        for conversion in &conversions {
            let report = run_conversion(py, conversion, progress.as_ref())?;
            reports.append(pythonize::pythonize(py, &report)?)?;
        }
        Ok(reports)
    })
}

/// What converting `src` into `dst` with `options` would do: the plan document.
#[pyfunction]
fn plan<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyAny>,
    dst: &Bound<'py, PyAny>,
    options: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    // Messages name settings as this module's keyword arguments (`memory_limit=`).
    keywords(|| {
        let conversion = configured(py, Action::Plan, src, dst, options)?;
        let plan = py
            .detach(|| conversion.plan())
            .map_err(|e| conversion_error(py, &e))?;
        Ok(pythonize::pythonize(py, &plan.to_json())?)
    })
}

/// Finalizes the partitioned conversion of `src` into `dst` made with `options`.
#[pyfunction]
fn finalize<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyAny>,
    dst: &Bound<'py, PyAny>,
    options: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    // Messages name settings as this module's keyword arguments (`memory_limit=`).
    keywords(|| {
        let conversion = configured(py, Action::Finalize, src, dst, options)?;
        let finalized = py
            .detach(|| conversion.finalize())
            .map_err(|e| conversion_error(py, &e))?;
        Ok(pythonize::pythonize(py, &finalized)?)
    })
}

/// Compares the output `dst` with its source `src` read with `options`; with `manifest`, checks
/// the output (`src` alone, or `dst`) against its kept manifest instead.
#[pyfunction]
#[pyo3(signature = (src, dst, options))]
fn verify<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyAny>,
    dst: Option<&Bound<'py, PyAny>>,
    options: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    // Messages name settings as this module's keyword arguments (`memory_limit=`).
    keywords(|| {
        let options: VerifyOptions = lower::model(py, Action::Verify, src, dst, options)?;
        // The one construction of each kind of verification (the command line's too).
        let manifest = options
            .manifest_verification()
            .map_err(|e| conversion_error(py, &e))?;
        if manifest.is_none() && options.destination.is_empty() {
            let message = format!(
                "verify() needs the output dst beside its source src (or {} to check the output alone)",
                zshard_convert::Setting::Manifest
            );
            return Err(python_error(py, "options", message, None, None));
        }
        let verified = match manifest {
            Some(check) => py.detach(|| check.run()),
            None => {
                let verification = Verification::from_options(&options);
                py.detach(|| verification.run())
            }
        }
        .map_err(|e| conversion_error(py, &e))?;
        Ok(pythonize::pythonize(py, &verified)?)
    })
}

/// How far the conversion into `dst` has come, from `dst` alone (the status document); with
/// `watch` in `options`, read again every so many seconds until the conversion is finished (Ctrl-C,
/// `KeyboardInterrupt`, stops waiting), the last reading returned.
#[pyfunction]
fn status<'py>(
    py: Python<'py>,
    dst: &Bound<'py, PyAny>,
    options: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    // Messages name settings as this module's keyword arguments (`memory_limit=`).
    keywords(|| {
        let options: StatusOptions = lower::model(py, Action::Status, dst, None, options)?;
        loop {
            let status = py
                .detach(|| options.status_read(false))
                .map_err(|e| conversion_error(py, &e))?;
            let over = StatusOptions::watch_is_over(&status);
            let Some(interval) = options.watch.filter(|_| !over) else {
                return Ok(pythonize::pythonize(py, &status)?);
            };
            let until = Instant::now() + interval.duration();
            while Instant::now() < until {
                py.check_signals()?;
                py.detach(|| {
                    std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())))
                });
            }
        }
    })
}

/// The arrays and groups of `src` read with `options`.
#[pyfunction]
fn ls<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyAny>,
    options: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    // Messages name settings as this module's keyword arguments (`memory_limit=`).
    keywords(|| {
        let options: Options = lower::model(py, Action::List, src, None, options)?;
        let (read, store) = (options.input.resolve(), options.storage.store_options());
        let listing = py
            .detach(|| zshard_convert::list(&options.source, &read, &store))
            .map_err(|e| conversion_error(py, &e))?;
        Ok(pythonize::pythonize(py, &listing)?)
    })
}

/// The conversion that `plan` or `finalize` (`action`) runs.
fn configured(
    py: Python<'_>,
    action: Action,
    src: &Bound<'_, PyAny>,
    dst: &Bound<'_, PyAny>,
    options: &Bound<'_, PyDict>,
) -> PyResult<Conversion> {
    let mut options: Options = lower::model(py, action, src, Some(dst), options)?;
    if matches!(action, Action::Finalize) {
        // What is not given comes from the conversion DST records (its workers' options).
        options = options
            .with_recorded()
            .map_err(|e| conversion_error(py, &e))?;
    }
    let (conversion, configured) = Conversion::configured(&options);
    configured.map_err(|e| conversion_error(py, &e))?;
    Ok(conversion)
}

/// `f` with the library's messages naming settings as this module's keyword arguments.
fn keywords<R>(f: impl FnOnce() -> R) -> R {
    zshard_convert::spelled(zshard_convert::Spelling::Keyword, f)
}

fn warn(py: Python<'_>, message: &str) -> PyResult<()> {
    let category = py.import("zshard._errors")?.getattr("ZshardWarning")?;
    PyErr::warn(py, &category, &std::ffi::CString::new(message)?, 1)
}

/// Converts on a thread of its own while this one, without the GIL, polls Python: a signal handler
/// that raises (Ctrl-C's `KeyboardInterrupt`) or a progress callback that raises cancels the
/// conversion, which then stops cleanly; that exception is raised once it has.
fn run_conversion(
    py: Python<'_>,
    conversion: &Conversion,
    progress: Option<&Py<PyAny>>,
) -> PyResult<zshard_convert::Report> {
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
            let handle = scope.spawn(zshard_convert::inheriting(|| conversion.convert(&counters)));
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
    converted.map_err(|e| conversion_error(py, &e))
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
            warn(py, &message)?;
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
    dict.set_item("objects_listed", f.objects_listed)?;
    Ok(dict)
}

/// The extension module `zshard._zshard`.
#[pymodule]
fn _zshard(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(convert, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(finalize, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(ls, m)?)?;
    m.add_function(wrap_pyfunction!(status, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(settings, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
