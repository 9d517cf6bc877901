//! OME-Zarr (NGFF) metadata: which version a hierarchy is written in, its translation from 0.4 to
//! 0.5, and the levels of its multiscale pyramids.
//!
//! OME-Zarr 0.4 keeps its metadata at the top level of a Zarr v2 group's attributes
//! (`multiscales`, `omero`, `labels`, `image-label`, `plate`, `well`, `bioformats2raw.layout`, and
//! `series` in the `OME` group of the bioformats2raw layout), each object carrying its own `version`.
//! OME-Zarr 0.5 is Zarr v3 only and keeps the same objects under one `ome` attribute with
//! `version: "0.5"` there, without a `version` inside `multiscales`, and with the axes' names as the
//! arrays' `dimension_names`. The translation is pure: nodes in, nodes out.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use zshard_core::{Node, NodeKind};

use crate::error::{Error, Result};

/// What to do with OME-Zarr metadata.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OmeMetadata {
    /// Translate an OME-Zarr 0.4 hierarchy into 0.5; any other version (0.5 included) is kept.
    #[default]
    Upgrade,
    /// Copy the attributes as they are.
    Keep,
    /// Write OME-Zarr 0.6: a 0.4 hierarchy is upgraded to 0.5 ([`apply`]), then every 0.5 group
    /// becomes 0.6 ([`finish`]): each image's axes become its coordinate system and each level's
    /// scale and translation one transformation from the level's array into it (RFC-5).
    V06,
}

impl std::str::FromStr for OmeMetadata {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "upgrade" => Ok(OmeMetadata::Upgrade),
            "keep" => Ok(OmeMetadata::Keep),
            "0.6" => Ok(OmeMetadata::V06),
            _ => Err(format!("{s:?} is not upgrade, keep or 0.6")),
        }
    }
}

/// The OME-Zarr version a hierarchy is written in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OmeVersion {
    /// Not OME-Zarr: no group has OME metadata.
    None,
    /// OME-Zarr 0.4 (or groups without a version of their own beside 0.4 ones).
    V04,
    /// OME-Zarr 0.5 (an `ome` attribute).
    V05,
    /// Another version (0.1-0.3, or a mix), named as the metadata states it.
    Other(String),
}

/// Top-level attributes of an OME-Zarr 0.4 group that move under `ome` in 0.5 (`series` only in
/// the `OME` group of a bioformats2raw layout, see [`SERIES`]).
const OME_KEYS: [&str; 7] = [
    "multiscales",
    "omero",
    "labels",
    "image-label",
    "plate",
    "well",
    "bioformats2raw.layout",
];

/// The bioformats2raw layout's list of images, in its `OME` group.
const SERIES: &str = "series";

/// The group of the bioformats2raw layout that holds `METADATA.ome.xml`.
pub const OME_GROUP: &str = "OME";

/// The OME-XML document of a bioformats2raw layout: a plain file, not a Zarr node.
pub const OME_XML_KEY: &str = "OME/METADATA.ome.xml";

/// The attribute OME-Zarr 0.5 keeps everything under.
const OME: &str = "ome";

/// One multiscale image (an entry of `multiscales`), as 0.4 and 0.5 both write it (0.6 has no
/// `axes`: its coordinate systems are among `other`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Multiscale {
    /// 0.4 only: the version of this object; 0.5 states it once, in `ome`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    axes: Vec<Axis>,
    datasets: Vec<Dataset>,
    #[serde(flatten)]
    other: Map<String, Value>,
}

/// One axis of a multiscale image.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Axis {
    name: String,
    #[serde(flatten)]
    other: Map<String, Value>,
}

/// One level of a multiscale image: an array below the image's group.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Dataset {
    path: String,
    #[serde(
        rename = "coordinateTransformations",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    transformations: Option<Vec<Transformation>>,
    #[serde(flatten)]
    other: Map<String, Value>,
}

/// A coordinate transformation; only `scale` ones matter here, and values are kept as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Transformation {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scale: Option<Vec<Value>>,
    #[serde(flatten)]
    other: Map<String, Value>,
}

