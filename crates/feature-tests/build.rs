//! Generates, through protox (no system protoc):
//!
//! - tonic clients (tonic-prost-build) for the interop TestService and the fault-injecting server's Faulty
//!   service, and tonic servers (methods left out answer UNIMPLEMENTED) for the compression tests' own
//!   tonic TestService;
//! - for `proto/routeguide.proto`, one crate serving with tonic and calling with grpc-channel: tonic's
//!   messages and server (`$OUT_DIR/routeguide.rs`, tonic's client off) and grpc-build's client alone
//!   (`build_messages(false)`: `$OUT_DIR/routeguide.grpc-client.rs`), over the same messages.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["../../proto/grpc/testing/test.proto", "proto/fault.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["../../proto", "proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .generate_default_stubs(true)
        .compile_fds(fds)?;

    let route_guide = ["proto/routeguide.proto"];
    let fds = protox::compile(route_guide, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false) // grpc-build's client takes the `route_guide_client` module
        .build_server(true)
        .build_transport(false)
        .compile_fds(fds)?;
    grpc_build::configure()
        .build_messages(false)
        .compile_protos(&route_guide, &["proto"])?;
    Ok(())
}
