//! Codec traits and the codec chain. Implementations live in `zshard-codecs`; this module only fixes
//! the contract so that readers, stages and writers agree on it.

use std::fmt::Debug;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::fill::FillValue;
use crate::geometry::product;

/// A codec as Zarr v3 metadata names it: `{"name": ..., "configuration": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CodecSpec {
    /// The codec's registered name, e.g. `"bytes"`, `"zstd"`, `"numcodecs.delta"`.
    pub name: String,
    /// The codec's parameters; `None` when the metadata gives none (or the short string form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub configuration: Option<Map<String, Value>>,
}

impl CodecSpec {
    /// A spec from a name and a JSON configuration; anything but a JSON object counts as no configuration.
    pub fn new(name: impl Into<String>, configuration: Value) -> Self {
        let configuration = match configuration {
            Value::Object(map) => Some(map),
            _ => None,
        };
        CodecSpec {
            name: name.into(),
            configuration,
        }
    }

    /// A configuration member, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.configuration.as_ref().and_then(|c| c.get(key))
    }

    /// The spec as it appears in a v3 `codecs` list.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl<'de> Deserialize<'de> for CodecSpec {
    /// Accepts the object form and the short string form (`"crc32c"`) that v3 allows for codecs
    /// without configuration.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Object {
            name: String,
            #[serde(default)]
            configuration: Option<Map<String, Value>>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Name(String),
            Object(Object),
        }
        Ok(match Form::deserialize(deserializer)? {
            Form::Name(name) => CodecSpec {
                name,
                configuration: None,
            },
            Form::Object(o) => CodecSpec {
                name: o.name,
                configuration: o.configuration,
            },
        })
    }
}

/// What a chunk is while it is an array: its shape, element type and fill value.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkRepr {
    /// Extent of the chunk in elements, per dimension (C order, slowest first).
    pub shape: Vec<u64>,
    /// The element type.
    pub data_type: DataType,
    /// The value of elements that were never written.
    pub fill_value: FillValue,
}

impl ChunkRepr {
    /// Number of elements (the product of `shape`).
    pub fn elements(&self) -> u64 {
        product(&self.shape)
    }

    /// Bytes of the decoded chunk (little-endian, C order); for strings, of their handles.
    pub fn byte_len(&self) -> usize {
        self.elements() as usize * self.data_type.size()
    }
}

/// A codec from array to array (for example `transpose`).
pub trait ArrayToArrayCodec: Send + Sync + Debug {
    /// The representation after encoding a chunk of `decoded` representation.
    fn encoded_repr(&self, decoded: &ChunkRepr) -> Result<ChunkRepr>;
    /// Encodes a chunk of `decoded` representation into one of [`encoded_repr`](Self::encoded_repr).
    fn encode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>>;
    /// Decodes a chunk back into `decoded` representation (the one it was encoded from).
    fn decode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>>;
    /// The codec as it appears in v3 metadata.
    fn spec(&self) -> CodecSpec;
}

