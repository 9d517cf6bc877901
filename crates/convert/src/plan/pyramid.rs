//! Pyramids made while converting (issue 41, `--pyramid`): the source array becomes level 0 of an
//! OME-Zarr 0.5 multiscale image, and each further level halves every spatial axis of the one
//! above (dimensions named `x`, `y` or `z`; channel, time and other axes keep their extent).
//!
//! Here, from metadata alone: the hierarchy the output will be (a group with the `multiscales`,
//! arrays `0`, `1`, ...), which the plan then lays out like any OME-Zarr pyramid (level shapes
//! from `--level-shapes`, else derived from level 0's), and what the run needs to make each level
//! from the one above ([`Made`]). The reductions are `zshard_core::downsample`; the pipeline makes
//! the levels below while it holds the level above (`zshard_pipeline`, its `pyramid` stage).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use zshard_core::downsample::{downsamples, Reduction};
use zshard_core::{ArrayMeta, Node, NodeKind, Setting};

use crate::error::{Error, Result};
use crate::plan::{Layouts, Plan};

/// How many levels `--pyramid` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PyramidLevels {
    /// This many levels, level 0 (the source) included; fewer when every spatial axis is down to
    /// one element before.
    Count(u32),
    /// Levels until one whose spatial extent fits one inner chunk (of level 0's shape).
    Auto,
}

impl std::str::FromStr for PyramidLevels {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        if s == "auto" {
            return Ok(PyramidLevels::Auto);
        }
        match s.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(PyramidLevels::Count(n)),
            _ => Err(Error::Options {
                reason: format!(
                    "{} is a number of levels (at least 1) or auto, not {s:?}",
                    Setting::Pyramid
                ),
            }),
        }
    }
}

impl std::fmt::Display for PyramidLevels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PyramidLevels::Count(n) => write!(f, "{n}"),
            PyramidLevels::Auto => f.write_str("auto"),
        }
    }
}

