//! The Python grpcio (C-core) interop server, `interop/peers/grpcio/server.py`, as a child process for one
//! test: started on a free loopback port, killed (by its process id) when dropped, a panicking test
//! included.
//!
//! Its Python comes from `GRPCIO_PYTHON`, else from the virtualenv `cargo xtask interop --peer grpcio`
//! makes in the target directory (`target/grpcio-peer/venv`). Without either the tests that need it print
//! why and pass, unless `GRPCIO_PEER_REQUIRED` is set (CI sets it once the virtualenv exists), when they
//! fail.
//!
//! The server serves `grpc.health.v1.Health` (grpcio-health-checking's servicer) unless started without it
//! ([`GrpcioOptions::health`]); [`Grpcio::set_health`] changes a service's status through the server's
//! stdin commands.

use std::net::SocketAddr;
use std::time::Duration;

use interop::grpcio_peer::{proto_dir, python_or_skip, script, PeerProcess};

/// A bound on the server's start-up (protoc runs first), not a measurement.
const START_LIMIT: Duration = Duration::from_secs(120);

/// A bound on how long the server takes to acknowledge a command.
const ACK_LIMIT: Duration = Duration::from_secs(10);

/// How to start the server.
#[derive(Clone, Debug)]
pub struct GrpcioOptions {
    /// Serve `grpc.health.v1.Health`, the whole server ("") SERVING (the default); without it `Check` and
    /// `Watch` answer UNIMPLEMENTED (`--health=false`).
    pub health: bool,
}

impl Default for GrpcioOptions {
    fn default() -> Self {
        Self { health: true }
    }
}

/// The running server (killed when dropped).
pub struct Grpcio {
    process: PeerProcess,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Grpcio {
    /// Sets `service`'s health status (`SERVING`, `NOT_SERVING`, `SERVICE_UNKNOWN` or `UNKNOWN`; "" is the
    /// whole server) and waits (at most 10 s) for the server to say it did: from then on `Check` answers it
    /// and every `Watch` on `service` has been sent it.
    pub fn set_health(&mut self, service: &str, status: &str) {
        assert!(
            service != "-"
                && !service
                    .chars()
                    .any(|c| c.is_whitespace() || c == '"' || c == '\''),
            "the server's commands take one plain word as a service name, not {service:?}"
        );
        let name = if service.is_empty() { "-" } else { service };
        let answer = self
            .process
            .command(&format!("health {name} {status}"), ACK_LIMIT);
        assert_eq!(
            answer, "ok",
            "the grpcio server's answer to `health {name} {status}`"
        );
    }
}

/// Starts the server with the default options (the health service on); `None` (after saying why) when
/// there is no grpcio to run it and `GRPCIO_PEER_REQUIRED` is not set.
pub fn start() -> Option<Grpcio> {
    start_with(GrpcioOptions::default())
}

/// Starts the server with `options`; `None` (after saying why) when there is no grpcio to run it and
/// `GRPCIO_PEER_REQUIRED` is not set.
pub fn start_with(options: GrpcioOptions) -> Option<Grpcio> {
    let python = python_or_skip()?;
    let process = PeerProcess::spawn(
        &python,
        &script("server.py"),
        &[
            "--port=0".to_owned(),
            format!("--proto_dir={}", proto_dir().display()),
            format!("--health={}", options.health),
        ],
        &[],
    );
    let addr = process.wait_for("listening on ", START_LIMIT);
    Some(Grpcio {
        addr: addr.trim().parse().expect("host:port"),
        process,
    })
}
