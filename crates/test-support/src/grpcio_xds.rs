//! The Python grpcio (C-core) xDS client, `interop/peers/grpcio/xds_client.py`, as a child process for one
//! test: a channel to `xds:///<NAME>` ([`crate::xds::NAME`]) with its bootstrap in a file named by
//! `GRPC_XDS_BOOTSTRAP` (removed when the client is dropped), driven by batches of calls over its stdin
//! commands. Shared by the grpcio xDS tests (`xds_grpcio.rs`, and `xds_grpcio_tls.rs` with
//! `--secure_mode=true`).
//!
//! Its Python comes as for [`crate::grpcio`]; without it [`grpcio_xds_client`] says why and gives `None`
//! (the test then passes), unless `GRPCIO_PEER_REQUIRED` is set. It does not start servers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use interop::grpcio_peer::{proto_dir, python_or_skip, script, PeerProcess};
use interop::xds_server::ManagementServer;
use serde_json::Value;

use crate::xds::NAME;

/// A bound on the client's start-up (protoc runs first), not a measurement.
const START: Duration = Duration::from_secs(120);

/// A bound on one command (a batch of calls).
const COMMAND: Duration = Duration::from_secs(60);

/// The grpcio xDS client, on a channel to `xds:///<NAME>`; its bootstrap file is removed when it is
/// dropped.
pub struct GrpcioXds {
    process: PeerProcess,
    bootstrap: PathBuf,
}

impl Drop for GrpcioXds {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.bootstrap);
    }
}

/// What one batch of calls did.
#[derive(Debug)]
pub struct Batch {
    /// Successful `UnaryCall`s per server id (other methods count under "").
    pub served: BTreeMap<String, u64>,
    /// Calls per status code name (`OK`, `UNAVAILABLE`, …).
    pub codes: BTreeMap<String, u64>,
    /// The first error messages.
    pub details: Vec<String>,
}

impl Batch {
    /// How many calls ended with the status code named `code` (`OK`, `UNAVAILABLE`, …).
    pub fn count(&self, code: &str) -> u64 {
        self.codes.get(code).copied().unwrap_or(0)
    }

    /// How many calls succeeded.
    pub fn ok(&self) -> u64 {
        self.count("OK")
    }

    /// How many `UnaryCall`s the server at `addr` answered.
    pub fn served_by(&self, addr: SocketAddr) -> u64 {
        self.served.get(&addr.to_string()).copied().unwrap_or(0)
    }
}

/// Starts the grpcio xDS client with `bootstrap` (JSON, written to a file for `GRPC_XDS_BOOTSTRAP`; `test`
/// names the file) and the further arguments `args` (e.g. `--secure_mode=true`); `None` when there is no
/// grpcio (the test then passes).
pub fn grpcio_xds_client(bootstrap: &str, test: &str, args: &[&str]) -> Option<GrpcioXds> {
    let python = python_or_skip()?;
    let path = std::env::temp_dir().join(format!(
        "grpc-channel-xds-grpcio-{}-{test}.json",
        std::process::id()
    ));
    std::fs::write(&path, bootstrap).expect("write the bootstrap file");
    let bootstrap_env = path.to_string_lossy().into_owned();
    let mut argv = vec![
        format!("--target=xds:///{NAME}"),
        format!("--proto_dir={}", proto_dir().display()),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let process = PeerProcess::spawn(
        &python,
        &script("xds_client.py"),
        &argv,
        &[("GRPC_XDS_BOOTSTRAP", &bootstrap_env)],
    );
    let client = GrpcioXds {
        process,
        bootstrap: path,
    };
    client.process.wait_for("ready", START);
    Some(client)
}

impl GrpcioXds {
    /// `calls` calls of `method` with `metadata`, one after another, each with a 10 s deadline, on a
    /// blocking thread of the runtime.
    pub async fn batch(&mut self, method: &str, calls: u32, metadata: &[(&str, &str)]) -> Batch {
        let command = serde_json::json!({
            "method": method,
            "calls": calls,
            "metadata": metadata.iter().map(|(k, v)| [k, v]).collect::<Vec<_>>(),
            "timeout": 10,
        })
        .to_string();
        let answer = tokio::task::block_in_place(|| self.process.command(&command, COMMAND));
        let value: Value = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("the grpcio client's answer {answer:?}: {e}"));
        assert!(value.get("error").is_none(), "the grpcio client: {value}");
        let counts = |key: &str| -> BTreeMap<String, u64> {
            value[key]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default()
        };
        Batch {
            served: counts("served"),
            codes: counts("codes"),
            details: value["details"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|d| d.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// `calls` `UnaryCall`s asking which server answers, one after another, each with `metadata` and a
    /// 10 s deadline.
    pub async fn unary(&mut self, calls: u32, metadata: &[(&str, &str)]) -> Batch {
        self.batch(interop_proto::paths::UNARY_CALL, calls, metadata)
            .await
    }
}

/// Waits (at most 10 s each) for the grpcio client to ACK each of `types` (a request naming a version,
/// without error), and checks it NACKed nothing.
pub async fn assert_acked(server: &ManagementServer, types: &[&str]) {
    for t in types {
        let ack = server
            .wait_for_request(Duration::from_secs(10), |r| {
                r.type_url == *t && !r.version_info.is_empty() && r.error_detail.is_none()
            })
            .await;
        assert!(
            ack.is_some(),
            "grpcio sent no ACK of {t}: {:?}",
            server.requests()
        );
    }
    let nacks: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.error_detail.is_some())
        .collect();
    assert!(nacks.is_empty(), "grpcio NACKed: {nacks:?}");
}
