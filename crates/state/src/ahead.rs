//! A state write sent ahead of the run: the options record (and an update's record of what it sets
//! out to write) goes out while the first source chunks are fetched (a round trip saved on an
//! object store), and no shard is written before it has landed, which is the order resume needs (a
//! shard is only ever found beside the options that made it).

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;
use zshard_core::{ShardSink, ShardStream};
use zshard_store::Store;

use crate::error::{Error, Result};

/// A write in flight on a thread of its own, that [`AfterWrite`] sinks wait for.
#[derive(Debug)]
pub struct WriteAhead {
    key: String,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    /// Not yet waited for.
    InFlight(JoinHandle<Result<()>>),
    /// It landed.
    Landed,
    /// It failed: the error (until [`WriteAhead::finish`] takes it) and its message for sinks.
    Failed(Option<Error>, String),
}

impl WriteAhead {
    /// Starts writing `data` at `key` of `store`.
    pub fn start(store: &Store, key: &str, data: Bytes) -> Result<WriteAhead> {
        let (store, owned_key) = (store.clone(), key.to_string());
        Self::spawn(key, "the options record", move || {
            store.put(&owned_key, data).map_err(Error::from)
        })
    }

    /// Starts writing `data` at `key` of `store` unless an object is there already (which is kept:
    /// the record of a run that this one resumes).
    pub fn start_new(store: &Store, key: &str, data: Bytes) -> Result<WriteAhead> {
        let (store, owned_key) = (store.clone(), key.to_string());
        Self::spawn(key, "the update record", move || {
            store
                .put_new(&owned_key, data)
                .map(|_| ())
                .map_err(Error::from)
        })
    }

    /// `write` (of `key`, which `what` names) on a thread of its own.
    fn spawn(
        key: &str,
        what: &'static str,
        write: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Result<WriteAhead> {
        let handle = std::thread::Builder::new()
            .name("zshard-ahead".into())
            .spawn(write)
            .map_err(|source| Error::Thread { what, source })?;
        Ok(WriteAhead {
            key: key.to_string(),
            state: Mutex::new(State::InFlight(handle)),
        })
    }

    /// Waits until the write has landed; the failure's message if it did not. Callers after the
    /// first find the outcome at once.
    fn wait(&self) -> std::result::Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, State::InFlight(_)) {
            if let State::InFlight(handle) = std::mem::replace(&mut *state, State::Landed) {
                let outcome = handle.join().unwrap_or(Err(Error::Poisoned {
                    what: "the options record",
                }));
                if let Err(e) = outcome {
                    let message = crate::error::one_line(&e);
                    *state = State::Failed(Some(e), message);
                }
            }
        }
        match &*state {
            State::Failed(_, message) => Err(message.clone()),
            _ => Ok(()),
        }
    }

    /// Waits until the write has landed (before the run records anything or removes its state) and
    /// hands over its error.
    pub fn finish(&self) -> Result<()> {
        if self.wait().is_ok() {
            return Ok(());
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *state {
            State::Failed(error, message) => {
                Err(error.take().unwrap_or_else(|| Error::Destination {
                    reason: message.clone(),
                }))
            }
            _ => Ok(()),
        }
    }

    /// Wraps `sink` so that it writes nothing before this write has landed.
    pub fn before(self: &Arc<Self>, sink: Arc<dyn ShardSink>) -> Arc<dyn ShardSink> {
        Arc::new(AfterWrite {
            sink,
            ahead: Arc::clone(self),
        })
    }
}

impl Drop for WriteAhead {
    /// A run that ends early still waits for the write (no thread outlives it).
    fn drop(&mut self) {
        let _ = self.wait();
    }
}

/// A sink whose shards wait for a [`WriteAhead`] (and fail if it failed).
#[derive(Debug)]
struct AfterWrite {
    sink: Arc<dyn ShardSink>,
    ahead: Arc<WriteAhead>,
}

impl AfterWrite {
    fn landed(&self) -> zshard_core::Result<()> {
        self.ahead
            .wait()
            .map_err(|message| zshard_core::Error::Write {
                key: self.ahead.key.clone(),
                source: message.into(),
            })
    }
}

impl ShardSink for AfterWrite {
    fn shard_key(&self, shard: &[u64]) -> String {
        self.sink.shard_key(shard)
    }

