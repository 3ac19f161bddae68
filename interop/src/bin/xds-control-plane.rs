//! A standalone xDS management server for running the interop client through xDS (feature `xds-server`):
//! `xds-control-plane --backends=127.0.0.1:P1[,...] [--port=0] [--name=svc.test] [--bootstrap_out=PATH]
//! [--tls_dir=DIR [--server_san=SPIFFE_ID]]`.
//!
//! It serves, over ADS (state of the world, [`interop::xds_server::ManagementServer`]), the client-side
//! Listener `NAME`, whose routes come from RDS as the RouteConfiguration `NAME-routes`: one virtual host for
//! the domain `NAME`, every path to the EDS cluster `NAME-cluster` (round_robin), whose ClusterLoadAssignment
//! holds every backend in one locality. A client with the bootstrap it writes reaches the backends through
//! the target `xds:///NAME`.
//!
//! Before it listens it writes the bootstrap (gRFC A27: its own address as the one `xds_servers` entry with
//! insecure credentials and `xds_v3`, node id `test-node`) to `--bootstrap_out`, replacing the file at once,
//! so that a reader never sees half of it. Then it prints `listening on 127.0.0.1:PORT`, and one line per ADS
//! request it receives, `ads request: TYPE names=N1,N2 version=V nonce=N` (TYPE the last part of the type
//! URL, `-` for no names, ` nack=MESSAGE` added to a NACK), so that a run can show the client fetched and
//! accepted the resources. It runs until killed.
//!
//! With `--tls_dir` (xDS security, gRFC A29; `cargo xtask interop --xds --tls`) the cluster carries a
//! `transport_socket` `envoy.transport_sockets.tls` whose `UpstreamTlsContext` asks for mTLS: the client
//! identity and the roots from the certificate provider instance `mesh`, the server's certificate matched
//! by an exact SAN matcher on `--server_san` (by default the interop server certificate's SPIFFE ID,
//! `spiffe://test.example/ns/default/sa/server`). The bootstrap then defines `mesh` as a `file_watcher`
//! provider of the files `interop-certs` writes into DIR (`client.pem`, `client.key`, `ca.pem`, re-read every
//! 60 s). A client needs xDS credentials (the interop client's `--secure_mode=true`) to use it.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use interop::client::write_stdout;
use interop::flags::{help_text, FlagSpec, Flags};
use interop::tls::{InteropFiles, SERVER_SPIFFE_ID};
use interop::xds_resources::{
    assignment, eds_cluster, exact_matcher, named, rds_listener, route_configuration,
    route_to_cluster, type_url, with_upstream_tls, BootstrapSpec, FileWatcherProvider,
    LocalitySpec, RouteMatchSpec, UpstreamTlsSpec,
};
use interop::xds_server::ManagementServer;

/// Every flag: `Flags::parse` takes its names from here and `--help` prints it.
const FLAGS: &[FlagSpec] = &[
    FlagSpec {
        name: "port",
        value: "PORT",
        default: "0",
        help: "loopback port to serve ADS on (0: a free one)",
    },
    FlagSpec {
        name: "name",
        value: "NAME",
        default: "svc.test",
        help: "the Listener's name, the target's xds:///NAME (also the virtual host's domain)",
    },
    FlagSpec {
        name: "backends",
        value: "ADDR[,ADDR...]",
        default: "",
        help: "the endpoints of the one EDS cluster, as IP:PORT (required)",
    },
    FlagSpec {
        name: "bootstrap_out",
        value: "PATH",
        default: "",
        help: "write a bootstrap JSON naming this server (for GRPC_XDS_BOOTSTRAP) to this file",
    },
    FlagSpec {
        name: "tls_dir",
        value: "DIR",
        default: "",
        help: "mTLS to the backends (A29): the cluster's UpstreamTlsContext names the provider `mesh`, which the bootstrap defines as a file_watcher of DIR/client.pem, DIR/client.key and DIR/ca.pem (as interop-certs writes them)",
    },
    FlagSpec {
        name: "server_san",
        value: "SAN",
        default: SERVER_SPIFFE_ID,
        help: "with --tls_dir, the SAN (exact match) the backends' certificates must carry",
    },
    FlagSpec {
        name: "help",
        value: "",
        default: "",
        help: "print this list and exit (also -h)",
    },
];