/// The one codec from array to bytes in a chain (`bytes`, `sharding_indexed`).
pub trait ArrayToBytesCodec: Send + Sync + Debug {
    /// Encodes little-endian, C-order elements of `repr` into bytes.
    fn encode(&self, data: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>>;
    /// Decodes into little-endian, C-order elements of `repr`; fails unless the size is exact.
    fn decode(&self, encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>>;
    /// An upper bound on the encoded size, used to bound allocations of the decoders before it.
    fn max_encoded_len(&self, repr: &ChunkRepr) -> usize;
    /// The codec as it appears in v3 metadata.
    fn spec(&self) -> CodecSpec;
}

/// A codec from bytes to bytes (compressors, checksums).
pub trait BytesToBytesCodec: Send + Sync + Debug {
    /// Encodes `decoded` (compresses, or appends a checksum).
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>>;
    /// Decodes `encoded`; must fail rather than produce (or allocate) more than `max_decoded_len` bytes,
    /// so that a chunk that lies about its size cannot exhaust memory.
    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>>;
    /// Checks that `encoded` is well formed and decodes to exactly `decoded_len` bytes without
    /// decoding it, when the format allows (frame headers state sizes); `None` when it does not.
    fn check_framing(&self, _encoded: &[u8], _decoded_len: usize) -> Option<Result<()>> {
        None
    }
    /// The bytes to copy in place of `encoded` when some readers of the output refuse `encoded` as it
    /// is though it decodes (zstd: skippable frames, which numcodecs refuses before the first real
    /// frame); `None` to copy it as it is.
    fn for_copy(&self, _encoded: &[u8]) -> Option<Vec<u8>> {
        None
    }
    /// An upper bound on the encoded size for a decoded size (used to bound the decoders before it).
    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        // Generous default for compressors: incompressible data grows by a small header and framing
        // (gzip/zlib: 5 bytes per stored block of up to 64 KiB and 18 of header and trailer; bzip2
        // about 1% and 600 bytes; xz/lzma a block header and 3 bytes per 64 KiB), far below this.
        decoded_len
            .saturating_add(decoded_len / 8)
            .saturating_add(1024)
    }
    /// The codec as it appears in v3 metadata.
    fn spec(&self) -> CodecSpec;
}

/// The least extra room [`CodecChain::max_stored_len`] leaves for bytes the codecs never read.
const STORED_ALLOWANCE: u64 = 1 << 20;

/// A full chain: array→array codecs, one array→bytes codec, bytes→bytes codecs, applied in that order
/// when encoding and in reverse when decoding.
#[derive(Clone, Debug)]
pub struct CodecChain {
    /// Applied first when encoding, in list order (last when decoding).
    pub array_to_array: Vec<Arc<dyn ArrayToArrayCodec>>,
    /// Turns the array into bytes, between the two lists.
    pub array_to_bytes: Arc<dyn ArrayToBytesCodec>,
    /// Applied last when encoding, in list order (first when decoding, in reverse).
    pub bytes_to_bytes: Vec<Arc<dyn BytesToBytesCodec>>,
}

impl CodecChain {
    /// Encodes one chunk given as little-endian C-order elements of `repr`.
    /// Strings come in the `vlen-utf8` layout, whose size is not fixed.
    pub fn encode(&self, mut data: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        if !repr.data_type.is_variable() && data.len() != repr.byte_len() {
            return Err(Error::DecodedSize {
                expected: repr.byte_len(),
                actual: data.len(),
            });
        }
        let mut repr = repr.clone();
        for codec in &self.array_to_array {
            let next = codec.encoded_repr(&repr)?;
            data = codec.encode(data, &repr)?;
            repr = next;
        }
        let mut bytes = self.array_to_bytes.encode(data, &repr)?;
        for codec in &self.bytes_to_bytes {
            bytes = codec.encode(&bytes)?;
        }
        Ok(bytes)
    }

    /// Decodes one chunk into little-endian C-order elements of `repr`. Allocation is bounded by the
    /// sizes that `repr` implies, whatever the encoded bytes claim.
    pub fn decode(&self, encoded: &[u8], repr: &ChunkRepr) -> Result<Vec<u8>> {
        let reprs = self.reprs(repr)?;
        let bytes_repr = reprs.last().unwrap_or(repr).clone();
        let bounds = self.bounds(&bytes_repr);
        let mut bytes: Option<Vec<u8>> = None;
        for (i, codec) in self.bytes_to_bytes.iter().enumerate().rev() {
            let input = bytes.as_deref().unwrap_or(encoded);
            bytes = Some(codec.decode(input, bounds[i])?);
        }
        let bytes = bytes.unwrap_or_else(|| encoded.to_vec());
        let mut data = self.array_to_bytes.decode(bytes, &bytes_repr)?;
        for (codec, decoded_repr) in self.array_to_array.iter().zip(&reprs).rev() {
            data = codec.decode(data, decoded_repr)?;
        }
        Ok(data)
    }

