//! The service config parser never panics, whatever the text.
#![no_main]

use grpc_service_config::{ParseOptions, ServiceConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(config) = ServiceConfig::parse(text, ParseOptions::default()) {
            // Lookups on a parsed config never panic either.
            let _ = config.method_config("/pkg.Service/Method");
            let _ = config.method_config("");
            let _ = config.method_config("/");
        }
    }
});
