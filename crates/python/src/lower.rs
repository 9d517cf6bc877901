//! Keyword arguments -> the library's options model: the one place the Python front end lowers
//! (the command line's is `pipelines/zshard/src/lower.rs`, a job file deserializes).
//!
//! Each value is first checked as a Python user expects: a value of the wrong type raises
//! `TypeError`, one out of range `OptionsError` (a `ValueError`), both naming the keyword; numpy
//! integers count as ints and `os.PathLike` as paths. The checked value then goes through the model's
//! own serde ([`Options`], [`VerifyOptions`]), so shapes, sizes, codecs and kinds parse exactly as a
//! job file's do, and the library's defaults and deeper checks stay the library's.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyString};
use serde::de::DeserializeOwned;
use serde_json::{Map, Number, Value};
use zshard_convert::options::Action;
use zshard_convert::Setting;

use crate::python_error;

/// What a setting takes from Python.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A sequence of ints, or a mapping of dimension names to ints.
    Shape,
    /// An int (bytes), or a str with a unit.
    Size,
    /// An int at least this.
    Count(i64),
    /// A bool.
    Flag,
    /// A str.
    Text,
    /// A str or an `os.PathLike`.
    Path,
    /// A str, or a sequence of str.
    Strings,
    /// A number of pyramid levels (at least 1), or `'auto'`.
    Pyramid,
    /// One of these str (the Python `Literal`).
    Choice(&'static [&'static str]),
    /// One of these ints (the Python `Literal`).
    Number(&'static [i64]),
    /// A spec (str), or a codec chain: a sequence of names and dicts.
    Compressor,
    /// `(index, count)` or `"index/count"`.
    Worker,
    /// A float in (0, 1].
    Fraction,
    /// A number of seconds above 0 (an int or a float).
    Seconds,
    /// A number of seconds (an int or a float) or a str such as `'10s'`, `'500ms'`; the model
    /// checks its range.
    Duration,
}

/// How `setting` is given in Python (`None`: it is no keyword): what its annotation
/// ([`Setting::python_type`]) says, unless its values are narrower than the annotation's (a choice,
/// a minimum, a range, a form of its own).
fn kind(setting: Setting) -> Option<Kind> {
    use Setting::*;
    Some(match setting {
        IndexLocation => Kind::Choice(&["start", "end"]),
        Ome => Kind::Choice(&["upgrade", "keep", "0.6"]),
        Pyramid => Kind::Pyramid,
        Downsample => Kind::Choice(&["mean", "mode", "nearest", "min", "max"]),
        SourceFormat => Kind::Choice(&[
            "zarr",
            "kerchunk-json",
            "kerchunk-parquet",
            "icechunk",
            "n5",
        ]),
        OnUnsupported => Kind::Choice(&["refuse", "skip"]),
        OutputFormat => Kind::Choice(&["zarr", "icechunk"]),
        IcechunkSpec => Kind::Number(&[1, 2]),
        Source | Destination => Kind::Path,
        Retries | RetryTimeout => Kind::Count(0),
        Sample => Kind::Fraction,
        Watch => Kind::Seconds,
        _ => match setting.python_type() {
            "Shape" => Kind::Shape,
            "Compressor" => Kind::Compressor,
            "bool" => Kind::Flag,
            "Location" => Kind::Path,
            "Strings" => Kind::Strings,
            "Size" => Kind::Size,
            "str" => Kind::Text,
            "int" => Kind::Count(1),
            "Worker" => Kind::Worker,
            "float | str" => Kind::Duration,
            _ => return None,
        },
    })
}

