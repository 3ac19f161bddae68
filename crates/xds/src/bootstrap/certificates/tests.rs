use std::path::PathBuf;
use std::time::Duration;

use super::super::{Bootstrap, ChannelCreds};
use super::*;

/// A bootstrap with one insecure server and these extra top-level fields.
fn with(extra: &str) -> String {
    format!(
        r#"{{"xds_servers": [{{"server_uri": "a:1", "channel_creds": [{{"type": "insecure"}}]}}]{extra}}}"#
    )
}

/// A bootstrap whose only server has these `channel_creds`.
fn with_creds(creds: &str) -> String {
    format!(r#"{{"xds_servers": [{{"server_uri": "a:1", "channel_creds": {creds}}}]}}"#)
}

#[test]
fn providers_are_read() {
    let json = with(
        r#", "certificate_providers": {
            "mesh": {"plugin_name": "file_watcher", "config": {
                "certificate_file": "/certs/cert.pem", "private_key_file": "/certs/key.pem",
                "ca_certificate_file": "/certs/ca.pem", "refresh_interval": "1.5s",
                "certificate_name": "ignored", "unknown": 1}},
            "roots": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": "/ca.pem"}},
            "id": {"plugin_name": "file_watcher", "config": {
                "certificate_file": "c", "private_key_file": "k"}}
        }"#,
    );
    let b = Bootstrap::parse(&json).expect("valid");
    assert_eq!(b.certificate_providers.len(), 3);
    assert_eq!(
        b.certificate_providers["mesh"],
        CertificateFiles {
            certificate_file: Some(PathBuf::from("/certs/cert.pem")),
            private_key_file: Some(PathBuf::from("/certs/key.pem")),
            ca_certificate_file: Some(PathBuf::from("/certs/ca.pem")),
            refresh_interval: Duration::from_millis(1500),
        }
    );
    assert_eq!(
        b.certificate_providers["roots"],
        CertificateFiles {
            ca_certificate_file: Some(PathBuf::from("/ca.pem")),
            ..CertificateFiles::default()
        }
    );
    assert_eq!(
        b.certificate_providers["roots"].refresh_interval,
        Duration::from_secs(600)
    );
    assert!(b.certificate_providers["id"].ca_certificate_file.is_none());
    // Absent, or null: none.
    for json in [with(""), with(r#", "certificate_providers": null"#)] {
        assert!(Bootstrap::parse(&json)
            .expect("valid")
            .certificate_providers
            .is_empty());
    }
}

#[test]
fn provider_errors_name_the_field() {
    let cases = [
        (r#"[]"#, "certificate_providers: expected an object"),
        (r#"{"p": 1}"#, "certificate_providers.p: expected an object"),
        (
            r#"{"p": {"config": {}}}"#,
            "certificate_providers.p.plugin_name: missing",
        ),
        (
            r#"{"p": {"plugin_name": 3, "config": {}}}"#,
            "certificate_providers.p.plugin_name: expected a string",
        ),
        (
            r#"{"p": {"plugin_name": "pem_file", "config": {"ca_certificate_file": "a"}}}"#,
            "certificate_providers.p.plugin_name: unknown plugin \"pem_file\"",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher"}}"#,
            "certificate_providers.p.config: missing",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher", "config": []}}"#,
            "certificate_providers.p.config: expected an object",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher", "config": {}}}"#,
            "certificate_providers.p.config: needs certificate_file",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher", "config": {"refresh_interval": "5s"}}}"#,
            "certificate_providers.p.config: needs certificate_file",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher", "config": {"certificate_file": 1}}}"#,
            "certificate_providers.p.config.certificate_file: expected a string",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher", "config": {"certificate_file": "", "private_key_file": "k"}}}"#,
            "certificate_providers.p.config.certificate_file: empty",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": ""}}}"#,
            "certificate_providers.p.config.ca_certificate_file: empty",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher", "config": {"certificate_file": "c"}}}"#,
            "certificate_providers.p.config.private_key_file: missing",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher", "config": {"private_key_file": "k", "ca_certificate_file": "a"}}}"#,
            "certificate_providers.p.config.certificate_file: missing",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": "a", "refresh_interval": 600}}}"#,
            "certificate_providers.p.config.refresh_interval: expected a Duration string",
        ),
        (
            r#"{"p": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": "a", "refresh_interval": "-1s"}}}"#,
            "certificate_providers.p.config.refresh_interval: \"-1s\" is not a Duration",
        ),
    ];
    for (providers, expected) in cases {
        let json = with(&format!(r#", "certificate_providers": {providers}"#));
        let e = Bootstrap::parse(&json).expect_err(providers);
        assert!(e.to_string().contains(expected), "{providers}: {e}");
    }
}

#[test]
fn the_number_of_providers_is_bounded() {
    let instance = r#"{"plugin_name": "file_watcher", "config": {"ca_certificate_file": "a"}}"#;
    let providers = |n: usize| {
        let entries: Vec<String> = (0..n).map(|i| format!(r#""p{i}": {instance}"#)).collect();
        with(&format!(
            r#", "certificate_providers": {{{}}}"#,
            entries.join(",")
        ))
    };
    let b = Bootstrap::parse(&providers(MAX_CERTIFICATE_PROVIDERS)).expect("at the bound");
    assert_eq!(b.certificate_providers.len(), MAX_CERTIFICATE_PROVIDERS);
    let e = Bootstrap::parse(&providers(MAX_CERTIFICATE_PROVIDERS + 1)).expect_err("past it");
    assert!(
        e.to_string()
            .contains("certificate_providers: 257 instances, more than the 256 allowed"),
        "{e}"
    );
}

// Out-of-range intervals are clamped, not refused (C-core and grpc-go accept any): raised to C-core's
// one-second floor, lowered to a day.
#[test]
fn the_refresh_interval_is_clamped() {
    let at = |interval: &str| {
        with(&format!(
            r#", "certificate_providers": {{"p": {{"plugin_name": "file_watcher",
                "config": {{"ca_certificate_file": "a", "refresh_interval": "{interval}"}}}}}}"#
        ))
    };
    let interval =
        |s: &str| Bootstrap::parse(&at(s)).expect(s).certificate_providers["p"].refresh_interval;
    assert_eq!(interval("86400s"), MAX_REFRESH_INTERVAL);
    assert_eq!(interval("86400.000000001s"), MAX_REFRESH_INTERVAL);
    assert_eq!(interval("86401s"), MAX_REFRESH_INTERVAL);
    assert_eq!(interval("1s"), MIN_REFRESH_INTERVAL);
    assert_eq!(interval("1.5s"), Duration::from_millis(1500));
    assert_eq!(interval("0.999999999s"), MIN_REFRESH_INTERVAL);
    assert_eq!(interval("0.000000001s"), MIN_REFRESH_INTERVAL);
    assert_eq!(interval("0s"), MIN_REFRESH_INTERVAL);
}

#[test]
fn json_durations() {
    for (s, d) in [
        ("600s", Duration::from_secs(600)),
        ("1.5s", Duration::from_millis(1500)),
        ("0.25s", Duration::from_millis(250)),
        ("1.000000001s", Duration::new(1, 1)),
        ("0s", Duration::ZERO),
        ("007s", Duration::from_secs(7)),
    ] {
        assert_eq!(json_duration(s), Ok(d), "{s}");
    }
    for s in [
        "",
        "s",
        "600",
        "1.s",
        ".5s",
        "1.0000000001s",
        "-1s",
        "+1s",
        "1e3s",
        " 1s",
        "1.5 s",
        "1,5s",
        "1m",
        "99999999999999999999999s",
        "١s",
    ] {
        assert!(json_duration(s).is_err(), "{s:?}");
    }
}

#[test]
fn tls_channel_creds_are_read() {
    let b = Bootstrap::parse(&with_creds(r#"[{"type": "tls"}]"#)).expect("no config");
    assert_eq!(
        b.xds_servers[0].channel_creds,
        ChannelCreds::Tls(CertificateFiles::default()),
        "plain TLS with the platform's roots"
    );
    let b = Bootstrap::parse(&with_creds(
        r#"[{"type": "tls", "config": {"ca_certificate_file": "/ca.pem",
            "certificate_file": "/c.pem", "private_key_file": "/k.pem", "refresh_interval": "30s"}}]"#,
    ))
    .expect("mTLS");
    assert_eq!(
        b.xds_servers[0].channel_creds,
        ChannelCreds::Tls(CertificateFiles {
            certificate_file: Some(PathBuf::from("/c.pem")),
            private_key_file: Some(PathBuf::from("/k.pem")),
            ca_certificate_file: Some(PathBuf::from("/ca.pem")),
            refresh_interval: Duration::from_secs(30),
        })
    );
    let b = Bootstrap::parse(&with_creds(
        r#"[{"type": "tls", "config": {"certificate_file": "/c.pem", "private_key_file": "/k.pem"}}]"#,
    ))
    .expect("an identity with the platform's roots");
    let ChannelCreds::Tls(files) = &b.xds_servers[0].channel_creds else {
        panic!("tls")
    };
    assert!(files.ca_certificate_file.is_none());
}

#[test]
fn the_first_supported_channel_creds_win() {
    // An unsupported type is skipped; after the chosen one, nothing is read.
    let b = Bootstrap::parse(&with_creds(
        r#"[{"type": "google_default"}, {"type": "insecure"},
            {"type": "tls", "config": {"certificate_file": 1}}]"#,
    ))
    .expect("insecure first");
    assert_eq!(b.xds_servers[0].channel_creds, ChannelCreds::Insecure);
    let b = Bootstrap::parse(&with_creds(
        r#"[{"type": "tls", "config": {"ca_certificate_file": "/ca.pem"}}, {"type": "insecure"}]"#,
    ))
    .expect("tls first");
    assert!(matches!(
        b.xds_servers[0].channel_creds,
        ChannelCreds::Tls(_)
    ));
}

#[test]
fn tls_channel_creds_errors_name_the_field() {
    let cases = [
        (
            r#"[{"type": "tls", "config": {"certificate_file": "/c.pem"}}]"#,
            "xds_servers[0].channel_creds[0].config.private_key_file: missing",
        ),
        (
            r#"[{"type": "tls", "config": {"private_key_file": "/k.pem"}}]"#,
            "xds_servers[0].channel_creds[0].config.certificate_file: missing",
        ),
        (
            r#"[{"type": "google_default"}, {"type": "tls", "config": {"ca_certificate_file": ""}}]"#,
            "xds_servers[0].channel_creds[1].config.ca_certificate_file: empty",
        ),
        (
            r#"[{"type": "tls", "config": {"ca_certificate_file": ["/ca.pem"]}}]"#,
            "xds_servers[0].channel_creds[0].config.ca_certificate_file: expected a string",
        ),
        (
            r#"[{"type": "tls", "config": {"refresh_interval": "10m"}}]"#,
            "xds_servers[0].channel_creds[0].config.refresh_interval",
        ),
        (
            r#"[{"type": "tls", "config": "x"}]"#,
            "xds_servers[0].channel_creds[0].config: expected an object",
        ),
    ];
    for (creds, expected) in cases {
        let e = Bootstrap::parse(&with_creds(creds)).expect_err(creds);
        assert!(e.to_string().contains(expected), "{creds}: {e}");
    }
}

#[test]
fn unix_server_uris_are_targets_like_any_other() {
    for uri in [
        "unix:/run/xds.sock",
        "unix:///run/xds.sock",
        "unix-abstract:xds",
    ] {
        let json = format!(
            r#"{{"xds_servers": [{{"server_uri": "{uri}", "channel_creds": [{{"type": "insecure"}}]}}]}}"#
        );
        let b = Bootstrap::parse(&json).expect(uri);
        assert_eq!(b.xds_servers[0].server_uri, uri);
    }
}

// C-core's FileWatcherCertificateProvider raises any refresh interval under one second to one second
// (`kMinimumFileWatcherRefreshIntervalSeconds`), and its factory keeps only whole seconds; a
// `refresh_interval` of "0.000000001s" must not become a provider that re-reads three PEM files a
// billion times a second. certificates.rs (`certificate_files`, the `refresh_interval` arm) only
// rejects zero, so a bootstrap typo ("0.001s" for "1000s") costs a core. Either an error naming the
// field or an interval of at least a second is what a careful client does.
#[test]
fn a_sub_second_refresh_interval_is_not_kept_as_is() {
    for interval in ["0.000000001s", "0.001s", "0.5s"] {
        let json = with(&format!(
            r#", "certificate_providers": {{"p": {{"plugin_name": "file_watcher",
                "config": {{"ca_certificate_file": "a", "refresh_interval": "{interval}"}}}}}}"#
        ));
        match Bootstrap::parse(&json) {
            Err(e) => assert!(
                e.to_string()
                    .contains("certificate_providers.p.config.refresh_interval"),
                "{interval}: {e}"
            ),
            Ok(b) => assert!(
                b.certificate_providers["p"].refresh_interval >= Duration::from_secs(1),
                "{interval}: kept as {:?}, under C-core's one-second floor",
                b.certificate_providers["p"].refresh_interval
            ),
        }
    }
}

// Neither C-core (`FileWatcherCertificateProviderFactory::Config`, a plain Duration field) nor grpc-go
// (`pemfile`'s `refresh_interval`, any durationpb) puts an upper bound on `refresh_interval`; a
// bootstrap with a weekly refresh ("604800s", long-lived certificates) works for them. certificates.rs
// (`certificate_files`, `d > MAX_REFRESH_INTERVAL`) fails the whole bootstrap instead, so no xDS
// channel can be built at all. A longer interval may be clamped, but the bootstrap must stay usable.
#[test]
fn a_refresh_interval_over_a_day_does_not_fail_the_bootstrap() {
    let json = with(
        r#", "certificate_providers": {"p": {"plugin_name": "file_watcher",
            "config": {"ca_certificate_file": "a", "refresh_interval": "604800s"}}}"#,
    );
    let b = Bootstrap::parse(&json).expect("C-core and grpc-go accept a weekly refresh");
    assert!(b.certificate_providers["p"].refresh_interval >= MAX_REFRESH_INTERVAL);
}
