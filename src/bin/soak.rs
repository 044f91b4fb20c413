//! `soak`: the command line. The work lives in the library (`soak::cli`).

fn main() {
    std::process::exit(soak::cli::main());
}
