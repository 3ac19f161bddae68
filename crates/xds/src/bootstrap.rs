//! The xDS bootstrap (gRFC A27; authorities from A47; several servers from A71): which management servers
//! to ask, with which channel credentials, and who the client is (`node`).
//!
//! Where it comes from ([`Bootstrap::from_env`]): the file `GRPC_XDS_BOOTSTRAP` names, else the JSON in
//! `GRPC_XDS_BOOTSTRAP_CONFIG` (the file wins when both are set, as in every gRPC stack); or the
//! application's JSON ([`Bootstrap::parse`]).
//!
//! What is checked, each failure a [`BootstrapError`] naming the field (`xds_servers[0].server_uri`):
//! * `xds_servers`: a non-empty list; each server a non-empty `server_uri`, and `channel_creds`, a list of
//!   `{"type": ..., "config": {...}}` of which the first type this client supports is used (`insecure`,
//!   `tls`; others such as `google_default` are skipped, and a list with none supported is an error);
//!   `server_features` a list of strings, the ones this client knows recorded ([`ServerFeatures`]), the
//!   others ignored;
//! * `node` (optional): `id`, `cluster`, `locality` (`region`, `zone`, `sub_zone`) strings, `metadata` an
//!   object (kept as JSON);
//! * `client_default_listener_resource_name_template` (default `%s`), and `authorities`: each one's
//!   `client_listener_resource_name_template` must start with `xdstp://<authority>/` (default
//!   `xdstp://<authority>/envoy.config.listener.v3.Listener/%s`), its `xds_servers` as above or empty (the
//!   top-level servers then);
//! * `certificate_providers` (A29): the `file_watcher` instances Clusters may name, and the `config` of
//!   `tls` channel creds (A65): see `certificates` for their rules;
//! * unknown fields are ignored (A27).
//!
//! `server_uri` is a channel target like any other: `host:port`, `dns:///host:port`, or a Unix domain
//! socket (`unix:/path`, `unix:///path`, `unix-abstract:name`, as Istio's local agent listens); the
//! bootstrap only requires it to be non-empty.
//!
//! Not here: the ADS stream, resources, the `xds:` target, reading the certificate files.

use std::collections::BTreeMap;

mod certificates;

pub use certificates::{
    CertificateFiles, DEFAULT_REFRESH_INTERVAL, FILE_WATCHER_PLUGIN, MAX_CERTIFICATE_PROVIDERS,
    MAX_REFRESH_INTERVAL, MIN_REFRESH_INTERVAL,
};

use serde_json::{Map, Value};

/// The environment variable naming a bootstrap file.
pub const BOOTSTRAP_FILE_VARIABLE: &str = "GRPC_XDS_BOOTSTRAP";

/// The environment variable holding the bootstrap JSON itself.
pub const BOOTSTRAP_CONFIG_VARIABLE: &str = "GRPC_XDS_BOOTSTRAP_CONFIG";

