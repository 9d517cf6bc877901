#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| zshard_fuzz::checks::zip_directory(data));
