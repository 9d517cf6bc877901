//! Progress of a conversion for people and for logs: a bar on a terminal, or a line every
//! `--log-interval` when stderr is a file (a SLURM or Airflow log), with the same figures: raw bytes
//! done of the total (parts of shards count as they are written, so a large shard advances), chunks,
//! shards, bytes read and written, the rate and an ETA from bytes, and the array being converted.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};
use zshard_convert::{ListedCount, Observer, PartOutcome, ShardOutcome, Work};

/// `--progress`: how a conversion shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// A bar when stderr is a terminal, else log lines.
    #[default]
    Auto,
    /// A bar (drawn only on a terminal).
    Bar,
    /// A line every --log-interval, and a last one at the end.
    Log,
    /// Nothing while running (the summary is still printed unless --quiet).
    None,
}

/// The progress flags, global to every command that converts (`convert`, `run`, `demo`).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct ProgressArgs {
    /// How progress is shown: auto, bar, log or none
    ///
    /// How progress is shown: auto (a bar on a terminal, log lines otherwise), bar, log or none.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = Mode::Auto,
        value_name = "MODE",
        hide_possible_values = true
    )]
    progress: Mode,
    /// Time between two progress lines in log mode, e.g. 30s, 5s, 2m.
    #[arg(long, global = true, default_value = "30s", value_parser = interval, value_name = "DURATION")]
    log_interval: Duration,
}

fn interval(text: &str) -> Result<Duration, String> {
    let parsed = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if parsed.is_zero() {
        return Err("must be longer than 0s".to_string());
    }
    Ok(parsed)
}

/// The settings given on the command line, read by every [`Progress`] of the process.
static SETTINGS: OnceLock<ProgressArgs> = OnceLock::new();

impl ProgressArgs {
    /// Makes these the settings of every progress display from now on.
    pub fn install(self) {
        let _ = SETTINGS.set(self);
    }
}

/// What is shown.
#[derive(Debug)]
enum Display {
    Bar(ProgressBar),
    Log(Duration),
    Hidden,
}

/// The counts of a run, updated by the library's events and read by the display.
#[derive(Debug, Default)]
struct Counts {
    raw_done: AtomicU64,
    raw_total: AtomicU64,
    chunks_done: AtomicU64,
    chunks_total: AtomicU64,
    shards_done: AtomicU64,
    shards_total: AtomicU64,
    /// Raw bytes earlier runs did (counted in `raw_done` from the start, not in the rate).
    raw_before: AtomicU64,
    read: AtomicU64,
    written: AtomicU64,
    /// The array of the part written last.
    array: Mutex<String>,
    /// When the work started.
    start: OnceLock<Instant>,
}

impl Counts {
    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn elapsed(&self) -> Duration {
        self.start.get().map_or(Duration::ZERO, Instant::elapsed)
    }

    /// Raw bytes per second this run did since its start.
    fn rate(&self) -> f64 {
        let seconds = self.elapsed().as_secs_f64();
        let this_run = Self::get(&self.raw_done).saturating_sub(Self::get(&self.raw_before));
        if seconds > 0.0 {
            this_run as f64 / seconds
        } else {
            0.0
        }
    }

    /// The figures as `key=value` fields, for logs (and people reading them).
    fn fields(&self) -> String {
        let (done, total) = (Self::get(&self.raw_done), Self::get(&self.raw_total));
        let rate = self.rate();
        let eta = if done >= total {
            "0s".to_string()
        } else if rate > 0.0 {
            compact(Duration::from_secs(
                ((total - done) as f64 / rate).ceil() as u64
            ))
        } else {
            "unknown".to_string()
        };
        let percent = if total == 0 {
            100.0
        } else {
            100.0 * done as f64 / total as f64
        };
        let array = self.array.lock().map(|a| a.clone()).unwrap_or_default();
        format!(
            "elapsed={} array={} done={percent:.1}% bytes={}/{} chunks={}/{} shards={}/{} read={} written={} rate={}/s eta={eta}",
            compact(Duration::from_secs(self.elapsed().as_secs())),
            if array.is_empty() { "-" } else { &array },
            bytes(done),
            bytes(total),
            Self::get(&self.chunks_done),
            Self::get(&self.chunks_total),
            Self::get(&self.shards_done),
            Self::get(&self.shards_total),
            bytes(Self::get(&self.read)),
            bytes(Self::get(&self.written)),
            bytes(rate as u64),
        )
    }

    /// The figures the bar's template does not show itself.
    fn bar_message(&self) -> String {
        let array = self.array.lock().map(|a| a.clone()).unwrap_or_default();
        format!(
            // Output inner chunks; the summary counts the source chunks read.
            "{array}: inner chunks {}/{}, shards {}/{}, read {}, written {}",
            Self::get(&self.chunks_done),
            Self::get(&self.chunks_total),
            Self::get(&self.shards_done),
            Self::get(&self.shards_total),
            HumanBytes(Self::get(&self.read)),
            HumanBytes(Self::get(&self.written)),
        )
    }
}

