//! `--compressor` specifications: `zstd:LEVEL`, `gzip:LEVEL`, `blosc:CNAME:CLEVEL:SHUFFLE`, `none`, or a
//! whole inner codec chain as Zarr v3 JSON (`[{"name": "bytes", ...}, ...]`).

use std::str::FromStr;

use serde_json::json;
use zshard_codecs::{BLOSC_CNAMES, BLOSC_SHUFFLES};
use zshard_core::{ArrayMeta, CodecSpec, DataType};

use crate::error::Error;

fn invalid(spec: &str, reason: impl Into<String>) -> Error {
    Error::Compressor {
        spec: spec.to_string(),
        reason: reason.into(),
    }
}

/// The compressor of the output's inner chunks.
///
/// ```
/// use zshard_convert::Compressor;
///
/// assert_eq!("zstd:5".parse::<Compressor>().unwrap(), Compressor::Zstd { level: 5 });
/// assert!("zstd:99".parse::<Compressor>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Compressor {
    /// No compression: only the `bytes` (or `vlen-utf8`) codec.
    None,
    /// `zstd` at a level in -7..=22, without a checksum.
    Zstd {
        /// Compression level.
        level: i32,
    },
    /// `gzip` at a level in 0..=9.
    Gzip {
        /// Compression level.
        level: u32,
    },
    /// `blosc` with one of its compressors and shuffles.
    Blosc {
        /// Compressor inside blosc (`blosclz`, `lz4`, `lz4hc`, `zlib`, `zstd`).
        cname: String,
        /// Compression level in 0..=9.
        clevel: u32,
        /// `noshuffle`, `shuffle` or `bitshuffle`.
        shuffle: String,
    },
    /// The inner chain as given, checked against each array's data type when planning.
    Chain(Vec<CodecSpec>),
    /// Each array's own codec chain where it is a valid Zarr v3 chain (so that passthrough can
    /// copy its chunks), else [`Compressor::DEFAULT`]; see [`Compressor::for_array`].
    Source,
}

impl FromStr for Compressor {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        if s.trim_start().starts_with('[') {
            let chain: Vec<CodecSpec> = serde_json::from_str(s).map_err(|e| {
                invalid(s, format!("the inner codec chain is not a JSON list of v3 codecs ({{\"name\": ..., \"configuration\": {{...}}}}): {e}"))
            })?;
            if chain.is_empty() {
                return Err(invalid(s, "the inner codec chain is empty"));
            }
            return Ok(Compressor::Chain(chain));
        }
        let parts: Vec<&str> = s.split(':').collect();
        let level = |text: &str| -> Result<i64, Error> {
            text.parse()
                .map_err(|_| invalid(s, format!("{text:?} is not a compression level")))
        };
        Ok(match parts.as_slice() {
            ["none"] => Compressor::None,
            ["source"] => Compressor::Source,
            ["zstd"] => Compressor::Zstd { level: 3 },
            ["zstd", l] => {
                let level = level(l)?;
                if !(-7..=22).contains(&level) {
                    return Err(invalid(s, format!("zstd level {level} is not in -7..=22")));
                }
                Compressor::Zstd { level: level as i32 }
            }
            ["gzip"] => Compressor::Gzip { level: 5 },
            ["gzip", l] => {
                let level = level(l)?;
                if !(0..=9).contains(&level) {
                    return Err(invalid(s, format!("gzip level {level} is not in 0..=9")));
                }
                Compressor::Gzip { level: level as u32 }
            }
            ["blosc", cname, clevel, shuffle] => {
                if !BLOSC_CNAMES.contains(cname) {
                    return Err(invalid(s, format!("blosc compressor {cname:?} is not one of {}", BLOSC_CNAMES.join(", "))));
                }
                let clevel = level(clevel)?;
                if !(0..=9).contains(&clevel) {
                    return Err(invalid(s, format!("blosc level {clevel} is not in 0..=9")));
                }
                if !BLOSC_SHUFFLES.contains(shuffle) {
                    return Err(invalid(s, format!("blosc shuffle {shuffle:?} is not one of {}", BLOSC_SHUFFLES.join(", "))));
                }
                Compressor::Blosc {
                    cname: cname.to_string(),
                    clevel: clevel as u32,
                    shuffle: shuffle.to_string(),
                }
            }
            _ => {
                return Err(invalid(
                    s,
                    format!("unknown compressor {s:?}: expected zstd:LEVEL, gzip:LEVEL, blosc:CNAME:CLEVEL:SHUFFLE, none, source, or a JSON list of v3 codecs"),
                ))
            }
        })
    }
}

