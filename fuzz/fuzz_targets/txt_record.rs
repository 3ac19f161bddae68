//! TXT record selection never panics: the input is split into records (on 0xFF) and strings (on 0xFE).
#![no_main]

use grpc_retry::SplitMix64;
use grpc_service_config::txt::{self, ChoiceContext};
use grpc_service_config::ParseOptions;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let records: Vec<Vec<Vec<u8>>> = data
        .split(|b| *b == 0xff)
        .map(|r| r.split(|b| *b == 0xfe).map(<[u8]>::to_vec).collect())
        .collect();
    let mut rng = SplitMix64::new(data.len() as u64);
    let mut ctx = ChoiceContext {
        language: txt::CLIENT_LANGUAGE,
        hostname: Some("fuzz-host"),
        rng: &mut rng,
    };
    let _ = txt::select(&records, &mut ctx, ParseOptions::default());
});
