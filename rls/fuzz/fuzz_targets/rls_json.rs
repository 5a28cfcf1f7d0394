//! Any bytes as a `POST /json` body: a request or an error message, never a panic, and a
//! request the service decides without panicking or admitting past a limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_rls::http::parse_request;

#[path = "common/decide.rs"]
mod decide;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = parse_request(data) {
        decide::decide(&req);
    }
});
