//! Small helpers to read codec configurations.

use zshard_core::CodecSpec;

use crate::error::{invalid, Result};

pub(crate) fn int(spec: &CodecSpec, key: &str, default: Option<i64>) -> Result<i64> {
    match spec.get(key) {
        Some(v) => v
            .as_i64()
            .ok_or_else(|| invalid(&spec.name, format!("{key} must be an integer, got {v}"))),
        None => default.ok_or_else(|| invalid(&spec.name, format!("missing {key}"))),
    }
}

pub(crate) fn string<'a>(spec: &'a CodecSpec, key: &str) -> Option<&'a str> {
    spec.get(key).and_then(|v| v.as_str())
}
