//! Turns the `ucx` cfg on when the `ucx` feature is enabled and dtxn-ucx-sys found UCX
//! (it exports `found` through its `links = "ucp"` key as DEP_UCP_FOUND).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ucx)");
    println!("cargo:rerun-if-env-changed=DEP_UCP_FOUND");
    if std::env::var_os("CARGO_FEATURE_UCX").is_some()
        && std::env::var_os("DEP_UCP_FOUND").is_some()
    {
        println!("cargo:rustc-cfg=ucx");
    }
}
