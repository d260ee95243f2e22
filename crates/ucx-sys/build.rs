//! Compiles the C shim against the system UCX found by pkg-config. Without UCX this crate
//! builds empty (the `have_ucx` cfg stays off), so the workspace builds on any machine.

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-env-changed=DTXN_NO_UCX");
    println!("cargo::rustc-check-cfg=cfg(have_ucx)");
    if std::env::var_os("DTXN_NO_UCX").is_some() {
        println!("cargo:warning=DTXN_NO_UCX is set: building without UCX");
        return;
    }
    let lib = match pkg_config::Config::new()
        .atleast_version("1.12")
        .probe("ucx")
    {
        Ok(lib) => lib,
        // Not an error: the fabric's ucx backend is simply left out. But look again once
        // pkg-config's directories change (UCX installed later), or a target dir built before
        // would keep the backend out for good.
        Err(_) => {
            watch_pkg_config_dirs();
            return;
        }
    };
    let mut build = cc::Build::new();
    build
        .file("src/shim.c")
        .warnings(true)
        .flag_if_supported("-Wextra");
    for inc in &lib.include_paths {
        build.include(inc);
    }
    build.compile("dtxn_ucx_shim");
    println!("cargo:rustc-cfg=have_ucx");
    // Read by dependents' build scripts as DEP_UCP_FOUND.
    println!("cargo:found=1");
}

/// Reruns this script when a directory pkg-config searches changes (a `.pc` file added).
fn watch_pkg_config_dirs() {
    let mut dirs: Vec<String> = std::env::var("PKG_CONFIG_PATH")
        .unwrap_or_default()
        .split(':')
        .map(str::to_owned)
        .collect();
    if let Ok(out) = std::process::Command::new("pkg-config")
        .args(["--variable", "pc_path", "pkg-config"])
        .output()
    {
        let path = String::from_utf8_lossy(&out.stdout);
        dirs.extend(path.trim().split(':').map(str::to_owned));
    }
    for d in dirs {
        if !d.is_empty() && std::path::Path::new(&d).is_dir() {
            println!("cargo:rerun-if-changed={d}");
        }
    }
}
