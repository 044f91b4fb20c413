//! `soak`: the command line. The work lives in the library (`soak::cli`).
//!
//! The same binary is also the reference node: started under the name
//! `soak-node` (a link to it, as busybox does), it serves as `soak-node`.
//! So `cargo run --bin soak` builds everything a suite of soak-node needs,
//! and the node soak starts is always the one built with it.

fn main() {
    std::process::exit(soak::cli::main());
}