/// The specification that parses back into the same compressor (`zstd:3`, `blosc:lz4:5:shuffle`,
/// `none`, or the chain as a JSON list).
impl std::fmt::Display for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Compressor::None => f.write_str("none"),
            Compressor::Source => f.write_str("source"),
            Compressor::Zstd { level } => write!(f, "zstd:{level}"),
            Compressor::Gzip { level } => write!(f, "gzip:{level}"),
            Compressor::Blosc {
                cname,
                clevel,
                shuffle,
            } => write!(f, "blosc:{cname}:{clevel}:{shuffle}"),
            Compressor::Chain(chain) => {
                let text = serde_json::to_string(chain).map_err(|_| std::fmt::Error)?;
                f.write_str(&text)
            }
        }
    }
}

impl Compressor {
    /// The default: `zstd` level 3.
    pub const DEFAULT: Compressor = Compressor::Zstd { level: 3 };

    /// The inner codec chain of the array `meta`, and, when [`Compressor::Source`] cannot keep the
    /// array's own chain (it has no valid Zarr v3 form), why, and that the default is used instead.
    pub fn for_array(&self, meta: &ArrayMeta) -> (Vec<CodecSpec>, Option<String>) {
        if let Compressor::Chain(chain) = self {
            return (chain.clone(), None);
        }
        if *self != Compressor::Source {
            let mut codecs = self.inner_codecs(meta.data_type);
            // A named compressor chooses the compression, not the layout: packed elements (int4,
            // float4, ... under zarr-extensions `packbits`) stay packed as the source had them.
            if let Some(packbits) = meta.codecs.iter().find(|c| c.name == "packbits") {
                codecs[0] = packbits.clone();
            }
            return (codecs, None);
        }
        // A v2 fixedscaleoffset or astype filter becomes scale_offset + cast_value where that is exact.
        let codecs = match zshard_codecs::v3_equivalent(&meta.codecs, &meta.chunk_repr()) {
            Ok(converted) => converted.unwrap_or_else(|| meta.codecs.clone()),
            Err(problem) => {
                return (
                    Compressor::DEFAULT.inner_codecs(meta.data_type),
                    Some(format!(
                        "the source's {problem}; written with the default {} instead",
                        Compressor::DEFAULT
                    )),
                )
            }
        };
        match zshard_codecs::v3_form_problem(&codecs) {
            None => (codecs, None),
            Some(problem) => (
                Compressor::DEFAULT.inner_codecs(meta.data_type),
                Some(format!(
                    "the source's codecs are not a valid Zarr v3 chain ({problem}); written with the default {} instead",
                    Compressor::DEFAULT
                )),
            ),
        }
    }

