//! Compiles the interop protos with protox (a pure-Rust protobuf compiler), so the build needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "grpc/testing/empty.proto",
        "grpc/testing/messages.proto",
        "grpc/testing/test.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."])?;
    prost_build::Config::new().bytes(["."]).compile_fds(fds)?;
    Ok(())
}
