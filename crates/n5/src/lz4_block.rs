//! N5's `lz4` compression: the block stream of lz4-java's `LZ4BlockOutputStream`, which n5-java
//! writes (not the LZ4 frame format, and not numcodecs' size-prefixed block). The stream is a run of
//! blocks, each `"LZ4Block"`, a token (method `0x10` stored or `0x20` LZ4, in the high nibble), the
//! compressed and decompressed lengths and an xxHash32 checksum (seed `0x9747b28c`, as lz4-java's
//! `Checksum` view reports it: the low 28 bits) of the decompressed bytes, little endian, then the
//! payload; a block with both lengths 0 ends the stream.

/// The magic of every block.
const MAGIC: &[u8; 8] = b"LZ4Block";
/// Magic, token, compressed length, decompressed length, checksum.
const HEADER_LEN: usize = 8 + 1 + 4 + 4 + 4;
const METHOD_RAW: u8 = 0x10;
const METHOD_LZ4: u8 = 0x20;
/// lz4-java's `LZ4BlockOutputStream.DEFAULT_SEED`.
const SEED: u32 = 0x9747_b28c;

/// Decodes a whole LZ4Block stream; fails rather than produce more than `max_len` bytes. Returns a
/// reason for people on malformed input.
pub(crate) fn decode(mut input: &[u8], max_len: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while !input.is_empty() {
        let (header, rest) = input
            .split_at_checked(HEADER_LEN)
            .ok_or("truncated LZ4Block header")?;
        if &header[..8] != MAGIC {
            return Err("not an LZ4Block stream (bad magic)".into());
        }
        let token = header[8];
        let field = |at: usize| {
            let bytes = [header[at], header[at + 1], header[at + 2], header[at + 3]];
            u32::from_le_bytes(bytes)
        };
        let (compressed_len, decoded_len, checksum) = (field(9), field(13), field(17));
        let (compressed_len, decoded_len) = (
            usize::try_from(compressed_len).map_err(|_| "block too large")?,
            usize::try_from(decoded_len).map_err(|_| "block too large")?,
        );
        if compressed_len == 0 && decoded_len == 0 {
            // The end of one stream; n5-java writes exactly one, lz4-java reads on past it.
            input = rest;
            continue;
        }
        let (payload, rest) = rest
            .split_at_checked(compressed_len)
            .ok_or("truncated LZ4Block payload")?;
        if decoded_len > max_len.saturating_sub(out.len()) {
            return Err(format!(
                "LZ4Block stream decodes to more than the {max_len} bytes expected"
            ));
        }
        let start = out.len();
        match token & 0xf0 {
            METHOD_RAW if compressed_len == decoded_len => out.extend_from_slice(payload),
            METHOD_RAW => return Err("stored LZ4Block with different lengths".into()),
            METHOD_LZ4 => {
                out.resize(start + decoded_len, 0);
                let written = lz4_flex::block::decompress_into(payload, &mut out[start..])
                    .map_err(|e| format!("LZ4Block payload: {e}"))?;
                if written != decoded_len {
                    return Err(format!(
                        "LZ4Block payload decodes to {written} bytes, its header says {decoded_len}"
                    ));
                }
            }
            other => return Err(format!("unknown LZ4Block method {other:#04x}")),
        }
        let hash = twox_hash::XxHash32::oneshot(SEED, &out[start..]);
        // lz4-java's Checksum view masks the hash to 28 bits; accept the full hash too.
        if checksum != hash & 0x0fff_ffff && checksum != hash {
            return Err("LZ4Block checksum mismatch".into());
        }
        input = rest;
    }
    Ok(out)
}

/// Encodes `data` as one LZ4Block stream the way lz4-java writes it (blocks of at most `block_size`
/// bytes, stored when LZ4 does not shrink them, then the end block). For tests and fuzz seeds.
pub fn encode(data: &[u8], block_size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut push_block = |method: u8, payload: &[u8], decoded: &[u8], checksum: u32| {
        out.extend_from_slice(MAGIC);
        out.push(method);
        for field in [payload.len() as u32, decoded.len() as u32, checksum] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        out.extend_from_slice(payload);
    };
    for block in data.chunks(block_size.max(1)) {
        let checksum = twox_hash::XxHash32::oneshot(SEED, block) & 0x0fff_ffff;
        let compressed = lz4_flex::block::compress(block);
        if compressed.len() < block.len() {
            push_block(METHOD_LZ4, &compressed, block, checksum);
        } else {
            push_block(METHOD_RAW, block, block, checksum);
        }
    }
    push_block(METHOD_RAW, &[], &[], 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_round_trip_over_several_blocks_stored_and_compressed() {
        let mut data: Vec<u8> = (0..5000u32).flat_map(|i| (i % 7).to_be_bytes()).collect();
        data.extend((0..300u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
        let stream = encode(&data, 4096);
        assert_eq!(&stream[..8], MAGIC);
        assert_eq!(decode(&stream, data.len()), Ok(data.clone()));
        // Incompressible data is stored (method 0x10).
        let noise: Vec<u8> = (0..64u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let stored = encode(&noise, 4096);
        assert_eq!(stored[8], METHOD_RAW);
        assert_eq!(decode(&stored, 64), Ok(noise));
    }

    #[test]
    fn malformed_streams_are_refused() {
        let data = vec![7u8; 1000];
        let stream = encode(&data, 1024);
        assert!(decode(&stream, 999)
            .expect_err("an error")
            .contains("more than the 999"));
        assert!(decode(&stream[..30], 1000).is_err());
        let mut bad = stream.clone();
        bad[17] ^= 1; // checksum
        assert_eq!(
            decode(&bad, 1000).expect_err("an error"),
            "LZ4Block checksum mismatch"
        );
        let mut bad = stream;
        bad[0] = b'X';
        assert!(decode(&bad, 1000)
            .expect_err("an error")
            .contains("bad magic"));
        assert_eq!(decode(&[], 10), Ok(Vec::new()));
    }
}
