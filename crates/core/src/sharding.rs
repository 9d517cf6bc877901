//! The metadata of the `sharding_indexed` codec, typed: [`ShardingConfig`] is its `configuration`,
//! read and written through serde, so that the codec builder, the sharded-source view, `plan`,
//! `verify` and the writer agree on one set of rules (the binary format is in `shard_index`).

use serde::{de::Error as _, Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::codec::CodecSpec;
use crate::dtype::Endian;
use crate::error::{Error, Result};
use crate::meta::ArrayMeta;
use crate::shard_index::{IndexEncoding, IndexLocation};

/// The codec name of sharding in Zarr v3 metadata.
pub const SHARDING_CODEC: &str = "sharding_indexed";

/// The `configuration` of a `sharding_indexed` codec (see the Zarr v3 sharding specification).
/// Members are written in this order, `index_location` always; a missing `index_location` reads as
/// `end`. Unknown members are ignored, as zshard always did (zarr-python and zarrs refuse them; a
/// converter that reads what it can serves migrations better).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardingConfig {
    /// The shape of the inner chunks; no entry is zero.
    #[serde(deserialize_with = "nonzero_shape")]
    pub chunk_shape: Vec<u64>,
    /// The chain of each inner chunk.
    pub codecs: Vec<CodecSpec>,
    /// The chain of the shard index (zshard reads `bytes`, optionally followed by `crc32c`: see
    /// [`ShardingConfig::index_encoding`]).
    pub index_codecs: Vec<CodecSpec>,
    /// Where the index sits in each shard; `end` when the metadata omits it.
    #[serde(default)]
    pub index_location: IndexLocation,
}

/// A zero entry would make a shard hold infinitely many inner chunks.
fn nonzero_shape<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u64>, D::Error> {
    let shape = Vec::<u64>::deserialize(deserializer)?;
    if shape.contains(&0) {
        return Err(D::Error::custom(format!("{shape:?} has a zero entry")));
    }
    Ok(shape)
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::InvalidShardingConfig {
        field: field.into(),
        reason: reason.into(),
    }
}

impl ShardingConfig {
    /// The configuration of shards whose index is encoded as `index_encoding`.
    pub fn new(
        chunk_shape: Vec<u64>,
        codecs: Vec<CodecSpec>,
        index_encoding: IndexEncoding,
        index_location: IndexLocation,
    ) -> Self {
        ShardingConfig {
            chunk_shape,
            codecs,
            index_codecs: index_encoding.to_codecs(),
            index_location,
        }
    }

    /// Reads the configuration of a `sharding_indexed` codec; the error names the member at fault
    /// (`configuration` for a missing member, which its reason names).
    pub fn from_codec(spec: &CodecSpec) -> Result<Self> {
        if spec.name != SHARDING_CODEC {
            return Err(invalid(
                "name",
                format!("codec {:?} is not {SHARDING_CODEC}", spec.name),
            ));
        }
        let configuration = Value::Object(spec.configuration.clone().unwrap_or_default());
        serde_path_to_error::deserialize(configuration).map_err(|e| {
            let field = match e.path().to_string() {
                root if root == "." => "configuration".to_string(),
                path => path,
            };
            invalid(field, e.into_inner().to_string())
        })
    }

    /// The codec as Zarr v3 metadata: `{"name": "sharding_indexed", "configuration": {...}}`.
    pub fn to_codec_spec(&self) -> CodecSpec {
        // Cannot fail: every member serializes to JSON with string keys.
        let configuration = serde_json::to_value(self).unwrap_or_default();
        CodecSpec::new(SHARDING_CODEC, configuration)
    }

    /// How the shard index is encoded (see [`IndexEncoding::from_codecs`]).
    pub fn index_encoding(&self) -> Result<IndexEncoding> {
        IndexEncoding::from_codecs(&self.index_codecs)
    }