impl Dataset {
    /// The level's scale per axis, when it is given inline as numbers (in 0.6 possibly as the
    /// first of a `sequence`).
    fn scale(&self) -> Option<Vec<f64>> {
        let numbers = |scale: &[Value]| scale.iter().map(Value::as_f64).collect();
        let transformations = self.transformations.iter().flatten();
        if let Some(scale) = transformations.clone().find(|t| t.kind == "scale") {
            return numbers(scale.scale.as_ref()?);
        }
        let sequence = transformations.clone().find(|t| t.kind == "sequence")?;
        let scale = sequence
            .other
            .get("transformations")?
            .as_array()?
            .iter()
            .find(|t| t.get("type").and_then(Value::as_str) == Some("scale"))?;
        numbers(scale.get("scale")?.as_array()?)
    }
}

/// The OME metadata of a group's attributes: the `ome` object in 0.5, the attributes themselves in
/// earlier versions.
fn ome_fields(attributes: &Map<String, Value>) -> &Map<String, Value> {
    match attributes.get(OME).and_then(Value::as_object) {
        Some(ome) => ome,
        None => attributes,
    }
}

/// The `multiscales` of a group (0.4 or 0.5), when it has valid ones.
fn multiscales(
    path: &str,
    attributes: &Map<String, Value>,
) -> Option<std::result::Result<Vec<Multiscale>, Error>> {
    let value = ome_fields(attributes).get("multiscales")?;
    Some(
        serde_json::from_value(value.clone()).map_err(|e| Error::Ome {
            node: format!("group {path:?}"),
            reason: format!("multiscales: {e}"),
        }),
    )
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}/{child}")
    }
}

fn groups(nodes: &[Node]) -> impl Iterator<Item = (&str, &Map<String, Value>)> {
    nodes.iter().filter_map(|n| match &n.kind {
        NodeKind::Group { attributes } => Some((n.path.as_str(), attributes)),
        NodeKind::Array(_) => None,
    })
}

/// The versions a 0.4-style group states: in each `multiscales` entry, `plate`, `well` and
/// `image-label`.
fn stated_versions(attributes: &Map<String, Value>) -> Vec<String> {
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let mut versions: Vec<String> = attributes
        .get("multiscales")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("version").map(text))
        .collect();
    for key in ["plate", "well", "image-label"] {
        if let Some(v) = attributes.get(key).and_then(|o| o.get("version")) {
            versions.push(text(v));
        }
    }
    versions
}

/// The OME-Zarr version of a hierarchy, from its groups' attributes.
pub fn ome_version(nodes: &[Node]) -> OmeVersion {
    let mut versions = std::collections::BTreeSet::new();
    let mut ome = false;
    for (_, attributes) in groups(nodes) {
        if let Some(fields) = attributes.get(OME).and_then(Value::as_object) {
            ome = true;
            if let Some(v) = fields.get("version") {
                versions.insert(v.as_str().map_or_else(|| v.to_string(), str::to_string));
            }
        } else if OME_KEYS.iter().any(|k| attributes.contains_key(*k)) {
            ome = true;
            versions.extend(stated_versions(attributes));
        }
    }
    let mut versions = versions.into_iter();
    match (ome, versions.next(), versions.next()) {
        (false, _, _) => OmeVersion::None,
        (true, None, _) => OmeVersion::V04,
        (true, Some(v), None) if v == "0.4" => OmeVersion::V04,
        (true, Some(v), None) if v == "0.5" => OmeVersion::V05,
        (true, Some(v), None) => OmeVersion::Other(v),
        (true, Some(a), Some(b)) => OmeVersion::Other(format!("a mix of {a} and {b}")),
    }
}

/// Applies `mode` to the OME-Zarr metadata of `nodes` (a hierarchy, parents first): with
/// [`OmeMetadata::Upgrade`], a 0.4 hierarchy becomes 0.5. Returns what a reader will find different
/// from what it may expect (a version that is kept because it cannot be upgraded).
pub fn apply(nodes: &mut [Node], mode: OmeMetadata) -> Result<Vec<String>> {
    if mode == OmeMetadata::Keep {
        return Ok(Vec::new());
    }
    match ome_version(nodes) {
        OmeVersion::V04 => upgrade(nodes).map(|()| Vec::new()),
        OmeVersion::Other(version) if mode == OmeMetadata::V06 && version == "0.6" => {
            Ok(Vec::new())
        }
        OmeVersion::Other(version) => Ok(vec![format!(
            "OME-Zarr metadata of version {version} is copied as it is: only 0.4 is upgraded to 0.5"
        )]),
        OmeVersion::None | OmeVersion::V05 => Ok(Vec::new()),
    }
}

