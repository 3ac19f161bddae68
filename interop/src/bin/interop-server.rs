//! The interop server: `interop-server --port=PORT [--use_tls=false] [--tls_cert_file=PEM --tls_key_file=PEM]
//! [--tls_client_ca_file=PEM]`.
//! With `--port=0` it picks a free port. It prints `listening on 127.0.0.1:PORT` once it accepts connections.
//! With `--use_tls=true` it serves TLS with ALPN `h2`, presenting the certificate and key given, by default
//! `server.pem` and `server.key` from the directory `interop-certs` writes (`target/interop-tls`). With
//! `--tls_client_ca_file` it also requires a client certificate signed by that CA (mTLS, as mesh backends
//! do for `cargo xtask interop --xds --tls`).

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use std::path::PathBuf;

use interop::flags::Flags;
use interop::tls::{server_config, InteropFiles};

#[tokio::main]
async fn main() -> ExitCode {
    let flags = match Flags::parse(
        std::env::args().skip(1),
        &[
            "port",
            "use_tls",
            "address_type",
            "tls_cert_file",
            "tls_key_file",
            "tls_client_ca_file",
        ],
    ) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("interop-server: {e}");
            return ExitCode::from(2);
        }
    };
    let tls = match flags.bool("use_tls", false) {
        Ok(false) => None,
        Ok(true) => match tls_config(&flags) {
            Ok(config) => Some(config),
            Err(e) => {
                eprintln!("interop-server: {e}");
                return ExitCode::FAILURE;
            }
        },
        Err(e) => {
            eprintln!("interop-server: {e}");
            return ExitCode::from(2);
        }
    };
    let port: u16 = match flags.num("port", 0) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("interop-server: {e}");
            return ExitCode::from(2);
        }
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("interop-server: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(a) => println!("listening on {a}"),
        Err(e) => {
            eprintln!("interop-server: {e}");
            return ExitCode::FAILURE;
        }
    }
    match tls {
        None => interop::server::serve(listener).await,
        Some(config) => interop::server::serve_tls(listener, config).await,
    }
    ExitCode::SUCCESS
}

/// The server's TLS configuration: the certificate and key files given, or the generated interop ones.
fn tls_config(flags: &Flags) -> Result<std::sync::Arc<rustls::ServerConfig>, String> {
    let dir = InteropFiles::default_dir();
    let cert = flags
        .str("tls_cert_file")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.join(InteropFiles::SERVER_CERT));
    let key = flags
        .str("tls_key_file")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.join(InteropFiles::SERVER_KEY));
    let identity = InteropFiles::read_identity(&cert, &key).map_err(|e| e.to_string())?;
    let client_ca = match flags.str("tls_client_ca_file").filter(|f| !f.is_empty()) {
        Some(file) => Some(
            std::fs::read_to_string(file)
                .map_err(|e| format!("--tls_client_ca_file: cannot read {file}: {e}"))?,
        ),
        None => None,
    };
    server_config(&identity, &[b"h2"], client_ca.as_deref()).map_err(|e| e.to_string())
}
