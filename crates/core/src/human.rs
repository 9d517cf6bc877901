//! Sizes in messages.

/// Bytes for people, in binary units with two decimals ("1.25 GiB", "15 B"), the way the progress
/// bar of the command line (indicatif's `HumanBytes`) writes them, through the same `unit-prefix`.
#[derive(Debug, Clone, Copy)]
pub struct HumanBytes(pub u64);

impl std::fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match unit_prefix::NumberPrefix::binary(self.0 as f64) {
            unit_prefix::NumberPrefix::Standalone(number) => write!(f, "{number:.0} B"),
            unit_prefix::NumberPrefix::Prefixed(prefix, number) => {
                write!(f, "{number:.2} {prefix}B")
            }
        }
    }
}
