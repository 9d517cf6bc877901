//! Verifying a pyramid that a conversion made from its source (`--pyramid`, issue 41): the output
//! is an OME-Zarr image whose level 0 is the source and whose lower levels exist nowhere in it.
//! The source is compared as the conversion saw it after `pyramid::make` (the image's group and
//! every level), level 0 against the source's elements and every lower level against its
//! recomputation from the source, made by the same pipeline stage that made it while converting.

use serde_json::Value;
use zshard_core::downsample::Reduction;
use zshard_core::{Node, NodeKind};
use zshard_zarr::ome::OmeMetadata;

use crate::plan::pyramid::{make, Made, PyramidLevels, PyramidOptions};
use crate::plan::Layouts;

/// How many levels and which reduction the output's image says zshard made it with, when its root
/// is such an image (`multiscales[0].metadata.method` is `zshard`).
fn made_by_zshard(output_nodes: &[Node]) -> Option<(u32, Reduction, Value)> {
    let attributes = output_nodes.iter().find_map(|n| match &n.kind {
        NodeKind::Group { attributes } if n.path.is_empty() => Some(attributes),
        _ => None,
    })?;
    let multiscale = attributes.get("ome")?.get("multiscales")?.get(0)?;
    let metadata = multiscale.get("metadata")?;
    if metadata.get("method")?.as_str()? != "zshard" {
        return None;
    }
    let reduction = multiscale.get("type")?.as_str()?.parse().ok()?;
    let levels = multiscale.get("datasets")?.as_array()?.len();
    Some((u32::try_from(levels).ok()?, reduction, metadata.clone()))
}

/// What the source is compared as, when the output is a pyramid zshard made from it: the
/// hierarchy `make` gives (the image's group and every level, the lower ones made from the one
/// above) and how each level is made; else the source's own nodes and `None`. A source that
/// already holds the output's levels (a pyramid converted as it is) is compared as it is. The
/// string is the mismatch of an output zshard says it made from a source it cannot be made from.
pub(super) fn as_made(
    source_nodes: Vec<Node>,
    output_nodes: &[Node],
    source: &str,
) -> (Vec<Node>, Option<Made>, Option<String>) {
    let Some((levels, reduction, metadata)) = made_by_zshard(output_nodes) else {
        return (source_nodes, None, None);
    };
    let output_arrays: Vec<&str> = output_nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Array(_)))
        .map(|n| n.path.as_str())
        .collect();
    let held = output_arrays.iter().all(|path| {
        source_nodes
            .iter()
            .any(|n| n.path == *path && matches!(n.kind, NodeKind::Array(_)))
    });
    if held {
        return (source_nodes, None, None);
    }
    let options = PyramidOptions {
        levels: PyramidLevels::Count(levels),
        downsample: Some(reduction),
    };
    // `Count` makes the levels the output lists (`auto` stopped at one of them), so no layout is
    // needed to know where `auto` would stop.
    match make(source_nodes.clone(), &options, &Layouts::default(), source) {
        Ok((mut nodes, made)) => {
            // The version of zshard that made it is what it is; the rest of the image must be
            // what this source makes.
            if let Some(version) = metadata.get("version") {
                let multiscale_metadata = nodes.iter_mut().find_map(|n| match &mut n.kind {
                    NodeKind::Group { attributes } if n.path.is_empty() => attributes
                        .get_mut("ome")?
                        .get_mut("multiscales")?
                        .get_mut(0)?
                        .get_mut("metadata")?
                        .as_object_mut(),
                    _ => None,
                });
                if let Some(m) = multiscale_metadata {
                    m.insert("version".into(), version.clone());
                }
            }
            // A pyramid written as OME-Zarr 0.6 (`--ome 0.6`) is compared as one.
            let version = output_nodes.iter().find_map(|n| match &n.kind {
                NodeKind::Group { attributes } if n.path.is_empty() => {
                    attributes.get("ome")?.get("version")?.as_str()
                }
                _ => None,
            });
            if version == Some("0.6") {
                if let Err(e) = zshard_zarr::ome::finish(&mut nodes, OmeMetadata::V06) {
                    let e = crate::Error::from(e);
                    return (source_nodes, None, Some(crate::error::one_line(&e)));
                }
            }
            (nodes, Some(made), None)
        }
        Err(e) => (
            source_nodes,
            None,
            Some(format!(
                "the output is a pyramid of {levels} level(s) zshard made by {reduction}, which \
                 {source} cannot make: {}",
                crate::error::one_line(&e)
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn group(attributes: Value) -> Node {
        Node {
            path: String::new(),
            kind: NodeKind::Group {
                attributes: attributes.as_object().cloned().unwrap_or_default(),
            },
        }
    }

    #[test]
    fn only_an_image_zshard_made_is_recomputed() {
        let made = json!({"ome": {"version": "0.5", "multiscales": [{
            "datasets": [{"path": "0"}, {"path": "1"}, {"path": "2"}],
            "type": "max",
            "metadata": {"method": "zshard", "version": "0.1.0"},
        }]}});
        let (levels, reduction, _) = made_by_zshard(&[group(made)]).expect("made by zshard");
        assert_eq!((levels, reduction), (3, Reduction::Max));
        let other = json!({"ome": {"version": "0.5", "multiscales": [{
            "datasets": [{"path": "0"}, {"path": "1"}],
            "type": "mean",
            "metadata": {"method": "skimage.transform.resize"},
        }]}});
        assert!(made_by_zshard(&[group(other)]).is_none());
    }
}
