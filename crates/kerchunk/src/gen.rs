//! The `gen` entries of a version 1 reference set: references generated from the cartesian product of
//! named dimensions, with `key`, `url`, `offset` and `length` rendered for each combination.

use std::sync::Arc;

use minijinja::Value as JinjaValue;
use serde_json::Value;

use crate::template::{Prepared, Template, Templates};

/// The most references one reference set may generate: 2^26 references already take a few GB
/// once held (every reference stays in memory), and a few bytes of `gen` must not ask for more.
pub(crate) const MAX_GENERATED: u64 = 1 << 26;

/// The least memory one generated reference holds once the set is built (see
/// [`crate::refs::HELD_REF_BYTES`]). With a memory limit, `gen` entries that would generate more
/// than the limit holds of these are refused before one is made.
pub(crate) const GENERATED_REF_BYTES: u64 = crate::refs::HELD_REF_BYTES;

/// One compiled `gen` entry.
#[derive(Debug)]
pub(crate) struct Gen {
    key: (String, Template),
    url: (String, Template),
    range: Option<((String, Template), (String, Template))>,
    dimensions: Vec<(Arc<str>, Values)>,
}

/// The values of one dimension: a list, or a range computed as it is enumerated (so that a range
/// costs no memory, whatever its length).
#[derive(Debug)]
enum Values {
    List(Vec<JinjaValue>),
    Range { start: i64, step: i64, count: u64 },
}

impl Values {
    fn len(&self) -> u64 {
        match self {
            Values::List(values) => values.len() as u64,
            Values::Range { count, .. } => *count,
        }
    }

    /// Value `i` (below `len()`): for a range `start + i * step`, which lies between start and stop.
    fn get(&self, i: usize) -> JinjaValue {
        match self {
            Values::List(values) => values[i].clone(),
            Values::Range { start, step, .. } => JinjaValue::from(start + i as i64 * step),
        }
    }
}

/// A generated reference.
#[derive(Debug, PartialEq)]
pub(crate) struct Generated {
    pub key: String,
    pub url: String,
    pub range: Option<(u64, u64)>,
}

/// Why a `gen` entry cannot be used: `(what, template text, reason)`; `what` names the entry.
pub(crate) type GenError = (String, String, String);

/// Compiles `field` of entry `what`, whose variables are the templates and `dimensions`.
fn compile(
    templates: &mut Templates,
    dimensions: &[&str],
    what: &str,
    field: &str,
    value: Option<&Value>,
) -> Result<(String, Template), GenError> {
    let text = match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err((
                what.to_string(),
                other.to_string(),
                format!("{field} must be a string"),
            ))
        }
        None => {
            return Err((
                what.to_string(),
                String::new(),
                format!("{field} is required"),
            ))
        }
    };
    let template = templates
        .compile(format!("{what}.{field}"), &text, dimensions)
        .map_err(|e| (what.to_string(), text.clone(), e))?;
    Ok((text, template))
}

fn dimension(what: &str, name: &str, spec: &Value) -> Result<Values, GenError> {
    let bad = |reason: String| (what.to_string(), spec.to_string(), reason);
    match spec {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::Number(n) => n
                    .as_i64()
                    .map(JinjaValue::from)
                    .or_else(|| n.as_f64().map(JinjaValue::from))
                    .ok_or_else(|| bad(format!("dimension {name}: bad number {n}"))),
                Value::String(s) => Ok(JinjaValue::from(s.as_str())),
                other => Err(bad(format!(
                    "dimension {name}: {other} is not a number or string"
                ))),
            })
            .collect::<Result<_, _>>()
            .map(Values::List),
        Value::Object(range) => {
            let int = |field: &str, default: Option<i64>| match range.get(field) {
                None => {
                    default.ok_or_else(|| bad(format!("dimension {name}: {field} is required")))
                }
                Some(v) => v
                    .as_i64()
                    .ok_or_else(|| bad(format!("dimension {name}: {field} must be an integer"))),
            };
            let (start, stop, step) = (
                int("start", Some(0))?,
                int("stop", None)?,
                int("step", Some(1))?,
            );
            if step == 0 {
                return Err(bad(format!("dimension {name}: step must not be 0")));
            }
            let count = if step > 0 {
                (i128::from(stop) - i128::from(start) + i128::from(step) - 1) / i128::from(step)
            } else {
                (i128::from(start) - i128::from(stop) - i128::from(step) - 1) / -i128::from(step)
            }
            .max(0);
            if count > i128::from(MAX_GENERATED) {
                return Err(bad(format!("dimension {name} has too many values")));
            }
            Ok(Values::Range {
                start,
                step,
                count: count as u64,
            })
        }
        _ => Err(bad(format!(
            "dimension {name} must be {{start, stop, step}} or a list"
        ))),
    }
}

