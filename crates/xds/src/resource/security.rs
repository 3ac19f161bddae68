//! gRFC A29's xDS security, the client's half: a Cluster's `transport_socket`
//! (`envoy.transport_sockets.tls` with an `UpstreamTlsContext`) validated into a [`ClusterSecurity`] that
//! names the bootstrap's certificate provider instances for the client's identity and for the roots, the
//! `match_subject_alt_names` that replace the host name check, and the `sni`; and [`san_matches`], the
//! SAN check itself on the SANs of the server's leaf certificate.
//!
//! [`san_matches`] follows the spec's SAN rules (turn4 §3.4, grpc-go `handshake_info.go`): an empty
//! matcher list passes; otherwise at least one SAN must match at least one matcher. A DNS SAN against an
//! `exact` matcher may be a wildcard (`*.example.com` matches exactly one left-most label; `*.` alone and
//! partial wildcards such as `f*o.example.com` never match), compared without regard to ASCII case and
//! with a trailing dot ignored. IP SANs are compared as their canonical text (IPv6 lower-case and
//! compressed, `2001:db8::1`). An empty SAN never matches. Email SANs are matched as text (grpc-go; C-core
//! ignores them).
//!
//! Not here: the parsing of the certificate (the channel reads the leaf's SANs) and the chain check.

use std::net::IpAddr;

use super::StringMatch;

/// A certificate provider instance named by a Cluster (`instance_name`, and the `certificate_name`
/// the `file_watcher` plugin ignores).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderInstance {
    /// The bootstrap's `certificate_providers` key.
    pub instance_name: String,
    /// `certificate_name` (ignored by `file_watcher`).
    pub certificate_name: String,
}

/// Where the roots that verify the server's certificate come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RootSource {
    /// A bootstrap certificate provider instance's CA certificates.
    Provider(ProviderInstance),
    /// The platform's root store (`system_root_certs`, A82).
    System,
}

/// A Cluster's validated `UpstreamTlsContext`: how the channel secures its connections to the
/// cluster's endpoints when the application opted in to xDS credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSecurity {
    /// The client's identity (mTLS), if the cluster asks the client to present one.
    pub identity: Option<ProviderInstance>,
    /// The roots.
    pub roots: RootSource,
    /// The server's leaf certificate must have a SAN matching one of these (empty: any certificate the
    /// roots verify).
    pub san_matchers: Vec<StringMatch>,
    /// The SNI to send, if the cluster gives one.
    pub sni: Option<String>,
}

/// A subject alternative name of a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubjectAltName {
    /// A DNS name.
    Dns(String),
    /// A URI (a SPIFFE ID, for one).
    Uri(String),
    /// An e-mail address.
    Email(String),
    /// An IP address.
    Ip(IpAddr),
}

/// Whether a leaf certificate with these SANs passes `matchers` (A29): true when `matchers` is empty,
/// else when at least one SAN matches at least one matcher.
pub fn san_matches(matchers: &[StringMatch], sans: &[SubjectAltName]) -> bool {
    if matchers.is_empty() {
        return true;
    }
    sans.iter().any(|san| {
        let text = match san {
            SubjectAltName::Dns(s) | SubjectAltName::Uri(s) | SubjectAltName::Email(s) => s.clone(),
            // `IpAddr`'s text is canonical: IPv6 lower-case, no leading zeros, the longest run of zero
            // groups as `::` (RFC 5952).
            SubjectAltName::Ip(ip) => ip.to_string(),
        };
        if text.is_empty() {
            return false;
        }
        matchers.iter().any(|m| match (san, m) {
            (SubjectAltName::Dns(_), StringMatch::Exact { value, .. }) => dns_match(value, &text),
            _ => m.matches(&text),
        })
    })
}

/// Whether host name `host` (an `exact` matcher's value) matches DNS SAN `san`, which may be a wildcard
/// `*.rest` standing for exactly one left-most label (grpc-go `dnsMatch`). Case-insensitive (ASCII); a
/// trailing dot on either is ignored.
fn dns_match(host: &str, san: &str) -> bool {
    let host = normalise_dns(host);
    let san = normalise_dns(san);
    if host.is_empty() || san.is_empty() {
        return false;
    }
    if !san.contains('*') {
        return host == san;
    }
    // Only a whole left-most label may be a wildcard, and only once, with something after it.
    let Some(rest) = san.strip_prefix("*.") else {
        return false;
    };
    if rest.is_empty() || rest.contains('*') {
        return false;
    }
    match host.strip_suffix(rest) {
        Some(label) => {
            let Some(label) = label.strip_suffix('.') else {
                return false;
            };
            !label.is_empty() && !label.contains('.')
        }
        None => false,
    }
}