    /// Inner chunks per shard along each dimension for shards of `shard_shape`, which the inner
    /// chunks must divide (with the same number of dimensions).
    pub fn chunks_per_shard(&self, shard_shape: &[u64]) -> Result<Vec<u64>> {
        let inner = &self.chunk_shape;
        if inner.len() != shard_shape.len()
            || inner.contains(&0)
            || shard_shape.iter().zip(inner).any(|(s, i)| s % i != 0)
        {
            return Err(invalid(
                "chunk_shape",
                format!("{inner:?} does not divide the shard shape {shard_shape:?}"),
            ));
        }
        Ok(shard_shape.iter().zip(inner).map(|(s, i)| s / i).collect())
    }
}

impl IndexEncoding {
    /// The encoding of an `index_codecs` chain: `bytes` (either byte order; little when it names
    /// none), optionally followed by `crc32c`. Any other chain is an invalid `index_codecs`.
    pub fn from_codecs(specs: &[CodecSpec]) -> Result<Self> {
        let unsupported = || {
            invalid(
                "index_codecs",
                format!(
                    "{} are not supported (bytes, optionally followed by crc32c)",
                    serde_json::to_string(specs).unwrap_or_default()
                ),
            )
        };
        let (first, rest) = specs.split_first().ok_or_else(unsupported)?;
        if first.name != "bytes" {
            return Err(unsupported());
        }
        let endian = match first.get("endian").and_then(Value::as_str) {
            Some("big") => Endian::Big,
            Some("little") | None => Endian::Little,
            Some(_) => return Err(unsupported()),
        };
        let crc32c = match rest {
            [] => false,
            [c] if c.name == "crc32c" => true,
            _ => return Err(unsupported()),
        };
        Ok(IndexEncoding { endian, crc32c })
    }

    /// The `index_codecs` chain of this encoding, the byte order always named.
    pub fn to_codecs(&self) -> Vec<CodecSpec> {
        let mut codecs = vec![CodecSpec::new(
            "bytes",
            serde_json::json!({"endian": self.endian.as_str()}),
        )];
        if self.crc32c {
            codecs.push(CodecSpec::new("crc32c", Value::Null));
        }
        codecs
    }
}

impl ArrayMeta {
    /// The `sharding_indexed` configuration, read, when the array's chain starts with that codec
    /// (after a transpose its chunk shape would be in permuted axis order); `None` otherwise.
    pub fn sharding(&self) -> Option<Result<ShardingConfig>> {
        let first = self.codecs.first().filter(|c| c.name == SHARDING_CODEC)?;
        Some(ShardingConfig::from_codec(first))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(configuration: Value) -> CodecSpec {
        CodecSpec::new(SHARDING_CODEC, configuration)
    }

    fn field_of(configuration: Value) -> String {
        match ShardingConfig::from_codec(&spec(configuration)) {
            Err(Error::InvalidShardingConfig { field, .. }) => field,
            other => panic!("expected an invalid configuration, got {other:?}"),
        }
    }

    #[test]
    fn reads_every_member_and_defaults_the_index_to_the_end() {
        let config = ShardingConfig::from_codec(&spec(json!({
            "chunk_shape": [32, 16],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, "zstd"],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
        })))
        .expect("valid");
        assert_eq!(config.chunk_shape, vec![32, 16]);
        assert_eq!(config.codecs[1], CodecSpec::new("zstd", Value::Null));
        assert_eq!(config.index_location, IndexLocation::End);
        assert_eq!(
            config.index_encoding().expect("bytes"),
            IndexEncoding {
                endian: Endian::Big,
                crc32c: false
            }
        );
        assert_eq!(config.chunks_per_shard(&[64, 64]).expect("divides"), [2, 4]);
        // The written form names the index location even when the source did not.
        assert_eq!(
            config.to_codec_spec().get("index_location"),
            Some(&json!("end"))
        );
    }

