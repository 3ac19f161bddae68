//! The bootstrap's certificate files: `certificate_providers` (gRFC A29, the `file_watcher` plugin) and
//! the `config` of `tls` channel creds (A65, built on the same plugin), each read into a
//! [`CertificateFiles`], with the protobuf JSON Duration of `refresh_interval`.
//!
//! The rules, each failure a `BootstrapError` naming the field
//! (`certificate_providers.NAME.config.certificate_file`):
//! * `certificate_providers` is an object of at most [`MAX_CERTIFICATE_PROVIDERS`] instances, each
//!   `{"plugin_name": "file_watcher", "config": {...}}`; another plugin name is an error (as in C-core,
//!   not skipped), and so is a missing `config`;
//! * the paths (`certificate_file`, `private_key_file`, `ca_certificate_file`) are non-empty strings when
//!   present; `certificate_file` and `private_key_file` come together or not at all; a provider needs at
//!   least one of `certificate_file` and `ca_certificate_file`, while `tls` channel creds may set none
//!   (plain TLS with the platform's roots);
//! * `refresh_interval` is a Duration string (`"600s"`, `"1.5s"`: digits, at most nine decimals, `s`);
//!   one under [`MIN_REFRESH_INTERVAL`] (a second, C-core's floor; zero included) is raised to it, one
//!   over [`MAX_REFRESH_INTERVAL`] (a day) is lowered to it, neither is an error (C-core and grpc-go
//!   accept any interval); unset it is [`DEFAULT_REFRESH_INTERVAL`].
//!
//! Other fields (`certificate_name`, unknown keys) are ignored. Not checked here: whether the files
//! exist or hold PEM (the provider reads them, and reports what it cannot read), and grpc-go's extra
//! rule that the certificate and key sit in one directory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

/// A field of the bootstrap that is wrong (the bootstrap turns it into its `BootstrapError::Field`).
#[derive(Debug)]
pub(super) struct FieldError {
    /// The field's path.
    pub(super) field: String,
    /// What is wrong.
    pub(super) reason: String,
}

fn field_error(field: impl Into<String>, reason: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The `refresh_interval` of a certificate provider or of `tls` channel creds that set none: 600 s
/// (C-core's and grpc-go's bootstrap default).
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(600);

/// PEM files watched for changes: a `file_watcher` certificate provider's config (A29), or the config of
/// `tls` channel creds (A65, built on the same plugin).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CertificateFiles {
    /// `certificate_file`: the identity's certificate chain (set together with `private_key_file`).
    pub certificate_file: Option<PathBuf>,
    /// `private_key_file`: the identity's private key.
    pub private_key_file: Option<PathBuf>,
    /// `ca_certificate_file`: the roots.
    pub ca_certificate_file: Option<PathBuf>,
    /// `refresh_interval`: how often the files are read again ([`DEFAULT_REFRESH_INTERVAL`] unless set).
    pub refresh_interval: Duration,
}

impl Default for CertificateFiles {
    fn default() -> CertificateFiles {
        CertificateFiles {
            certificate_file: None,
            private_key_file: None,
            ca_certificate_file: None,
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
        }
    }
}

/// The most `certificate_providers` instances a bootstrap may define (the bootstrap is trusted, but a
/// bound keeps one mistake from costing a watcher per entry).
pub const MAX_CERTIFICATE_PROVIDERS: usize = 256;

/// The shortest `refresh_interval` (one second, C-core's `kMinimumFileWatcherRefreshIntervalSeconds`): a
/// shorter one, zero included, is raised to it, so a typo cannot make a provider re-read its files in a
/// busy loop.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// The longest `refresh_interval` (one day): a longer one is lowered to it (C-core and grpc-go set no
/// maximum, so a longer one is accepted, not refused), which keeps the timers sane and re-reads a
/// rotated identity at least daily.
pub const MAX_REFRESH_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// The only certificate provider plugin this client knows.
pub const FILE_WATCHER_PLUGIN: &str = "file_watcher";

