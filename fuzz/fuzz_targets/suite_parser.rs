//! Any bytes given to the suite parser get a suite or an error, never a
//! panic, a hang or a crash: users hand it files they typed.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = soak::suite::Suite::parse(std::path::Path::new("fuzz.yaml"), text) {
            // Rendering the message walks the same paths users see.
            let _ = e.to_string();
        }
    }
});
