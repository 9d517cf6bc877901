//! The typed values of settings that are more than a number or a word: intervals, sizes, the
//! reference coalescing gap, level shapes, and the lease's staleness from the environment, each
//! parsed (and shown) in one place for every front end; and the serde helpers that read settings
//! as their text (`text`, `ome`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zshard_core::Setting;

use crate::error::{Error, Result};
use crate::plan::input::{OnUnsupported, SourceFormat};
use crate::plan::LevelShapes;
use crate::ShapeSpec;

/// A time between two readings, in seconds (a positive, finite number; fractions allowed).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Interval(f64);

impl Interval {
    /// `seconds` as an interval: positive and at most a day.
    pub fn from_secs(seconds: f64) -> Result<Interval> {
        if seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0 {
            Ok(Interval(seconds))
        } else {
            Err(Error::Options {
                reason: format!(
                    "{} is a number of seconds above 0 and at most 86400, got {seconds}",
                    Setting::Watch
                ),
            })
        }
    }

    /// As a [`Duration`].
    pub fn duration(self) -> Duration {
        Duration::from_secs_f64(self.0)
    }
}

impl FromStr for Interval {
    type Err = Error;

    fn from_str(s: &str) -> Result<Interval> {
        let text = s.trim();
        let number = text.strip_suffix('s').unwrap_or(text).trim();
        let seconds = number.parse::<f64>().map_err(|_| Error::Options {
            reason: format!(
                "{} takes a number of seconds, e.g. 2 or 0.5, got {s:?}",
                Setting::Watch
            ),
        })?;
        Interval::from_secs(seconds)
    }
}

impl<'de> Deserialize<'de> for Interval {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::Number(n) => {
                let seconds = n.as_f64().unwrap_or(f64::NAN);
                Interval::from_secs(seconds).map_err(serde::de::Error::custom)
            }
            serde_json::Value::String(text) => text.parse().map_err(serde::de::Error::custom),
            other => Err(serde::de::Error::custom(format!(
                "{} takes a number of seconds, got {other}",
                Setting::Watch
            ))),
        }
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How often a conversion records the shards it has written, each time after a checkpoint on local
/// disk (one `syncfs`, see [`zshard_store::Store::checkpoint`]): a duration from
/// [`CheckpointInterval::MIN`] to [`CheckpointInterval::MAX`], given as text (`10s`, `500ms`,
/// `2m`, as [`humantime`] reads it; a bare number is seconds) or as a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckpointInterval(Duration);

impl CheckpointInterval {
    /// The shortest interval: below it the checkpoints (a sync of the whole filesystem each) would
    /// take more of the run than the shards.
    pub const MIN: Duration = Duration::from_millis(10);
    /// The longest interval: beyond it a crash leaves more to check than a checkpoint saves.
    pub const MAX: Duration = Duration::from_secs(3600);

    /// `interval`, when it lies in [`MIN`](Self::MIN)..=[`MAX`](Self::MAX).
    pub fn new(interval: Duration) -> Result<CheckpointInterval> {
        if (Self::MIN..=Self::MAX).contains(&interval) {
            Ok(CheckpointInterval(interval))
        } else {
            Err(Error::Options {
                reason: format!(
                    "{} is a duration from 10ms to 1h, e.g. 10s, got {}",
                    Setting::CheckpointInterval,
                    humantime::format_duration(interval)
                ),
            })
        }
    }

    /// `seconds` as an interval (a job file's or Python's number).
    pub fn from_secs(seconds: f64) -> Result<CheckpointInterval> {
        let interval = Duration::try_from_secs_f64(seconds).map_err(|_| Error::Options {
            reason: format!(
                "{} is a duration from 10ms to 1h, e.g. 10s, got {seconds} seconds",
                Setting::CheckpointInterval
            ),
        })?;
        CheckpointInterval::new(interval)
    }

    /// As a [`Duration`].
    pub fn duration(self) -> Duration {
        self.0
    }
}

