//! Generates the tonic server of the interop TestService (tonic-build, through protox: no system protoc)
//! for `grpc-bench tonic-server`, the tonic peer of the windowed bidi scenario.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = "../proto/grpc/testing/test.proto";
    println!("cargo:rerun-if-changed={file}");
    let fds = protox::compile([file], ["../proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .build_transport(false)
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    Ok(())
}