impl Serialize for PyramidLevels {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match self {
            PyramidLevels::Count(n) => serializer.serialize_u32(*n),
            PyramidLevels::Auto => serializer.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for PyramidLevels {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let text = match Value::deserialize(deserializer)? {
            Value::String(text) => text,
            Value::Number(n) => n.to_string(),
            other => other.to_string(),
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A pyramid to make while converting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PyramidOptions {
    /// How many levels.
    pub levels: PyramidLevels,
    /// How a block becomes one element; `None`: `mode` for label images, else `mean`.
    pub downsample: Option<Reduction>,
}

/// What the run needs to make a planned pyramid: the levels' array paths, full resolution first,
/// and how each is made from the one above.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Made {
    /// Where level 0 is read from in the source.
    pub(crate) source_path: String,
    /// The levels' paths in the output.
    pub(crate) levels: Vec<String>,
    pub(crate) reduction: Reduction,
    /// Per dimension: 2 for the spatial axes, 1 for the others.
    pub(crate) factors: Vec<u64>,
    /// The element `mean`, `min` and `max` leave out (the `_FillValue` xarray masks).
    pub(crate) masked: Option<Vec<u8>>,
    /// Per array of the plan, which worker of a partitioned run makes its shards (see
    /// [`owners`]); set once the plan has laid the levels out.
    pub(crate) owners: Vec<zshard_state::Owner>,
}

/// What a pyramid is made from: one array, alone or as the one level of an OME-Zarr image.
struct Base {
    /// The array's path in the source (and level 0's in the output).
    path: String,
    meta: ArrayMeta,
    /// The axes: their names and whether each is spatial.
    names: Vec<String>,
    spatial: Vec<bool>,
    /// An OME-Zarr image's group attributes (0.5 form) and its level's scale and translation.
    image: Option<Image>,
}

/// An OME-Zarr image's group attributes (0.5 form), and its one level's scale and translation.
type Image = (Map<String, Value>, Vec<f64>, Vec<f64>);

/// The array `nodes` hold, alone or as the single level of an OME-Zarr image (after
/// `ome::apply`: 0.4 upgraded to 0.5).
fn base(nodes: Vec<Node>, source: &str) -> Result<Base> {
    let refuse = |reason: String| Error::Options {
        reason: format!("{}: {reason}", Setting::Pyramid),
    };
    let count = nodes.len();
    let mut nodes = nodes.into_iter();
    match (nodes.next(), nodes.next(), count) {
        (
            Some(Node {
                path,
                kind: NodeKind::Array(meta),
            }),
            None,
            1,
        ) => {
            let names = axis_names(&meta, source)?;
            let spatial = names
                .iter()
                .map(|n| axis_type(n) == Some("space"))
                .collect();
            Ok(Base {
                path,
                meta: *meta,
                names,
                spatial,
                image: None,
            })
        }
        (
            Some(Node {
                path: group,
                kind: NodeKind::Group { attributes },
            }),
            Some(Node {
                path,
                kind: NodeKind::Array(meta),
            }),
            2,
        ) if group.is_empty() => {
            let multiscale = attributes
                .get("ome")
                .and_then(|ome| ome.get("multiscales"))
                .and_then(Value::as_array)
                .filter(|all| all.len() == 1)
                .and_then(|all| all.first());
            let dataset = multiscale
                .and_then(|m| m.get("datasets"))
                .and_then(Value::as_array)
                .filter(|d| d.len() == 1)
                .and_then(|d| d.first())
                .filter(|d| d.get("path").and_then(Value::as_str) == Some(path.as_str()));
            let (Some(multiscale), Some(dataset)) = (multiscale, dataset) else {
                return Err(refuse(format!(
                    "{source} is a group; a pyramid is made from a single array or from an \
                     OME-Zarr image of one level (give the array's own path)"
                )));
            };
            let axes: Vec<&Value> = multiscale
                .get("axes")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            let names: Vec<String> = axes
                .iter()
                .filter_map(|a| a.get("name").and_then(Value::as_str).map(str::to_string))
                .collect();
            if names.len() != meta.shape.len() || axes.len() != names.len() {
                return Err(refuse(format!(
                    "{source}: the image's axes {names:?} do not name the {} dimensions of {path:?}",
                    meta.shape.len()
                )));
            }
            let spatial: Vec<bool> = axes
                .iter()
                .map(|a| a.get("type").and_then(Value::as_str) == Some("space"))
                .collect();
            let transform = |kind: &str, default: f64| -> Vec<f64> {
                dataset
                    .get("coordinateTransformations")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find(|t| t.get("type").and_then(Value::as_str) == Some(kind))
                    .and_then(|t| t.get(kind))
                    .and_then(Value::as_array)
                    .map(|v| v.iter().filter_map(Value::as_f64).collect::<Vec<f64>>())
                    .filter(|v| v.len() == names.len())
                    .unwrap_or_else(|| vec![default; names.len()])
            };
            let (scale, translation) = (transform("scale", 1.0), transform("translation", 0.0));
            Ok(Base {
                path,
                meta: *meta,
                names,
                spatial,
                image: Some((attributes, scale, translation)),
            })
        }
        _ => Err(refuse(format!(
            "{source} is a hierarchy of {count} nodes; a pyramid is made from a single array or \
             from an OME-Zarr image of one level (give the array's own path)"
        ))),
    }
}

/// The path of level `k` beside level 0 at `first`: its trailing number replaced (`0` -> `1`,
/// `s0` -> `s1`), else `_k` appended.
fn level_path(first: &str, k: usize) -> String {
    if k == 0 {
        return first.to_string();
    }
    let stem = first.trim_end_matches(|c: char| c.is_ascii_digit());
    if stem.len() < first.len() {
        format!("{stem}{k}")
    } else {
        format!("{first}_{k}")
    }
}

/// The hierarchy of the pyramid made from `nodes` (the source: one array, or an OME-Zarr image of
/// one level), and how its levels are made; `layouts` give level 0's inner chunk shape (what
/// `auto` stops at).
pub(crate) fn make(
    nodes: Vec<Node>,
    options: &PyramidOptions,
    layouts: &Layouts,
    source: &str,
) -> Result<(Vec<Node>, Made)> {
    let refuse = |reason: String| Error::Options {
        reason: format!("{}: {reason}", Setting::Pyramid),
    };
    let Base {
        path,
        meta,
        names,
        spatial,
        image,
    } = base(nodes, source)?;
    if !downsamples(meta.data_type) {
        return Err(refuse(format!(
            "{source} holds {} elements; pyramids are made of booleans, integers and floats",
            meta.data_type
        )));
    }
    if !spatial.iter().any(|&s| s) {
        return Err(refuse(format!("{source}: no axis of the image is spatial")));
    }
    let factors: Vec<u64> = spatial.iter().map(|&s| if s { 2 } else { 1 }).collect();
    let inner = crate::plan::first_level_inner(layouts, &meta)?;
    let mut shapes = vec![meta.shape.clone()];
    loop {
        let last = &shapes[shapes.len() - 1];
        let more = match options.levels {
            PyramidLevels::Count(n) => shapes.len() < n as usize,
            PyramidLevels::Auto => (0..last.len()).any(|d| spatial[d] && last[d] > inner[d]),
        };
        // A level whose spatial axes are one element each has no level below it.
        if !more || (0..last.len()).all(|d| !spatial[d] || last[d] <= 1) {
            break;
        }
        let next = last
            .iter()
            .zip(&factors)
            .map(|(&n, &f)| n.div_ceil(f))
            .collect();
        shapes.push(next);
    }
    let labels = meta.attributes.contains_key("image-label")
        || image.as_ref().is_some_and(|(attributes, _, _)| {
            attributes
                .get("ome")
                .is_some_and(|ome| ome.get("image-label").is_some())
        });
    let reduction = options.downsample.unwrap_or(if labels {
        Reduction::Mode
    } else {
        Reduction::Mean
    });
    // xarray's mask (a Zarr v2 fill value, a `_FillValue` attribute) is what a masked element means
    // for a plain array; an OME-Zarr image's fill value is a pixel value like any other.
    let masked = zshard_zarr::xarray_mask(&meta.attributes, meta.data_type)
        .filter(|_| image.is_none())
        .map(|fill| fill.as_bytes().to_vec());
    // A single array's levels are `0`, `1`, ... in a new group; an image's sit beside its level.
    let levels: Vec<String> = (0..shapes.len())
        .map(|k| match image {
            Some(_) => level_path(&path, k),
            None => k.to_string(),
        })
        .collect();
    let (base_scale, base_translation) = match &image {
        Some((_, scale, translation)) => (scale.clone(), translation.clone()),
        None => (vec![1.0; names.len()], vec![0.0; names.len()]),
    };
    let datasets: Vec<Value> = levels
        .iter()
        .enumerate()
        .map(|(k, level)| {
            let factor = (1u64 << k) as f64;
            let scale: Vec<f64> = (0..names.len())
                .map(|d| base_scale[d] * if spatial[d] { factor } else { 1.0 })
                .collect();
            // ngff-zarr's choice: a level's pixel centres sit at the centres of the blocks they
            // reduce, so level k is shifted by half of (2^k - 1) level-0 pixels.
            let translation: Vec<f64> = (0..names.len())
                .map(|d| {
                    let shift = if spatial[d] {
                        (factor - 1.0) / 2.0
                    } else {
                        0.0
                    };
                    base_translation[d] + shift * base_scale[d]
                })
                .collect();
            json!({
                "path": level,
                "coordinateTransformations": [
                    {"type": "scale", "scale": scale},
                    {"type": "translation", "translation": translation},
                ],
            })
        })
        .collect();
    let metadata = json!({
        "description": format!("2x2 {} downsampling of the spatial axes", reduction.name()),
        "method": "zshard",
        "version": env!("CARGO_PKG_VERSION"),
    });
    let attributes = match image {
        // The image keeps its attributes (`omero`, its axes with their units, its name); its one
        // multiscale lists the levels.
        Some((mut attributes, _, _)) => {
            if let Some(multiscale) = attributes
                .get_mut("ome")
                .and_then(|ome| ome.get_mut("multiscales"))
                .and_then(|m| m.get_mut(0))
                .and_then(Value::as_object_mut)
            {
                multiscale.insert("datasets".into(), Value::Array(datasets));
                multiscale.insert("type".into(), reduction.name().into());
                multiscale.insert("metadata".into(), metadata);
            }
            attributes
        }
        None => {
            let axes: Vec<Value> = names
                .iter()
                .map(|name| match axis_type(name) {
                    Some(kind) => json!({"name": name, "type": kind}),
                    None => json!({"name": name}),
                })
                .collect();
            let name = source
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("image")
                .to_string();
            let multiscale = json!({
                "name": name,
                "axes": axes,
                "datasets": datasets,
                "type": reduction.name(),
                "metadata": metadata,
            });
            let mut attributes = Map::new();
            attributes.insert(
                "ome".into(),
                json!({"version": "0.5", "multiscales": [multiscale]}),
            );
            attributes
        }
    };
    let mut out = vec![Node {
        path: String::new(),
        kind: NodeKind::Group { attributes },
    }];
    for (k, shape) in shapes.iter().enumerate() {
        let mut level = meta.clone();
        level.dimension_names = Some(names.iter().cloned().map(Some).collect());
        if k > 0 {
            level.chunk_shape = meta
                .chunk_shape
                .iter()
                .zip(shape)
                .map(|(&c, &n)| c.min(n).max(1))
                .collect();
            level.shape = shape.clone();
            level.rectilinear = None;
            level.sharded = None;
            level.warnings = Vec::new();
        }
        out.push(Node {
            path: levels[k].clone(),
            kind: NodeKind::Array(Box::new(level)),
        });
    }
    Ok((
        out,
        Made {
            source_path: path,
            levels,
            reduction,
            factors,
            masked,
            owners: Vec::new(),
        },
    ))
}

/// The names of the array's dimensions as OME axes; every one must have a name, and the spatial
/// ones (x, y, z) come last, two or three of them, as OME-Zarr asks.
fn axis_names(meta: &ArrayMeta, source: &str) -> Result<Vec<String>> {
    let refuse = |reason: String| Error::Options {
        reason: format!("{}: {source}: {reason}", Setting::Pyramid),
    };
    let names: Option<Vec<String>> = meta
        .dimension_names
        .as_ref()
        .and_then(|names| names.iter().cloned().collect());
    let Some(names) = names else {
        return Err(refuse(
            "the array's dimensions have no names: the spatial axes are those named x, y or z \
             (dimension_names, or _ARRAY_DIMENSIONS in Zarr v2)"
                .into(),
        ));
    };
    let spatial = names
        .iter()
        .filter(|n| axis_type(n) == Some("space"))
        .count();
    let first_spatial = names.iter().position(|n| axis_type(n) == Some("space"));
    let ordered = first_spatial
        .is_some_and(|first| names[first..].iter().all(|n| axis_type(n) == Some("space")));
    if !(2..=3).contains(&spatial) || !ordered || names.len() > 5 {
        return Err(refuse(format!(
            "dimensions {names:?}: OME-Zarr images have two or three spatial axes (x, y, z), \
             last, after at most a time and a channel axis"
        )));
    }
    Ok(names)
}

/// The OME axis type a dimension name stands for.
fn axis_type(name: &str) -> Option<&'static str> {
    match name.to_ascii_lowercase().as_str() {
        "x" | "y" | "z" => Some("space"),
        "c" | "channel" => Some("channel"),
        "t" | "time" => Some("time"),
        _ => None,
    }
}

impl Made {
    /// Readies `plan` (planned from the nodes [`make`] gave) for making the levels: no level is
    /// copied through encoded (each is decoded, to be reduced), and every level with one below it
    /// has inner chunks of even extent along the spatial axes, so that no block straddles two.
    pub(crate) fn apply(&self, plan: &mut Plan) -> Result<()> {
        let last = self.levels.len().saturating_sub(1);
        for array in &mut plan.arrays {
            let Some(level) = self.levels.iter().position(|l| *l == array.path) else {
                continue;
            };
            array.passthrough = false;
            if level == last {
                continue;
            }
            let inner = array.geometry.inner_shape();
            let shape = array.geometry.array_shape();
            let odd = (0..inner.len())
                .find(|&d| self.factors[d] == 2 && inner[d] % 2 == 1 && inner[d] < shape[d]);
            if let Some(d) = odd {
                return Err(Error::Options {
                    reason: format!(
                        "{}: level {level} has inner chunks {inner:?}, odd along dimension {d} \
                         which shrinks; give even extents ({} or {})",
                        Setting::Pyramid,
                        Setting::ChunkShape,
                        Setting::LevelShapes
                    ),
                });
            }
        }
        let mut made = self.clone();
        made.owners = owners(plan, self);
        plan.pyramid = Some(made);
        Ok(())
    }
}

/// Who makes each array's shards in a partitioned run (issue 41). Level 0's shards are shared as any
/// array's (see `zshard_state::Partition`). A lower level each of whose shards is made from the
/// blocks of one level-0 shard alone is made by that shard's worker, in the same pass
/// ([`Owner::Below`]): with the shapes derived from level 0's, every level down to the one whose
/// shard is one inner chunk. The levels below the first one some shard of which is fed by several
/// level-0 shards are made by `finalize`, from the last level the workers made, as they wrote it
/// ([`Owner::Finalize`]): the only read back of the output, a small part of the image.
fn owners(plan: &Plan, made: &Made) -> Vec<zshard_state::Owner> {
    use zshard_state::Owner;
    let mut owners = vec![Owner::Global; plan.arrays.len()];
    let position = |path: &String| plan.arrays.iter().position(|a| &a.path == path);
    let Some(level0) = made.levels.first().and_then(position) else {
        return owners;
    };
    let level0_first: u64 = plan.arrays[..level0]
        .iter()
        .map(|a| a.geometry.shard_count())
        .sum();
    // Per shard of the level above, the level-0 shard whose blocks alone make it.
    let mut roots: Vec<u64> = (0..plan.arrays[level0].geometry.shard_count()).collect();
    let mut above = level0;
    let mut scale = vec![1u64; made.factors.len()];
    let mut finalize = false;
    for path in &made.levels[1..] {
        let Some(index) = position(path) else {
            continue;
        };
        scale = scale
            .iter()
            .zip(&made.factors)
            .map(|(s, f)| s * f)
            .collect();
        let single = (!finalize)
            .then(|| fed_by_one(plan, above, index, &made.factors, &roots))
            .flatten();
        match single {
            Some(level_roots) => {
                owners[index] = Owner::Below {
                    level0,
                    level0_first,
                    scale: scale.clone(),
                };
                roots = level_roots;
            }
            None => {
                finalize = true;
                owners[index] = Owner::Finalize;
            }
        }
        above = index;
    }
    owners
}

/// For each shard of array `below` (made from array `above` by `factors`), the one root (of
/// `roots`, by shard of `above`) of every shard of `above` that feeds it; `None` when some shard
/// is fed from shards of several roots.
fn fed_by_one(
    plan: &Plan,
    above: usize,
    below: usize,
    factors: &[u64],
    roots: &[u64],
) -> Option<Vec<u64>> {
    let up = &plan.arrays[above].geometry;
    let up_grid = up.shard_grid();
    let geometry = &plan.arrays[below].geometry;
    let grid = geometry.shard_grid();
    (0..geometry.shard_count())
        .map(|linear| {
            let shard = zshard_core::unravel_index(linear, &grid);
            let region = geometry
                .shard_region(&shard)
                .intersect(&geometry.array_region())?;
            let fed = zshard_core::Region {
                start: region
                    .start
                    .iter()
                    .zip(factors)
                    .map(|(s, f)| s * f)
                    .collect(),
                shape: region
                    .shape
                    .iter()
                    .zip(factors)
                    .map(|(n, f)| n * f)
                    .collect(),
            }
            .intersect(&up.array_region())?;
            let mut feeding = fed
                .chunks_overlapping(up.shard_shape())
                .into_iter()
                .map(|s| {
                    roots
                        .get(zshard_core::linear_index(&s, &up_grid) as usize)
                        .copied()
                });
            let first = feeding.next()??;
            feeding.all(|root| root == Some(first)).then_some(first)
        })
        .collect()
}

impl Plan {
    /// For a level of the pyramid this conversion makes below level 0: the path of the level above
    /// it is made from, and how.
    pub(crate) fn made_from_above(&self, path: &str) -> Option<(&str, Reduction)> {
        let made = self.pyramid.as_ref()?;
        let level = made.levels.iter().position(|l| l == path)?;
        let above = made.levels.get(level.checked_sub(1)?)?;
        Some((above.as_str(), made.reduction))
    }
}

/// Refuses a destination that holds a finished pyramid made with other levels or another
/// reduction: its arrays can equal this plan's (fewer levels, the same shapes), so only the image's
/// `multiscales` tell them apart. `--overwrite` replaces it.
pub(crate) fn check_finished(
    plan: &Plan,
    destination: &zshard_store::Store,
    overwrite: bool,
) -> Result<()> {
    if overwrite || plan.pyramid.is_none() {
        return Ok(());
    }
    let Some(bytes) = destination.get("zarr.json")? else {
        return Ok(());
    };
    let made = |ome: Option<&Value>| {
        let multiscale = ome?.get("multiscales")?.get(0)?;
        Some((
            multiscale.get("datasets")?.clone(),
            multiscale.get("type").cloned(),
        ))
    };
    let held: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let held = made(held.get("attributes").and_then(|a| a.get("ome")));
    let planned = plan
        .groups
        .iter()
        .find(|(path, _)| path.is_empty())
        .and_then(|(_, attributes)| made(attributes.get("ome")));
    match held {
        Some(held) if Some(&held) != planned.as_ref() => Err(Error::Destination {
            reason: format!(
                "{} holds a multiscale image made with other levels, another {} or another {}; \
                 use {} to replace it",
                destination.url(""),
                Setting::Downsample,
                Setting::Ome,
                Setting::Overwrite
            ),
        }),
        _ => Ok(()),
    }
}

/// Bytes the run holds in shards of the levels below level 0 that wait for blocks: with shards
/// done in C order, at most two slabs of each level's shard grid (along its first dimension of
/// more than one shard), each a whole shard buffer.
pub(crate) fn pending_bytes(plan: &Plan) -> u64 {
    let Some(made) = &plan.pyramid else {
        return 0;
    };
    plan.arrays
        .iter()
        .filter(|a| made.levels[1..].contains(&a.path))
        .map(|a| level_pending_bytes(&a.geometry, a.output.data_type.size() as u64))
        .fold(0, u64::saturating_add)
}

/// Bytes of the shards of one level below level 0 (`geometry`, elements of `element` bytes) that
/// wait for blocks (see [`pending_bytes`]); `verify` holds the same while it recomputes them.
pub(crate) fn level_pending_bytes(geometry: &zshard_core::ShardGeometry, element: u64) -> u64 {
    let grid = geometry.shard_grid();
    let total = zshard_core::product(&grid);
    let slab = match grid.iter().position(|&n| n > 1) {
        Some(d) => zshard_core::product(&grid[d + 1..]).saturating_mul(2),
        None => 1,
    };
    let shard = zshard_core::product(geometry.shard_shape()).saturating_mul(element);
    slab.min(total).saturating_mul(shard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::{ChunkKeyEncoding, CodecSpec, DataType, FillValue};

    fn array(shape: &[u64], chunks: &[u64], names: &[&str]) -> Vec<Node> {
        vec![Node {
            path: String::new(),
            kind: NodeKind::Array(Box::new(ArrayMeta {
                shape: shape.to_vec(),
                data_type: DataType::UInt16,
                fill_value: FillValue::zero(DataType::UInt16),
                chunk_shape: chunks.to_vec(),
                rectilinear: None,
                codecs: vec![CodecSpec::new("bytes", json!({"endian": "little"}))],
                chunk_key_encoding: ChunkKeyEncoding::Default { separator: '/' },
                attributes: Map::new(),
                dimension_names: Some(names.iter().map(|n| Some(n.to_string())).collect()),
                sharded: None,
                warnings: Vec::new(),
            })),
        }]
    }

    fn levels(made: &(Vec<Node>, Made)) -> Vec<Vec<u64>> {
        made.0
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Array(meta) => Some(meta.shape.clone()),
                NodeKind::Group { .. } => None,
            })
            .collect()
    }