/// Why a bootstrap is not usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BootstrapError {
    /// Neither variable is set, and the application gave none.
    #[error("no xDS bootstrap: set {BOOTSTRAP_FILE_VARIABLE} (a file) or {BOOTSTRAP_CONFIG_VARIABLE} (the JSON)")]
    Missing,
    /// The bootstrap file could not be read.
    #[error("cannot read the xDS bootstrap file {path}: {reason}")]
    Unreadable {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// Not JSON.
    #[error("the xDS bootstrap{} is not JSON: {reason}", from.as_deref().map(|f| format!(" from {f}")).unwrap_or_default())]
    Json {
        /// Where it came from (a variable or a file), if not from the application.
        from: Option<String>,
        /// The parser's message.
        reason: String,
    },
    /// A field is missing or wrong.
    #[error("invalid xDS bootstrap: {field}: {reason}")]
    Field {
        /// The field's path, e.g. `xds_servers[0].channel_creds`.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

fn field_error(field: impl Into<String>, reason: impl Into<String>) -> BootstrapError {
    BootstrapError::Field {
        field: field.into(),
        reason: reason.into(),
    }
}

impl From<certificates::FieldError> for BootstrapError {
    fn from(e: certificates::FieldError) -> BootstrapError {
        field_error(e.field, e.reason)
    }
}

/// The channel credentials to reach a management server with: the first type of its `channel_creds` that
/// this client supports.
#[derive(Clone, Debug, PartialEq)]
pub enum ChannelCreds {
    /// Plaintext.
    Insecure,
    /// TLS (A65): the server verified with the CA file's roots (the system's when unset), and a client
    /// certificate presented when the config names one (mTLS); every file unset is plain TLS with the
    /// platform's roots.
    Tls(CertificateFiles),
}

/// The `server_features` this client knows (others are ignored).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerFeatures {
    /// `ignore_resource_deletion` (A53): a Listener or Cluster missing from a response is not deleted.
    pub ignore_resource_deletion: bool,
    /// `trusted_xds_server`: the server may configure what only a trusted one may.
    pub trusted_xds_server: bool,
    /// `fail_on_data_errors` (A88): a data error drops the cached resource.
    pub fail_on_data_errors: bool,
    /// `resource_timer_is_transient_error` (A88): a resource not sent in time is a transient error.
    pub resource_timer_is_transient_error: bool,
}

/// One management server.
#[derive(Clone, Debug, PartialEq)]
pub struct XdsServer {
    /// Its target, e.g. `xds.example.com:443` (a channel target).
    pub server_uri: String,
    /// The credentials chosen from its `channel_creds`.
    pub channel_creds: ChannelCreds,
    /// The features it declares.
    pub server_features: ServerFeatures,
}

/// Where the client runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Locality {
    /// `region`.
    pub region: String,
    /// `zone`.
    pub zone: String,
    /// `sub_zone`.
    pub sub_zone: String,
}

/// Who the client is, as the management server sees it (`node` in every first request of a stream).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    /// `id`.
    pub id: String,
    /// `cluster`.
    pub cluster: String,
    /// `locality`, if given.
    pub locality: Option<Locality>,
    /// `metadata`, as given (a JSON object).
    pub metadata: Map<String, Value>,
}

/// An authority of `xdstp://` resource names (A47).
#[derive(Clone, Debug, PartialEq)]
pub struct Authority {
    /// The Listener name template for `xds://<authority>/<name>` targets.
    pub client_listener_resource_name_template: String,
    /// Its servers (empty: the top-level ones).
    pub xds_servers: Vec<XdsServer>,
}

/// A validated bootstrap.
#[derive(Clone, Debug, PartialEq)]
pub struct Bootstrap {
    /// The management servers, in order of preference (A71).
    pub xds_servers: Vec<XdsServer>,
    /// The client's node.
    pub node: Node,
    /// The Listener name template for `xds:///<name>` targets (`%s` by default).
    pub client_default_listener_resource_name_template: String,
    /// The authorities, by name.
    pub authorities: BTreeMap<String, Authority>,
    /// `certificate_providers` (A29): the `file_watcher` instances Clusters may name, by instance name
    /// (at most [`MAX_CERTIFICATE_PROVIDERS`]).
    pub certificate_providers: BTreeMap<String, CertificateFiles>,
}

impl Bootstrap {
    /// Parses and validates the bootstrap JSON.
    pub fn parse(json: &str) -> Result<Bootstrap, BootstrapError> {
        Bootstrap::parse_from(json, None)
    }

