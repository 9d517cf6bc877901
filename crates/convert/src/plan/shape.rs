//! Shard and inner chunk shapes as a user gives them: one extent per dimension (`4096,4096`, for one
//! array or arrays of one rank), or extents by dimension name (`time=48,lat=720`, for every array
//! that has those dimensions, whatever its rank). Every front end hands its text (or job file value)
//! to [`ShapeSpec`]; the plan resolves it for each array.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use zshard_core::{auto_shard_shape_around, ArrayMeta, Setting};

use crate::error::{Error, Result};

/// A shard or inner chunk shape as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeSpec {
    /// One extent per dimension, in order (`4096,4096`).
    Positional(Vec<u64>),
    /// Extents of the dimensions with these names (`time=48,lat=720`); the other dimensions of an
    /// array keep the default rule.
    ByName(BTreeMap<String, u64>),
}

impl From<Vec<u64>> for ShapeSpec {
    fn from(extents: Vec<u64>) -> Self {
        ShapeSpec::Positional(extents)
    }
}

impl FromStr for ShapeSpec {
    type Err = Error;

    /// `a,b,...` or `name=a,name=b,...`; the two forms cannot be mixed.
    fn from_str(text: &str) -> Result<Self> {
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        let named = parts.iter().filter(|p| p.contains('=')).count();
        if named == 0 {
            return parts
                .iter()
                .map(|p| positive(p, text))
                .collect::<Result<_>>()
                .map(ShapeSpec::Positional);
        }
        if named < parts.len() {
            return Err(invalid(
                text,
                "mixes extents by position and by dimension name: give either a,b,... (every \
                 dimension in order) or name=a,name=b,... (e.g. time=48,lat=720)",
            ));
        }
        let mut by_name = BTreeMap::new();
        for part in parts {
            let (name, extent) = part.split_once('=').unwrap_or((part, ""));
            let name = name.trim();
            if name.is_empty() {
                return Err(invalid(text, &format!("{part:?} has no dimension name")));
            }
            if by_name
                .insert(name.to_string(), positive(extent.trim(), text)?)
                .is_some()
            {
                return Err(invalid(
                    text,
                    &format!("names the dimension {name:?} twice"),
                ));
            }
        }
        Ok(ShapeSpec::ByName(by_name))
    }
}

/// One extent of `text`: a positive integer.
fn positive(part: &str, text: &str) -> Result<u64> {
    part.parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| {
        invalid(
            text,
            &format!(
                "{part:?} is not a positive integer (expected a,b,... e.g. 4096,4096, or \
                 name=a,... e.g. time=48,lat=720)"
            ),
        )
    })
}

fn invalid(text: &str, reason: &str) -> Error {
    Error::Shape {
        text: text.to_string(),
        reason: reason.to_string(),
    }
}

impl fmt::Display for ShapeSpec {
    /// The form [`ShapeSpec::from_str`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = match self {
            ShapeSpec::Positional(extents) => extents.iter().map(u64::to_string).collect(),
            ShapeSpec::ByName(by_name) => by_name.iter().map(|(n, e)| format!("{n}={e}")).collect(),
        };
        f.write_str(&parts.join(","))
    }
}

/// A list (`[48, 720]`) or a map by name (`{"time": 48}`), in reports.
impl Serialize for ShapeSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            ShapeSpec::Positional(extents) => extents.serialize(serializer),
            ShapeSpec::ByName(by_name) => by_name.serialize(serializer),
        }
    }
}

/// A list (`[48, 720]`), a table by name (`{ time = 48, lat = 720 }`) or the text form
/// (`"time=48,lat=720"`), as job files give it.
impl<'de> Deserialize<'de> for ShapeSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        deserializer.deserialize_any(SpecVisitor)
    }
}

struct SpecVisitor;

impl<'de> Visitor<'de> for SpecVisitor {
    type Value = ShapeSpec;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of extents, a table of extents by dimension name, or \"name=a,...\"")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> std::result::Result<ShapeSpec, E> {
        text.parse().map_err(|e: Error| E::custom(e))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<ShapeSpec, A::Error> {
        let mut extents = Vec::new();
        while let Some(extent) = seq.next_element::<u64>()? {
            extents.push(extent);
        }
        Ok(ShapeSpec::Positional(extents))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<ShapeSpec, A::Error> {
        let mut by_name = BTreeMap::new();
        while let Some((name, extent)) = map.next_entry::<String, u64>()? {
            by_name.insert(name, extent);
        }
        Ok(ShapeSpec::ByName(by_name))
    }
}

impl ShapeSpec {
    /// The extent this gives each dimension of `meta`: `None` where the default rule applies (a
    /// dimension whose name it does not give, or any dimension of an array without names). Positional
    /// extents are returned whole, so the caller's rank check sees them.
    pub(crate) fn extents(&self, meta: &ArrayMeta) -> Vec<Option<u64>> {
        match self {
            ShapeSpec::Positional(extents) => extents.iter().copied().map(Some).collect(),
            ShapeSpec::ByName(by_name) => dimension_names(meta)
                .map(|names| {
                    names
                        .iter()
                        .map(|name| name.as_ref().and_then(|n| by_name.get(n).copied()))
                        .collect()
                })
                .unwrap_or_else(|| vec![None; meta.shape.len()]),
        }
    }

    /// The dimension names it gives (none for positional extents).
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        let by_name = match self {
            ShapeSpec::ByName(by_name) => Some(by_name),
            ShapeSpec::Positional(_) => None,
        };
        by_name
            .into_iter()
            .flat_map(|m| m.keys().map(String::as_str))
    }
}