    #[test]
    fn auto_stops_at_the_level_that_fits_one_inner_chunk() {
        let options = PyramidOptions {
            levels: PyramidLevels::Auto,
            downsample: None,
        };
        let made = make(
            array(&[3, 1000, 513], &[1, 256, 256], &["c", "y", "x"]),
            &options,
            &Layouts::default(),
            "in.zarr",
        )
        .expect("planned");
        assert_eq!(
            levels(&made),
            [vec![3, 1000, 513], vec![3, 500, 257], vec![3, 250, 129]],
            "channels never shrink; odd extents round up"
        );
        assert_eq!(made.1.factors, [1, 2, 2]);
        assert_eq!(made.1.reduction, Reduction::Mean);
        let NodeKind::Group { attributes } = &made.0[0].kind else {
            panic!("the root is a group");
        };
        let datasets = &attributes["ome"]["multiscales"][0]["datasets"];
        assert_eq!(
            datasets[2]["coordinateTransformations"],
            json!([
                {"type": "scale", "scale": [1.0, 4.0, 4.0]},
                {"type": "translation", "translation": [0.0, 1.5, 1.5]},
            ])
        );
    }

    #[test]
    fn arrays_without_spatial_names_are_refused() {
        let options = PyramidOptions {
            levels: PyramidLevels::Count(3),
            downsample: None,
        };
        for names in [&["a", "b"][..], &["x", "c"], &["x"]] {
            let shape = vec![64; names.len()];
            let e = make(
                array(&shape, &shape, names),
                &options,
                &Layouts::default(),
                "in.zarr",
            )
            .expect_err("refused");
            assert!(e.to_string().contains("pyramid"), "{e}");
        }
    }

    #[test]
    fn levels_are_numbers_or_auto() {
        assert_eq!(
            "auto".parse::<PyramidLevels>().ok(),
            Some(PyramidLevels::Auto)
        );
        assert_eq!(
            "4".parse::<PyramidLevels>().ok(),
            Some(PyramidLevels::Count(4))
        );
        assert!("0".parse::<PyramidLevels>().is_err());
        let parsed: PyramidLevels = serde_json::from_value(json!(3)).expect("a number");
        assert_eq!(parsed, PyramidLevels::Count(3));
        assert_eq!(
            serde_json::to_value(PyramidLevels::Auto).ok(),
            Some(json!("auto"))
        );
    }
}
