//! Shared by the benchmarks: a tool they compare against must be
//! installed, or the benchmark stops with the package to install.

use std::process::{Command, Stdio};

pub fn need(tool: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !found {
        eprintln!("{tool} is missing: apt-get install {package}");
        std::process::exit(3);
    }
}