/// The names of the dimensions of `meta`, which shapes by name refer to: v3 `dimension_names`, into
/// which the readers also put v2's and kerchunk's `_ARRAY_DIMENSIONS`.
pub(crate) fn dimension_names(meta: &ArrayMeta) -> Option<&[Option<String>]> {
    meta.dimension_names.as_deref()
}

/// Refuses a `spec` (of the setting `setting`) that names a dimension none of `arrays` has: a misspelt
/// name must not silently leave the shapes to the default rule. `scope` says which arrays they are in
/// the message (`any array of SRC`).
pub(crate) fn check_names_known<'a>(
    setting: Setting,
    spec: &ShapeSpec,
    arrays: impl Iterator<Item = &'a ArrayMeta>,
    scope: &str,
) -> Result<()> {
    let known: BTreeSet<&str> = arrays
        .filter_map(dimension_names)
        .flatten()
        .flatten()
        .map(String::as_str)
        .collect();
    let unknown: Vec<&str> = spec.names().filter(|n| !known.contains(n)).collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let known = if known.is_empty() {
        "no dimension names are given (v3 dimension_names, _ARRAY_DIMENSIONS)".to_string()
    } else {
        let list: Vec<&str> = known.into_iter().collect();
        format!("the dimension names are: {}", list.join(", "))
    };
    Err(Error::UnknownDimension {
        setting,
        names: unknown.iter().map(|n| n.to_string()).collect(),
        known,
        scope: scope.to_string(),
    })
}

// The shapes an array is given, resolved against its metadata (moved from layout.rs).

/// The inner chunk shape of an already sharded source, which is the natural default for the output.
fn source_inner_shape(meta: &ArrayMeta) -> Option<Vec<u64>> {
    meta.sharding()?.ok().map(|config| config.chunk_shape)
}

/// For an array whose dimensions have names, how to give a shape that fits arrays of any rank.
fn by_name_hint(what: Setting, meta: &ArrayMeta) -> String {
    let named = dimension_names(meta)
        .and_then(|names| names.iter().flatten().next())
        .zip(meta.chunk_shape.first());
    named.map_or_else(String::new, |(name, extent)| {
        // In the syntax of the front end in use: a flag's `time=48`, a Python dict, a TOML table.
        let example = match zshard_core::setting::spelling() {
            zshard_core::setting::Spelling::Keyword => format!("{{{name:?}: {extent}}}"),
            zshard_core::setting::Spelling::Flag => format!("{name}={extent}"),
            _ => format!("{{ {name} = {extent} }}"),
        };
        format!(
            "; arrays of different ranks take extents by dimension name, e.g. {}",
            what.given(example)
        )
    })
}

/// Checks a shape given for an array (`what` names the setting): one positive extent per dimension.
/// Every front end (flags, job files, the library) goes through here, before any geometry divides by
/// an extent.
pub(crate) fn check_shape(what: Setting, shape: &[u64], meta: &ArrayMeta) -> Result<()> {
    if shape.len() != meta.shape.len() {
        return Err(Error::Layout {
            reason: format!(
                "{what} {shape:?} has {} dimensions, but the array has {} (shape {:?}){}",
                shape.len(),
                meta.shape.len(),
                meta.shape,
                by_name_hint(what, meta)
            ),
        });
    }
    if let Some(d) = shape.iter().position(|&n| n == 0) {
        return Err(Error::Layout {
            reason: format!(
                "{what} {shape:?} has a zero extent (dimension {d}): every extent must be at least 1"
            ),
        });
    }
    Ok(())
}

/// The extent `spec` (of the setting `what`) gives each dimension of `meta`, `None` where the default
/// rule applies; extents by position must give every dimension.
pub(crate) fn given_extents(
    what: Setting,
    spec: Option<&ShapeSpec>,
    meta: &ArrayMeta,
) -> Result<Vec<Option<u64>>> {
    match spec {
        None => Ok(vec![None; meta.shape.len()]),
        Some(spec) => {
            if let ShapeSpec::Positional(shape) = spec {
                check_shape(what, shape, meta)?;
            }
            Ok(spec.extents(meta))
        }
    }
}