/// The OME-Zarr 0.5 groups of `nodes` written as `mode` asks, once [`apply`] (and whatever the
/// conversion makes from its result, such as a pyramid's levels) is done: with
/// [`OmeMetadata::V06`], as 0.6. Other versions are left as they are.
pub fn finish(nodes: &mut [Node], mode: OmeMetadata) -> Result<()> {
    if mode != OmeMetadata::V06 {
        return Ok(());
    }
    for node in nodes.iter_mut() {
        if let NodeKind::Group { attributes } = &mut node.kind {
            to_v06(&node.path, attributes)?;
        }
    }
    Ok(())
}

/// The name of the coordinate system a 0.6 image's levels map into: the physical space its axes
/// (with their units) describe.
pub const V06_SYSTEM: &str = "physical";

/// A 0.5 group's attributes as 0.6 writes them (nothing changes in a group of another version):
/// `version: "0.6"` once, in `ome` (the `plate`, `well` and `image-label` objects no longer state
/// their own), and every multiscale image in RFC-5's form: its `axes` become the coordinate
/// system [`V06_SYSTEM`], and each level's `scale` (and `translation`) one transformation (a
/// `sequence` of both) whose `input` is the level's array and whose `output` that system. A
/// transformation of the whole image (0.5's `coordinateTransformations` beside `datasets`) is
/// folded into every level's, which it follows.
fn to_v06(path: &str, attributes: &mut Map<String, Value>) -> Result<()> {
    let Some(ome) = attributes.get_mut(OME).and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if ome.get("version").and_then(Value::as_str) != Some("0.5") {
        return Ok(());
    }
    ome.insert("version".into(), "0.6".into());
    for key in ["plate", "well", "image-label"] {
        if let Some(object) = ome.get_mut(key).and_then(Value::as_object_mut) {
            object.remove("version");
        }
    }
    if let Some(all) = ome.get_mut("multiscales").and_then(Value::as_array_mut) {
        for multiscale in all.iter_mut().filter_map(Value::as_object_mut) {
            multiscale_to_v06(path, multiscale)?;
        }
    }
    Ok(())
}

/// One 0.5 multiscale image in 0.6's form (see [`to_v06`]).
fn multiscale_to_v06(path: &str, multiscale: &mut Map<String, Value>) -> Result<()> {
    let refuse = |reason: String| Error::Ome {
        node: format!("group {path:?}"),
        reason: format!("multiscales, written as OME-Zarr 0.6: {reason}"),
    };
    let Some(axes) = multiscale.remove("axes") else {
        return Err(refuse("the image has no axes".into()));
    };
    let rank = axes.as_array().map_or(0, Vec::len);
    let (outer_scale, outer_translation) = match multiscale.remove("coordinateTransformations") {
        Some(outer) => scale_and_translation(&outer, rank).ok_or_else(|| {
            refuse(format!(
                "its transformation {outer} is not a scale and a translation given inline"
            ))
        })?,
        None => (vec![1.0; rank], vec![0.0; rank]),
    };
    let datasets = multiscale
        .get_mut("datasets")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| refuse("the image has no datasets".into()))?;
    for dataset in datasets.iter_mut().filter_map(Value::as_object_mut) {
        let level = dataset
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let transformations = dataset
            .remove("coordinateTransformations")
            .unwrap_or(Value::Array(Vec::new()));
        let (scale, translation) =
            scale_and_translation(&transformations, rank).ok_or_else(|| {
                refuse(format!(
                    "level {level:?}: its transformations {transformations} are not a scale and a \
                 translation given inline"
                ))
            })?;
        // The image's transformation follows the level's: x -> s_o (s x + t) + t_o.
        let scale: Vec<f64> = scale.iter().zip(&outer_scale).map(|(s, o)| s * o).collect();
        let translation: Vec<f64> = (0..rank)
            .map(|d| translation[d] * outer_scale[d] + outer_translation[d])
            .collect();
        let ends = json!({
            "input": {"path": level},
            "output": {"name": V06_SYSTEM},
        });
        let mut transform = match translation.iter().all(|t| *t == 0.0) {
            true => json!({"type": "scale", "scale": scale}),
            false => json!({
                "type": "sequence",
                "transformations": [
                    {"type": "scale", "scale": scale},
                    {"type": "translation", "translation": translation},
                ],
            }),
        };
        if let (Some(transform), Some(ends)) = (transform.as_object_mut(), ends.as_object()) {
            transform.extend(ends.clone());
        }
        dataset.insert("coordinateTransformations".into(), json!([transform]));
    }
    multiscale.insert(
        "coordinateSystems".into(),
        json!([{"name": V06_SYSTEM, "axes": axes}]),
    );
    Ok(())
}

