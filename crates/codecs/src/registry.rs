//! Which codec names exist and how to build them. Adding a codec is a new module with a `build`
//! function plus one line in [`REGISTRY`].

use std::sync::Arc;

use zshard_core::{
    ArrayToArrayCodec, ArrayToBytesCodec, BytesToBytesCodec, ChunkRepr, CodecChain, CodecSpec,
};

use crate::error::{Error, Result};

/// A built codec, by the kind of data it maps between.
#[derive(Debug, Clone)]
pub enum Codec {
    /// Maps a chunk to a chunk, before the array→bytes codec (`transpose`, zarr-python 3's array filters).
    ArrayToArray(Arc<dyn ArrayToArrayCodec>),
    /// Turns a chunk into bytes (`bytes`, `vlen-utf8`, `sharding_indexed`); one per chain.
    ArrayToBytes(Arc<dyn ArrayToBytesCodec>),
    /// Maps bytes to bytes after the array→bytes codec (compressors, checksums, v2 filters).
    BytesToBytes(Arc<dyn BytesToBytesCodec>),
}

type Build = fn(&CodecSpec, &ChunkRepr) -> Result<Codec>;

/// Every codec name zshard reads and writes, with v3 names and the `numcodecs.*` names zarr-python
/// uses for numcodecs codecs.
const REGISTRY: &[(&str, Build)] = &[
    ("bytes", crate::bytes_codec::build),
    // zarr-extensions: sub-byte and bit-range packing (not numcodecs.packbits below).
    ("packbits", crate::packbits_ext::build),
    ("vlen-utf8", crate::vlen_utf8::build),
    ("vlen-bytes", crate::vlen_utf8::build_bytes),
    ("numcodecs.json2", crate::object_codecs::build_json2),
    ("numcodecs.msgpack2", crate::object_codecs::build_msgpack2),
    ("transpose", crate::transpose::build),
    // zarr-extensions registered codecs.
    ("bitround", crate::bitround::build_registered),
    ("reshape", crate::reshape::build),
    ("conditional", crate::conditional::build),
    ("n5_default", crate::n5_default::build),
    ("zfp", crate::zfp::build_registered),
    // zarr-extensions array→array codecs (zarr-python 3.2+).
    ("scale_offset", crate::scale_offset::build),
    ("cast_value", crate::cast_value::build),
    ("sharding_indexed", crate::sharding::build),
    ("blosc", crate::blosc::build),
    ("numcodecs.blosc", crate::blosc::build),
    ("zstd", crate::zstd_codec::build),
    ("numcodecs.zstd", crate::zstd_codec::build),
    ("gzip", crate::deflate::build_gzip),
    ("numcodecs.gzip", crate::deflate::build_gzip),
    ("numcodecs.zlib", crate::deflate::build_zlib),
    ("crc32c", crate::crc32c_codec::build),
    ("numcodecs.bz2", crate::bz2_codec::build),
    ("numcodecs.lzma", crate::lzma_codec::build),
    ("numcodecs.lz4", crate::lz4_codec::build),
    // numcodecs filters: bytes to bytes over the flattened elements, as Zarr v2 applies them.
    ("numcodecs.shuffle", crate::shuffle::build),
    ("numcodecs.delta", crate::delta::build),
    ("numcodecs.fixedscaleoffset", crate::fixedscaleoffset::build),
    ("numcodecs.quantize", crate::cast::build_quantize),
    ("numcodecs.astype", crate::cast::build_astype),
    ("numcodecs.packbits", crate::packbits::build),
    ("numcodecs.crc32", crate::checksum32::build_crc32),
    ("numcodecs.adler32", crate::checksum32::build_adler32),
    ("numcodecs.crc32c", crate::checksum32::build_crc32c),
    ("numcodecs.fletcher32", crate::checksum32::build_fletcher32),
    (
        "numcodecs.jenkins_lookup3",
        crate::checksum32::build_jenkins_lookup3,
    ),
    ("numcodecs.bitround", crate::bitround::build),
    ("numcodecs.categorize", crate::categorize::build),
    ("numcodecs.pcodec", crate::pcodec_codec::build),
    ("numcodecs.zfpy", crate::zfp::build),
];

/// Codecs that lay out fixed-size elements, which string arrays do not have.
const FIXED_SIZE_ONLY: &[&str] = &[
    "bytes",
    "packbits",
    "transpose",
    "bitround",
    "reshape",
    "n5_default",
    "zfp",
    "sharding_indexed",
    "numcodecs.pcodec",
    "numcodecs.zfpy",
];

/// The codec names zshard supports, for error messages and `--help`.
pub fn supported_codecs() -> Vec<&'static str> {
    REGISTRY.iter().map(|(name, _)| *name).collect()
}

