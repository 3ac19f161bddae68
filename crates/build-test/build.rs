//! Generates the kitchen-sink protos' messages and clients with grpc-build.

fn main() -> Result<(), grpc_build::Error> {
    grpc_build::compile_protos(&["kitchen/sink/v1/sink.proto"], &["proto"])
}