impl Gen {
    fn range_text(&self) -> String {
        self.range
            .as_ref()
            .map(|((o, _), (l, _))| format!("{o}, {l}"))
            .unwrap_or_default()
    }

    /// Compiles the `gen` list of a reference set, its strings into `templates`. The references
    /// the entries generate are counted from their dimensions first: more than [`MAX_GENERATED`],
    /// or more than `memory_limit` holds at [`GENERATED_REF_BYTES`] each, are refused before any
    /// is generated.
    pub(crate) fn parse_all(
        gen: &Value,
        templates: &mut Templates,
        memory_limit: Option<u64>,
    ) -> Result<Vec<Gen>, GenError> {
        let Value::Array(entries) = gen else {
            return Err(("gen".into(), gen.to_string(), "gen must be a list".into()));
        };
        let mut total: u64 = 0;
        let mut out = Vec::with_capacity(entries.len());
        for (n, entry) in entries.iter().enumerate() {
            let what = format!("gen[{n}]");
            let Value::Object(o) = entry else {
                return Err((what, entry.to_string(), "must be an object".into()));
            };
            let range = match (o.get("offset"), o.get("length")) {
                (None, None) => None,
                (Some(offset), Some(length)) => Some((offset, length)),
                _ => {
                    return Err((
                        what,
                        String::new(),
                        "offset and length must be given together".into(),
                    ))
                }
            };
            let Some(Value::Object(dims)) = o.get("dimensions") else {
                return Err((what, String::new(), "dimensions must be an object".into()));
            };
            if dims.is_empty() {
                return Err((what, String::new(), "dimensions must not be empty".into()));
            }
            let dimensions = dims
                .iter()
                .map(|(name, spec)| Ok((Arc::from(name.as_str()), dimension(&what, name, spec)?)))
                .collect::<Result<Vec<_>, GenError>>()?;
            let count = dimensions
                .iter()
                .try_fold(1u64, |acc, (_, values)| acc.checked_mul(values.len()));
            total = count
                .and_then(|c| total.checked_add(c))
                .filter(|t| *t <= MAX_GENERATED)
                .ok_or_else(|| {
                    (
                        what.clone(),
                        String::new(),
                        format!("generates more than {MAX_GENERATED} references"),
                    )
                })?;
            let held = total.saturating_mul(GENERATED_REF_BYTES);
            if let Some(limit) = memory_limit.filter(|&limit| held > limit) {
                return Err((
                    what,
                    String::new(),
                    format!(
                        "the gen entries up to this one generate {total} references, which take at least {} held in memory, more than the memory limit of {} ({}); generate fewer references or use a larger memory limit",
                        zshard_core::HumanBytes(held),
                        zshard_core::HumanBytes(limit),
                        zshard_core::Setting::MemoryLimit,
                    ),
                ));
            }
            let names: Vec<&str> = dimensions.iter().map(|(n, _)| &**n).collect();
            let range = match range {
                None => None,
                Some((offset, length)) => Some((
                    compile(templates, &names, &what, "offset", Some(offset))?,
                    compile(templates, &names, &what, "length", Some(length))?,
                )),
            };
            out.push(Gen {
                key: compile(templates, &names, &what, "key", o.get("key"))?,
                url: compile(templates, &names, &what, "url", o.get("url"))?,
                range,
                dimensions,
            });
        }
        Ok(out)
    }