/// The scale and translation (1 and 0 where absent) of 0.5 transformations given inline, `rank`
/// numbers each; `None` for any other transformation (a scale given by a path, say).
fn scale_and_translation(transformations: &Value, rank: usize) -> Option<(Vec<f64>, Vec<f64>)> {
    let (mut scale, mut translation) = (vec![1.0; rank], vec![0.0; rank]);
    for transformation in transformations.as_array()? {
        let kind = transformation.get("type")?.as_str()?;
        let into = match kind {
            "scale" => &mut scale,
            "translation" => &mut translation,
            "identity" => continue,
            _ => return None,
        };
        let values: Vec<f64> = transformation
            .get(kind)?
            .as_array()?
            .iter()
            .map(Value::as_f64)
            .collect::<Option<_>>()?;
        if values.len() != rank {
            return None;
        }
        *into = values;
    }
    Some((scale, translation))
}

/// Translates an OME-Zarr 0.4 hierarchy into 0.5: every group's OME attributes under `ome`, and the
/// axes' names as the `dimension_names` of every level of every image.
fn upgrade(nodes: &mut [Node]) -> Result<()> {
    let bioformats2raw = groups(nodes).any(|(path, attributes)| {
        path.is_empty() && attributes.contains_key("bioformats2raw.layout")
    });
    let mut dimension_names = std::collections::BTreeMap::new();
    for (path, attributes) in groups(nodes) {
        for multiscale in multiscales(path, attributes)
            .transpose()?
            .into_iter()
            .flatten()
        {
            let names: Vec<Option<String>> = multiscale
                .axes
                .iter()
                .map(|a| Some(a.name.clone()))
                .collect();
            for dataset in &multiscale.datasets {
                dimension_names.insert(join(path, &dataset.path), names.clone());
            }
        }
    }
    for node in nodes.iter_mut() {
        match &mut node.kind {
            NodeKind::Group { attributes } => {
                let series = bioformats2raw && node.path == OME_GROUP;
                *attributes = upgrade_group(&node.path, attributes, series)?;
            }
            NodeKind::Array(meta) => {
                if let Some(names) = dimension_names.remove(&node.path) {
                    if names.len() != meta.shape.len() {
                        return Err(Error::Ome {
                            node: format!("array {:?}", node.path),
                            reason: format!(
                                "the image's axes name {} dimensions, but the array has {} (shape {:?})",
                                names.len(),
                                meta.shape.len(),
                                meta.shape
                            ),
                        });
                    }
                    meta.dimension_names = Some(names);
                }
            }
        }
    }
    Ok(())
}

/// A 0.4 group's attributes as 0.5 writes them: the OME keys under `ome` with `version: "0.5"` (and
/// `series` when the group is the bioformats2raw `OME` group), the others where they were.
fn upgrade_group(
    path: &str,
    attributes: &Map<String, Value>,
    series: bool,
) -> Result<Map<String, Value>> {
    let moves = |key: &str| OME_KEYS.contains(&key) || (series && key == SERIES);
    if !attributes.keys().any(|k| moves(k)) {
        return Ok(attributes.clone());
    }
    let mut ome = Map::new();
    ome.insert("version".into(), "0.5".into());
    let mut rest = Map::new();
    for (key, value) in attributes {
        if !moves(key) {
            rest.insert(key.clone(), value.clone());
            continue;
        }
        let value = match key.as_str() {
            "multiscales" => upgrade_multiscales(path, attributes)?,
            // The 0.5 specification still asks the plate for a version of its own.
            "plate" => with_version(value, true),
            "well" | "image-label" => with_version(value, false),
            _ => value.clone(),
        };
        ome.insert(key.clone(), value);
    }
    let mut upgraded = Map::new();
    upgraded.insert(OME.into(), Value::Object(ome));
    upgraded.extend(rest);
    Ok(upgraded)
}

/// `multiscales` without the per-object `version` (0.5 states it once, in `ome`).
fn upgrade_multiscales(path: &str, attributes: &Map<String, Value>) -> Result<Value> {
    let mut all = multiscales(path, attributes)
        .transpose()?
        .unwrap_or_default();
    for multiscale in &mut all {
        multiscale.version = None;
    }
    serde_json::to_value(all).map_err(|e| Error::Ome {
        node: format!("group {path:?}"),
        reason: format!("multiscales: {e}"),
    })
}