/// The model `T` of `action` from `src`, `dst` and the keyword arguments `given` (those not `None`).
pub(crate) fn model<T: DeserializeOwned>(
    py: Python<'_>,
    action: Action,
    src: &Bound<'_, PyAny>,
    dst: Option<&Bound<'_, PyAny>>,
    given: &Bound<'_, PyDict>,
) -> PyResult<T> {
    let mut document = Map::new();
    if action.takes(Setting::Source) {
        document.insert("source".into(), Value::String(path("src", src)?));
    } else {
        // `status` takes the destination alone (its one positional `dst`).
        document.insert("destination".into(), Value::String(path("dst", src)?));
    }
    if let Some(dst) = dst {
        document.insert("destination".into(), Value::String(path("dst", dst)?));
    }
    for (key, value) in given.iter() {
        let key: String = key.extract()?;
        let kind = Setting::from_key(&key)
            .filter(|s| action.takes(*s) && !matches!(s, Setting::Source | Setting::Destination))
            .and_then(kind);
        let Some(kind) = kind else {
            return Err(PyTypeError::new_err(format!(
                "{}() got an unexpected keyword argument '{key}'",
                action.name()
            )));
        };
        if value.is_none() {
            continue;
        }
        let checked = check(py, &key, kind, &value)?;
        // The model reads each value alone first, so that a value it refuses is named.
        let alone = Value::Object(Map::from_iter([(key.clone(), checked.clone())]));
        if let Err(e) = serde_json::from_value::<T>(alone) {
            let message = format!("invalid value {} for '{key}': {e}", value.repr()?);
            return Err(python_error(py, "options", message, None, None));
        }
        document.insert(key, checked);
    }
    serde_json::from_value(Value::Object(document))
        .map_err(|e| python_error(py, "options", e.to_string(), None, None))
}

/// `value` for the keyword `name` of `kind`, checked, as the model's serde reads it.
fn check(py: Python<'_>, name: &str, kind: Kind, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    let out_of_range = |message: String| Err(python_error(py, "options", message, None, None));
    match kind {
        Kind::Duration => {
            if let Ok(text) = value.cast::<PyString>() {
                return Ok(Value::String(text.to_str()?.to_string()));
            }
            if value.is_instance_of::<PyBool>()
                || !(value.is_instance_of::<PyFloat>()
                    || value.is_instance_of::<pyo3::types::PyInt>())
            {
                return Err(wrong(
                    name,
                    "a number of seconds (int or float) or a str such as '10s'",
                    value,
                ));
            }
            let seconds: f64 = value.extract()?;
            match Number::from_f64(seconds) {
                Some(n) => Ok(Value::Number(n)),
                None => out_of_range(format!(
                    "{name} is a duration from 10ms to 1h, got {}",
                    value.str()?
                )),
            }
        }
        Kind::Shape => shape(py, name, value),
        Kind::Size => {
            if let Ok(text) = value.cast::<PyString>() {
                let text = text.to_str()?;
                if text.trim().is_empty() {
                    return out_of_range(format!("{name}: an empty size"));
                }
                return Ok(Value::String(text.to_string()));
            }
            let n = integer(
                py,
                name,
                value,
                "a size is an int (bytes) or a str such as '4GiB'",
            )?;
            if n < 0 {
                return out_of_range(format!("{name} must not be negative, got {n}"));
            }
            Ok(Value::from(n))
        }
        Kind::Count(minimum) => {
            let n = integer(py, name, value, "an int")?;
            if n < minimum {
                return out_of_range(format!("{name} must be at least {minimum}, got {n}"));
            }
            Ok(Value::from(n))
        }
        Kind::Pyramid => {
            if let Ok(text) = value.cast::<PyString>() {
                let text = text.to_str()?;
                if text != "auto" {
                    return out_of_range(format!("{name} is an int or 'auto', got '{text}'"));
                }
                return Ok(Value::String(text.to_string()));
            }
            let n = integer(py, name, value, "an int or 'auto'")?;
            if n < 1 {
                return out_of_range(format!("{name} must be at least 1, got {n}"));
            }
            Ok(Value::from(n))
        }
        Kind::Flag => match value.cast::<PyBool>() {
            Ok(flag) => Ok(Value::Bool(flag.is_true())),
            Err(_) => Err(wrong(name, "a bool", value)),
        },
        Kind::Text => Ok(Value::String(text(name, value, "a str")?)),
        Kind::Path => Ok(Value::String(path(name, value)?)),
        Kind::Strings => Ok(Value::Array(
            strings(py, name, value)?
                .into_iter()
                .map(Value::String)
                .collect(),
        )),
        Kind::Choice(allowed) => {
            let listed = allowed
                .iter()
                .map(|a| format!("'{a}'"))
                .collect::<Vec<_>>()
                .join(", ");
            let text = text(name, value, &format!("one of {listed}"))?;
            if !allowed.contains(&text.as_str()) {
                return out_of_range(format!("{name} is one of {listed}, got '{text}'"));
            }
            Ok(Value::String(text))
        }
        Kind::Number(allowed) => {
            let n = integer(py, name, value, "an int")?;
            if !allowed.contains(&n) {
                let listed: Vec<String> = allowed.iter().map(i64::to_string).collect();
                return out_of_range(format!("{name} is one of {}, got {n}", listed.join(", ")));
            }
            Ok(Value::from(n))
        }
        Kind::Compressor => compressor(py, name, value),
        Kind::Worker => {
            if let Ok(text) = value.cast::<PyString>() {
                return Ok(Value::String(text.to_str()?.to_string()));
            }
            let pair = match value.cast::<pyo3::types::PyTuple>() {
                Ok(pair) if pair.len() == 2 => pair,
                _ => return Err(wrong(name, "(index, count) or 'index/count'", value)),
            };
            let index = integer(py, name, &pair.get_item(0)?, "the index is an int")?;
            let count = integer(py, name, &pair.get_item(1)?, "the count is an int")?;
            if count < 1 || !(0..count).contains(&index) {
                return out_of_range(format!("{name}: index {index} is not in 0..{count}"));
            }
            Ok(Value::String(format!("{index}/{count}")))
        }
        Kind::Fraction => {
            if value.is_instance_of::<PyBool>()
                || !(value.is_instance_of::<PyFloat>()
                    || value.is_instance_of::<pyo3::types::PyInt>())
            {
                return Err(wrong(name, "a float", value));
            }
            let fraction: f64 = value.extract()?;
            if fraction.is_nan() || fraction <= 0.0 || fraction > 1.0 {
                return out_of_range(format!(
                    "{name} is a fraction in (0, 1], got {}",
                    value.str()?
                ));
            }
            Number::from_f64(fraction)
                .map(Value::Number)
                .ok_or_else(|| wrong(name, "a float", value))
        }
        Kind::Seconds => {
            if value.is_instance_of::<PyBool>()
                || !(value.is_instance_of::<PyFloat>()
                    || value.is_instance_of::<pyo3::types::PyInt>())
            {
                return Err(wrong(name, "a number of seconds (int or float)", value));
            }
            let seconds: f64 = value.extract()?;
            if seconds.is_nan() || seconds <= 0.0 {
                return out_of_range(format!(
                    "{name} is a number of seconds above 0, got {}",
                    value.str()?
                ));
            }
            Number::from_f64(seconds)
                .map(Value::Number)
                .ok_or_else(|| wrong(name, "a number of seconds (int or float)", value))
        }
    }
}