    /// The most bytes a chunk of `repr` can be stored in: the array→bytes codec's bound, grown by
    /// each bytes→bytes codec's worst-case expansion (see [`BytesToBytesCodec::max_encoded_len`]).
    /// A stored chunk longer than this cannot decode, so readers refuse it before reading it whole
    /// (a sparse file, a lying zip member or reference cannot make a run allocate more). For
    /// variable-length types the bound is the decoders' own ([`ArrayToBytesCodec::max_encoded_len`]:
    /// 1 GiB of string bytes per chunk), not one the metadata implies.
    pub fn max_encoded_len(&self, repr: &ChunkRepr) -> Result<u64> {
        let reprs = self.reprs(repr)?;
        let bytes_repr = reprs.last().unwrap_or(repr);
        let bound = self.bounds(bytes_repr).last().copied().unwrap_or(0);
        Ok(u64::try_from(bound).unwrap_or(u64::MAX))
    }

    /// The most bytes a stored chunk of `repr` is read up to: [`CodecChain::max_encoded_len`] plus
    /// as much again (at least 1 MiB) for bytes the codecs never read, which readers of the source
    /// accept: numcodecs' zlib and Blosc ignore bytes after their stream, zstd skips skippable frames.
    /// A longer chunk cannot be one its readers decode; it is refused unread.
    pub fn max_stored_len(&self, repr: &ChunkRepr) -> Result<u64> {
        let bound = self.max_encoded_len(repr)?;
        Ok(bound.saturating_add(bound.max(STORED_ALLOWANCE)))
    }

    /// `repr`, then what each array→array codec turns it into, in encoding order.
    fn reprs(&self, repr: &ChunkRepr) -> Result<Vec<ChunkRepr>> {
        let mut reprs = vec![repr.clone()];
        for codec in &self.array_to_array {
            let next = codec.encoded_repr(reprs.last().unwrap_or(repr))?;
            reprs.push(next);
        }
        Ok(reprs)
    }

    /// The largest input of each bytes→bytes stage when decoding, innermost first; the last is the
    /// largest stored chunk.
    fn bounds(&self, bytes_repr: &ChunkRepr) -> Vec<usize> {
        let mut bounds = vec![self.array_to_bytes.max_encoded_len(bytes_repr)];
        for codec in &self.bytes_to_bytes {
            let last = bounds.last().copied().unwrap_or(0);
            bounds.push(codec.max_encoded_len(last));
        }
        bounds
    }

    /// Checks an encoded chunk that is going to be copied as it is: by its framing when the chain is
    /// `bytes` and one compressor whose frames state their sizes (see
    /// [`BytesToBytesCodec::check_framing`]), by decoding it otherwise.
    pub fn check(&self, encoded: &[u8], repr: &ChunkRepr) -> Result<()> {
        if let ([], [compressor]) = (
            self.array_to_array.as_slice(),
            self.bytes_to_bytes.as_slice(),
        ) {
            if !repr.data_type.is_variable() {
                if let Some(checked) = compressor.check_framing(encoded, repr.byte_len()) {
                    return checked;
                }
            }
        }
        self.decode(encoded, repr).map(|_| ())
    }

    /// The bytes to copy in place of the encoded chunk `encoded` when the chain is `bytes` and one
    /// compressor that rewrites what some readers refuse (see [`BytesToBytesCodec::for_copy`]);
    /// `None` to copy it as it is. Check the result with [`check`](Self::check).
    pub fn for_copy(&self, encoded: &[u8]) -> Option<Vec<u8>> {
        match (
            self.array_to_array.as_slice(),
            self.bytes_to_bytes.as_slice(),
        ) {
            ([], [compressor]) => compressor.for_copy(encoded),
            _ => None,
        }
    }

    /// The chain as Zarr v3 metadata.
    pub fn specs(&self) -> Vec<CodecSpec> {
        let mut out: Vec<CodecSpec> = self.array_to_array.iter().map(|c| c.spec()).collect();
        out.push(self.array_to_bytes.spec());
        out.extend(self.bytes_to_bytes.iter().map(|c| c.spec()));
        out
    }
}