    fn parse_from(json: &str, from: Option<&str>) -> Result<Bootstrap, BootstrapError> {
        let value: Value = serde_json::from_str(json).map_err(|e| BootstrapError::Json {
            from: from.map(str::to_owned),
            reason: e.to_string(),
        })?;
        let top = value
            .as_object()
            .ok_or_else(|| field_error("(top level)", "expected a JSON object"))?;
        let xds_servers = match top.get("xds_servers") {
            None => {
                return Err(field_error(
                    "xds_servers",
                    "missing: at least one server is needed",
                ))
            }
            Some(v) => servers(v, "xds_servers")?,
        };
        if xds_servers.is_empty() {
            return Err(field_error(
                "xds_servers",
                "empty: at least one server is needed",
            ));
        }
        let node = match top.get("node") {
            None | Some(Value::Null) => Node::default(),
            Some(v) => node(v)?,
        };
        let client_default_listener_resource_name_template =
            optional_string(top, "client_default_listener_resource_name_template", "")?
                .unwrap_or_else(|| "%s".to_owned());
        let authorities = match top.get("authorities") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(v) => authorities(v)?,
        };
        let certificate_providers = match top.get("certificate_providers") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(v) => certificates::certificate_providers(v)?,
        };
        Ok(Bootstrap {
            xds_servers,
            node,
            client_default_listener_resource_name_template,
            authorities,
            certificate_providers,
        })
    }

    /// The bootstrap the environment names (see the module docs), `env` reading a variable and `read`
    /// reading a file.
    pub fn from_env(
        env: impl Fn(&str) -> Option<String>,
        read: impl Fn(&str) -> std::io::Result<String>,
    ) -> Result<Bootstrap, BootstrapError> {
        if let Some(path) = env(BOOTSTRAP_FILE_VARIABLE).filter(|p| !p.is_empty()) {
            let json = read(&path).map_err(|e| BootstrapError::Unreadable {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            return Bootstrap::parse_from(&json, Some(&path));
        }
        match env(BOOTSTRAP_CONFIG_VARIABLE).filter(|j| !j.is_empty()) {
            Some(json) => Bootstrap::parse_from(&json, Some(BOOTSTRAP_CONFIG_VARIABLE)),
            None => Err(BootstrapError::Missing),
        }
    }

    /// The Listener resource name for the target `xds:///<name>` (`authority` `None`) or
    /// `xds://<authority>/<name>`: the template with `%s` replaced by the name (percent-encoded, but for
    /// `/`, in an `xdstp:` template, A47). An authority the bootstrap does not list is an error.
    pub fn listener_name(
        &self,
        authority: Option<&str>,
        name: &str,
    ) -> Result<String, BootstrapError> {
        let template = match authority {
            None => self.client_default_listener_resource_name_template.as_str(),
            Some(a) => self
                .authorities
                .get(a)
                .map(|a| a.client_listener_resource_name_template.as_str())
                .ok_or_else(|| {
                    field_error(
                        format!("authorities.{a}"),
                        "the target names an authority the bootstrap does not list",
                    )
                })?,
        };
        let name = if template.starts_with("xdstp:") {
            const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
                .remove(b'/')
                .remove(b'-')
                .remove(b'.')
                .remove(b'_')
                .remove(b'~')
                .remove(b':');
            percent_encoding::utf8_percent_encode(name, KEEP).to_string()
        } else {
            name.to_owned()
        };
        Ok(template.replace("%s", &name))
    }
}

fn string<'a>(v: &'a Value, field: &str) -> Result<&'a str, BootstrapError> {
    v.as_str()
        .ok_or_else(|| field_error(field, "expected a string"))
}

fn optional_string(
    object: &Map<String, Value>,
    key: &str,
    prefix: &str,
) -> Result<Option<String>, BootstrapError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => Ok(Some(string(v, &format!("{prefix}{key}"))?.to_owned())),
    }
}

fn servers(v: &Value, field: &str) -> Result<Vec<XdsServer>, BootstrapError> {
    let list = v
        .as_array()
        .ok_or_else(|| field_error(field, "expected a list of servers"))?;
    list.iter()
        .enumerate()
        .map(|(i, s)| server(s, &format!("{field}[{i}]")))
        .collect()
}

