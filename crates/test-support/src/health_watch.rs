//! The health Watch (gRFC A17) as the tests' scriptable servers answer it: SERVING, then the stream held
//! open until the client resets it.

use interop_proto::grpc_health_v1::health_check_response::ServingStatus;
use interop_proto::grpc_health_v1::HealthCheckResponse;
use prost::Message;

use crate::frames::grpc_message;
use crate::h2_server::{handler, Handler, Stream};

/// The Watch method's path.
pub const WATCH: &str = "/grpc.health.v1.Health/Watch";

/// Answers a Watch with SERVING and keeps it open until the client resets it.
pub async fn answer_serving(mut stream: Stream) {
    let _ = stream.read_to_end().await;
    let Some(mut send) = stream.headers() else {
        return;
    };
    let msg = HealthCheckResponse {
        status: ServingStatus::Serving as i32,
    };
    let _ = send.send_data(grpc_message(&msg.encode_to_vec()), false);
    let _ = std::future::poll_fn(|cx| send.poll_reset(cx)).await;
}

/// A handler: Watch answers SERVING (held open), every other call OK with an empty message.
pub fn serving_or_ok() -> Handler {
    handler(|mut stream| async move {
        if stream.path == WATCH {
            answer_serving(stream).await;
        } else {
            stream.ok(b"");
        }
    })
}
