//! The chaos client: `chaos-client --ports=P1,P2,P3,P4 [--sick_ports=P1,P2,P3,P4] [--quick] [--calls=N]
//! [--concurrency=N] [--seed=N]`. Runs the soak of `interop::chaos::client` against the chaos server's
//! backends on 127.0.0.1 (1,000,000 calls, or 10,000 with `--quick`), prints a table of outcomes and the
//! closing `chaos: calls=N ok=N ...` line; then, with `--sick_ports`, the sick-backend scenario of
//! `interop::chaos::sick` (10 s per flavour, 2 s with `--quick`), a line per flavour. Exits non-zero when
//! any check fails.

use std::process::ExitCode;
use std::time::Duration;

use interop::chaos::client::{self, Config};
use interop::flags::Flags;

fn main() -> ExitCode {
    match parse() {
        Ok((config, sick)) => {
            let soak = client::run(config);
            let sick = sick
                .is_none_or(|(ports, per_flavour)| interop::chaos::sick::run(&ports, per_flavour));
            if soak && sick {
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

/// A comma-separated list of ports.
fn port_list(flag: &str, list: &str) -> Result<Vec<u16>, String> {
    let ports = list
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<u16>()
                .map_err(|e| format!("--{flag}: {p:?}: {e}"))
        })
        .collect::<Result<Vec<u16>, String>>()?;
    if ports.is_empty() {
        return Err(format!("--{flag} needs at least one port"));
    }
    Ok(ports)
}

/// The soak's config, and the sick-backend scenario's ports and time per flavour if it runs.
type Parsed = (Config, Option<(Vec<u16>, Duration)>);

fn parse() -> Result<Parsed, String> {
    let flags = Flags::parse(
        std::env::args().skip(1),
        &[
            "ports",
            "sick_ports",
            "quick",
            "calls",
            "concurrency",
            "seed",
        ],
    )?;
    let quick = flags.bool("quick", false)?;
    let ports = port_list(
        "ports",
        flags.str("ports").ok_or("--ports=P1,P2,... is required")?,
    )?;
    let sick = match flags.str("sick_ports") {
        Some(list) => Some((
            port_list("sick_ports", list)?,
            Duration::from_secs(if quick { 2 } else { 10 }),
        )),
        None => None,
    };
    let calls: u64 = flags.num("calls", if quick { 10_000 } else { 1_000_000 })?;
    let config = Config {
        ports,
        calls,
        concurrency: flags.num("concurrency", 96)?,
        seed: flags.num("seed", 1)?,
        // Far more than the calls need (~4,000 calls/s on 2 cores; this assumes 500): a hang shows as a
        // stalled soak, not a stuck CI job.
        max_duration: Duration::from_secs(120 + calls / 500),
    };
    Ok((config, sick))
}
