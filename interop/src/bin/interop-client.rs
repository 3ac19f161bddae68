//! The interop client with the standard flags (`shared/spec/interop.md`). Prints one line per case as it
//! finishes (`name: passed` or `name: failed: reason`), then `N passed, N failed`; exits non-zero on any
//! failure. `--target` takes any channel target, `xds:///name` included (grpc-channel's feature `xds`): the
//! channel then finds its bootstrap as any gRPC client does, in `GRPC_XDS_BOOTSTRAP` (a file) or
//! `GRPC_XDS_BOOTSTRAP_CONFIG` (the JSON); `etcd://HOST:PORT/NAME` follows the endpoints registered in that
//! etcd under `NAME/` (grpc-etcd-resolver).

use std::io::ErrorKind;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use grpc_channel::{Channel, TlsConfig};
use interop::client::{self, out_line, write_stdout, Context, SoakConfig, ALL_CASES};
use interop::flags::{help_text, FlagSpec, Flags};
use interop::tls::InteropFiles;

/// Every flag the client accepts: `Flags::parse` takes its names from here and `--help` prints it.
const FLAGS: &[FlagSpec] = &[
    FlagSpec {
        name: "target",
        value: "URI",
        default: "",
        help: "channel target (host:port, dns:[//auth/]host[:port], ipv4:a:p[,b:p], ipv6:[::1]:p, unix:/path, etcd://HOST:PORT/NAME (the endpoints etcd holds under NAME/), xds:///name with the bootstrap file GRPC_XDS_BOOTSTRAP names, else the JSON of GRPC_XDS_BOOTSTRAP_CONFIG); overrides --server_host/--server_port",
    },
    FlagSpec {
        name: "server_host",
        value: "HOST",
        default: "localhost",
        help: "host to connect to (ignored with --target)",
    },
    FlagSpec {
        name: "server_port",
        value: "PORT",
        default: "",
        help: "port to connect to; required unless --target is given",
    },
    FlagSpec {
        name: "server_host_override",
        value: "NAME",
        default: "",
        help: "the :authority to send, as NAME:PORT (NAME alone for a target without a port), and with TLS the name the server's certificate must be valid for",
    },
    FlagSpec {
        name: "test_case",
        value: "NAME[,NAME...]",
        default: "all",
        help: "the cases to run, in order (all: every case this client knows)",
    },
    FlagSpec {
        name: "use_tls",
        value: "BOOL",
        default: "false",
        help: "TLS (rustls, ALPN h2) instead of plaintext",
    },
    FlagSpec {
        name: "secure_mode",
        value: "BOOL",
        default: "false",
        help: "with an xds:/// target, xDS credentials (gRFC A29): TLS/mTLS as each Cluster's UpstreamTlsContext says, with the bootstrap's certificate_providers; plaintext for a Cluster without one",
    },
    FlagSpec {
        name: "use_test_ca",
        value: "BOOL",
        default: "false",
        help: "with TLS, trust the test CA (ca.pem from $INTEROP_TLS_DIR or target/interop-tls, made by interop-certs) instead of the platform's roots",
    },
    FlagSpec {
        name: "ca_file",
        value: "PEM",
        default: "",
        help: "with TLS, trust the CA certificates of this PEM file (overrides --use_test_ca)",
    },
    FlagSpec {
        name: "service_config_json",
        value: "JSON",
        default: "",
        help: "turn off service config lookup and use this JSON as the default service config",
    },
    FlagSpec {
        name: "additional_metadata",
        value: "K:V[;K:V...]",
        default: "",
        help: "extra metadata on every call",
    },
    FlagSpec {
        name: "skip",
        value: "NAME[,NAME...]",
        default: "",
        help: "cases to report as skipped instead of running (not a standard flag)",
    },
    FlagSpec {
        name: "soak_iterations",
        value: "N",
        default: "10",
        help: "RPCs per soak case",
    },
    FlagSpec {
        name: "soak_max_failures",
        value: "N",
        default: "0",
        help: "failed or too slow soak RPCs allowed",
    },
    FlagSpec {
        name: "soak_per_iteration_max_acceptable_latency_ms",
        value: "MS",
        default: "1000",
        help: "a soak RPC slower than this counts as a failure",
    },
    FlagSpec {
        name: "soak_overall_timeout_seconds",
        value: "S",
        default: "latency limit x iterations, at least 10",
        help: "time limit of a whole soak case",
    },
    FlagSpec {
        name: "soak_min_time_ms_between_rpcs",
        value: "MS",
        default: "0",
        help: "least time from the start of one soak RPC to the next",
    },
    FlagSpec {
        name: "soak_request_size",
        value: "BYTES",
        default: "271828",
        help: "payload size of a soak request",
    },
    FlagSpec {
        name: "soak_response_size",
        value: "BYTES",
        default: "314159",
        help: "payload size of a soak response",
    },
    FlagSpec {
        name: "soak_num_threads",
        value: "N",
        default: "1",
        help: "concurrent soak workers sharing the iterations",
    },
    FlagSpec {
        name: "help",
        value: "",
        default: "",
        help: "print this list and exit (also -h)",
    },
];