    fn write_shard(
        &self,
        shard: &[u64],
        inner: &[Option<Bytes>],
    ) -> zshard_core::Result<zshard_core::Stored> {
        self.landed()?;
        self.sink.write_shard(shard, inner)
    }

    fn begin_shard(
        &self,
        shard: &[u64],
        chunks: usize,
    ) -> zshard_core::Result<Box<dyn ShardStream + '_>> {
        self.landed()?;
        self.sink.begin_shard(shard, chunks)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use zshard_store::IoRuntime;

    use super::*;

    /// A sink that counts the shards it was handed.
    #[derive(Debug, Default)]
    struct Counting(AtomicUsize);

    impl ShardSink for Counting {
        fn shard_key(&self, shard: &[u64]) -> String {
            format!("c/{shard:?}")
        }

        fn write_shard(
            &self,
            _: &[u64],
            _: &[Option<Bytes>],
        ) -> zshard_core::Result<zshard_core::Stored> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(zshard_core::Stored::NOTHING)
        }
    }

    /// The options record written ahead into `dir`, and a counting sink behind it.
    fn ahead_of_counting(
        dir: &std::path::Path,
    ) -> (Arc<WriteAhead>, Arc<Counting>, Arc<dyn ShardSink>) {
        let runtime = IoRuntime::new(1).expect("runtime");
        let store = Store::open(dir.to_str().expect("utf-8"), runtime, true).expect("open");
        let ahead = Arc::new(
            WriteAhead::start(&store, ".zshard/options/w0of1.json", Bytes::from("{}"))
                .expect("start"),
        );
        let counting = Arc::new(Counting::default());
        let sink = ahead.before(counting.clone());
        (ahead, counting, sink)
    }

    #[test]
    fn shards_are_written_once_the_write_has_landed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ahead, counting, sink) = ahead_of_counting(dir.path());
        assert_eq!(
            sink.write_shard(&[0], &[]).expect("write"),
            zshard_core::Stored::NOTHING
        );
        // The shard went through only after the record was there.
        let record = dir.path().join(".zshard/options/w0of1.json");
        assert_eq!(std::fs::read(record).expect("record"), b"{}");
        assert_eq!(counting.0.load(Ordering::SeqCst), 1);
        ahead.finish().expect("landed");
    }

    #[test]
    fn a_write_that_fails_stops_every_shard_and_is_the_run_s_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A file where the record's folder would go: the write cannot land.
        std::fs::write(dir.path().join(".zshard"), b"not a folder").expect("file");
        let (ahead, counting, sink) = ahead_of_counting(dir.path());
        for shard in [[0u64], [1]] {
            let error = sink.write_shard(&shard, &[]).expect_err("refused");
            assert_eq!(error.to_string(), "cannot write .zshard/options/w0of1.json");
            let cause = std::error::Error::source(&error)
                .expect("cause")
                .to_string();
            assert!(cause.contains("options/w0of1.json"), "{cause}");
        }
        assert!(sink.begin_shard(&[2], 1).is_err());
        assert_eq!(counting.0.load(Ordering::SeqCst), 0);
        let error = ahead.finish().expect_err("failed");
        assert!(
            crate::error::one_line(&error).contains("options/w0of1.json"),
            "{error}"
        );
    }

    /// An update's record written ahead is create-only: a resumed run keeps the first run's
    /// record, and its shards still wait for the write.
    #[test]
    fn a_create_only_write_keeps_what_is_there() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runtime = IoRuntime::new(1).expect("runtime");
        let store = Store::open(dir.path().to_str().expect("utf-8"), runtime, true).expect("open");
        let key = ".zshard/update/w0of1.txt";
        let ahead =
            Arc::new(WriteAhead::start_new(&store, key, Bytes::from("first")).expect("start"));
        ahead.finish().expect("landed");
        let again =
            Arc::new(WriteAhead::start_new(&store, key, Bytes::from("second")).expect("start"));
        let counting = Arc::new(Counting::default());
        let sink = again.before(counting.clone());
        sink.write_shard(&[0], &[]).expect("write");
        again.finish().expect("landed");
        assert_eq!(
            std::fs::read(dir.path().join(key)).expect("record"),
            b"first"
        );
        assert_eq!(counting.0.load(Ordering::SeqCst), 1);
    }
}
