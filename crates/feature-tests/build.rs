//! Generates tonic clients (tonic-build, through protox: no system protoc) for the interop TestService and
//! the fault-injecting server's Faulty service, and tonic servers (methods left out answer UNIMPLEMENTED)
//! for the tests' own tonic TestService.

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
    Ok(())
}
