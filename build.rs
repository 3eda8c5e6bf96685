//! Rebuilds when a migration is added: `sqlx::migrate!` embeds the directory at compile time.
//! Lays the release binary's code out with the functions a running gateway executes first
//! (build/symbol-order.txt, written by bench/symbol_order.sh; docs/decisions.md, "Code the
//! gateway runs, laid out together").
use std::{env, path::Path};

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    let order = Path::new(&env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("build/symbol-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    // The option is LLD's, the linker rustc uses by default on this target only: a linker
    // chosen in Cargo's settings (RUSTC_LINKER) or in the flags may not be LLD, so it gets no
    // ordering. Names that no longer exist after a change are skipped, silently: the file is
    // a layout hint, never a condition of a correct build.
    let release = env::var("PROFILE").as_deref() == Ok("release");
    let lld_target = env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu");
    let own_linker =
        env::var_os("RUSTC_LINKER").is_some() || env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|flags| flags.contains("linker"));
    let wanted = env::var_os("GATEHOUSE_NO_SYMBOL_ORDER").is_none();
    if release && lld_target && !own_linker && wanted && order.exists() {
        println!("cargo:rustc-link-arg-bin=gatehouse=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo:rustc-link-arg-bin=gatehouse=-Wl,--no-warn-symbol-ordering");
    }
    println!("cargo:rerun-if-env-changed=GATEHOUSE_NO_SYMBOL_ORDER");
}