/// A byte count without spaces (`1.50MiB`), so that a log field is one word.
fn bytes(n: u64) -> String {
    HumanBytes(n).to_string().replace(' ', "")
}

/// A duration without spaces (`1m45s`); humantime reads it back.
fn compact(d: Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
}

/// Shows the progress of one conversion as the library reports it (see the module doc).
#[derive(Debug)]
pub struct Progress {
    display: Display,
    counts: Arc<Counts>,
    /// The run got as far as converting (no bar or final line is left behind by a failure before).
    started: AtomicBool,
    /// The thread printing log lines, and the sender that stops it.
    logger: Mutex<Option<(mpsc::Sender<()>, JoinHandle<()>)>>,
    /// The thread showing the source's listing before the work is known, and its stop.
    lister: Mutex<Option<(mpsc::Sender<()>, JoinHandle<()>)>>,
}

impl Progress {
    /// A display as the command line chose (`--progress`, `--log-interval`); nothing when quiet.
    pub fn new(quiet: bool) -> Self {
        let settings = SETTINGS.get().copied().unwrap_or(ProgressArgs {
            progress: Mode::Auto,
            log_interval: Duration::from_secs(30),
        });
        let terminal = std::io::stderr().is_terminal();
        let display = match settings.progress {
            _ if quiet => Display::Hidden,
            Mode::None => Display::Hidden,
            Mode::Log => Display::Log(settings.log_interval),
            Mode::Auto if !terminal => Display::Log(settings.log_interval),
            Mode::Auto | Mode::Bar => Display::Bar(bar()),
        };
        if let Display::Bar(bar) = &display {
            crate::signals::show_notices_above(Some(bar.clone()));
        }
        Progress {
            display,
            counts: Arc::new(Counts::default()),
            started: AtomicBool::new(false),
            logger: Mutex::new(None),
            lister: Mutex::new(None),
        }
    }

    /// Ends the display: clears the bar after a run that succeeded (leaves it where it stopped after
    /// a failure); in log mode prints the last line.
    pub fn finish(&self, status: zshard_convert::Status) {
        let succeeded = matches!(
            status,
            zshard_convert::Status::Ok | zshard_convert::Status::Complete
        );
        self.stop_listing();
        crate::signals::show_notices_above(None);
        let started = self.started.load(Ordering::Relaxed);
        match &self.display {
            Display::Bar(bar) if succeeded || !started => bar.finish_and_clear(),
            Display::Bar(bar) => bar.abandon(),
            Display::Log(_) => {
                let logger = self.logger.lock().ok().and_then(|mut l| l.take());
                if let Some((stop, thread)) = logger {
                    drop(stop);
                    let _ = thread.join();
                }
                if started {
                    // The report's word for it.
                    eprintln!(
                        "zshard: finished status={} {}",
                        status.word(),
                        self.counts.fields()
                    );
                }
            }
            Display::Hidden => {}
        }
    }

    /// Stops showing the listing (the work is known, or the run ends).
    fn stop_listing(&self) {
        let lister = self.lister.lock().ok().and_then(|mut l| l.take());
        if let Some((stop, thread)) = lister {
            drop(stop);
            let _ = thread.join();
        }
    }

    /// Starts the log lines: one every `every` until [`Progress::finish`].
    fn start_logging(&self, every: Duration) {
        let (stop, stopped) = mpsc::channel::<()>();
        let counts = Arc::clone(&self.counts);
        let thread = std::thread::Builder::new()
            .name("zshard-progress".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    eprintln!("zshard: progress {}", counts.fields());
                }
            });
        match thread {
            Ok(thread) => {
                if let Ok(mut logger) = self.logger.lock() {
                    *logger = Some((stop, thread));
                }
            }
            Err(e) => eprintln!("zshard: warning: no progress lines: {e}"),
        }
    }
}