fn parse_metadata(spec: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in spec.split(';').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once(':')
            .ok_or_else(|| format!("--additional_metadata: {pair:?} has no ':'"))?;
        let mut probe = grpc_channel::MetadataMap::new();
        probe
            .append(k, v)
            .map_err(|e| format!("--additional_metadata: {e}"))?;
        out.push((k.to_owned(), v.to_owned()));
    }
    Ok(out)
}

/// What the flags ask for, before any channel exists.
#[derive(Debug)]
struct Settings {
    target: String,
    authority: Option<String>,
    tls: Option<TlsConfig>,
    service_config_json: Option<String>,
    metadata: Vec<(String, String)>,
    soak: SoakConfig,
    cases: Vec<String>,
    skip: Vec<String>,
    /// `--secure_mode`: xDS credentials.
    secure_mode: bool,
}

/// The port a channel target names, if any: for the authority with `--server_host_override`.
fn target_port(target: &str) -> Option<u16> {
    let host_port = if let Some(rest) = target.strip_prefix("dns:") {
        match rest.strip_prefix("//") {
            Some(with_authority) => with_authority.split_once('/')?.1,
            None => rest,
        }
    } else if let Some(list) = target
        .strip_prefix("ipv4:")
        .or_else(|| target.strip_prefix("ipv6:"))
    {
        list.split(',').next()?
    } else if target.starts_with("unix:") || target.starts_with("unix-abstract:") {
        return None;
    } else {
        target
    };
    let port = match host_port.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once("]:")?.1,
        None => match host_port.split_once(':') {
            Some((_, p)) if !p.contains(':') => p,
            _ => return None,
        },
    };
    port.parse().ok()
}

/// The channel target and the `:authority` override: `--target` as given, or `--server_host:--server_port`.
fn target_and_authority(flags: &Flags) -> Result<(String, Option<String>), String> {
    let host_override = flags.str("server_host_override").filter(|h| !h.is_empty());
    if let Some(target) = flags.str("target") {
        if target.is_empty() {
            return Err("--target needs a value".to_owned());
        }
        if flags.str("server_host").is_some() || flags.str("server_port").is_some() {
            eprintln!("interop-client: --target given; ignoring --server_host and --server_port");
        }
        let authority = host_override.map(|h| match target_port(target) {
            Some(port) => format!("{h}:{port}"),
            None => h.to_owned(),
        });
        return Ok((target.to_owned(), authority));
    }
    let host = flags.str("server_host").unwrap_or("localhost");
    let port: u16 = flags.num("server_port", 0)?;
    if port == 0 {
        return Err("--server_port (or --target) is required".to_owned());
    }
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok((target, host_override.map(|h| format!("{h}:{port}"))))
}