impl FromStr for CheckpointInterval {
    type Err = Error;

    fn from_str(s: &str) -> Result<CheckpointInterval> {
        let text = s.trim();
        if let Ok(seconds) = text.parse::<f64>() {
            return CheckpointInterval::from_secs(seconds);
        }
        let interval = humantime::parse_duration(text).map_err(|e| Error::Options {
            reason: format!(
                "{} takes a duration such as 10s, 500ms or 2m, got {s:?} ({e})",
                Setting::CheckpointInterval
            ),
        })?;
        CheckpointInterval::new(interval)
    }
}

impl fmt::Display for CheckpointInterval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl Serialize for CheckpointInterval {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        // One word (`1m 30s` would not read back as a flag's value).
        serializer.serialize_str(&self.to_string().replace(' ', ""))
    }
}

impl<'de> Deserialize<'de> for CheckpointInterval {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::Number(n) => {
                let seconds = n.as_f64().unwrap_or(f64::NAN);
                CheckpointInterval::from_secs(seconds).map_err(serde::de::Error::custom)
            }
            serde_json::Value::String(text) => text.parse().map_err(serde::de::Error::custom),
            other => Err(serde::de::Error::custom(format!(
                "{} takes a duration such as \"10s\" or a number of seconds, got {other}",
                Setting::CheckpointInterval
            ))),
        }
    }
}

/// A size in bytes: an integer, or text with a unit (`512MiB`, `4G`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(pub u64);

/// The reference coalescing gap: a size, or `off` (`None`: one request per reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoalesceGap(pub Option<u64>);

impl FromStr for CoalesceGap {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        if s.trim().eq_ignore_ascii_case("off") {
            return Ok(CoalesceGap(None));
        }
        crate::parse_size(s).map(|n| CoalesceGap(Some(n)))
    }
}

/// The variable that sets how long a run's lease on its destination stays fresh without renewal.
pub const LEASE_VARIABLE: &str = "ZSHARD_LEASE_STALE_SECONDS";

/// How long a run's lease stays fresh: [`LEASE_VARIABLE`] in `env` (seconds, fractions allowed),
/// else [`DEFAULT_LEASE_STALE_AFTER`](crate::DEFAULT_LEASE_STALE_AFTER).
pub fn lease_stale_after(env: impl Fn(&str) -> Option<String>) -> Result<Duration> {
    let Some(text) = env(LEASE_VARIABLE) else {
        return Ok(crate::DEFAULT_LEASE_STALE_AFTER);
    };
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| Error::Options {
            reason: format!("{LEASE_VARIABLE}={text:?} is not a positive number of seconds"),
        })
}

/// One `level_shapes` entry as text, `LEVEL:SHARD[/CHUNK]` (`2:1,256,256/1,64,64`): the level and
/// its shapes (extents by position).
pub fn parse_level_shapes(text: &str) -> Result<(usize, LevelShapes)> {
    let invalid = |why: String| Error::Options {
        reason: format!(
            "{} {text:?}: {why} (expected LEVEL:SHARD[/CHUNK], e.g. 1:1,512,512/1,128,128)",
            Setting::LevelShapes
        ),
    };
    let (level, shapes) = text
        .split_once(':')
        .ok_or_else(|| invalid("no LEVEL:".into()))?;
    let level = level
        .trim()
        .parse::<usize>()
        .map_err(|_| invalid(format!("{level:?} is not a level number")))?;
    let positional = |s: &str| match s.parse::<ShapeSpec>() {
        Ok(ShapeSpec::Positional(shape)) => Ok(shape),
        Ok(ShapeSpec::ByName(_)) => Err(invalid(format!(
            "{s:?}: a level's extents are by position (a,b,...)"
        ))),
        Err(e) => Err(invalid(crate::one_line(&e))),
    };
    let (shard, chunk) = match shapes.split_once('/') {
        Some((shard, chunk)) => (shard, Some(positional(chunk)?)),
        None => (shapes, None),
    };
    Ok((
        level,
        LevelShapes {
            shard_shape: positional(shard)?,
            chunk_shape: chunk,
        },
    ))
}

