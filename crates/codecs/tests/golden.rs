//! Golden vectors: Zarr v2 and v3 arrays written by zarr-python with every numcodecs compressor and
//! filter and every data type zshard reads (tests/golden/make_golden.py), decoded here through the
//! metadata translation and the codec chain and compared bit for bit with the values zarr-python
//! reads from them (strings: element by element).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use zshard_codecs::{build_chain, build_codec, Codec};
use zshard_core::{
    c_order, copy_region, grid_shape, swap_byte_order, unravel_index, vlen_ranges, ArrayMeta,
    ChunkRepr, CodecSpec, DataType, Endian, FillValue, NodeKind, Region,
};
use zshard_zarr::{parse_v2_array, parse_v3_node};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/fixtures")
}

/// A `.npy` file (format 1.0 or 2.0): its type string, shape and data bytes.
struct Npy {
    descr: String,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// Parses the simple dictionary header numpy writes:
/// `{'descr': '<i4', 'fortran_order': False, 'shape': (9, 7), }`.
fn read_npy(path: &Path) -> Result<Npy, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file".into());
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("npy version {v}")),
    };
    let header = std::str::from_utf8(&bytes[start..start + header_len])
        .map_err(|_| "header is not text".to_string())?;
    let field = |key: &str| -> Result<&str, String> {
        let at = header
            .find(&format!("'{key}':"))
            .ok_or_else(|| format!("no {key} in {header}"))?;
        Ok(header[at + key.len() + 3..].trim_start())
    };
    let descr = field("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or_else(|| format!("descr in {header}"))?
        .to_string();
    if !field("fortran_order")?.starts_with("False") {
        return Err("fortran_order is not False".into());
    }
    let shape = field("shape")?;
    let shape = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| format!("shape in {header}"))?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().map_err(|e| format!("shape {s}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Npy {
        descr,
        shape,
        data: bytes[start + header_len..].to_vec(),
    })
}

/// What one fixture's check found.
struct Outcome {
    /// Bit-for-bit equal to what zarr-python reads.
    decoded: Result<(), String>,
    /// Re-encoding each decoded chunk gives the stored bytes again.
    reencoded: bool,
    /// Whether the chunks have no compressor, so that re-encoding must reproduce them exactly
    /// (compressors may legitimately produce other valid streams).
    uncompressed: bool,
}

fn check(dir: &Path) -> Outcome {
    let mut reencoded = true;
    let uncompressed = std::fs::read(dir.join(".zarray"))
        .ok()
        .and_then(|z| serde_json::from_slice::<serde_json::Value>(&z).ok())
        .is_some_and(|z| z["compressor"].is_null());
    let decoded = (|| -> Result<(), String> {
        let meta = read_meta(dir)?;
        let repr = meta.chunk_repr();
        let chain = build_chain(&meta.codecs, &repr).map_err(|e| e.to_string())?;
        if meta.data_type.is_variable() {
            return check_strings(dir, &meta, &chain, &mut reencoded);
        }
        let size = meta.data_type.size();
        let elements = meta.shape.iter().product::<u64>() as usize;
        let mut array = meta.fill_value.repeat(elements);
        let origin = vec![0; meta.shape.len()];
        for coord in c_order(&grid_shape(&meta.shape, &meta.chunk_shape)) {
            let key = meta.chunk_key_encoding.key(&coord);
            let Ok(stored) = std::fs::read(dir.join(&key)) else {
                continue; // never written: all fill value
            };
            let chunk = chain
                .decode(&stored, &repr)
                .map_err(|e| format!("chunk {key}: {e}"))?;
            reencoded &= chain.encode(chunk.clone(), &repr).ok().as_deref() == Some(&stored[..]);
            let region = Region::of_chunk(&coord, &meta.chunk_shape, &meta.shape);
            let chunk_origin: Vec<u64> = coord
                .iter()
                .zip(&meta.chunk_shape)
                .map(|(c, s)| c * s)
                .collect();
            copy_region(
                &chunk,
                &meta.chunk_shape,
                &chunk_origin,
                &mut array,
                &meta.shape,
                &origin,
                &region,
                size,
            );
        }
        let npy_path = dir.with_extension("npy");
        let mut npy = read_npy(&npy_path)?;
        let (npy_type, npy_endian) =
            DataType::from_v2_typestr(&npy.descr).map_err(|e| e.to_string())?;
        if npy_type != meta.data_type || npy.shape != meta.shape {
            return Err(format!(
                "expected values are {} {:?}, the array is {} {:?}",
                npy.descr, npy.shape, meta.data_type, meta.shape
            ));
        }
        if npy_endian == Endian::Big {
            swap_byte_order(&mut npy.data, npy_type.swap_unit());
        }
        if array != npy.data {
            let first = array
                .chunks(size)
                .zip(npy.data.chunks(size))
                .position(|(a, b)| a != b);
            return Err(format!(
                "values differ (first differing element: {first:?})"
            ));
        }
        Ok(())
    })();
    Outcome {
        decoded,
        reencoded,
        uncompressed,
    }
}

