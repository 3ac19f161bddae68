//! The chaos client: `chaos-client --ports=P1,P2,P3,P4 [--quick] [--calls=N] [--concurrency=N] [--seed=N]`.
//! Runs the soak of `interop::chaos::client` against the chaos server's backends on 127.0.0.1 (1,000,000 calls,
//! or 10,000 with `--quick`), prints a table of outcomes and the closing `chaos: calls=N ok=N ...` line, and
//! exits non-zero when any check fails.

use std::process::ExitCode;
use std::time::Duration;

use interop::chaos::client::{self, Config};
use interop::flags::Flags;

fn main() -> ExitCode {
    match parse() {
        Ok(config) => {
            if client::run(config) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("chaos-client: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse() -> Result<Config, String> {
    let flags = Flags::parse(
        std::env::args().skip(1),
        &["ports", "quick", "calls", "concurrency", "seed"],
    )?;
    let quick = flags.bool("quick", false)?;
    let ports = flags
        .str("ports")
        .ok_or("--ports=P1,P2,... is required")?
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<u16>()
                .map_err(|e| format!("--ports: {p:?}: {e}"))
        })
        .collect::<Result<Vec<u16>, String>>()?;
    if ports.is_empty() {
        return Err("--ports needs at least one port".to_owned());
    }
    let calls: u64 = flags.num("calls", if quick { 10_000 } else { 1_000_000 })?;
    Ok(Config {
        ports,
        calls,
        concurrency: flags.num("concurrency", 96)?,
        seed: flags.num("seed", 1)?,
        // Far more than the calls need (~4,000 calls/s on 2 cores; this assumes 500): a hang shows as a
        // stalled soak, not a stuck CI job.
        max_duration: Duration::from_secs(120 + calls / 500),
    })
}