/// The inner chunk shape: the extents given, else the source's chunk (or inner chunk) extent.
pub(crate) fn inner_shape_of(spec: Option<&ShapeSpec>, meta: &ArrayMeta) -> Result<Vec<u64>> {
    let source = source_inner_shape(meta).unwrap_or_else(|| meta.chunk_shape.clone());
    let given = given_extents(Setting::ChunkShape, spec, meta)?;
    let shape: Vec<u64> = given
        .iter()
        .zip(&source)
        .map(|(given, &source)| given.unwrap_or(source))
        .collect();
    check_shape(Setting::ChunkShape, &shape, meta)?;
    Ok(shape)
}

/// The shard shape: the extents given, the others chosen around them (see
/// [`auto_shard_shape_around`]).
pub(crate) fn shard_shape_of(
    spec: Option<&ShapeSpec>,
    meta: &ArrayMeta,
    inner_shape: &[u64],
    auto_max_chunks: u64,
) -> Result<Vec<u64>> {
    let given = given_extents(Setting::ShardShape, spec, meta)?;
    let size = meta.data_type.size();
    let shape = auto_shard_shape_around(&meta.shape, inner_shape, size, &given, auto_max_chunks);
    check_shape(Setting::ShardShape, &shape, meta)?;
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::setting::{spelled, Spelling};

    fn meta(shape: &[u64]) -> ArrayMeta {
        ArrayMeta {
            shape: shape.to_vec(),
            data_type: zshard_core::DataType::UInt8,
            fill_value: zshard_core::FillValue::zero(zshard_core::DataType::UInt8),
            chunk_shape: shape.to_vec(),
            codecs: Vec::new(),
            chunk_key_encoding: zshard_core::ChunkKeyEncoding::Default { separator: '/' },
            attributes: Default::default(),
            dimension_names: None,
            rectilinear: None,
            sharded: None,
            warnings: Vec::new(),
        }
    }

    fn by_name(pairs: &[(&str, u64)]) -> ShapeSpec {
        ShapeSpec::ByName(pairs.iter().map(|(n, e)| (n.to_string(), *e)).collect())
    }

    #[test]
    fn parses_both_forms_and_refuses_mixing_them() {
        assert_eq!(
            "4096, 4096".parse::<ShapeSpec>().expect("positional"),
            ShapeSpec::Positional(vec![4096, 4096])
        );
        assert_eq!(
            "time=48, lat = 720".parse::<ShapeSpec>().expect("by name"),
            by_name(&[("time", 48), ("lat", 720)])
        );
        let e = |t: &str| t.parse::<ShapeSpec>().expect_err(t).to_string();
        assert!(e("time=48,720").contains("mixes extents by position and by dimension name"));
        assert!(e("0,1").contains("\"0\" is not a positive integer"));
        assert!(e("a").contains("\"a\" is not a positive integer"));
        assert!(e("time=0").contains("\"0\" is not a positive integer"));
        assert!(e("=4").contains("\"=4\" has no dimension name"));
        assert!(e("t=4,t=5").contains("names the dimension \"t\" twice"));
        assert_eq!(
            by_name(&[("time", 48), ("lat", 720)]).to_string(),
            "lat=720,time=48"
        );
    }

    #[test]
    fn job_file_values_deserialize_in_every_form() {
        let spec = |json: &str| serde_json::from_str::<ShapeSpec>(json);
        assert_eq!(
            spec("[2, 3]").expect("list"),
            ShapeSpec::Positional(vec![2, 3])
        );
        assert_eq!(spec(r#"{"lat": 3}"#).expect("map"), by_name(&[("lat", 3)]));
        assert_eq!(spec(r#""lat=3""#).expect("text"), by_name(&[("lat", 3)]));
        assert!(spec(r#""lat=3,4""#).is_err());
        assert_eq!(
            serde_json::to_value(by_name(&[("lat", 3)])).expect("json"),
            serde_json::json!({"lat": 3})
        );
    }

    #[test]
    fn named_extents_apply_to_the_dimensions_of_that_name() {
        let mut meta = meta(&[10, 20, 30]);
        meta.dimension_names = Some(vec![Some("time".into()), None, Some("lon".into())]);
        let spec = by_name(&[("lon", 15), ("lat", 4)]);
        assert_eq!(spec.extents(&meta), vec![None, None, Some(15)]);
        meta.dimension_names = None;
        assert_eq!(spec.extents(&meta), vec![None, None, None]);
    }

    #[test]
    fn unknown_names_are_refused_listing_the_known_ones() {
        let mut meta = meta(&[10, 20]);
        meta.dimension_names = Some(vec![Some("time".into()), Some("lat".into())]);
        let spec = by_name(&[("tme", 4), ("lat", 2)]);
        let e = spelled(Spelling::Flag, || {
            check_names_known(
                Setting::ShardShape,
                &spec,
                [&meta].into_iter(),
                "any array of src",
            )
            .expect_err("typo")
            .to_string()
        });
        assert_eq!(
            e,
            "--shard-shape: no dimension named tme in any array of src; the dimension names are: lat, time"
        );
        assert!(check_names_known(
            Setting::ShardShape,
            &by_name(&[("lat", 2)]),
            [&meta].into_iter(),
            "any array of src"
        )
        .is_ok());
    }
}
