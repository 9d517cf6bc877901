//! `zip_directory`: the input is a whole zip file, whose central directory is read as a zip source's
//! is (`ZipDirectory::parse`: rc-zip's directory state machine answered by ranged reads of the
//! input, ZIP64 records included, then every entry checked to lie within the file).
//!
//! Promises checked: no panic; no single allocation over 1 MiB plus four times the input (a
//! directory cannot make zshard reserve memory that its file does not hold); the members listed
//! have distinct keys without empty path segments, and a stored member's size fits in the file.

pub fn zip_directory(data: &[u8]) {
    crate::probe::arm();
    let parsed = zshard_store::ZipDirectory::parse("fuzz.zip", data);
    let peak = crate::probe::disarm();
    let limit = (1 << 20) + 4 * data.len();
    assert!(peak <= limit, "allocated {peak} bytes for a {}-byte zip", data.len());
    let Ok(directory) = parsed else {
        return;
    };
    let mut previous: Option<&str> = None;
    for (key, _size) in directory.members() {
        assert!(!key.is_empty(), "an empty member key");
        assert!(!key.split('/').any(str::is_empty), "member key {key:?} has an empty segment");
        assert!(previous.is_none_or(|p| p < key), "member keys not sorted and distinct at {key:?}");
        previous = Some(key);
    }
}
