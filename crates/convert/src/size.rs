//! Byte sizes as people and schedulers write them: `8G` is 8 GiB (as in SLURM's `--mem=8G`), while
//! `8GB` (powers of 1000) and `8GiB` (powers of 1024) say which they mean.

use crate::error::{Error, Result};

/// Parses `512MiB`, `4G`, `2GB`, `1.5 TiB` or `1000000` into a byte count.
///
/// ```
/// use zshard_convert::parse_size;
///
/// assert_eq!(parse_size("8G").unwrap(), 8 << 30);
/// assert_eq!(parse_size("8GiB").unwrap(), 8 << 30);
/// assert_eq!(parse_size("8GB").unwrap(), 8_000_000_000);
/// assert!(parse_size("lots").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<u64> {
    let trimmed = text.trim();
    let unit = trimmed.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ' ');
    // A bare prefix letter is binary, as SLURM and most people read it; `KB`, `MB`, ... stay decimal.
    let bare_prefix = unit.len() == 1 && unit.chars().all(|c| "kKmMgGtTpP".contains(c));
    let config = if bare_prefix {
        parse_size::Config::new().with_binary()
    } else {
        parse_size::Config::new()
    };
    config.parse_size(trimmed).map_err(|e| Error::Size {
        text: text.to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB").ok(), Some(512 << 20));
        assert_eq!(parse_size("4GiB").ok(), Some(4 << 30));
        assert_eq!(parse_size("2GB").ok(), Some(2_000_000_000));
        assert_eq!(parse_size("1000").ok(), Some(1000));
        assert_eq!(parse_size("64KiB").ok(), Some(65536));
        assert_eq!(parse_size("8G").ok(), Some(8 << 30));
        assert_eq!(parse_size("8g").ok(), Some(8 << 30));
        assert_eq!(parse_size("512M").ok(), Some(512 << 20));
        assert_eq!(parse_size("1.5GiB").ok(), Some(3 << 29));
        assert_eq!(parse_size("0").ok(), Some(0));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("").is_err());
    }
}