/// The array's metadata, from `.zarray` (v2) or `zarr.json` (v3).
fn read_meta(dir: &Path) -> Result<ArrayMeta, String> {
    if let Ok(zarray) = std::fs::read(dir.join(".zarray")) {
        let zattrs = std::fs::read(dir.join(".zattrs")).ok();
        return parse_v2_array(".zarray", &zarray, zattrs.as_deref()).map_err(|e| e.to_string());
    }
    let json = std::fs::read(dir.join("zarr.json")).map_err(|e| e.to_string())?;
    match parse_v3_node("zarr.json", &json)
        .map_err(|e| e.to_string())?
        .kind
    {
        NodeKind::Array(meta) => Ok(*meta),
        _ => Err("zarr.json is not an array".into()),
    }
}

/// Strings: every element of every chunk, inside the array, equals what zarr-python reads (a JSON list
/// in C order beside the array); unwritten chunks hold the fill value.
fn check_strings(
    dir: &Path,
    meta: &ArrayMeta,
    chain: &zshard_core::CodecChain,
    reencoded: &mut bool,
) -> Result<(), String> {
    let text = std::fs::read_to_string(dir.with_extension("json")).map_err(|e| e.to_string())?;
    let expected: Vec<String> = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let repr = meta.chunk_repr();
    let count = repr.elements() as usize;
    let mut seen = vec![false; expected.len()];
    for coord in c_order(&grid_shape(&meta.shape, &meta.chunk_shape)) {
        let key = meta.chunk_key_encoding.key(&coord);
        let stored = std::fs::read(dir.join(&key)).ok();
        let chunk = match &stored {
            Some(stored) => {
                let chunk = chain
                    .decode(stored, &repr)
                    .map_err(|e| format!("chunk {key}: {e}"))?;
                *reencoded &=
                    chain.encode(chunk.clone(), &repr).ok().as_deref() == Some(&stored[..]);
                Some(chunk)
            }
            None => None,
        };
        let ranges = match &chunk {
            Some(c) => Some(vlen_ranges(c, count).map_err(|e| format!("chunk {key}: {e}"))?),
            None => None,
        };
        for i in 0..count {
            let local = unravel_index(i as u64, &meta.chunk_shape);
            let global: Vec<u64> = coord
                .iter()
                .zip(&meta.chunk_shape)
                .zip(&local)
                .map(|((c, s), l)| c * s + l)
                .collect();
            if global.iter().zip(&meta.shape).any(|(g, s)| g >= s) {
                continue;
            }
            let at = zshard_core::linear_index(&global, &meta.shape) as usize;
            let actual = match (&chunk, &ranges) {
                (Some(c), Some(r)) => &c[r[i].clone()],
                _ => meta.fill_value.as_bytes(),
            };
            if actual != expected[at].as_bytes() {
                return Err(format!(
                    "element {global:?}: {:?}, zarr-python reads {:?}",
                    String::from_utf8_lossy(actual),
                    expected[at]
                ));
            }
            seen[at] = true;
        }
    }
    if seen.iter().any(|s| !s) {
        return Err("not every element was checked".into());
    }
    Ok(())
}