/// `certificate_providers`: instance name → its files.
pub(super) fn certificate_providers(
    v: &Value,
) -> Result<BTreeMap<String, CertificateFiles>, FieldError> {
    let field = "certificate_providers";
    let object = v
        .as_object()
        .ok_or_else(|| field_error(field, "expected an object"))?;
    if object.len() > MAX_CERTIFICATE_PROVIDERS {
        return Err(field_error(
            field,
            format!(
                "{} instances, more than the {MAX_CERTIFICATE_PROVIDERS} allowed",
                object.len()
            ),
        ));
    }
    let mut out = BTreeMap::new();
    for (name, instance) in object {
        let at = format!("{field}.{name}");
        let instance = instance
            .as_object()
            .ok_or_else(|| field_error(&at, "expected an object"))?;
        let plugin_field = format!("{at}.plugin_name");
        let plugin = instance
            .get("plugin_name")
            .ok_or_else(|| field_error(&plugin_field, "missing"))?
            .as_str()
            .ok_or_else(|| field_error(&plugin_field, "expected a string"))?;
        if plugin != FILE_WATCHER_PLUGIN {
            return Err(field_error(
                &plugin_field,
                format!("unknown plugin {plugin:?} (this client supports {FILE_WATCHER_PLUGIN:?})"),
            ));
        }
        let config_field = format!("{at}.config");
        let config = match instance.get("config") {
            None | Some(Value::Null) => return Err(field_error(&config_field, "missing")),
            Some(Value::Object(config)) => config,
            Some(_) => return Err(field_error(&config_field, "expected an object")),
        };
        let files = certificate_files(config, &config_field)?;
        if files.certificate_file.is_none() && files.ca_certificate_file.is_none() {
            return Err(field_error(
                &config_field,
                "needs certificate_file (with private_key_file) or ca_certificate_file",
            ));
        }
        out.insert(name.clone(), files);
    }
    Ok(out)
}

/// The files of a `file_watcher` config or of `tls` channel creds' config at `at` (all may be unset).
pub(super) fn certificate_files(
    config: &Map<String, Value>,
    at: &str,
) -> Result<CertificateFiles, FieldError> {
    let path = |key: &str| -> Result<Option<PathBuf>, FieldError> {
        let field = format!("{at}.{key}");
        match config.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Err(field_error(field, "empty")),
            Some(Value::String(s)) => Ok(Some(PathBuf::from(s))),
            Some(_) => Err(field_error(field, "expected a string (a file's path)")),
        }
    };
    let certificate_file = path("certificate_file")?;
    let private_key_file = path("private_key_file")?;
    let ca_certificate_file = path("ca_certificate_file")?;
    match (&certificate_file, &private_key_file) {
        (Some(_), None) => {
            return Err(field_error(
                format!("{at}.private_key_file"),
                "missing: certificate_file and private_key_file come together",
            ))
        }
        (None, Some(_)) => {
            return Err(field_error(
                format!("{at}.certificate_file"),
                "missing: certificate_file and private_key_file come together",
            ))
        }
        _ => {}
    }
    let field = format!("{at}.refresh_interval");
    let refresh_interval = match config.get("refresh_interval") {
        None | Some(Value::Null) => DEFAULT_REFRESH_INTERVAL,
        Some(Value::String(s)) => {
            let d = json_duration(s).map_err(|reason| field_error(&field, reason))?;
            d.clamp(MIN_REFRESH_INTERVAL, MAX_REFRESH_INTERVAL)
        }
        Some(_) => {
            return Err(field_error(
                &field,
                "expected a Duration string such as \"600s\"",
            ))
        }
    };
    Ok(CertificateFiles {
        certificate_file,
        private_key_file,
        ca_certificate_file,
        refresh_interval,
    })
}

/// A protobuf JSON Duration that is not negative: seconds, then at most nine decimals, then `s`
/// (`"600s"`, `"1.5s"`, `"0.000000001s"`).
pub(super) fn json_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a Duration such as \"600s\" or \"1.5s\"");
    let number = s.strip_suffix('s').ok_or_else(bad)?;
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (number, None),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    // More digits than u64 holds are out of any range we accept.
    let seconds: u64 = whole.parse().map_err(|_| format!("{s:?} is too long"))?;
    let nanos = match fraction {
        None => 0,
        Some(f) if f.is_empty() || f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) => {
            return Err(bad())
        }
        Some(f) => {
            let digits: u32 = f.parse().map_err(|_| bad())?;
            digits * 10u32.pow(9 - f.len() as u32)
        }
    };
    Ok(Duration::new(seconds, nanos))
}

#[cfg(test)]
mod tests;