/// What the flags ask for; `None` for `--help`.
#[derive(Debug)]
struct Settings {
    port: u16,
    name: String,
    backends: Vec<SocketAddr>,
    bootstrap_out: Option<String>,
    /// `--tls_dir`: mTLS to the backends with the files there.
    tls_dir: Option<PathBuf>,
    /// `--server_san`.
    server_san: String,
}

/// The certificate provider instance the cluster names with `--tls_dir`.
const PROVIDER: &str = "mesh";

/// How often the client re-reads the files with `--tls_dir`.
const REFRESH: Duration = Duration::from_secs(60);

fn settings(args: impl IntoIterator<Item = String>) -> Result<Option<Settings>, String> {
    let flags = Flags::parse(args, FLAGS)?;
    if flags.bool("help", false)? {
        return Ok(None);
    }
    let name = flags.str("name").unwrap_or("svc.test");
    if name.is_empty() {
        return Err("--name needs a value".to_owned());
    }
    let backends = flags
        .str("backends")
        .unwrap_or("")
        .split(',')
        .filter(|b| !b.is_empty())
        .map(|b| {
            b.parse::<SocketAddr>()
                .map_err(|_| format!("--backends: {b:?} is not an IP:PORT address"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if backends.is_empty() {
        return Err("--backends is required (IP:PORT[,IP:PORT...])".to_owned());
    }
    Ok(Some(Settings {
        port: flags.num("port", 0)?,
        name: name.to_owned(),
        backends,
        bootstrap_out: flags
            .str("bootstrap_out")
            .filter(|p| !p.is_empty())
            .map(str::to_owned),
        tls_dir: flags
            .str("tls_dir")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        server_san: match flags.str("server_san") {
            Some("") => return Err("--server_san needs a value".to_owned()),
            Some(san) => san.to_owned(),
            None => SERVER_SPIFFE_ID.to_owned(),
        },
    }))
}

/// Publishes `NAME` → `NAME-routes` → `NAME-cluster` with every backend.
fn publish(server: &ManagementServer, s: &Settings) {
    let routes = format!("{}-routes", s.name);
    let cluster = format!("{}-cluster", s.name);
    server.set(
        type_url::LISTENER,
        vec![named(
            &s.name,
            type_url::LISTENER,
            &rds_listener(&s.name, &routes),
        )],
    );
    server.set(
        type_url::ROUTE,
        vec![named(
            &routes,
            type_url::ROUTE,
            &route_configuration(
                &routes,
                &[s.name.as_str()],
                vec![route_to_cluster(&RouteMatchSpec::any(), &cluster)],
            ),
        )],
    );
    let mut resource = eds_cluster(&cluster);
    if s.tls_dir.is_some() {
        resource = with_upstream_tls(
            resource,
            &UpstreamTlsSpec::mtls(PROVIDER, PROVIDER).san(exact_matcher(&s.server_san)),
        );
    }
    server.set(
        type_url::CLUSTER,
        vec![named(&cluster, type_url::CLUSTER, &resource)],
    );
    server.set(
        type_url::ENDPOINTS,
        vec![named(
            &cluster,
            type_url::ENDPOINTS,
            &assignment(&cluster, &[LocalitySpec::new("z1", &s.backends)]),
        )],
    );
}

/// The bootstrap naming `server`: with `--tls_dir`, the provider the cluster names.
fn bootstrap(server: &ManagementServer, s: &Settings) -> String {
    let Some(dir) = &s.tls_dir else {
        return server.bootstrap_json();
    };
    let provider = FileWatcherProvider {
        certificate_file: Some(dir.join(InteropFiles::CLIENT_CERT)),
        private_key_file: Some(dir.join(InteropFiles::CLIENT_KEY)),
        ca_certificate_file: Some(dir.join(InteropFiles::CA)),
        refresh_interval: Some(REFRESH),
    };
    BootstrapSpec::new(&server.server_uri())
        .provider(PROVIDER, provider)
        .to_json()
}

/// Writes `text` to `path` through a temporary file beside it, renamed over it.
fn write_whole(path: &Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// The line printed for one request (see the module docs).
fn request_line(r: &DiscoveryRequest) -> String {
    let kind = r.type_url.rsplit('.').next().unwrap_or(&r.type_url);
    let names = if r.resource_names.is_empty() {
        "-".to_owned()
    } else {
        r.resource_names.join(",")
    };
    let mut line = format!(
        "ads request: {kind} names={names} version={} nonce={}",
        r.version_info, r.response_nonce
    );
    if let Some(error) = &r.error_detail {
        line.push_str(&format!(" nack={}", error.message.replace('\n', " ")));
    }
    line
}

/// Prints a line; a closed stdout is not an error (the server keeps serving).
fn say(line: std::fmt::Arguments<'_>) {
    let _ = write_stdout(format_args!("{line}\n"));
}

#[tokio::main]
async fn main() -> ExitCode {
    let s = match settings(std::env::args().skip(1)) {
        Ok(Some(s)) => s,
        Ok(None) => {
            say(format_args!(
                "usage: xds-control-plane --backends=IP:PORT[,...] [--flag=value ...]; every flag:\n{}",
                help_text(FLAGS).trim_end()
            ));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("xds-control-plane: {e}");
            return ExitCode::from(2);
        }
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, s.port));
    let server = match ManagementServer::start_on(addr).await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("xds-control-plane: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    publish(&server, &s);
    if let Some(path) = &s.bootstrap_out {
        if let Err(e) = write_whole(Path::new(path), &bootstrap(&server, &s)) {
            eprintln!("xds-control-plane: cannot write the bootstrap to {path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    eprintln!(
        "xds-control-plane: Listener {name} -> RouteConfiguration {name}-routes -> EDS cluster \
         {name}-cluster with {} backend(s){}",
        s.backends.len(),
        match &s.tls_dir {
            Some(dir) => format!(
                ", mTLS (UpstreamTlsContext, SAN {}, files in {})",
                s.server_san,
                dir.display()
            ),
            None => String::new(),
        },
        name = s.name
    );
    say(format_args!("listening on {}", server.addr()));
    let mut seen = 0;
    loop {
        for r in server.requests_after(seen) {
            seen += 1;
            say(format_args!("{}", request_line(&r)));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings_of(args: &[&str]) -> Result<Option<Settings>, String> {
        settings(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_parse_and_backends_are_required() {
        let s = settings_of(&[
            "--port=5",
            "--name=a.test",
            "--backends=127.0.0.1:1,[::1]:2",
            "--bootstrap_out=/tmp/b.json",
        ])
        .expect("valid")
        .expect("not --help");
        assert_eq!((s.port, s.name.as_str()), (5, "a.test"));
        assert_eq!(s.backends.len(), 2);
        assert_eq!(s.bootstrap_out.as_deref(), Some("/tmp/b.json"));
        assert!(settings_of(&["--port=5"]).is_err());
        assert!(settings_of(&["--backends=localhost:1"]).is_err());
        assert!(settings_of(&["-h"]).expect("parses").is_none());
        let s = settings_of(&["--backends=127.0.0.1:1"])
            .expect("valid")
            .expect("not --help");
        assert_eq!(
            (s.port, s.name.as_str(), s.bootstrap_out),
            (0, "svc.test", None)
        );
        assert!(s.tls_dir.is_none());
        let s = settings_of(&["--backends=127.0.0.1:1", "--tls_dir=/tmp/tls"])
            .expect("valid")
            .expect("not --help");
        assert_eq!(s.tls_dir, Some(PathBuf::from("/tmp/tls")));
        assert_eq!(s.server_san, SERVER_SPIFFE_ID);
        assert!(settings_of(&["--backends=127.0.0.1:1", "--server_san="]).is_err());
    }

    #[test]
    fn a_request_line_names_type_names_version_and_nack() {
        let mut r = DiscoveryRequest {
            type_url: type_url::LISTENER.to_owned(),
            resource_names: vec!["svc.test".to_owned()],
            version_info: "1".to_owned(),
            response_nonce: "2".to_owned(),
            ..Default::default()
        };
        assert_eq!(
            request_line(&r),
            "ads request: Listener names=svc.test version=1 nonce=2"
        );
        r.error_detail = Some(envoy_types::pb::google::rpc::Status {
            message: "bad\nlistener".to_owned(),
            ..Default::default()
        });
        r.resource_names.clear();
        assert_eq!(
            request_line(&r),
            "ads request: Listener names=- version=1 nonce=2 nack=bad listener"
        );
    }
}