    /// Renders every combination of the dimensions (the last dimension varying fastest, as
    /// `itertools.product`), calling `emit` for each reference.
    pub(crate) fn expand<'t>(
        &'t self,
        templates: &'t Templates,
        emit: &mut dyn FnMut(Generated) -> Result<(), GenError>,
    ) -> Result<(), GenError> {
        if self.dimensions.iter().any(|(_, v)| v.len() == 0) {
            return Ok(());
        }
        let prepare = |(text, template): &'t (String, Template)| {
            templates
                .prepare(template)
                .map(|prepared| (text.as_str(), prepared))
                .map_err(|e| ("gen".to_string(), text.clone(), e))
        };
        let (key_template, url_template) = (prepare(&self.key)?, prepare(&self.url)?);
        let range_templates = match &self.range {
            None => None,
            Some((offset, length)) => Some((prepare(offset)?, prepare(length)?)),
        };
        let mut index = vec![0usize; self.dimensions.len()];
        loop {
            let scope = templates.scope(
                self.dimensions
                    .iter()
                    .zip(&index)
                    .map(|((name, values), &i)| (Arc::clone(name), values.get(i)))
                    .collect(),
            );
            let render = |(text, template): &(&str, Prepared)| {
                template
                    .render(&scope)
                    .map_err(|e| ("gen".to_string(), text.to_string(), e))
            };
            let key = render(&key_template)?;
            let url = render(&url_template)?;
            let range = match &range_templates {
                None => None,
                Some((offset, length)) => {
                    let int = |field: &(&str, Prepared)| -> Result<u64, GenError> {
                        let text = render(field)?;
                        text.trim().parse::<u64>().map_err(|_| {
                            (
                                key.clone(),
                                field.0.to_string(),
                                format!("{text:?} is not a non-negative integer"),
                            )
                        })
                    };
                    let (offset, length) = (int(offset)?, int(length)?);
                    if offset.checked_add(length).is_none() {
                        return Err((key, self.range_text(), "offset + length overflows".into()));
                    }
                    Some((offset, length))
                }
            };
            emit(Generated { key, url, range })?;
            // Odometer increment, last dimension fastest.
            let mut d = index.len();
            loop {
                if d == 0 {
                    return Ok(());
                }
                d -= 1;
                index[d] += 1;
                if (index[d] as u64) < self.dimensions[d].1.len() {
                    break;
                }
                index[d] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn expand_all(gen: Value, templates: &mut Templates) -> Result<Vec<Generated>, GenError> {
        let mut out = Vec::new();
        for g in Gen::parse_all(&gen, templates, None)? {
            g.expand(templates, &mut |r| {
                out.push(r);
                Ok(())
            })?;
        }
        Ok(out)
    }

    #[test]
    fn the_spec_example() {
        let mut t = Templates::new([("u", "server.domain/path"), ("f", "{{c}}")]).expect("ok");
        let out = expand_all(
            json!([{"key": "gen_key{{i}}", "url": "http://{{u}}_{{i}}",
                    "offset": "{{(i + 1) * 1000}}", "length": "1000", "dimensions": {"i": {"stop": 5}}}]),
            &mut t,
        )
        .expect("expands");
        assert_eq!(out.len(), 5);
        assert_eq!(
            out[1],
            Generated {
                key: "gen_key1".into(),
                url: "http://server.domain/path_1".into(),
                range: Some((2000, 1000))
            }
        );
        assert_eq!(out[4].range, Some((5000, 1000)));
    }

    #[test]
    fn cartesian_product_lists_steps_and_whole_files() {
        let mut t = Templates::default();
        let out = expand_all(
            json!([{"key": "a/{{y}}.{{x}}", "url": "f{{y}}_{{x}}.bin",
                    "dimensions": {"y": [3, 1], "x": {"start": 10, "stop": 4, "step": -3}}}]),
            &mut t,
        )
        .expect("expands");
        let keys: Vec<&str> = out.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["a/3.10", "a/3.7", "a/1.10", "a/1.7"]);
        assert!(out.iter().all(|g| g.range.is_none()));
        assert_eq!(out[3].url, "f1_7.bin");
        // An empty dimension generates nothing.
        let none = expand_all(
            json!([{"key": "k{{i}}", "url": "u", "dimensions": {"i": {"start": 3, "stop": 3}}}]),
            &mut t,
        )
        .expect("ok");
        assert!(none.is_empty());
    }

    #[test]
    fn references_are_counted_against_the_memory_limit_before_they_are_made() {
        let gen = json!([{"key": "x/{{i}}", "url": "u", "offset": "{{i}}", "length": "1",
            "dimensions": {"i": {"stop": 60_000_000}}}]);
        let (what, _, reason) =
            Gen::parse_all(&gen, &mut Templates::default(), Some(256 << 20)).expect_err("refused");
        assert_eq!(what, "gen[0]");
        assert!(
            reason.starts_with(
                "the gen entries up to this one generate 60000000 references, which take at least "
            ) && reason.contains("more than the memory limit of 256.00 MiB"),
            "{reason}"
        );
        // What fits is compiled.
        let fits = json!([{"key": "x/{{i}}", "url": "u", "dimensions": {"i": {"stop": 1000}}}]);
        assert!(Gen::parse_all(&fits, &mut Templates::default(), Some(256 << 20)).is_ok());
    }

    #[test]
    fn bad_gen_entries() {
        let mut t = Templates::default();
        for bad in [
            json!({"key": "k"}),
            json!([{"key": "k{{i}}", "url": "u", "offset": "1", "dimensions": {"i": {"stop": 2}}}]),
            json!([{"key": "k{{i}}", "url": "u", "dimensions": {}}]),
            json!([{"key": "k{{i}}", "url": "u", "dimensions": {"i": {"stop": 2, "step": 0}}}]),
            json!([{"key": "k{{i}}", "url": "u", "dimensions": {"i": {"start": 1}}}]),
            json!([{"key": "k{{i}}", "url": "u", "dimensions": {"i": "x"}}]),
            json!([{"key": "k{{j}}", "url": "u", "dimensions": {"i": [1]}}]),
            json!([{"key": "k{{i}}", "url": "u", "offset": "{{i - 5}}", "length": "1", "dimensions": {"i": [1]}}]),
            json!([{"key": "k", "url": "u", "dimensions": {"i": {"stop": 100000}, "j": {"stop": 100000}}}]),
            json!([{"key": "k{{i}}", "url": "u", "offset": "18446744073709551615", "length": "1", "dimensions": {"i": [1]}}]),
            // Found by the kerchunk_json fuzz target: 4e9 values were materialized (96 GB) before
            // anything was checked, and 2^32 references could never be held anyway.
            json!([{"key": "k{{i}}", "url": "u", "dimensions": {"i": {"stop": 4_000_000_000u64}}}]),
            json!([{"key": "k{{i}}{{j}}", "url": "u", "dimensions": {"i": {"stop": 65536}, "j": {"stop": 1025}}}]),
        ] {
            assert!(
                expand_all(bad.clone(), &mut t).is_err(),
                "{bad} should fail"
            );
        }
    }
}

#[cfg(test)]
mod bench {
    use super::*;
    use serde_json::json;

    /// Time to expand a million generated references (run with `--ignored --nocapture`).
    #[test]
    #[ignore]
    fn expand_a_million_references() {
        let mut t = Templates::new([("u", "server.domain/path")]).expect("compile");
        let gens = Gen::parse_all(
            &json!([{"key": "data/{{i}}.{{j}}", "url": "http://{{u}}/f{{i}}.nc",
            "offset": "{{(i * 1000 + j) * 4096}}", "length": "4096",
            "dimensions": {"i": {"stop": 1000}, "j": {"stop": 1000}}}]),
            &mut t,
            None,
        )
        .expect("parses");
        let start = std::time::Instant::now();
        let (mut count, mut bytes) = (0u64, 0usize);
        for g in &gens {
            g.expand(&t, &mut |r| {
                count += 1;
                bytes += r.key.len() + r.url.len();
                Ok(())
            })
            .expect("expands");
        }
        let elapsed = start.elapsed();
        assert_eq!(count, 1_000_000);
        println!("expanded {count} references ({bytes} bytes of keys and urls) in {elapsed:?}");
    }
}