/// The bar: raw bytes done of the total with rate and ETA, then the other figures.
fn bar() -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    bar.set_style(bar_style());
    bar
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}, ETA {eta} | {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// While the source is listed (and the destination surveyed): no bytes to count yet, the objects
/// listed.
fn listing_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn listing_message(objects: u64) -> String {
    format!("listing the source and the destination: {objects} objects")
}

impl Observer for Progress {
    /// A spinner with the objects listed so far, or a log line every `--log-interval` (a long
    /// listing otherwise shows nothing for minutes), until the work is known.
    fn listing(&self, listed: &ListedCount) {
        let (every, bar) = match &self.display {
            Display::Bar(bar) => (Duration::from_millis(200), Some(bar.clone())),
            Display::Log(every) => (*every, None),
            Display::Hidden => return,
        };
        if let Some(bar) = &bar {
            bar.set_style(listing_style());
            bar.set_message(listing_message(0));
            bar.enable_steady_tick(every);
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let listed = listed.clone();
        let start = Instant::now();
        let thread = std::thread::Builder::new()
            .name("zshard-listing".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    match &bar {
                        Some(bar) => bar.set_message(listing_message(listed.get())),
                        None => eprintln!(
                            "zshard: listing elapsed={} objects={}",
                            compact(Duration::from_secs(start.elapsed().as_secs())),
                            listed.get()
                        ),
                    }
                }
            });
        if let (Ok(thread), Ok(mut lister)) = (thread, self.lister.lock()) {
            *lister = Some((stop, thread));
        }
    }

    fn started(&self, pending_shards: u64) {
        self.stop_listing();
        self.started.store(true, Ordering::Relaxed);
        self.counts
            .shards_total
            .store(pending_shards, Ordering::Relaxed);
    }

    /// The whole share from the start: what earlier runs did counts as done (issue 44), as
    /// `zshard status` counts it; a log's first line says where the run starts.
    fn work(&self, work: &Work) {
        let counts = &self.counts;
        let raw_total = work.raw_bytes + work.done_raw_bytes;
        counts.raw_total.store(raw_total, Ordering::Relaxed);
        counts
            .raw_done
            .store(work.done_raw_bytes, Ordering::Relaxed);
        counts
            .raw_before
            .store(work.done_raw_bytes, Ordering::Relaxed);
        counts.chunks_total.store(
            work.inner_chunks + work.done_inner_chunks,
            Ordering::Relaxed,
        );
        counts
            .chunks_done
            .store(work.done_inner_chunks, Ordering::Relaxed);
        counts
            .shards_total
            .store(work.shards + work.done_shards, Ordering::Relaxed);
        counts
            .shards_done
            .store(work.done_shards, Ordering::Relaxed);
        let _ = counts.start.set(Instant::now());
        match &self.display {
            Display::Bar(bar) => {
                bar.set_style(bar_style());
                bar.set_length(raw_total);
                bar.set_position(work.done_raw_bytes);
                // The rate and ETA from this run's progress, not the jump to what was done.
                bar.reset_eta();
                bar.set_message(counts.bar_message());
                bar.enable_steady_tick(Duration::from_millis(200));
            }
            Display::Log(every) => {
                eprintln!("zshard: progress {}", counts.fields());
                self.start_logging(*every)
            }
            Display::Hidden => {}
        }
    }

    fn part_done(&self, array: &str, part: &PartOutcome) {
        let counts = &self.counts;
        if let Ok(mut current) = counts.array.lock() {
            if current.as_str() != array {
                *current = array.to_string();
            }
        }
        counts.raw_done.fetch_add(part.raw_bytes, Ordering::Relaxed);
        counts
            .chunks_done
            .fetch_add(part.inner_chunks, Ordering::Relaxed);
        counts.read.fetch_add(part.bytes_read, Ordering::Relaxed);
        counts
            .written
            .fetch_add(part.bytes_written, Ordering::Relaxed);
        if let Display::Bar(bar) = &self.display {
            bar.inc(part.raw_bytes);
            bar.set_message(counts.bar_message());
        }
    }

    fn shard_done(&self, _outcome: &ShardOutcome) {
        self.counts.shards_done.fetch_add(1, Ordering::Relaxed);
        if let Display::Bar(bar) = &self.display {
            bar.set_message(self.counts.bar_message());
        }
    }

    fn warning(&self, message: &str) {
        match &self.display {
            Display::Bar(bar) => bar.suspend(|| eprintln!("zshard: warning: {message}")),
            _ => eprintln!("zshard: warning: {message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_read_as_humantime() {
        assert_eq!(interval("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(interval("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(interval("1m30s"), Ok(Duration::from_secs(90)));
        assert!(interval("0s").is_err());
        assert!(interval("soon").is_err());
    }

    #[test]
    fn log_fields_are_single_words() {
        let counts = Counts::default();
        counts.raw_total.store(4 << 20, Ordering::Relaxed);
        counts.raw_done.store(1 << 20, Ordering::Relaxed);
        counts.chunks_total.store(8, Ordering::Relaxed);
        counts.chunks_done.store(2, Ordering::Relaxed);
        let fields = counts.fields();
        assert!(
            fields.contains(" array=- done=25.0% bytes=1.00MiB/4.00MiB chunks=2/8 shards=0/0 "),
            "{fields}"
        );
        assert!(fields.ends_with("eta=unknown"), "{fields}");
        assert_eq!(compact(Duration::from_secs(105)), "1m45s");
    }
}