fn server(v: &Value, field: &str) -> Result<XdsServer, BootstrapError> {
    let object = v
        .as_object()
        .ok_or_else(|| field_error(field, "expected an object"))?;
    let server_uri = match object.get("server_uri") {
        None => return Err(field_error(format!("{field}.server_uri"), "missing")),
        Some(v) => string(v, &format!("{field}.server_uri"))?.to_owned(),
    };
    if server_uri.is_empty() {
        return Err(field_error(format!("{field}.server_uri"), "empty"));
    }
    let creds_field = format!("{field}.channel_creds");
    let creds = object
        .get("channel_creds")
        .ok_or_else(|| field_error(&creds_field, "missing"))?
        .as_array()
        .ok_or_else(|| field_error(&creds_field, "expected a list"))?;
    let mut seen = Vec::new();
    let mut chosen = None;
    for (i, c) in creds.iter().enumerate() {
        let at = format!("{creds_field}[{i}]");
        let c = c
            .as_object()
            .ok_or_else(|| field_error(&at, "expected an object"))?;
        let kind = string(
            c.get("type")
                .ok_or_else(|| field_error(format!("{at}.type"), "missing"))?,
            &format!("{at}.type"),
        )?;
        let config = match c.get("config") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(field_error(format!("{at}.config"), "expected an object")),
        };
        // Only the chosen entry's config is read (A27: the first supported type wins; later ones are
        // never used).
        if chosen.is_none() {
            chosen = match kind {
                "insecure" => Some(ChannelCreds::Insecure),
                "tls" => Some(ChannelCreds::Tls(certificates::certificate_files(
                    &config,
                    &format!("{at}.config"),
                )?)),
                _ => None,
            };
        }
        seen.push(kind.to_owned());
    }
    let channel_creds = chosen.ok_or_else(|| {
        field_error(
            &creds_field,
            format!(
                "no supported type (this client supports insecure and tls; the list has {seen:?})"
            ),
        )
    })?;
    let mut server_features = ServerFeatures::default();
    if let Some(v) = object.get("server_features") {
        let at = format!("{field}.server_features");
        let list = v
            .as_array()
            .ok_or_else(|| field_error(&at, "expected a list of strings"))?;
        for (i, f) in list.iter().enumerate() {
            match string(f, &format!("{at}[{i}]"))? {
                "ignore_resource_deletion" => server_features.ignore_resource_deletion = true,
                "trusted_xds_server" => server_features.trusted_xds_server = true,
                "fail_on_data_errors" => server_features.fail_on_data_errors = true,
                "resource_timer_is_transient_error" => {
                    server_features.resource_timer_is_transient_error = true
                }
                _ => {}
            }
        }
    }
    Ok(XdsServer {
        server_uri,
        channel_creds,
        server_features,
    })
}

fn node(v: &Value) -> Result<Node, BootstrapError> {
    let object = v
        .as_object()
        .ok_or_else(|| field_error("node", "expected an object"))?;
    let locality = match object.get("locality") {
        None | Some(Value::Null) => None,
        Some(Value::Object(l)) => Some(Locality {
            region: optional_string(l, "region", "node.locality.")?.unwrap_or_default(),
            zone: optional_string(l, "zone", "node.locality.")?.unwrap_or_default(),
            sub_zone: optional_string(l, "sub_zone", "node.locality.")?.unwrap_or_default(),
        }),
        Some(_) => return Err(field_error("node.locality", "expected an object")),
    };
    let metadata = match object.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(field_error("node.metadata", "expected an object")),
    };
    Ok(Node {
        id: optional_string(object, "id", "node.")?.unwrap_or_default(),
        cluster: optional_string(object, "cluster", "node.")?.unwrap_or_default(),
        locality,
        metadata,
    })
}