/// The nested chain of a codec that holds one in its `codecs` member (`conditional`,
/// `n5_default`), as the metadata gives it; `missing` says what that member should hold when it
/// is absent.
pub(crate) fn nested_specs(spec: &CodecSpec, codec: &str, missing: &str) -> Result<Vec<CodecSpec>> {
    match spec.get("codecs") {
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|item| serde_json::from_value(item.clone()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| {
                crate::error::invalid(codec, format!("codecs is not a list of v3 codecs: {e}"))
            }),
        _ => Err(crate::error::invalid(codec, missing)),
    }
}

/// Builds one codec for chunks of representation `repr` (the representation it receives when encoding).
pub fn build_codec(spec: &CodecSpec, repr: &ChunkRepr) -> Result<Codec> {
    let build = REGISTRY
        .iter()
        .find(|(name, _)| *name == spec.name)
        .map(|(_, build)| *build)
        .ok_or_else(|| Error::UnknownCodec {
            name: spec.name.clone(),
            supported: supported_codecs().join(", "),
        })?;
    if repr.data_type.is_variable() && FIXED_SIZE_ONLY.contains(&spec.name.as_str()) {
        return Err(Error::InvalidConfiguration {
            codec: spec.name.clone(),
            reason: format!(
                "cannot encode {} arrays (variable-length strings and bytes use vlen-utf8 and vlen-bytes)",
                repr.data_type
            ),
        });
    }
    build(spec, repr)
}

/// Builds a chain from v3 codec metadata for chunks of representation `repr`, checking the order:
/// array→array codecs, exactly one array→bytes codec, then bytes→bytes codecs.
pub fn build_chain(specs: &[CodecSpec], repr: &ChunkRepr) -> Result<CodecChain> {
    let mut array_to_array = Vec::new();
    let mut array_to_bytes = None;
    let mut bytes_to_bytes = Vec::new();
    let mut current = repr.clone();
    let names = || {
        specs
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    for spec in specs {
        match build_codec(spec, &current)? {
            Codec::ArrayToArray(c) if array_to_bytes.is_none() => {
                current = c.encoded_repr(&current)?;
                array_to_array.push(c);
            }
            Codec::ArrayToBytes(c) if array_to_bytes.is_none() => array_to_bytes = Some(c),
            Codec::BytesToBytes(c) if array_to_bytes.is_some() => bytes_to_bytes.push(c),
            // zarr-python 3 writes numcodecs filters before `bytes`, as array→array codecs.
            Codec::BytesToBytes(c)
                if array_to_bytes.is_none()
                    && crate::array_filter::ARRAY_FILTERS.contains(&spec.name.as_str()) =>
            {
                let filter = crate::array_filter::wrap(spec, c, &current)?;
                current = filter.encoded_repr(&current)?;
                array_to_array.push(Arc::new(filter));
            }
            _ => {
                return Err(Error::InvalidChain {
                    reason: format!("{} is out of place in [{}]", spec.name, names()),
                })
            }
        }
    }
    let array_to_bytes = array_to_bytes.ok_or_else(|| Error::InvalidChain {
        reason: format!("no array-to-bytes codec (such as bytes) in [{}]", names()),
    })?;
    Ok(CodecChain {
        array_to_array,
        array_to_bytes,
        bytes_to_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use zshard_core::{DataType, FillValue};

    /// The registry's codecs are known by their registered names; a zfp chunk type zshard does not
    /// read is refused naming the codec and the registry (not as an unknown name).
    #[test]
    fn registered_codecs_are_known_and_zfp_refused_by_name() {
        for name in [
            "bitround",
            "reshape",
            "conditional",
            "n5_default",
            "packbits",
        ] {
            assert!(supported_codecs().contains(&name), "{name}");
        }
        let repr = ChunkRepr {
            shape: vec![4],
            data_type: DataType::Float32,
            fill_value: FillValue::zero(DataType::Float32),
        };
        let bool_type = ChunkRepr {
            data_type: DataType::Bool,
            fill_value: FillValue::zero(DataType::Bool),
            ..repr.clone()
        };
        let spec = CodecSpec::new("zfp", json!({"mode": "reversible"}));
        let err = build_codec(&spec, &bool_type).expect_err("zfp").to_string();
        assert!(
            err.starts_with("codec zfp (zarr-extensions registry) is not supported"),
            "{err}"
        );
        // A chain of the registered codecs builds in their places.
        let chain = build_chain(
            &[
                CodecSpec::new("bitround", json!({"keepbits": 3})),
                CodecSpec::new("reshape", json!({"shape": [2, 2]})),
                CodecSpec::new("bytes", json!({"endian": "little"})),
                CodecSpec::new(
                    "conditional",
                    json!({"codecs": [{"name": "zstd", "configuration": {"level": 1}}]}),
                ),
            ],
            &repr,
        )
        .expect("chain");
        let data: Vec<u8> = [1.2f32, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let encoded = chain.encode(data, &repr).expect("encode");
        let decoded = chain.decode(&encoded, &repr).expect("decode");
        assert_eq!(decoded[..4], 1.25f32.to_le_bytes());
    }
}