/// Reads the flags; `None` for `--help`.
fn settings(args: impl IntoIterator<Item = String>) -> Result<Option<Settings>, String> {
    let flags = Flags::parse(args, FLAGS)?;
    if flags.bool("help", false)? {
        return Ok(None);
    }
    let (target, authority) = target_and_authority(&flags)?;
    let use_test_ca = flags.bool("use_test_ca", false)?;
    let ca_file = flags.str("ca_file").filter(|f| !f.is_empty());
    let tls = if flags.bool("use_tls", false)? {
        let mut tls = match (ca_file, use_test_ca) {
            (Some(file), _) => TlsConfig::new().ca_certificate_file(file),
            (None, true) => TlsConfig::new()
                .ca_certificate_file(InteropFiles::default_dir().join(InteropFiles::CA)),
            (None, false) => TlsConfig::new(),
        };
        if let Some(name) = flags.str("server_host_override").filter(|h| !h.is_empty()) {
            tls = tls.server_name(name);
        }
        Some(tls)
    } else {
        if use_test_ca || ca_file.is_some() {
            eprintln!(
                "interop-client: --use_test_ca and --ca_file have no effect without --use_tls=true"
            );
        }
        None
    };
    let service_config_json = flags
        .str("service_config_json")
        .filter(|j| !j.is_empty())
        .map(str::to_owned);
    let iterations: u32 = flags.num("soak_iterations", SoakConfig::default().iterations)?;
    let max_latency_ms: u64 = flags.num("soak_per_iteration_max_acceptable_latency_ms", 1000)?;
    let soak = SoakConfig {
        iterations,
        max_failures: flags.num("soak_max_failures", 0)?,
        max_latency: Duration::from_millis(max_latency_ms),
        overall_timeout: Duration::from_secs(
            flags.num(
                "soak_overall_timeout_seconds",
                (max_latency_ms * u64::from(iterations))
                    .div_ceil(1000)
                    .max(10),
            )?,
        ),
        min_time_between: Duration::from_millis(flags.num("soak_min_time_ms_between_rpcs", 0)?),
        request_size: flags.num("soak_request_size", 271_828)?,
        response_size: flags.num("soak_response_size", 314_159)?,
        threads: flags.num("soak_num_threads", 1)?,
    };
    let metadata = parse_metadata(flags.str("additional_metadata").unwrap_or(""))?;
    let cases: Vec<String> = match flags.str("test_case").unwrap_or("all") {
        "all" => ALL_CASES.iter().map(|s| s.to_string()).collect(),
        list => list
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
    };
    for c in &cases {
        if !ALL_CASES.contains(&c.as_str()) {
            return Err(format!(
                "unknown test case {c:?}; known: all, {}",
                ALL_CASES.join(", ")
            ));
        }
    }
    let skip: Vec<String> = flags
        .str("skip")
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let secure_mode = flags.bool("secure_mode", false)?;
    Ok(Some(Settings {
        secure_mode,
        target,
        authority,
        tls,
        service_config_json,
        metadata,
        soak,
        cases,
        skip,
    }))
}

fn context(s: Settings) -> Result<(Context, Vec<String>, Vec<String>), String> {
    let mut builder = Channel::builder(s.target.clone());
    if let Some(a) = &s.authority {
        builder = builder.authority(a.clone());
    }
    if let Some(tls) = &s.tls {
        builder = builder.tls(tls.clone());
    }
    if s.secure_mode {
        builder = builder.xds_credentials();
    }
    // The standard meaning: no service config lookup, and this JSON as the default config.
    if let Some(json) = &s.service_config_json {
        builder = builder
            .service_config_lookup(false)
            .default_service_config(json.clone());
    }
    let channel = builder.clone().build().map_err(|e| e.to_string())?;
    let ctx = Context {
        channel,
        target: s.target,
        channel_builder: builder,
        metadata: s.metadata,
        soak: s.soak,
    };
    Ok((ctx, s.cases, s.skip))
}

