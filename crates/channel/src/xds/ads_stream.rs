//! One management server's channel and ADS stream, for the ADS task (`ads_task.rs`): the channel per
//! the server's channel creds (A65's `tls`: the CA file, the platform's roots without one, and the
//! client certificate and key for mTLS, read when the channel is built, every file error naming the
//! file), the stream's life cycle (waiting, opening, open), its writer task behind a bounded queue,
//! and its events. Not here: which server is used (A71, `ads_state.rs`), the responses' handling.

use std::future::Future;
use std::pin::Pin;

use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use grpc_xds::{CertificateFiles, ChannelCreds, XdsServer};
use tokio::sync::mpsc;

use crate::call::{RequestSender, Streaming};
use crate::channel::Channel;
use crate::conn::tls::TlsConfig;
use crate::request::Request;
use crate::wire::status::Status;

/// The ADS method.
const ADS_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";

/// The channel to a management server, per its credentials: A65's `tls` reads the CA file (the
/// platform's roots without one) and the client certificate and key (mTLS) when the channel is built,
/// so a fallback server's files are read when the client falls back to it. An unreadable or invalid
/// file fails the build, with a status naming it.
pub(super) fn server_channel(server: &XdsServer) -> Result<Channel, Status> {
    // Keepalive (grpc-go's for its xDS channel: 5 minutes, 20 s to answer) notices a stream a NAT or a
    // vanished server left silent, so it restarts instead of waiting for updates that never come.
    let mut builder = Channel::builder(server.server_uri.clone())
        .service_config_lookup(false)
        .keepalive_time(std::time::Duration::from_secs(300))
        .keepalive_timeout(std::time::Duration::from_secs(20));
    if let ChannelCreds::Tls(files) = &server.channel_creds {
        builder = builder.tls(tls_config(files));
    }
    builder.build().map_err(|e| {
        Status::unavailable(format!(
            "cannot reach the xDS server {:?}: {e}",
            server.server_uri
        ))
    })
}

/// A65: the TLS configuration of `tls` channel creds.
fn tls_config(files: &CertificateFiles) -> TlsConfig {
    let mut tls = TlsConfig::new();
    if let Some(ca) = &files.ca_certificate_file {
        tls = tls.ca_certificate_file(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&files.certificate_file, &files.private_key_file) {
        tls = tls.identity_files(cert.clone(), key.clone());
    }
    tls
}

/// The capacity of a stream's request queue. Requests wait in the sans-IO client (which folds them, one
/// per type) rather than here, so a server slow to read costs no memory.
pub(super) const REQUEST_QUEUE: usize = 4;

/// An ADS stream: requests go out through a writer task, so a server slow to read them never stops this
/// task from reading responses, taking watches and firing timers.
pub(super) struct Stream {
    pub(super) requests: mpsc::Sender<DiscoveryRequest>,
    pub(super) responses: Streaming<DiscoveryResponse>,
    /// Each request the writer has actually sent (its type and names), for A57's timers.
    pub(super) sent: mpsc::UnboundedReceiver<(String, Vec<String>)>,
    pub(super) writer: tokio::task::JoinHandle<()>,
}

/// The task's ADS stream through its life cycle: waiting (for the client's backoff and a watch), being
/// opened, open; it waits again when opening fails or the open stream ends.
// One per ADS task, as large as the `Option<Stream>` it replaces.
#[allow(clippy::large_enum_variant)]
pub(super) enum AdsStream {
    /// No stream: the next opens at the client's next stream start, once a watch exists.
    Waiting,
    /// A stream being opened.
    Opening(Opening),
    /// The stream.
    Open(Stream),
}

/// What the stream brought.
// Made per event and taken apart at once: boxing the opened halves would cost an allocation per stream.
#[allow(clippy::large_enum_variant)]
pub(super) enum StreamEvent {
    /// The stream being opened opened, or could not.
    Opened(Result<Opened, Status>),
    Response(Result<Option<DiscoveryResponse>, Status>),
    Sent(String, Vec<String>),
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.writer.abort();
    }
}

/// A stream being opened (the channel getting READY, then the call starting).
pub(super) type Opening = Pin<Box<dyn Future<Output = Result<Opened, Status>> + Send>>;

/// An opened stream's two halves.
pub(super) type Opened = (
    RequestSender<DiscoveryRequest>,
    Streaming<DiscoveryResponse>,
);

/// Opens a stream once the channel is READY; a failure (a channel that could not be built included)
/// counts as a stream that ended before any response.
pub(super) fn open(channel: Option<&Result<Channel, Status>>) -> Opening {
    let channel = match channel {
        Some(Ok(channel)) => Ok(channel.clone()),
        Some(Err(status)) => Err(status.clone()),
        None => Err(Status::unavailable("xDS: no channel to the server")),
    };
    Box::pin(async move {
        let channel = channel?;
        channel.ready().await?;
        channel.streaming(ADS_PATH, Request::new(())).await
    })
}

/// Starts the stream's writer task: it sends the queued requests in order, reports each once it has
/// actually left, and stops at the first the call does not take (the call has ended; its status comes
/// with the responses).
pub(super) fn writer(
    mut sender: RequestSender<DiscoveryRequest>,
    responses: Streaming<DiscoveryResponse>,
) -> Stream {
    let (requests, mut queue) = mpsc::channel::<DiscoveryRequest>(REQUEST_QUEUE);
    // One report per request, and requests come through a queue of four: bounded by the writer's pace.
    let (reports, sent) = mpsc::unbounded_channel();
    let writer = tokio::spawn(async move {
        while let Some(request) = queue.recv().await {
            let report = (request.type_url.clone(), request.resource_names.clone());
            // A57: the request counts as sent once written within the stream's flow-control window.
            if sender.send(request).await.is_err() || sender.flushed().await.is_err() {
                return;
            }
            if reports.send(report).is_err() {
                return;
            }
        }
    });
    Stream {
        requests,
        responses,
        sent,
        writer,
    }
}

/// Ready once the stream's request queue (`requests`) has room again.
pub(super) async fn room(requests: Option<mpsc::Sender<DiscoveryRequest>>) {
    match requests {
        // A permit taken and dropped at once: the room stays for the next pass of the loop.
        Some(requests) => drop(requests.reserve().await),
        None => std::future::pending().await,
    }
}

/// The next event of the stream being opened, or of the open stream; never while waiting.
pub(super) async fn next_event(stream: &mut AdsStream) -> StreamEvent {
    match stream {
        AdsStream::Opening(opening) => StreamEvent::Opened(opening.await),
        AdsStream::Open(open) => {
            let Stream {
                responses, sent, ..
            } = open;
            tokio::select! {
                Some((type_url, names)) = sent.recv() => StreamEvent::Sent(type_url, names),
                response = responses.message() => StreamEvent::Response(response),
            }
        }
        AdsStream::Waiting => std::future::pending().await,
    }
}
