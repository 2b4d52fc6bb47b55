//! Gives `libhal_ipc.so` its soname, `libhal_ipc.so.1` (the major version
//! of the ABI, `HAL_ABI_VERSION / 1000`), so that programs linked against
//! it keep loading it across compatible releases.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhal_ipc.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