/// A DNS name lower-cased (ASCII) without its trailing dot.
fn normalise_dns(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::SafeRegex;

    fn exact(v: &str) -> StringMatch {
        StringMatch::Exact {
            value: v.to_owned(),
            ignore_case: false,
        }
    }

    fn dns(v: &str) -> SubjectAltName {
        SubjectAltName::Dns(v.to_owned())
    }

    #[test]
    fn no_matchers_pass_any_certificate() {
        assert!(san_matches(&[], &[]));
        assert!(san_matches(&[], &[dns("a.example.com")]));
    }

    #[test]
    fn matchers_need_a_san() {
        assert!(!san_matches(&[exact("a.example.com")], &[]));
    }

    #[test]
    fn one_san_matching_one_matcher_passes() {
        let matchers = [exact("x.example.com"), exact("b.example.com")];
        assert!(san_matches(
            &matchers,
            &[dns("a.example.com"), dns("b.example.com")]
        ));
        assert!(!san_matches(
            &matchers,
            &[dns("a.example.com"), dns("c.example.com")]
        ));
    }

    #[test]
    fn dns_wildcards_match_one_left_most_label() {
        let m = [exact("foo.example.com")];
        assert!(san_matches(&m, &[dns("*.example.com")]));
        assert!(san_matches(
            &[exact("foo.example.com.")],
            &[dns("*.example.com")]
        ));
        assert!(san_matches(&m, &[dns("*.EXAMPLE.com.")]));
        assert!(san_matches(
            &[exact("FOO.Example.COM")],
            &[dns("foo.example.com")]
        ));
        assert!(!san_matches(
            &[exact("a.foo.example.com")],
            &[dns("*.example.com")]
        ));
        assert!(!san_matches(
            &[exact("example.com")],
            &[dns("*.example.com")]
        ));
        assert!(!san_matches(
            &[exact(".example.com")],
            &[dns("*.example.com")]
        ));
        assert!(!san_matches(&m, &[dns("*.")]));
        assert!(!san_matches(&m, &[dns("*")]));
        assert!(!san_matches(&m, &[dns("f*.example.com")]));
        assert!(!san_matches(&m, &[dns("*o.example.com")]));
        assert!(!san_matches(&m, &[dns("foo.*.com")]));
        assert!(!san_matches(&m, &[dns("*.*.com")]));
    }

    #[test]
    fn wildcards_apply_to_exact_matchers_on_dns_sans_only() {
        let prefix = StringMatch::Prefix {
            value: "foo.".to_owned(),
            ignore_case: false,
        };
        assert!(!san_matches(&[prefix], &[dns("*.example.com")]));
        assert!(!san_matches(
            &[exact("foo.example.com")],
            &[SubjectAltName::Uri("*.example.com".to_owned())]
        ));
    }

    #[test]
    fn uri_sans_match_spiffe_ids() {
        let m = [StringMatch::Prefix {
            value: "spiffe://mesh.local/".to_owned(),
            ignore_case: false,
        }];
        let uri = SubjectAltName::Uri("spiffe://mesh.local/ns/default/sa/server".to_owned());
        assert!(san_matches(&m, std::slice::from_ref(&uri)));
        let other = SubjectAltName::Uri("spiffe://other/ns/default/sa/server".to_owned());
        assert!(!san_matches(&m, &[other]));
        let suffix = StringMatch::Suffix {
            value: "/SA/SERVER".to_ascii_lowercase(),
            ignore_case: true,
        };
        assert!(san_matches(&[suffix], &[uri]));
    }

    #[test]
    fn ip_sans_compare_as_canonical_text() {
        let v6: IpAddr = "2001:DB8:0::01".parse().expect("test setup");
        assert!(san_matches(
            &[exact("2001:db8::1")],
            &[SubjectAltName::Ip(v6)]
        ));
        assert!(!san_matches(
            &[exact("2001:DB8:0::01")],
            &[SubjectAltName::Ip(v6)]
        ));
        let v4: IpAddr = "10.0.0.1".parse().expect("test setup");
        assert!(san_matches(&[exact("10.0.0.1")], &[SubjectAltName::Ip(v4)]));
        let contains = StringMatch::Contains {
            value: "db8".to_owned(),
            ignore_case: false,
        };
        assert!(san_matches(&[contains], &[SubjectAltName::Ip(v6)]));
    }

    #[test]
    fn empty_sans_never_match() {
        let empty_prefix = StringMatch::Prefix {
            value: String::new(),
            ignore_case: false,
        };
        assert!(!san_matches(
            std::slice::from_ref(&empty_prefix),
            &[dns("")]
        ));
        assert!(!san_matches(&[exact("")], &[dns("")]));
        assert!(!san_matches(
            &[empty_prefix],
            &[SubjectAltName::Uri(String::new())]
        ));
    }

    #[test]
    fn regexes_match_the_whole_san() {
        let re = StringMatch::Regex(
            SafeRegex::new("spiffe://mesh/ns/[a-z]+/sa/server", true).expect("test setup"),
        );
        let ok = SubjectAltName::Uri("spiffe://mesh/ns/prod/sa/server".to_owned());
        let longer = SubjectAltName::Uri("spiffe://mesh/ns/prod/sa/server2".to_owned());
        assert!(san_matches(std::slice::from_ref(&re), &[ok]));
        assert!(!san_matches(&[re], &[longer]));
    }

    #[test]
    fn email_sans_match_as_text() {
        let m = [exact("svc@example.com")];
        assert!(san_matches(
            &m,
            &[SubjectAltName::Email("svc@example.com".to_owned())]
        ));
    }
}