fn authorities(v: &Value) -> Result<BTreeMap<String, Authority>, BootstrapError> {
    let object = v
        .as_object()
        .ok_or_else(|| field_error("authorities", "expected an object"))?;
    let mut out = BTreeMap::new();
    for (name, a) in object {
        let at = format!("authorities.{name}");
        let a = a
            .as_object()
            .ok_or_else(|| field_error(&at, "expected an object"))?;
        let prefix = format!("xdstp://{name}/");
        let template = optional_string(
            a,
            "client_listener_resource_name_template",
            &format!("{at}."),
        )?
        .unwrap_or_else(|| format!("{prefix}envoy.config.listener.v3.Listener/%s"));
        if !template.starts_with(&prefix) {
            return Err(field_error(
                format!("{at}.client_listener_resource_name_template"),
                format!("must start with {prefix:?}"),
            ));
        }
        let xds_servers = match a.get("xds_servers") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => servers(v, &format!("{at}.xds_servers"))?,
        };
        out.insert(
            name.clone(),
            Authority {
                client_listener_resource_name_template: template,
                xds_servers,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"{
        "xds_servers": [
            {"server_uri": "xds.example.com:443",
             "channel_creds": [{"type": "google_default"}, {"type": "tls", "config": {}}, {"type": "insecure"}],
             "server_features": ["xds_v3", "ignore_resource_deletion", "something_new"]},
            {"server_uri": "fallback:15010", "channel_creds": [{"type": "insecure"}]}
        ],
        "node": {"id": "client-1", "cluster": "c", "locality": {"region": "r", "zone": "z"},
                 "metadata": {"k": ["v"]}, "user_agent_name": "ignored"},
        "certificate_providers": {"p": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": "/ca.pem"}}},
        "authorities": {"corp": {}, "edge": {
            "client_listener_resource_name_template": "xdstp://edge/envoy.config.listener.v3.Listener/%s",
            "xds_servers": [{"server_uri": "edge:1", "channel_creds": [{"type": "insecure"}]}]}},
        "unknown_field": 1
    }"#;

    #[test]
    fn a_full_bootstrap() {
        let b = Bootstrap::parse(FULL).expect("valid");
        assert_eq!(b.xds_servers.len(), 2);
        let first = &b.xds_servers[0];
        assert_eq!(first.server_uri, "xds.example.com:443");
        assert_eq!(
            first.channel_creds,
            ChannelCreds::Tls(CertificateFiles::default()),
            "the first supported type"
        );
        assert!(first.server_features.ignore_resource_deletion);
        assert!(!first.server_features.trusted_xds_server);
        assert_eq!(b.xds_servers[1].channel_creds, ChannelCreds::Insecure);
        assert_eq!(b.node.id, "client-1");
        assert_eq!(
            b.node.locality,
            Some(Locality {
                region: "r".into(),
                zone: "z".into(),
                sub_zone: String::new()
            })
        );
        assert!(b.node.metadata.contains_key("k"));
        assert_eq!(b.client_default_listener_resource_name_template, "%s");
        assert_eq!(
            b.authorities["corp"].client_listener_resource_name_template,
            "xdstp://corp/envoy.config.listener.v3.Listener/%s"
        );
        assert!(b.authorities["corp"].xds_servers.is_empty());
        assert_eq!(b.authorities["edge"].xds_servers[0].server_uri, "edge:1");
    }

    #[test]
    fn listener_names() {
        let b = Bootstrap::parse(FULL).expect("valid");
        assert_eq!(
            b.listener_name(None, "svc.example:8080").expect("ok"),
            "svc.example:8080"
        );
        assert_eq!(
            b.listener_name(Some("corp"), "a b/c").expect("ok"),
            "xdstp://corp/envoy.config.listener.v3.Listener/a%20b/c"
        );
        let e = b
            .listener_name(Some("nope"), "x")
            .expect_err("unknown authority");
        assert!(e.to_string().contains("authorities.nope"), "{e}");
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("[]", "(top level)"),
            ("{}", "xds_servers: missing"),
            (r#"{"xds_servers": []}"#, "xds_servers: empty"),
            (r#"{"xds_servers": {}}"#, "xds_servers: expected a list"),
            (r#"{"xds_servers": [{}]}"#, "xds_servers[0].server_uri: missing"),
            (r#"{"xds_servers": [{"server_uri": ""}]}"#, "xds_servers[0].server_uri: empty"),
            (r#"{"xds_servers": [{"server_uri": 5}]}"#, "xds_servers[0].server_uri: expected a string"),
            (r#"{"xds_servers": [{"server_uri": "a"}]}"#, "xds_servers[0].channel_creds: missing"),
            (
                r#"{"xds_servers": [{"server_uri": "a", "channel_creds": [{"type": "google_default"}]}]}"#,
                "xds_servers[0].channel_creds: no supported type",
            ),
            (
                r#"{"xds_servers": [{"server_uri": "a", "channel_creds": [{}]}]}"#,
                "xds_servers[0].channel_creds[0].type: missing",
            ),
            (
                r#"{"xds_servers": [{"server_uri": "a", "channel_creds": [{"type": "insecure"}], "server_features": [1]}]}"#,
                "xds_servers[0].server_features[0]: expected a string",
            ),
            (
                r#"{"xds_servers": [{"server_uri": "a", "channel_creds": [{"type": "insecure"}]}], "node": {"id": 1}}"#,
                "node.id: expected a string",
            ),
            (
                r#"{"xds_servers": [{"server_uri": "a", "channel_creds": [{"type": "insecure"}]}], "node": {"locality": {"zone": []}}}"#,
                "node.locality.zone: expected a string",
            ),
            (
                r#"{"xds_servers": [{"server_uri": "a", "channel_creds": [{"type": "insecure"}]}],
                    "authorities": {"a": {"client_listener_resource_name_template": "xdstp://b/%s"}}}"#,
                "authorities.a.client_listener_resource_name_template: must start with \"xdstp://a/\"",
            ),
        ];
        for (json, expected) in cases {
            let e = Bootstrap::parse(json).expect_err(json);
            assert!(e.to_string().contains(expected), "{json}: {e}");
        }
        let e = Bootstrap::parse("{not json").expect_err("not JSON");
        assert!(matches!(e, BootstrapError::Json { .. }), "{e}");
    }

    #[test]
    fn the_file_variable_wins_over_the_inline_one() {
        let file = r#"{"xds_servers": [{"server_uri": "file:1", "channel_creds": [{"type": "insecure"}]}]}"#;
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let read = |path: &str| {
            if path == "/etc/xds.json" {
                Ok(file.to_owned())
            } else {
                Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such file",
                ))
            }
        };
        let both: &'static [(&str, &str)] = &[
            (BOOTSTRAP_FILE_VARIABLE, "/etc/xds.json"),
            (
                BOOTSTRAP_CONFIG_VARIABLE,
                r#"{"xds_servers": [{"server_uri": "inline:1", "channel_creds": [{"type": "insecure"}]}]}"#,
            ),
        ];
        let b = Bootstrap::from_env(env(both), read).expect("valid");
        assert_eq!(b.xds_servers[0].server_uri, "file:1");
        let only_inline: &'static [(&str, &str)] = &[(
            BOOTSTRAP_CONFIG_VARIABLE,
            r#"{"xds_servers": [{"server_uri": "inline:1", "channel_creds": [{"type": "insecure"}]}]}"#,
        )];
        let b = Bootstrap::from_env(env(only_inline), read).expect("valid");
        assert_eq!(b.xds_servers[0].server_uri, "inline:1");
        assert_eq!(
            Bootstrap::from_env(env(&[]), read),
            Err(BootstrapError::Missing)
        );
        let missing_file: &'static [(&str, &str)] = &[(BOOTSTRAP_FILE_VARIABLE, "/nope")];
        let e = Bootstrap::from_env(env(missing_file), read).expect_err("unreadable");
        assert!(
            e.to_string().contains("/nope") && e.to_string().contains("no such file"),
            "{e}"
        );
        let bad_inline: &'static [(&str, &str)] = &[(BOOTSTRAP_CONFIG_VARIABLE, "{")];
        let e = Bootstrap::from_env(env(bad_inline), read).expect_err("bad JSON");
        assert!(e.to_string().contains(BOOTSTRAP_CONFIG_VARIABLE), "{e}");
    }
}
