//! Generates `include/backplane.h` from the crate's `extern "C"` items with cbindgen, and sets
//! the library's SONAME to the name `scripts/install-c.sh` installs it under.

fn main() {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=src/lib.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libbackplane.so.{major}");
    let config = cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml"))
        .expect("bindings/c/cbindgen.toml is readable");
    let header = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    // Written only when it changed, so the committed header stays untouched otherwise.
    header.write_to_file(format!("{crate_dir}/include/backplane.h"));
}
