//! `interop-certs [--out=DIR]`: makes a fresh test CA, the interop server's certificate (names
//! `*.test.google.fr`, `localhost`, `127.0.0.1`, `::1`, and the SPIFFE ID
//! `spiffe://test.example/ns/default/sa/server`) and a client identity (SPIFFE ID
//! `spiffe://test.example/ns/default/sa/client`, for mTLS through xDS), and writes `ca.pem`, `server.pem`,
//! `server.key`, `client.pem` and `client.key` into DIR (by default `$INTEROP_TLS_DIR`, or
//! `target/interop-tls` in this workspace). `cargo xtask interop --tls` runs it; the files are never
//! committed.

use std::process::ExitCode;

use interop::flags::Flags;
use interop::tls::InteropFiles;

fn main() -> ExitCode {
    let flags = match Flags::parse(std::env::args().skip(1), &["out"]) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("interop-certs: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = flags
        .str("out")
        .map(Into::into)
        .unwrap_or_else(InteropFiles::default_dir);
    match InteropFiles::generate(&dir) {
        Ok(()) => {
            println!("wrote {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("interop-certs: {e}");
            ExitCode::FAILURE
        }
    }
}
