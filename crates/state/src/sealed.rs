//! The integrity check of zshard's record files (`done`, `empty` and manifest records under
//! `DST/.zshard/`): each file ends with a line holding the crc32c of everything before it. A file
//! whose line does not match (a flipped digit, bytes lost or added) is not read at all, so a damaged
//! record can only make a shard converted again, never skipped. Files without the line were written
//! by earlier versions of zshard and are read as before.

use bytes::Bytes;

/// The last line of a sealed record file: this marker, then the crc32c of the bytes before the
/// line in 8 hex digits, then a newline.
const SEAL: &str = "#crc32c\t";

/// Ends `body` (whole lines) with its seal.
pub(crate) fn seal(body: &mut Vec<u8>) {
    let crc = zshard_core::crc32c(body);
    body.extend_from_slice(format!("{SEAL}{crc:08x}\n").as_bytes());
}

/// [`seal`] for a body kept as text.
pub(crate) fn seal_text(body: String) -> Bytes {
    let mut bytes = body.into_bytes();
    seal(&mut bytes);
    Bytes::from(bytes)
}

/// The records of a record file, without its seal; `None` when the seal does not match them. An
/// unsealed file (an earlier version's) is its own records.
pub(crate) fn unseal(file: &Bytes) -> Option<Bytes> {
    let text = file.strip_suffix(b"\n").unwrap_or(file);
    let line_start = text
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |at| at + 1);
    let Some(hex) = text[line_start..].strip_prefix(SEAL.as_bytes()) else {
        // Not sealed, unless a damaged seal: no record line starts with `#` or holds `crc32c<TAB>`
        // (a flipped `#`, or a flipped newline that joined the seal to the line before).
        let last = &text[line_start..];
        let damaged_seal = last.starts_with(b"#")
            || last
                .windows(SEAL.len() - 1)
                .any(|w| w == &SEAL.as_bytes()[1..]);
        return (!damaged_seal).then(|| file.clone());
    };
    let recorded = std::str::from_utf8(hex)
        .ok()
        // As written: 8 lowercase digits (an upper-case digit is a flipped bit, not the same seal).
        .filter(|hex| hex.len() == 8 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())?;
    (zshard_core::crc32c(&file[..line_start]) == recorded).then(|| file.slice(..line_start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_file_gives_back_its_records_and_any_damage_is_refused() {
        let records = "a\t0,1\t100\t0000abcd\t\"e1\"\nb\t2,3\n";
        let sealed = seal_text(records.to_string());
        assert_eq!(unseal(&sealed).as_deref(), Some(records.as_bytes()));
        // Every single flipped bit, anywhere in the file (records or seal), is caught.
        for at in 0..sealed.len() {
            for bit in 0..8 {
                let mut damaged = sealed.to_vec();
                damaged[at] ^= 1 << bit;
                let damaged = Bytes::from(damaged);
                let read = unseal(&damaged);
                assert_eq!(read, None, "flipped bit {bit} of byte {at} passed");
            }
        }
        // Truncated, or with a line added.
        assert_eq!(unseal(&sealed.slice(..sealed.len() - 3)), None);
        let mut longer = b"x\t0\n".to_vec();
        longer.extend_from_slice(&sealed);
        assert_eq!(unseal(&Bytes::from(longer)), None);
        // An earlier version's file, and an empty one, are read as they are.
        let old = Bytes::from_static(b"a\t0,1\t100\n");
        assert_eq!(unseal(&old), Some(old.clone()));
        assert_eq!(unseal(&Bytes::new()), Some(Bytes::new()));
    }
}
