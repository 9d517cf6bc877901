//! `reshape` (zarr-extensions, array→array): gives a chunk another shape with the same elements in
//! the same C order, so the bytes never move; only the representation after it changes.
//!
//! Each output dimension is a size, a list of input dimensions (the product of their sizes), or -1
//! (at most once: whatever makes the element counts equal). The registry's constraints are checked
//! for every chunk shape the codec meets: equal counts, input dimensions in increasing order, and
//! output dimensions given by input dimensions lying where those input dimensions ravel.

use std::sync::Arc;

use serde_json::{json, Value};
use zshard_core::{ArrayToArrayCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::error::invalid;
use crate::registry::Codec;

const NAME: &str = "reshape";

/// One output dimension of the configuration.
#[derive(Debug, Clone, PartialEq)]
enum Dim {
    Size(u64),
    InputDims(Vec<usize>),
    Auto,
}

impl Dim {
    fn to_json(&self) -> Value {
        match self {
            Dim::Size(size) => json!(size),
            Dim::InputDims(dims) => json!(dims),
            Dim::Auto => json!(-1),
        }
    }
}

#[derive(Debug)]
pub(crate) struct ReshapeCodec {
    shape: Vec<Dim>,
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let items = spec
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(NAME, "shape must be a list"))?;
    let dim = |item: &Value| -> crate::Result<Dim> {
        match item {
            Value::Number(n) if n.as_i64() == Some(-1) => Ok(Dim::Auto),
            Value::Number(n) => n
                .as_u64()
                .filter(|size| *size > 0)
                .map(Dim::Size)
                .ok_or_else(|| invalid(NAME, format!("size {n} is not a positive integer or -1"))),
            Value::Array(dims) => dims
                .iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect::<Option<Vec<_>>>()
                .map(Dim::InputDims)
                .ok_or_else(|| invalid(NAME, format!("{item} is not a list of input dimensions"))),
            other => Err(invalid(
                NAME,
                format!("{other} is not a size, a list of input dimensions or -1"),
            )),
        }
    };
    let shape = items.iter().map(dim).collect::<crate::Result<Vec<_>>>()?;
    if shape.is_empty() {
        return Err(invalid(NAME, "shape is empty"));
    }
    if shape.iter().filter(|d| **d == Dim::Auto).count() > 1 {
        return Err(invalid(NAME, "-1 occurs more than once in shape"));
    }
    let flattened: Vec<usize> = shape
        .iter()
        .filter_map(|d| match d {
            Dim::InputDims(dims) => Some(dims.iter().copied()),
            _ => None,
        })
        .flatten()
        .collect();
    if flattened.windows(2).any(|w| w[0] >= w[1]) {
        return Err(invalid(
            NAME,
            format!("the input dimensions {flattened:?} are not in increasing order (reshape never transposes)"),
        ));
    }
    let codec = ReshapeCodec { shape };
    // The chunk shape this chain is built for must reshape.
    codec
        .output_shape(&repr.shape)
        .map_err(crate::Error::Core)?;
    Ok(Codec::ArrayToArray(Arc::new(codec)))
}

fn product(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |p, &d| p.checked_mul(d))
}

impl ReshapeCodec {
    fn error(&self, reason: String) -> Error {
        let config: Vec<Value> = self.shape.iter().map(Dim::to_json).collect();
        Error::codec(NAME, format!("shape {}: {reason}", Value::from(config)))
    }

    /// The encoded shape of a chunk of `input` shape, or why it has none.
    fn output_shape(&self, input: &[u64]) -> Result<Vec<u64>> {
        let count = product(input).ok_or_else(|| self.error("too many elements".into()))?;
        let mut out = Vec::with_capacity(self.shape.len());
        let mut auto = None;
        for dim in &self.shape {
            out.push(match dim {
                Dim::Size(size) => *size,
                Dim::InputDims(dims) => {
                    let sizes = dims
                        .iter()
                        .map(|&d| input.get(d).copied())
                        .collect::<Option<Vec<u64>>>()
                        .ok_or_else(|| {
                            self.error(format!(
                                "an input dimension of {dims:?} is not one of the chunk's {}",
                                input.len()
                            ))
                        })?;
                    product(&sizes).ok_or_else(|| self.error("too many elements".into()))?
                }
                Dim::Auto => {
                    auto = Some(out.len());
                    1
                }
            });
        }
        let known = product(&out).ok_or_else(|| self.error("too many elements".into()))?;
        if let Some(i) = auto {
            if known == 0 || !count.is_multiple_of(known) {
                return Err(self.error(format!(
                    "no size for -1 gives the {count} elements of a chunk of shape {input:?}"
                )));
            }
            out[i] = count / known;
        } else if known != count {
            return Err(self.error(format!(
                "{known} elements, a chunk of shape {input:?} has {count}"
            )));
        }
        // An output dimension given by input dimensions must be where they ravel: the output
        // dimensions before it hold as many elements as the input dimensions before them, and
        // likewise after.
        for (i, dim) in self.shape.iter().enumerate() {
            if let Dim::InputDims(dims) = dim {
                let (Some(&first), Some(&last)) = (dims.first(), dims.last()) else {
                    continue;
                };
                let before = product(&out[..i]) == product(&input[..first]);
                let after = product(&out[i + 1..]) == product(&input[last + 1..]);
                if !(before && after) {
                    return Err(self.error(format!(
                        "output dimension {i} is not where input dimensions {dims:?} of a chunk of shape {input:?} lie"
                    )));
                }
            }
        }
        Ok(out)
    }
}

