//! `grpc-bench tonic-server`: the interop TestService's `UnaryCall` and `FullDuplexCall` served by tonic
//! (its generated server, hyper under it), the tonic peer of the windowed bidi scenario. Same HTTP/2 windows
//! and TCP_NODELAY as every client. `FullDuplexCall` answers each request with one message of the first
//! response size it asks for, as a stream mapped over the request stream: tonic's encoder takes every
//! answer that is ready into one DATA frame, as a tonic service does. Prints `listening on ADDR` and serves
//! until its stdin ends.

use std::io::BufRead;

use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

mod pb {
    #![allow(clippy::all, missing_docs, unreachable_pub)]
    tonic::include_proto!("grpc.testing");
}

use pb::test_service_server::{TestService, TestServiceServer};
use pb::{
    Payload, SimpleRequest, SimpleResponse, StreamingOutputCallRequest, StreamingOutputCallResponse,
};

struct Echo;

fn payload(size: i32) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: vec![0; usize::try_from(size).unwrap_or(0)],
    })
}

#[tonic::async_trait]
impl TestService for Echo {
    async fn unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        Ok(Response::new(SimpleResponse {
            payload: payload(request.get_ref().response_size),
            ..Default::default()
        }))
    }

    async fn full_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<tonic::codegen::BoxStream<StreamingOutputCallResponse>>, Status> {
        let answers = request.into_inner().map(|r| {
            r.map(|req| StreamingOutputCallResponse {
                payload: payload(req.response_parameters.first().map_or(0, |p| p.size)),
                ..Default::default()
            })
        });
        Ok(Response::new(Box::pin(answers)))
    }
}

/// Serves on a free loopback port until stdin ends.
pub(crate) fn serve() -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        println!("listening on {addr}");
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let server = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .initial_stream_window_size(crate::clients::STREAM_WINDOW)
            .initial_connection_window_size(crate::clients::CONNECTION_WINDOW)
            .serve_with_incoming(TestServiceServer::new(Echo), incoming);
        let stdin_closed =
            tokio::task::spawn_blocking(|| for _ in std::io::stdin().lock().lines() {});
        tokio::select! {
            r = server => r.map_err(|e| e.to_string()),
            _ = stdin_closed => Ok(()),
        }
    })
}
