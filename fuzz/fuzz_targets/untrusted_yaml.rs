#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kuvryn_sync_fuzzing::untrusted_yaml(data));