    /// The inner codec chain: `bytes` (little endian; `vlen-utf8` for strings, `vlen-bytes` for
    /// variable-length bytes) then the compressor.
    /// [`Compressor::Source`] needs the array ([`Compressor::for_array`]): here it is the default's.
    pub fn inner_codecs(&self, data_type: DataType) -> Vec<CodecSpec> {
        let mut codecs = vec![if data_type == DataType::Bytes {
            CodecSpec::new("vlen-bytes", json!({}))
        } else if data_type.is_variable() {
            CodecSpec::new("vlen-utf8", json!({}))
        } else {
            CodecSpec::new("bytes", json!({"endian": "little"}))
        }];
        let typesize = data_type.typesize();
        match self {
            Compressor::Chain(chain) => return chain.clone(),
            Compressor::Source => return Compressor::DEFAULT.inner_codecs(data_type),
            Compressor::None => {}
            Compressor::Zstd { level } => codecs.push(CodecSpec::new(
                "zstd",
                json!({"level": level, "checksum": false}),
            )),
            Compressor::Gzip { level } => {
                codecs.push(CodecSpec::new("gzip", json!({"level": level})))
            }
            Compressor::Blosc {
                cname,
                clevel,
                shuffle,
            } => codecs.push(CodecSpec::new(
                "blosc",
                json!({"cname": cname, "clevel": clevel, "shuffle": shuffle,
                       "typesize": typesize, "blocksize": 0}),
            )),
        }
        codecs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(
            "zstd:3".parse::<Compressor>().ok(),
            Some(Compressor::Zstd { level: 3 })
        );
        assert_eq!(
            "gzip:9".parse::<Compressor>().ok(),
            Some(Compressor::Gzip { level: 9 })
        );
        assert_eq!("none".parse::<Compressor>().ok(), Some(Compressor::None));
        assert_eq!(
            "blosc:lz4:5:bitshuffle".parse::<Compressor>().ok(),
            Some(Compressor::Blosc {
                cname: "lz4".into(),
                clevel: 5,
                shuffle: "bitshuffle".into()
            })
        );
        for bad in [
            "zstd:x",
            "zstd:99",
            "gzip:10",
            "blosc:snappy:5:shuffle",
            "blosc:lz4:5",
            "blosc:lz4:5:twice",
            "lzma:1",
            "",
        ] {
            assert!(bad.parse::<Compressor>().is_err(), "{bad}");
        }
    }

    #[test]
    fn blosc_records_the_type_size() {
        let c: Compressor = "blosc:zstd:5:shuffle".parse().expect("valid");
        let codecs = c.inner_codecs(DataType::Float64);
        assert_eq!(codecs[1].get("typesize"), Some(&json!(8)));
        let strings = c.inner_codecs(DataType::String);
        assert_eq!(strings[0].name, "vlen-utf8");
        assert_eq!(strings[1].get("typesize"), Some(&json!(1)));
        assert_eq!(c.inner_codecs(DataType::Bytes)[0].name, "vlen-bytes");
    }

    /// A source whose elements are packed (zarr-extensions `packbits`: int4, float4, ...) stays packed
    /// under a named compressor, which chooses only the compression; a JSON chain is taken as given.
    #[test]
    fn named_compressors_keep_packbits() {
        let int4 = DataType::from_v3_name("int4").expect("int4");
        let packbits = CodecSpec::new("packbits", json!({"padding_encoding": "first_byte"}));
        let meta = ArrayMeta {
            shape: vec![10],
            data_type: int4,
            fill_value: zshard_core::FillValue::zero(int4),
            chunk_shape: vec![4],
            codecs: vec![packbits.clone(), CodecSpec::new("crc32c", json!({}))],
            chunk_key_encoding: zshard_core::ChunkKeyEncoding::Default { separator: '/' },
            attributes: serde_json::Map::new(),
            dimension_names: None,
            rectilinear: None,
            sharded: None,
            warnings: Vec::new(),
        };
        let (codecs, fallback) = Compressor::Zstd { level: 3 }.for_array(&meta);
        assert_eq!(fallback, None);
        assert_eq!(codecs[0], packbits);
        assert_eq!(codecs[1].name, "zstd");
        assert_eq!(Compressor::None.for_array(&meta).0, vec![packbits.clone()]);
        let bytes = vec![CodecSpec::new("bytes", json!({}))];
        assert_eq!(Compressor::Chain(bytes.clone()).for_array(&meta).0, bytes);
    }

    #[test]
    fn takes_a_json_chain() {
        let text = r#"[{"name": "bytes", "configuration": {"endian": "big"}}, "crc32c"]"#;
        let Ok(Compressor::Chain(chain)) = text.parse::<Compressor>() else {
            panic!("a JSON chain parses");
        };
        assert_eq!(chain.len(), 2);
        assert_eq!(chain[1].name, "crc32c");
        assert_eq!(
            Compressor::Chain(chain.clone()).inner_codecs(DataType::UInt8),
            chain
        );
        assert!("[]".parse::<Compressor>().is_err());
        assert!("[{\"nom\": 1}]".parse::<Compressor>().is_err());
    }
}