    #[test]
    fn errors_name_the_member_at_fault() {
        let good = json!({"chunk_shape": [2], "codecs": ["bytes"], "index_codecs": ["bytes"]});
        let with = |key: &str, value: Value| {
            let mut c = good.clone();
            c[key] = value;
            c
        };
        assert_eq!(field_of(with("chunk_shape", json!([2, 0]))), "chunk_shape");
        assert_eq!(
            field_of(with("chunk_shape", json!([2, -1]))),
            "chunk_shape[1]"
        );
        assert_eq!(field_of(with("chunk_shape", json!("2"))), "chunk_shape");
        assert_eq!(field_of(with("codecs", json!([5]))), "codecs[0]");
        assert_eq!(
            field_of(with("index_location", json!("middle"))),
            "index_location"
        );
        assert_eq!(field_of(with("index_location", json!(1))), "index_location");
        // Unknown members are ignored.
        assert!(ShardingConfig::from_codec(&spec(with("extra", json!(1)))).is_ok());
        let mut missing = good.clone();
        missing.as_object_mut().expect("object").remove("codecs");
        let err = ShardingConfig::from_codec(&spec(missing)).expect_err("missing codecs");
        assert!(err.to_string().contains("missing field `codecs`"), "{err}");
        // Index chains zshard cannot read are valid metadata, refused when the encoding is asked for.
        let zstd_index =
            ShardingConfig::from_codec(&spec(with("index_codecs", json!(["bytes", "zstd"]))))
                .expect("valid metadata");
        assert!(matches!(
            zstd_index.index_encoding(),
            Err(Error::InvalidShardingConfig { field, .. }) if field == "index_codecs"
        ));
        let err = ShardingConfig::from_codec(&CodecSpec::new("bytes", Value::Null))
            .expect_err("not sharding");
        assert!(matches!(err, Error::InvalidShardingConfig { field, .. } if field == "name"));
    }

    #[test]
    fn index_encodings_read_and_write_as_index_codecs() {
        let read = |c: Value| {
            IndexEncoding::from_codecs(&serde_json::from_value::<Vec<CodecSpec>>(c).expect("specs"))
        };
        assert_eq!(
            read(json!(["bytes", "crc32c"])).expect("default"),
            IndexEncoding::default()
        );
        for bad in [
            json!([]),
            json!(["zstd"]),
            json!(["bytes", "zstd"]),
            json!([{"name": "bytes", "configuration": {"endian": "middle"}}]),
            json!(["bytes", "crc32c", "crc32c"]),
        ] {
            match read(bad) {
                Err(Error::InvalidShardingConfig { field, .. }) => {
                    assert_eq!(field, "index_codecs")
                }
                other => panic!("expected unsupported index codecs, got {other:?}"),
            }
        }
        for encoding in [
            IndexEncoding::default(),
            IndexEncoding {
                endian: Endian::Big,
                crc32c: false,
            },
        ] {
            assert_eq!(
                IndexEncoding::from_codecs(&encoding.to_codecs()).expect("own"),
                encoding
            );
        }
    }

    #[test]
    fn chunk_shapes_must_divide_the_shard() {
        let config = ShardingConfig::new(
            vec![30, 32],
            vec![],
            IndexEncoding::default(),
            IndexLocation::End,
        );
        assert!(config.chunks_per_shard(&[64, 64]).is_err());
        assert!(config.chunks_per_shard(&[60]).is_err());
        assert_eq!(config.chunks_per_shard(&[60, 64]).expect("divides"), [2, 2]);
    }

    #[test]
    fn written_configurations_read_back_unchanged() {
        let config = ShardingConfig::new(
            vec![4, 4],
            vec![CodecSpec::new("bytes", json!({"endian": "little"}))],
            IndexEncoding::default(),
            IndexLocation::Start,
        );
        let spec = config.to_codec_spec();
        assert_eq!(
            serde_json::to_string(&spec).expect("json"),
            r#"{"name":"sharding_indexed","configuration":{"chunk_shape":[4,4],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"start"}}"#
        );
        assert_eq!(ShardingConfig::from_codec(&spec).expect("valid"), config);
    }
}
