//! With the `node` feature, soak links a few lines of C++ against the
//! RocksDB that librocksdb-sys builds: the per-file checksum verification
//! that RocksDB's C API does not offer (src/verify/sst_verify.cc).

fn main() {
    println!("cargo:rerun-if-changed=src/verify/sst_verify.cc");
    if std::env::var_os("CARGO_FEATURE_NODE").is_none() {
        return;
    }
    // librocksdb-sys (`links = "rocksdb"`) names its source directory.
    let sources = std::env::var("DEP_ROCKSDB_CARGO_MANIFEST_DIR")
        .expect("librocksdb-sys names its sources (DEP_ROCKSDB_CARGO_MANIFEST_DIR)");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file("src/verify/sst_verify.cc")
        .include(format!("{sources}/rocksdb/include"))
        .flag("-std=c++20")
        .define("NDEBUG", Some("1"));
    for define in [
        "OS_LINUX",
        "ROCKSDB_PLATFORM_POSIX",
        "ROCKSDB_LIB_IO_POSIX",
        "HAVE_ALIGNED_NEW",
        "HAVE_UINT128_EXTENSION",
    ] {
        build.define(define, None);
    }
    build.compile("soak_sst_verify");
}