impl ArrayToArrayCodec for ReshapeCodec {
    fn encoded_repr(&self, decoded: &ChunkRepr) -> Result<ChunkRepr> {
        Ok(ChunkRepr {
            shape: self.output_shape(&decoded.shape)?,
            ..decoded.clone()
        })
    }

    fn encode(&self, data: Vec<u8>, _decoded: &ChunkRepr) -> Result<Vec<u8>> {
        Ok(data)
    }

    fn decode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        if data.len() != decoded.byte_len() {
            return Err(Error::DecodedSize {
                expected: decoded.byte_len(),
                actual: data.len(),
            });
        }
        Ok(data)
    }

    fn spec(&self) -> CodecSpec {
        let shape: Vec<Value> = self.shape.iter().map(Dim::to_json).collect();
        CodecSpec::new(NAME, json!({ "shape": shape }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::{DataType, FillValue};

    fn repr(shape: &[u64]) -> ChunkRepr {
        ChunkRepr {
            shape: shape.to_vec(),
            data_type: DataType::UInt16,
            fill_value: FillValue::zero(DataType::UInt16),
        }
    }

    fn codec(shape: Value, input: &[u64]) -> crate::Result<Arc<dyn ArrayToArrayCodec>> {
        match build(
            &CodecSpec::new(NAME, json!({ "shape": shape })),
            &repr(input),
        )? {
            Codec::ArrayToArray(c) => Ok(c),
            other => panic!("not array to array: {other:?}"),
        }
    }

    /// The registry's example and zarrs' unit tests (a chunk of 5×4×4×3).
    #[test]
    fn output_shapes_follow_the_registry() {
        let input = [5, 4, 4, 3];
        let shape = |config: Value| {
            codec(config, &input)
                .and_then(|c| Ok(c.encoded_repr(&repr(&input))?.shape))
                .map_err(|e| e.to_string())
        };
        assert_eq!(shape(json!([[0, 1], [2], 3])), Ok(vec![20, 4, 3]));
        assert_eq!(shape(json!([[0, 1], [2], -1])), Ok(vec![20, 4, 3]));
        assert_eq!(shape(json!([[0, 1], -1])), Ok(vec![20, 12]));
        assert_eq!(shape(json!([5, -1, 3])), Ok(vec![5, 16, 3]));
        assert_eq!(shape(json!([240])), Ok(vec![240]));
        assert_eq!(shape(json!([-1])), Ok(vec![240]));
        // Refused: counts that differ, -1 twice, transposing input dimensions, dimensions not where
        // they ravel, a dimension the chunk does not have, and sizes that are not sizes.
        let refused = |config: Value| shape(config).expect_err("refused");
        assert!(refused(json!([239])).contains("239 elements"));
        assert!(refused(json!([-1, -1])).contains("more than once"));
        assert!(refused(json!([[1], [0], 48])).contains("increasing"));
        assert!(refused(json!([[1, 0], 48])).contains("increasing"));
        assert!(refused(json!([4, [1], 15])).contains("not where"));
        assert!(refused(json!([[3, 4], -1])).contains("not one of"));
        assert!(refused(json!([0, -1])).contains("positive"));
        assert!(refused(json!([7, -1])).contains("no size for -1"));
        assert!(refused(json!("C")).contains("must be a list"));
    }

    #[test]
    fn bytes_do_not_move_and_the_spec_round_trips() {
        let c = codec(json!([[0, 1], -1]), &[2, 3, 4]).expect("built");
        let data: Vec<u8> = (0..48).collect();
        assert_eq!(
            c.encode(data.clone(), &repr(&[2, 3, 4])).expect("encode"),
            data
        );
        assert_eq!(
            c.decode(data.clone(), &repr(&[2, 3, 4])).expect("decode"),
            data
        );
        assert!(c.decode(data[1..].to_vec(), &repr(&[2, 3, 4])).is_err());
        assert_eq!(
            c.spec().to_json(),
            json!({"name": "reshape", "configuration": {"shape": [[0, 1], -1]}})
        );
    }
}