/// The `level_shapes` setting as a job file gives it (a table by level) or as the command line and
/// Python give it (a list of `LEVEL:SHARD[/CHUNK]` texts, read by [`parse_level_shapes`]).
pub(crate) mod level_shapes {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer};

    use crate::plan::LevelShapes;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<BTreeMap<usize, LevelShapes>, D::Error> {
        use serde::de::Error as _;
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::Array(texts) => texts
                .iter()
                .map(|text| match text {
                    serde_json::Value::String(text) => {
                        super::parse_level_shapes(text).map_err(|e| crate::one_line(&e))
                    }
                    other => Err(format!("expected a LEVEL:SHARD[/CHUNK] text, got {other}")),
                })
                .collect::<std::result::Result<_, _>>()
                .map_err(D::Error::custom),
            by_level => serde_json::from_value(by_level).map_err(D::Error::custom),
        }
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(text) => crate::parse_size(&text)
                .map(Size)
                .map_err(serde::de::Error::custom),
            serde_json::Value::Number(n) => n
                .as_u64()
                .map(Size)
                .ok_or_else(|| serde::de::Error::custom(format!("{n} is not a size in bytes"))),
            other => Err(serde::de::Error::custom(format!(
                "{other} is not a size (bytes, or text such as \"4GiB\")"
            ))),
        }
    }
}

impl Serialize for CoalesceGap {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0 {
            Some(n) => serializer.serialize_u64(n),
            None => serializer.serialize_str("off"),
        }
    }
}

impl<'de> Deserialize<'de> for CoalesceGap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(text) => text.parse().map_err(serde::de::Error::custom),
            serde_json::Value::Number(n) => n
                .as_u64()
                .map(|n| CoalesceGap(Some(n)))
                .ok_or_else(|| serde::de::Error::custom(format!("{n} is not a size in bytes"))),
            other => Err(serde::de::Error::custom(format!(
                "{other} is not a size or off"
            ))),
        }
    }
}

impl fmt::Display for SourceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SourceFormat::Zarr => "zarr",
            SourceFormat::KerchunkJson => "kerchunk-json",
            SourceFormat::KerchunkParquet => "kerchunk-parquet",
            SourceFormat::Icechunk => "icechunk",
            SourceFormat::N5 => "n5",
        })
    }
}

impl fmt::Display for OnUnsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnUnsupported::Refuse => "refuse",
            OnUnsupported::Skip => "skip",
        })
    }
}

/// (De)serializes an optional value as its text (`Display` / `FromStr`, so the library's own
/// parse and wording); a number or a list is taken as its JSON text (`2`, a codec list).
pub(super) mod text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<T: Display, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => serializer.collect_str(value),
            None => serializer.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, T, D>(deserializer: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let text = match Option::<serde_json::Value>::deserialize(deserializer)? {
            None => return Ok(None),
            Some(serde_json::Value::String(text)) => text,
            Some(other) => other.to_string(),
        };
        text.parse().map(Some).map_err(serde::de::Error::custom)
    }
}

/// (De)serializes [`OmeMetadata`] as `upgrade` or `keep`.
pub(super) mod ome {
    use serde::{Deserialize, Deserializer, Serializer};
    use zshard_zarr::ome::OmeMetadata;

    pub(crate) fn serialize<S: Serializer>(
        value: &Option<OmeMetadata>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(OmeMetadata::Upgrade) => serializer.serialize_str("upgrade"),
            Some(OmeMetadata::Keep) => serializer.serialize_str("keep"),
            Some(OmeMetadata::V06) => serializer.serialize_str("0.6"),
            None => serializer.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<OmeMetadata>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|text| text.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}