#[test]
fn golden_fixtures_decode_bit_for_bit() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .expect("tests/golden/fixtures exists (run tests/golden/make_golden.py)")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "zarr"))
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 90, "only {} fixtures", dirs.len());
    let mut results = BTreeMap::new();
    for dir in &dirs {
        let name = dir
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        results.insert(name, check(dir));
    }
    let mut failed = Vec::new();
    for (name, outcome) in &results {
        let status = match &outcome.decoded {
            Ok(()) if outcome.uncompressed && !outcome.reencoded => {
                failed.push(name.clone());
                "FAIL: re-encoding differs from numcodecs".to_string()
            }
            Ok(()) => "pass".to_string(),
            Err(e) => {
                failed.push(name.clone());
                format!("FAIL: {e}")
            }
        };
        let reencode = if outcome.reencoded {
            "re-encodes identically"
        } else {
            "re-encodes differently"
        };
        println!("{name:50} {status} ({reencode})");
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Codec-level vectors from numcodecs (fixtures/vectors.json): every dtype/astype pair of `delta`
/// and `astype`, `fixedscaleoffset` and `quantize` variants, checksums, `shuffle` and `packbits` at
/// awkward lengths. Each must decode numcodecs' encoding to numcodecs' decoding, and (unless the
/// vector is decode-only, with arbitrary encoded data) encode the input to numcodecs' encoding.
#[test]
fn numcodecs_vectors_decode_and_encode_bit_for_bit() {
    let text = std::fs::read_to_string(fixtures().join("vectors.json")).expect("vectors.json");
    let vectors: Vec<serde_json::Value> = serde_json::from_str(&text).expect("json");
    assert!(vectors.len() > 400, "only {} vectors", vectors.len());
    let repr = ChunkRepr {
        shape: vec![1],
        data_type: DataType::UInt8,
        fill_value: FillValue::zero(DataType::UInt8),
    };
    let mut failed = Vec::new();
    for v in &vectors {
        let case = v["case"].as_str().unwrap_or_default();
        let spec: CodecSpec = serde_json::from_value(v["codec"].clone()).expect("codec");
        let hex = |key: &str| unhex(v[key].as_str().unwrap_or_default());
        let (input, encoded, decoded) = (hex("input"), hex("encoded"), hex("decoded"));
        let codec = bytes_codec(case, &spec, &repr);
        match codec.decode(&encoded, decoded.len()) {
            Ok(d) if d == decoded => {}
            Ok(d) => failed.push(format!(
                "{case}: decodes to {d:02x?}, numcodecs {decoded:02x?}"
            )),
            Err(e) => failed.push(format!("{case}: decode error {e}")),
        }
        if v.get("input").is_none() {
            continue; // a decode-only vector: arbitrary encoded data
        }
        match codec.encode(&input) {
            Ok(e) if e == encoded => {}
            Ok(e) => failed.push(format!(
                "{case}: encodes to {e:02x?}, numcodecs {encoded:02x?}"
            )),
            Err(e) => failed.push(format!("{case}: encode error {e}")),
        }
        assert_eq!(
            codec.max_encoded_len(input.len()),
            encoded.len(),
            "{case}: filters know their exact encoded size"
        );
    }
    assert!(
        failed.is_empty(),
        "{} of {} vectors fail:\n{}",
        failed.len(),
        vectors.len(),
        failed.join("\n")
    );
}

/// Every data type through every numcodecs compressor (blosc with each cname and shuffle) and the byte
/// filters (fixtures/dtype_vectors.json, strings laid out by numcodecs' VLenUTF8): zshard decodes
/// numcodecs' encoding to the same bytes, and for strings the layout holds the 12 elements.
#[test]
fn every_data_type_through_every_compressor() {
    let text = std::fs::read_to_string(fixtures().join("dtype_vectors.json")).expect("vectors");
    let vectors: Vec<serde_json::Value> = serde_json::from_str(&text).expect("json");
    assert!(vectors.len() >= 24 * 26, "only {} vectors", vectors.len());
    let mut failed = Vec::new();
    let mut dtypes = std::collections::BTreeSet::new();
    for v in &vectors {
        let case = v["case"].as_str().unwrap_or_default();
        let dtype = v["dtype"].as_str().unwrap_or_default();
        let data_type = if dtype == "str" {
            DataType::String
        } else {
            DataType::from_v2_typestr(dtype).expect("dtype").0
        };
        dtypes.insert(data_type.to_string());
        let repr = ChunkRepr {
            shape: vec![12],
            data_type,
            fill_value: FillValue::zero(data_type),
        };
        let spec: CodecSpec = serde_json::from_value(v["codec"].clone()).expect("codec");
        let hex = |key: &str| unhex(v[key].as_str().unwrap_or_default());
        let (encoded, decoded) = (hex("encoded"), hex("decoded"));
        let codec = bytes_codec(case, &spec, &repr);
        match codec.decode(&encoded, decoded.len()) {
            Ok(d) if d == decoded => {}
            Ok(_) => failed.push(format!("{case}: decodes to other bytes")),
            Err(e) => failed.push(format!("{case}: {e}")),
        }
        if data_type.is_variable() {
            assert!(vlen_ranges(&decoded, 12).is_ok(), "{case}: layout");
        }
    }
    assert_eq!(dtypes.len(), 23, "data types covered: {dtypes:?}");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The bytes-to-bytes codec of a golden vector's spec (the vector names the case in failures).
fn bytes_codec(
    case: &str,
    spec: &CodecSpec,
    repr: &ChunkRepr,
) -> std::sync::Arc<dyn zshard_core::BytesToBytesCodec> {
    match build_codec(spec, repr) {
        Ok(Codec::BytesToBytes(c)) => c,
        Ok(_) => panic!("{case}: not bytes to bytes"),
        Err(e) => panic!("{case}: {e}"),
    }
}
