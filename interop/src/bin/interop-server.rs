//! The interop server: `interop-server --port=PORT [--use_tls=false]`. With `--port=0` it picks a free port.
//! It prints `listening on 127.0.0.1:PORT` once it accepts connections.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use interop::flags::Flags;

#[tokio::main]
async fn main() -> ExitCode {
    let flags = match Flags::parse(
        std::env::args().skip(1),
        &["port", "use_tls", "address_type"],
    ) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("interop-server: {e}");
            return ExitCode::from(2);
        }
    };
    match flags.bool("use_tls", false) {
        Ok(false) => {}
        Ok(true) => {
            eprintln!(
                "interop-server: --use_tls=true is not supported yet: TLS has its own work item"
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("interop-server: {e}");
            return ExitCode::from(2);
        }
    }
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
    interop::server::serve(listener).await;
    ExitCode::SUCCESS
}
