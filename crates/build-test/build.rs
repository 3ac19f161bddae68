//! Generates the kitchen-sink protos with grpc-build three ways: messages and clients together in
//! `$OUT_DIR/<package>.rs` (what most tests use); and apart, as for a crate whose messages come from
//! another generator: messages only in `$OUT_DIR/split/<package>.rs`, clients only
//! (`build_messages(false)`) in `$OUT_DIR/<package>.grpc-client.rs`, beside the first set without clashing.

use std::path::PathBuf;

fn main() -> Result<(), grpc_build::Error> {
    let protos = ["kitchen/sink/v1/sink.proto"];
    grpc_build::compile_protos(&protos, &["proto"])?;

    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let split = out_dir.join("split");
    std::fs::create_dir_all(&split).map_err(grpc_build::Error::Generate)?;
    grpc_build::configure()
        .emit_rerun_if_changed(false)
        .build_client(false)
        .out_dir(split)
        .compile_protos(&protos, &["proto"])?;
    grpc_build::configure()
        .emit_rerun_if_changed(false)
        .build_messages(false)
        .compile_protos(&protos, &["proto"])?;

    // Awkward names (keywords, `Self`, acronyms, an RPC named like the client's own `connect`), messages and
    // clients together, and clients only over messages written apart.
    {
        let adv = [
            "adv/names/a.proto",
            "adv/names/b.proto",
            "adv/names/connect.proto",
            "adv/names/tower.proto",
        ];
        let together = out_dir.join("adv");
        let apart = out_dir.join("adv-split");
        std::fs::create_dir_all(&together).map_err(grpc_build::Error::Generate)?;
        std::fs::create_dir_all(&apart).map_err(grpc_build::Error::Generate)?;
        grpc_build::configure()
            .out_dir(&together)
            .compile_protos(&adv, &["proto"])?;
        grpc_build::configure()
            .emit_rerun_if_changed(false)
            .build_client(false)
            .out_dir(&apart)
            .compile_protos(&adv, &["proto"])?;
        grpc_build::configure()
            .emit_rerun_if_changed(false)
            .build_messages(false)
            .out_dir(&apart)
            .compile_protos(&adv, &["proto"])?;
    }
    Ok(())
}
