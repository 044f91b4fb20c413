//! `soak-node`: the reference RESP-over-RocksDB node. See `soak::node`.
use clap::Parser;

fn main() {
    let args = soak::node::NodeArgs::parse();
    std::process::exit(soak::node::server::run(args));
}
