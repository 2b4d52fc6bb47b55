//! Link the stand-in so that it is never unloaded: a `dlclose` (a test's
//! `Library` going out of scope) leaves it mapped, as a real vendor
//! library is never unloaded either. Threads the simulator starts inside
//! it, and their thread-local destructors, may still run after the last
//! handle closes; unmapping the code under them crashes the process.

fn main() {
    // DF_1_NODELETE in the shared library's dynamic section; the rlib
    // that tests link is unaffected.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
