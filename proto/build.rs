//! Compiles the interop protos with grpc-build (protox, a pure-Rust protobuf compiler, so the build needs no
//! system `protoc`): prost messages with `bytes` fields, and a generated client per service. Besides the
//! interop protos (`grpc.testing`), the standard health service (`grpc.health.v1`).

fn main() -> Result<(), grpc_build::Error> {
    let mut config = grpc_build::prost_build::Config::new();
    config.bytes(["."]);
    grpc_build::configure().compile_with_config(
        config,
        &[
            "grpc/testing/empty.proto",
            "grpc/testing/messages.proto",
            "grpc/testing/test.proto",
            "grpc/health/v1/health.proto",
        ],
        &["."],
    )
}