/// An object (`plate`, `well`, `image-label`) with its `version` made "0.5": always when `required`,
/// else only where it states one.
fn with_version(value: &Value, required: bool) -> Value {
    let mut value = value.clone();
    if let Some(object) = value.as_object_mut() {
        if required || object.contains_key("version") {
            object.insert("version".into(), "0.5".into());
        }
    }
    value
}

/// One multiscale image: its group and its levels, full resolution first.
#[derive(Debug, Clone, PartialEq)]
pub struct Pyramid {
    /// The image's group.
    pub group: String,
    /// Its levels in the order `multiscales` lists them (the first is the full resolution).
    pub levels: Vec<PyramidLevel>,
}

/// One level of a [`Pyramid`].
#[derive(Debug, Clone, PartialEq)]
pub struct PyramidLevel {
    /// The level's array, by path in the hierarchy.
    pub path: String,
    /// Its `scale` transformation per axis, when given inline.
    pub scale: Option<Vec<f64>>,
}

/// Every multiscale image of a hierarchy (OME-Zarr 0.4 or 0.5), from its groups' `multiscales`.
pub fn pyramids(nodes: &[Node]) -> Result<Vec<Pyramid>> {
    let mut all = Vec::new();
    for (path, attributes) in groups(nodes) {
        for multiscale in multiscales(path, attributes)
            .transpose()?
            .into_iter()
            .flatten()
        {
            let levels = multiscale
                .datasets
                .iter()
                .map(|d| PyramidLevel {
                    path: join(path, &d.path),
                    scale: d.scale(),
                })
                .collect();
            all.push(Pyramid {
                group: path.to_string(),
                levels,
            });
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use zshard_core::{ArrayMeta, ChunkKeyEncoding, CodecSpec, DataType, FillValue};

    fn group(path: &str, attributes: Value) -> Node {
        Node {
            path: path.into(),
            kind: NodeKind::Group {
                attributes: attributes.as_object().cloned().unwrap_or_default(),
            },
        }
    }

    fn array(path: &str, shape: &[u64]) -> Node {
        Node {
            path: path.into(),
            kind: NodeKind::Array(Box::new(ArrayMeta {
                shape: shape.to_vec(),
                data_type: DataType::UInt8,
                fill_value: FillValue::zero(DataType::UInt8),
                chunk_shape: shape.to_vec(),
                codecs: vec![CodecSpec::new("bytes", json!({}))],
                chunk_key_encoding: ChunkKeyEncoding::Default { separator: '/' },
                attributes: Map::new(),
                dimension_names: None,
                rectilinear: None,
                sharded: None,
                warnings: Vec::new(),
            })),
        }
    }

    fn attributes(node: &Node) -> Value {
        match &node.kind {
            NodeKind::Group { attributes } => Value::Object(attributes.clone()),
            NodeKind::Array(meta) => json!(meta.dimension_names),
        }
    }

    /// An image as ome-zarr-py 0.16 writes it in 0.4: two levels, with a label image.
    fn image_04() -> Vec<Node> {
        let multiscale = |name: &str| {
            json!([{"version": "0.4", "name": name, "axes": [
                {"name": "y", "type": "space", "unit": "micrometer"}, {"name": "x", "type": "space"}],
                "datasets": [
                    {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0, 1.0]}]},
                    {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [2.0, 2.0]}]}],
                "coordinateTransformations": [{"type": "scale", "scale": [0.5, 0.5]}]}])
        };
        vec![
            group(
                "",
                json!({"_creator": {"name": "omero-zarr"}, "multiscales": multiscale("image"),
                       "omero": {"channels": [{"label": "c0", "color": "FF0000"}], "version": "0.4"}}),
            ),
            array("0", &[64, 48]),
            array("1", &[32, 24]),
            group("labels", json!({"labels": ["cells"]})),
            group(
                "labels/cells",
                json!({"multiscales": multiscale("cells"),
                       "image-label": {"version": "0.4", "colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]}}),
            ),
            array("labels/cells/0", &[64, 48]),
            array("labels/cells/1", &[32, 24]),
        ]
    }

    #[test]
    fn an_image_with_labels_is_upgraded() {
        let mut nodes = image_04();
        assert_eq!(ome_version(&nodes), OmeVersion::V04);
        assert_eq!(
            apply(&mut nodes, OmeMetadata::Upgrade).expect("valid"),
            Vec::<String>::new()
        );
        let root = attributes(&nodes[0]);
        assert_eq!(root["_creator"], json!({"name": "omero-zarr"}));
        assert_eq!(root["ome"]["version"], "0.5");
        assert_eq!(root.get("multiscales"), None);
        assert_eq!(root.get("omero"), None);
        assert_eq!(root["ome"]["omero"]["channels"][0]["label"], "c0");
        let multiscale = &root["ome"]["multiscales"][0];
        assert_eq!(multiscale.get("version"), None);
        assert_eq!(multiscale["name"], "image");
        assert_eq!(
            multiscale["axes"][0],
            json!({"name": "y", "type": "space", "unit": "micrometer"})
        );
        assert_eq!(
            multiscale["datasets"][1],
            json!({"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [2.0, 2.0]}]})
        );
        assert_eq!(
            multiscale["coordinateTransformations"][0]["scale"],
            json!([0.5, 0.5])
        );
        assert_eq!(attributes(&nodes[1]), json!(["y", "x"]));
        assert_eq!(attributes(&nodes[2]), json!(["y", "x"]));
        assert_eq!(
            attributes(&nodes[3]),
            json!({"ome": {"version": "0.5", "labels": ["cells"]}})
        );
        let label = attributes(&nodes[4]);
        assert_eq!(label["ome"]["image-label"]["version"], "0.5");
        assert_eq!(label["ome"]["image-label"]["colors"][0]["label-value"], 1);
        assert_eq!(label["ome"]["multiscales"][0].get("version"), None);
        assert_eq!(attributes(&nodes[6]), json!(["y", "x"]));
        assert_eq!(ome_version(&nodes), OmeVersion::V05);
    }

    #[test]
    fn keep_and_0_5_sources_are_left_as_they_are() {
        let mut kept = image_04();
        assert!(apply(&mut kept, OmeMetadata::Keep)
            .expect("valid")
            .is_empty());
        assert_eq!(
            kept.iter().map(attributes).collect::<Vec<_>>(),
            image_04().iter().map(attributes).collect::<Vec<_>>()
        );
        let mut upgraded = image_04();
        apply(&mut upgraded, OmeMetadata::Upgrade).expect("valid");
        let once: Vec<Value> = upgraded.iter().map(attributes).collect();
        apply(&mut upgraded, OmeMetadata::Upgrade).expect("valid");
        assert_eq!(upgraded.iter().map(attributes).collect::<Vec<_>>(), once);
    }

    #[test]
    fn plates_wells_and_bioformats2raw_are_upgraded() {
        let mut nodes = vec![
            group("", json!({"bioformats2raw.layout": 3})),
            group("OME", json!({"series": ["0"]})),
            group(
                "plate",
                json!({"plate": {"version": "0.4", "name": "p", "rows": [{"name": "A"}],
                "columns": [{"name": "1"}], "wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0}]}}),
            ),
            group(
                "plate/A/1",
                json!({"well": {"version": "0.4", "images": [{"path": "0"}]}}),
            ),
        ];
        apply(&mut nodes, OmeMetadata::Upgrade).expect("valid");
        assert_eq!(
            attributes(&nodes[0]),
            json!({"ome": {"version": "0.5", "bioformats2raw.layout": 3}})
        );
        assert_eq!(
            attributes(&nodes[1]),
            json!({"ome": {"version": "0.5", "series": ["0"]}})
        );
        let plate = attributes(&nodes[2]);
        assert_eq!(plate["ome"]["plate"]["version"], "0.5");
        assert_eq!(plate["ome"]["plate"]["wells"][0]["path"], "A/1");
        assert_eq!(
            attributes(&nodes[3]),
            json!({"ome": {"version": "0.5", "well": {"version": "0.5", "images": [{"path": "0"}]}}})
        );
    }

    #[test]
    fn other_versions_are_kept_with_a_warning() {
        let mut nodes = vec![group(
            "",
            json!({"multiscales": [{"version": "0.3", "axes": [], "datasets": [{"path": "0"}]}]}),
        )];
        assert_eq!(ome_version(&nodes), OmeVersion::Other("0.3".into()));
        let warnings = apply(&mut nodes, OmeMetadata::Upgrade).expect("valid");
        assert_eq!(
            warnings,
            vec![
                "OME-Zarr metadata of version 0.3 is copied as it is: only 0.4 is upgraded to 0.5"
            ]
        );
        assert!(attributes(&nodes[0]).get("ome").is_none());
        assert_eq!(ome_version(&[group("", json!({"a": 1}))]), OmeVersion::None);
    }

    #[test]
    fn a_0_4_image_and_plate_are_written_as_0_6() {
        let mut nodes = image_04();
        if let NodeKind::Group { attributes } = &mut nodes[0].kind {
            if let Some(multiscale) = attributes
                .get_mut("multiscales")
                .and_then(|m| m.get_mut(0))
                .and_then(Value::as_object_mut)
            {
                // A transformation of the whole image follows every level's.
                multiscale.insert(
                    "coordinateTransformations".into(),
                    json!([{"type": "scale", "scale": [2.0, 2.0]}, {"type": "translation", "translation": [10.0, 0.0]}]),
                );
            }
        }
        nodes.push(group(
            "plate",
            json!({"plate": {"version": "0.4", "columns": [{"name": "1"}], "rows": [{"name": "A"}], "wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0}]}}),
        ));
        assert!(apply(&mut nodes, OmeMetadata::V06)
            .expect("valid")
            .is_empty());
        finish(&mut nodes, OmeMetadata::V06).expect("valid");
        let image = attributes(&nodes[0]);
        assert_eq!(image["ome"]["version"], "0.6");
        let multiscale = &image["ome"]["multiscales"][0];
        assert!(multiscale.get("axes").is_none());
        assert!(multiscale.get("coordinateTransformations").is_none());
        assert_eq!(
            multiscale["coordinateSystems"][0]["name"],
            json!(V06_SYSTEM)
        );
        assert_eq!(
            multiscale["coordinateSystems"][0]["axes"][0],
            json!({"name": "y", "type": "space", "unit": "micrometer"})
        );
        assert_eq!(
            multiscale["datasets"][1],
            json!({"path": "1", "coordinateTransformations": [{
                "type": "sequence",
                "input": {"path": "1"},
                "output": {"name": "physical"},
                "transformations": [
                    {"type": "scale", "scale": [4.0, 4.0]},
                    {"type": "translation", "translation": [10.0, 0.0]},
                ],
            }]})
        );
        assert_eq!(
            attributes(&nodes[4])["ome"]["image-label"],
            json!({"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]})
        );
        assert_eq!(
            attributes(&nodes[7])["ome"],
            json!({"version": "0.6", "plate": {"columns": [{"name": "1"}], "rows": [{"name": "A"}], "wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0}]}})
        );
        // The levels are still found, their scale inside the sequence.
        let levels = pyramids(&nodes).expect("valid");
        assert_eq!(levels[0].levels[1].scale, Some(vec![4.0, 4.0]));
        // Another mode writes no 0.6.
        let mut nodes = image_04();
        apply(&mut nodes, OmeMetadata::Upgrade).expect("valid");
        finish(&mut nodes, OmeMetadata::Upgrade).expect("valid");
        assert_eq!(attributes(&nodes[0])["ome"]["version"], "0.5");
    }

    #[test]
    fn axes_that_do_not_fit_an_array_are_an_error() {
        let mut nodes = image_04();
        nodes[1] = array("0", &[64, 48, 3]);
        let error = apply(&mut nodes, OmeMetadata::Upgrade)
            .expect_err("an error")
            .to_string();
        assert_eq!(
            error,
            "OME-Zarr metadata of array \"0\": the image's axes name 2 dimensions, but the array has 3 (shape [64, 48, 3])"
        );
    }

    #[test]
    fn pyramids_list_levels_with_their_scales() {
        let expected = |group: &str| Pyramid {
            group: group.into(),
            levels: vec![
                PyramidLevel {
                    path: join(group, "0"),
                    scale: Some(vec![1.0, 1.0]),
                },
                PyramidLevel {
                    path: join(group, "1"),
                    scale: Some(vec![2.0, 2.0]),
                },
            ],
        };
        let mut nodes = image_04();
        assert_eq!(
            pyramids(&nodes).expect("valid"),
            vec![expected(""), expected("labels/cells")]
        );
        apply(&mut nodes, OmeMetadata::Upgrade).expect("valid");
        assert_eq!(
            pyramids(&nodes).expect("valid"),
            vec![expected(""), expected("labels/cells")]
        );
    }
}