/// Prints the flag table; a closed pipe (`--help | head -1`) is a normal end.
fn print_help() -> ExitCode {
    let text = format!(
        "usage: interop-client [--flag=value ...]; every flag:\n{}",
        help_text(FLAGS)
    );
    match write_stdout(format_args!("{text}")) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("interop-client: cannot write the help: {e}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // `etcd://HOST:PORT/NAME` targets: the endpoints etcd holds under NAME/ (grpc-etcd-resolver, on the
    // channel's public resolver API).
    if let Err(e) = grpc_channel::resolver::register(grpc_etcd_resolver::EtcdResolverBuilder::new())
    {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    let setup = settings(std::env::args().skip(1)).and_then(|s| s.map(context).transpose());
    let (ctx, cases, skip) = match setup {
        Ok(Some(s)) => s,
        Ok(None) => return print_help(),
        Err(e) => {
            eprintln!("interop-client: {e}");
            return ExitCode::from(2);
        }
    };
    // Once stdout is gone (`| head -1`), the cases still run, without output, so the exit status stays the
    // suite's result.
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for case in &cases {
        if skip.contains(case) {
            out_line(format_args!("{case}: skipped"));
            skipped += 1;
            continue;
        }
        let start = Instant::now();
        let result =
            tokio::time::timeout(Duration::from_secs(120), client::run_case(&ctx, case)).await;
        let ms = start.elapsed().as_millis();
        match result {
            Ok(Ok(())) => {
                passed += 1;
                out_line(format_args!("{case}: passed ({ms} ms)"));
            }
            Ok(Err(reason)) => {
                failed += 1;
                out_line(format_args!("{case}: failed: {reason}"));
            }
            Err(_) => {
                failed += 1;
                out_line(format_args!("{case}: failed: did not finish within 120 s"));
            }
        }
    }
    if skipped > 0 {
        out_line(format_args!(
            "{passed} passed, {failed} failed, {skipped} skipped"
        ));
    } else {
        out_line(format_args!("{passed} passed, {failed} failed"));
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings_of(args: &[&str]) -> Result<Option<Settings>, String> {
        settings(args.iter().map(|s| s.to_string()))
    }

    fn run_settings(args: &[&str]) -> Settings {
        settings_of(args).expect("valid flags").expect("not --help")
    }

    #[test]
    fn help_lists_every_flag_once() {
        let help = help_text(FLAGS);
        assert_eq!(help.lines().count(), FLAGS.len());
        for spec in FLAGS {
            assert!(!spec.help.is_empty(), "--{} has no description", spec.name);
            let prefix = format!("  --{}", spec.name);
            let lines = help
                .lines()
                .filter(|l| {
                    l.strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with(['=', ' ']) || rest.is_empty())
                })
                .count();
            assert_eq!(lines, 1, "--{} in the help:\n{help}", spec.name);
        }
    }

    #[test]
    fn help_and_h_ask_for_the_help() {
        assert!(settings_of(&["--help"]).expect("parses").is_none());
        assert!(settings_of(&["-h"]).expect("parses").is_none());
        // Before the checks of the other flags, so `--help` works whatever else is on the line.
        assert!(settings_of(&["--server_port=x", "--help"])
            .expect("parses")
            .is_none());
        let e = settings_of(&["--bogus"]).expect_err("unknown flag");
        assert!(
            e.contains("--target") && e.contains("--soak_num_threads"),
            "{e}"
        );
    }

    #[test]
    fn every_flag_in_the_table_parses_together() {
        // Each flag the code reads must be in the table (Flags::str checks that in debug builds).
        let s = run_settings(&[
            "--target=localhost:1",
            "--server_host=h",
            "--server_port=2",
            "--server_host_override=o",
            "--test_case=empty_unary,large_unary",
            "--use_tls=false",
            "--use_test_ca=false",
            "--service_config_json={}",
            "--additional_metadata=k:v",
            "--skip=large_unary",
            "--soak_iterations=3",
            "--soak_max_failures=1",
            "--soak_per_iteration_max_acceptable_latency_ms=5",
            "--soak_overall_timeout_seconds=6",
            "--soak_min_time_ms_between_rpcs=7",
            "--soak_request_size=8",
            "--soak_response_size=9",
            "--soak_num_threads=2",
            "--secure_mode=true",
        ]);
        assert!(s.secure_mode);
        assert_eq!(s.cases, ["empty_unary", "large_unary"]);
        assert_eq!(s.skip, ["large_unary"]);
        assert_eq!(s.service_config_json.as_deref(), Some("{}"));
        assert_eq!(s.soak.threads, 2);
    }

    #[test]
    fn target_overrides_host_and_port() {
        for (target, authority) in [
            ("ipv4:127.0.0.1:5000,127.0.0.2:5001", "o:5000"),
            ("ipv6:[::1]:5002", "o:5002"),
            ("dns:///localhost:5003", "o:5003"),
            ("dns://8.8.8.8:53/example.com:5004", "o:5004"),
            ("dns:example.com", "o"),
            ("unix:/tmp/sock", "o"),
            ("unix:///tmp/sock", "o"),
            ("localhost:5005", "o:5005"),
            ("[::1]:5006", "o:5006"),
            ("xds:///svc.test", "o"),
        ] {
            let s = run_settings(&[
                &format!("--target={target}"),
                "--server_host=ignored",
                "--server_port=1",
                "--server_host_override=o",
            ]);
            assert_eq!(s.target, target);
            assert_eq!(s.authority.as_deref(), Some(authority), "{target}");
            let s = run_settings(&[&format!("--target={target}")]);
            assert_eq!((s.target.as_str(), s.authority), (target, None));
        }
        assert!(settings_of(&["--target="]).is_err());
    }

    #[test]
    fn without_target_host_and_port_make_the_target() {
        let s = run_settings(&["--server_port=50051"]);
        assert_eq!((s.target.as_str(), s.authority), ("localhost:50051", None));
        let s = run_settings(&[
            "--server_host=::1",
            "--server_port=50051",
            "--server_host_override=foo.test.google.fr",
        ]);
        assert_eq!(s.target, "[::1]:50051");
        assert_eq!(s.authority.as_deref(), Some("foo.test.google.fr:50051"));
        assert!(settings_of(&["--server_host=h"]).is_err());
    }
}