/// `TypeError: NAME: WHAT, got TYPE VALUE`.
fn wrong(name: &str, what: &str, value: &Bound<'_, PyAny>) -> PyErr {
    let kind = value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string());
    let repr = value
        .repr()
        .map_or_else(|_| "?".to_string(), |r| r.to_string());
    PyTypeError::new_err(format!("{name}: {what}, got {kind} {repr}"))
}

/// `value` as an int (numpy integers too, through `__index__`), refusing bools and floats.
fn integer(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>, what: &str) -> PyResult<i64> {
    if value.is_instance_of::<PyBool>() {
        return Err(wrong(name, what, value));
    }
    let index = py.import("operator")?.getattr("index")?;
    let Ok(n) = index.call1((value,)) else {
        return Err(wrong(name, what, value));
    };
    n.extract::<i64>().map_err(|_| {
        python_error(
            py,
            "options",
            format!(
                "{name}: {} is too large",
                n.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            ),
            None,
            None,
        )
    })
}

fn text(name: &str, value: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    match value.cast::<PyString>() {
        Ok(text) => Ok(text.to_str()?.to_string()),
        Err(_) => Err(wrong(name, what, value)),
    }
}

/// A path: a str, or an `os.PathLike` giving one.
fn path(name: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    let refused = || wrong(name, "a path is a str or a pathlib.Path", value);
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_str()?.to_string());
    }
    let fspath = value.py().import("os")?.getattr("fspath")?;
    match fspath.call1((value,)) {
        Ok(path) => match path.cast::<PyString>() {
            Ok(text) => Ok(text.to_str()?.to_string()),
            Err(_) => Err(refused()),
        },
        Err(_) => Err(refused()),
    }
}

