//! The chaos server: `chaos-server [--seed=N]`. Starts the four fault-injecting backends of
//! `interop::chaos::server` on free loopback ports and prints `chaos ports: P1,P2,P3,P4` once they accept
//! connections, then the four backends of the sick-backend scenario (`interop::chaos::sick`) and
//! `sick ports: P1,P2,P3,P4` (the sick one last). It runs until its stdin closes (or it is killed), then prints what it injected on stderr:
//! `chaos-server: calls=N connections=N refused=N ...`.

use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;

use interop::chaos::server::{self, Stats};
use interop::flags::Flags;

fn main() -> ExitCode {
    let flags = match Flags::parse(std::env::args().skip(1), &["seed"]) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("chaos-server: {e}");
            return ExitCode::from(2);
        }
    };
    let seed: u64 = match flags.num("seed", 1) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("chaos-server: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("chaos-server: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stats = Arc::new(Stats::default());
    let addrs = match runtime.block_on(server::start(seed, stats.clone())) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("chaos-server: cannot listen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sick = match runtime.block_on(interop::chaos::sick::start_backends()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("chaos-server: cannot listen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ports: Vec<String> = addrs.iter().map(|a| a.port().to_string()).collect();
    let sick_ports: Vec<String> = sick.ports().iter().map(u16::to_string).collect();
    println!("chaos ports: {}", ports.join(","));
    println!("sick ports: {}", sick_ports.join(","));
    // Serve until stdin closes (the xtask closes it to stop the server).
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    eprintln!("chaos-server: {}", stats.line());
    drop(sick);
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    ExitCode::SUCCESS
}
