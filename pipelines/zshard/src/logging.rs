//! `-v` / `-vv` / `RUST_LOG`: request-level detail (retries, coalesced ranges, passthrough
//! decisions) through `tracing`, printed to stderr above the progress bar.

use std::io::Write;

use tracing_subscriber::EnvFilter;

/// The crates of zshard, whose detail `-v` shows (not that of the HTTP client below them).
const OWN_CRATES: &[&str] = &[
    "zshard",
    "zshard_convert",
    "zshard_store",
    "zshard_pipeline",
    "zshard_zarr",
    "zshard_kerchunk",
    "zshard_writer",
];

/// The verbosity flags.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct LoggingArgs {
    /// More detail on stderr: -v zshard's decisions and requests, -vv the HTTP client too
    ///
    /// More detail on stderr: -v for zshard's decisions and requests (retries, coalesced ranges,
    /// passthrough), -vv for everything including the HTTP client. RUST_LOG (e.g.
    /// RUST_LOG=zshard_store=debug) overrides both.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
}

impl LoggingArgs {
    /// Starts printing tracing events as the flags and RUST_LOG say; nothing without either.
    pub fn install(self) {
        let filter = match std::env::var("RUST_LOG") {
            Ok(directives) if !directives.trim().is_empty() => EnvFilter::new(directives),
            _ => match self.verbose {
                0 => return,
                1 => EnvFilter::new(own_crates_at("debug")),
                _ => EnvFilter::new(format!("debug,{}", own_crates_at("trace"))),
            },
        };
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(|| AboveBar)
            .with_ansi(false)
            .with_target(true)
            .try_init();
    }
}

fn own_crates_at(level: &str) -> String {
    OWN_CRATES
        .iter()
        .map(|c| format!("{c}={level}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Stderr, written above the progress bar while one is shown.
struct AboveBar;

impl Write for AboveBar {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut written = Ok(0);
        crate::signals::above_bar(|| {
            written = std::io::stderr().write_all(buf).map(|()| buf.len())
        });
        written
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