fn abc<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("collections.abc")?.getattr(name)
}

/// A str, or a sequence of str.
fn strings(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(vec![text.to_str()?.to_string()]);
    }
    if !value.is_instance(&abc(py, "Sequence")?)? || value.is_instance_of::<pyo3::types::PyBytes>()
    {
        return Err(wrong(name, "a str or a sequence of str", value));
    }
    value
        .try_iter()?
        .map(|item| {
            let item = item?;
            text(name, &item, "items are str")
        })
        .collect()
}

/// A shape: extents by position (any iterable of ints but a str, bytes or set: a numpy array too),
/// or by dimension name (a mapping).
fn shape(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    let extent = |n: &Bound<'_, PyAny>| integer(py, name, n, "extents are ints");
    let (shape, extents) = if value.is_instance(&abc(py, "Mapping")?)? {
        let mut named = Map::new();
        let mut extents = Vec::new();
        for item in value.call_method0("items")?.try_iter()? {
            let (dim, n): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            let dim = text(name, &dim, "dimension names are str")?;
            let n = extent(&n)?;
            named.insert(dim, Value::from(n));
            extents.push(n);
        }
        (Value::Object(named), extents)
    } else if value.is_instance(&abc(py, "Iterable")?)?
        && !value.is_instance_of::<PyString>()
        && !value.is_instance_of::<pyo3::types::PyBytes>()
        && !value.is_instance(&abc(py, "Set")?)?
    {
        let extents = value
            .try_iter()?
            .map(|n| extent(&n?))
            .collect::<PyResult<Vec<i64>>>()?;
        (
            Value::Array(extents.iter().copied().map(Value::from).collect()),
            extents,
        )
    } else {
        return Err(wrong(
            name,
            "a shape is a sequence of ints or a mapping of dimension names to ints",
            value,
        ));
    };
    let refuse = |message: String| Err(python_error(py, "options", message, None, None));
    if extents.is_empty() {
        return refuse(format!("{name}: a shape has at least one extent"));
    }
    if let Some(n) = extents.iter().find(|n| **n < 1) {
        return refuse(format!("{name}: extents are at least 1, got {n}"));
    }
    Ok(shape)
}

/// A compressor: a spec (str), a codec (dict) or a codec chain (a sequence of names and dicts).
fn compressor(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(Value::String(text.to_str()?.to_string()));
    }
    if value.is_instance(&abc(py, "Mapping")?)? {
        return json(py, name, value);
    }
    if value.is_instance(&abc(py, "Sequence")?)? && !value.is_instance_of::<pyo3::types::PyBytes>()
    {
        let mut chain = Vec::new();
        for codec in value.try_iter()? {
            let codec = codec?;
            if codec.is_instance_of::<PyString>() || codec.is_instance(&abc(py, "Mapping")?)? {
                chain.push(json(py, name, &codec)?);
            } else {
                return Err(wrong(name, "codecs are dicts or names", &codec));
            }
        }
        return Ok(Value::Array(chain));
    }
    Err(wrong(
        name,
        "a spec such as 'zstd:3' or a list of Zarr v3 codecs",
        value,
    ))
}

/// A JSON-like Python value (a codec's configuration) as a JSON value.
fn json(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(Value::String(text.to_str()?.to_string()));
    }
    if let Ok(float) = value.cast::<PyFloat>() {
        return Number::from_f64(float.value())
            .map(Value::Number)
            .ok_or_else(|| wrong(name, "codec values are finite numbers", value));
    }
    if value.is_instance(&abc(py, "Mapping")?)? {
        let mut map = Map::new();
        for item in value.call_method0("items")?.try_iter()? {
            let (key, item): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            map.insert(
                text(name, &key, "codec keys are str")?,
                json(py, name, &item)?,
            );
        }
        return Ok(Value::Object(map));
    }
    if value.is_instance(&abc(py, "Sequence")?)? && !value.is_instance_of::<pyo3::types::PyBytes>()
    {
        return value
            .try_iter()?
            .map(|item| json(py, name, &item?))
            .collect::<PyResult<Vec<Value>>>()
            .map(Value::Array);
    }
    integer(
        py,
        name,
        value,
        "codec values are str, numbers, bools, lists or dicts",
    )
    .map(Value::from)
}
