//! gRFC A29's `file_watcher` certificate provider: the PEM files of one bootstrap `certificate_providers`
//! instance (`certificate_file` + `private_key_file`, the client's identity; `ca_certificate_file`, the
//! roots), read when the provider is created and again when a connection asks for its material and
//! `refresh_interval` has passed since the last read (measured with `tokio::time::Instant`, so tokio's
//! paused clock drives it in tests).
//!
//! * One provider per (instance name, config) in the process, shared by every channel that uses it and
//!   ref-counted: it goes when the last user drops it (a closed or dropped channel releases it).
//! * No task, no timer: refreshing belongs to no runtime, so a provider shared by channels on several
//!   runtimes (or made outside any) keeps refreshing for all of them. A file that changes is seen by the
//!   first connection attempt after the interval, which is when it matters (grpc-go's watcher reads on
//!   a timer; what connections see is the same: the newest files, at most one interval old).
//! * A read that fails (a file missing, too large, not PEM, a key that does not belong to the
//!   certificate) keeps the last good identity and roots and logs a WARN; a provider that never read a
//!   usable one says so, naming the file and the cause, to every connection that needs it.
//! * Each file is read up to [`MAX_PEM_FILE_BYTES`]; a larger one is a failed read. A CA file keeps the
//!   certificates that can be roots and skips the others (Go's `AppendCertsFromPEM`); it fails when
//!   none can.
//! * New connections get the newest material; existing connections keep theirs.
//!
//! The files are read with blocking I/O on the thread of the connection attempt that finds them due (a
//! few KB, at most once per interval); concurrent attempts wait for that read. Not here: Go's rule that
//! the certificate and key sit in one directory, other plugins, A65's `tls` channel creds for the
//! management server.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use grpc_xds::CertificateFiles;
use parking_lot::{Mutex, RwLock};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use tokio::time::Instant;

use crate::conn::xds_tls::ClientIdentity;

/// The largest PEM file a provider reads.
pub(crate) const MAX_PEM_FILE_BYTES: u64 = 1 << 20;

/// The shortest refresh interval honoured (a shorter one would spin).
const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(100);

/// What a provider read last.
#[derive(Default)]
struct Material {
    identity: Option<ClientIdentity>,
    roots: Option<Arc<RootCertStore>>,
    /// Why the last read of the identity failed (kept while it has never succeeded, for the message).
    identity_error: Option<String>,
    /// Why the last read of the roots failed.
    roots_error: Option<String>,
}

/// One `file_watcher` provider instance.
pub(crate) struct CertificateProvider {
    name: String,
    files: CertificateFiles,
    material: RwLock<Material>,
    /// When the files were last read (held while a read is under way, so one caller reads).
    last_read: Mutex<Instant>,
}

impl std::fmt::Debug for CertificateProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateProvider")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

type Key = (String, CertificateFiles);

/// The process's providers (weak: a provider lives as long as its users).
static PROVIDERS: LazyLock<Mutex<HashMap<Key, Weak<CertificateProvider>>>> =
    LazyLock::new(Default::default);

impl CertificateProvider {
    /// The provider of instance `name` with `files`: the one in use if some channel uses it, else a new
    /// one that reads its files now. Needs no tokio runtime.
    pub(crate) fn shared(name: &str, files: &CertificateFiles) -> Arc<CertificateProvider> {
        let mut providers = PROVIDERS.lock();
        let key = (name.to_owned(), files.clone());
        if let Some(p) = providers.get(&key).and_then(Weak::upgrade) {
            return p;
        }
        providers.retain(|_, w| w.strong_count() > 0);
        let provider = Arc::new(CertificateProvider {
            name: name.to_owned(),
            files: files.clone(),
            material: RwLock::new(Material::default()),
            last_read: Mutex::new(Instant::now()),
        });
        provider.reload();
        providers.insert(key, Arc::downgrade(&provider));
        provider
    }

    /// The newest usable identity, or why there is none.
    pub(crate) fn identity(&self) -> Result<ClientIdentity, String> {
        self.refresh_if_due();
        let m = self.material.read();
        match (&m.identity, &m.identity_error) {
            (Some(id), _) => Ok(id.clone()),
            (None, why) => Err(format!(
                "certificate provider instance {:?} has no usable identity: {}",
                self.name,
                why.as_deref().unwrap_or("not read yet")
            )),
        }
    }

    /// The newest usable roots, or why there are none.
    pub(crate) fn roots(&self) -> Result<Arc<RootCertStore>, String> {
        self.refresh_if_due();
        let m = self.material.read();
        match (&m.roots, &m.roots_error) {
            (Some(r), _) => Ok(r.clone()),
            (None, why) => Err(format!(
                "certificate provider instance {:?} has no usable CA certificates: {}",
                self.name,
                why.as_deref().unwrap_or("not read yet")
            )),
        }
    }

    /// Reads the files again when the refresh interval has passed since the last read. A clock that
    /// reads earlier than the last read (another runtime's paused clock) counts as due: one extra read
    /// is harmless, a refresh put off by a clock's offset is not.
    fn refresh_if_due(&self) {
        let every = self.files.refresh_interval.max(MIN_REFRESH_INTERVAL);
        let mut last_read = self.last_read.lock();
        let now = Instant::now();
        let due = now
            .checked_duration_since(*last_read)
            .is_none_or(|since| since >= every);
        if due {
            *last_read = now;
            self.reload();
        }
    }

    /// Reads the files: what reads well replaces what was there; a failure keeps the last good material.
    fn reload(&self) {
        let files = &self.files;
        let identity = match (&files.certificate_file, &files.private_key_file) {
            (Some(cert), Some(key)) => Some(read_identity(cert, key)),
            (None, None) => None,
            _ => Some(Err(
                "certificate_file and private_key_file must be set together".to_owned(),
            )),
        };
        let roots = files.ca_certificate_file.as_deref().map(read_roots);
        let mut m = self.material.write();
        match identity {
            Some(Ok(id)) => {
                m.identity = Some(id);
                m.identity_error = None;
            }
            Some(Err(why)) => {
                tracing::warn!(instance = %self.name, %why, "xDS certificate provider: keeping the last good identity");
                m.identity_error = Some(why);
            }
            None => m.identity_error = Some("the instance has no certificate_file".to_owned()),
        }
        match roots {
            Some(Ok(r)) => {
                m.roots = Some(r);
                m.roots_error = None;
            }
            Some(Err(why)) => {
                tracing::warn!(instance = %self.name, %why, "xDS certificate provider: keeping the last good CA certificates");
                m.roots_error = Some(why);
            }
            None => m.roots_error = Some("the instance has no ca_certificate_file".to_owned()),
        }
    }
}

/// A file's bytes, at most [`MAX_PEM_FILE_BYTES`].
fn read_bounded(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read the {what} file {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the {what} file {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_PEM_FILE_BYTES {
        return Err(format!(
            "the {what} file {} is larger than {MAX_PEM_FILE_BYTES} bytes",
            path.display()
        ));
    }
    Ok(bytes)
}

fn certificates(
    pem: &[u8],
    what: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the {what} file {} is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "the {what} file {} holds no CERTIFICATE block",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_identity(cert: &Path, key: &Path) -> Result<ClientIdentity, String> {
    let chain = certificates(&read_bounded(cert, "certificate")?, "certificate", cert)?;
    let key_pem = read_bounded(key, "private key")?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!(
            "the private key file {} holds no usable key: {e}",
            key.display()
        )
    })?;
    // The key must be the certificate's (a rotation caught half-way is not used).
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(chain.clone(), key_der.clone_key(), &provider).map_err(
        |e| {
            format!(
                "the private key {} does not go with the certificate {}: {e}",
                key.display(),
                cert.display()
            )
        },
    )?;
    Ok(ClientIdentity {
        chain,
        key: key_der,
    })
}

/// The roots of a CA file: every certificate that can be a root (others are skipped with a WARN, as
/// Go's `AppendCertsFromPEM` skips them); an error when none can.
fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let certs = certificates(
        &read_bounded(path, "CA certificate")?,
        "CA certificate",
        path,
    )?;
    let mut store = RootCertStore::empty();
    let mut last_error = None;
    for (index, cert) in certs.into_iter().enumerate() {
        if let Err(e) = store.add(cert) {
            tracing::warn!(file = %path.display(), index, error = %e, "xDS certificate provider: skipping a CA certificate that cannot be a root");
            last_error = Some(e);
        }
    }
    match last_error {
        Some(e) if store.is_empty() => Err(format!(
            "no certificate of {} can be used as a root: {e}",
            path.display()
        )),
        _ => Ok(Arc::new(store)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use interop::tls::{TestCa, Usage};

    fn temp_dir(tag: &str) -> crate::xds::temp_dir::TempDir {
        crate::xds::temp_dir::temp_dir("grpc-cert-provider", tag)
    }

    fn files(dir: &Path, refresh: Duration) -> CertificateFiles {
        CertificateFiles {
            certificate_file: Some(dir.join("cert.pem")),
            private_key_file: Some(dir.join("key.pem")),
            ca_certificate_file: Some(dir.join("ca.pem")),
            refresh_interval: refresh,
        }
    }

    fn write_identity(dir: &Path, ca: &TestCa, name: &str) -> String {
        let id = ca.issue(&[name], Usage::Client).expect("test setup");
        std::fs::write(dir.join("cert.pem"), &id.cert_pem).expect("test setup");
        std::fs::write(dir.join("key.pem"), &id.key_pem).expect("test setup");
        id.cert_pem
    }

    fn leaf_pem(p: &CertificateProvider) -> Vec<u8> {
        p.identity().expect("test setup").chain[0].to_vec()
    }

    #[tokio::test(start_paused = true)]
    async fn rereads_at_the_refresh_interval_and_keeps_the_last_good_material() {
        let dir = temp_dir("rotate");
        let ca = TestCa::new("provider test CA").expect("test setup");
        std::fs::write(dir.0.join("ca.pem"), &ca.cert_pem).expect("test setup");
        write_identity(&dir.0, &ca, "first.client");
        let p = CertificateProvider::shared("rotate", &files(&dir.0, Duration::from_secs(60)));
        let first = leaf_pem(&p);
        assert!(p.roots().is_ok());
        write_identity(&dir.0, &ca, "second.client");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(leaf_pem(&p), first, "not re-read before the interval");
        tokio::time::sleep(Duration::from_secs(31)).await;
        let second = leaf_pem(&p);
        assert_ne!(second, first, "re-read at the interval");
        // A bad file keeps the last good identity.
        std::fs::write(dir.0.join("cert.pem"), "garbage").expect("test setup");
        std::fs::remove_file(dir.0.join("ca.pem")).expect("test setup");
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(leaf_pem(&p), second);
        assert!(p.roots().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn one_provider_per_instance_and_config_while_used() {
        let dir = temp_dir("shared");
        let ca = TestCa::new("provider test CA").expect("test setup");
        std::fs::write(dir.0.join("ca.pem"), &ca.cert_pem).expect("test setup");
        write_identity(&dir.0, &ca, "a.client");
        let f = files(&dir.0, Duration::from_secs(600));
        let a = CertificateProvider::shared("shared", &f);
        let b = CertificateProvider::shared("shared", &f);
        assert!(Arc::ptr_eq(&a, &b));
        let c = CertificateProvider::shared("other-name", &f);
        assert!(!Arc::ptr_eq(&a, &c));
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(weak.upgrade().is_none(), "the last user stops it");
    }

    #[tokio::test(start_paused = true)]
    async fn missing_and_oversized_files_are_named() {
        let dir = temp_dir("missing");
        let p = CertificateProvider::shared("missing", &files(&dir.0, Duration::from_secs(600)));
        let e = p.identity().expect_err("fails");
        assert!(e.contains("cert.pem") && e.contains("\"missing\""), "{e}");
        let e = p.roots().expect_err("fails");
        assert!(e.contains("ca.pem"), "{e}");
        let big = dir.0.join("ca.pem");
        std::fs::write(&big, vec![b'a'; (MAX_PEM_FILE_BYTES + 1) as usize]).expect("test setup");
        let e = read_roots(&big).expect_err("fails");
        assert!(e.contains("larger than"), "{e}");
    }

    #[test]
    fn a_provider_made_outside_any_runtime_reads_and_refreshes() {
        let dir = temp_dir("no-runtime");
        let ca = TestCa::new("provider test CA").expect("test setup");
        std::fs::write(dir.0.join("ca.pem"), &ca.cert_pem).expect("test setup");
        write_identity(&dir.0, &ca, "first.client");
        let p = CertificateProvider::shared("no-runtime", &files(&dir.0, Duration::from_secs(60)));
        let first = leaf_pem(&p);
        assert!(p.roots().is_ok());
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("test setup")
            .block_on(async {
                write_identity(&dir.0, &ca, "second.client");
                tokio::time::sleep(Duration::from_secs(61)).await;
                assert_ne!(leaf_pem(&p), first, "re-read once the interval passed");
            });
    }

    #[test]
    fn a_ca_file_keeps_the_certificates_that_can_be_roots() {
        let dir = temp_dir("bad-root");
        let ca = TestCa::new("provider test CA").expect("test setup");
        // A CERTIFICATE block whose DER is no certificate.
        let bad = "-----BEGIN CERTIFICATE-----\nAAECAwQFBgcICQ==\n-----END CERTIFICATE-----\n";
        let path = dir.0.join("ca.pem");
        std::fs::write(&path, format!("{bad}{}{bad}", ca.cert_pem)).expect("test setup");
        let roots = read_roots(&path).expect("the usable root is kept");
        assert_eq!(roots.len(), 1);
        std::fs::write(&path, format!("{bad}{bad}")).expect("test setup");
        let e = read_roots(&path).expect_err("no usable root");
        assert!(e.contains("no certificate") && e.contains("ca.pem"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_of_another_certificate_is_refused() {
        let dir = temp_dir("mismatch");
        let ca = TestCa::new("provider test CA").expect("test setup");
        write_identity(&dir.0, &ca, "a.client");
        let other = ca.issue(&["b.client"], Usage::Client).expect("test setup");
        std::fs::write(dir.0.join("key.pem"), other.key_pem).expect("test setup");
        let e = read_identity(&dir.0.join("cert.pem"), &dir.0.join("key.pem")).expect_err("fails");
        assert!(e.contains("does not go with"), "{e}");
    }

    /// A provider is one per instance in the process, shared by every channel that uses it (module
    /// doc), and re-reads its files every `refresh_interval` for all of them (grpc-go's pemfile watcher
    /// runs on its own goroutine, whoever made it). A refresh task spawned on the runtime of the first
    /// user would die with it, and a channel on a live runtime handed the same provider would never see
    /// a rotated certificate.
    #[test]
    fn a_shared_provider_keeps_refreshing_after_the_runtime_that_made_it_is_gone() {
        let dir = temp_dir("two-runtimes");
        let ca = TestCa::new("provider test CA").expect("test setup");
        std::fs::write(dir.0.join("ca.pem"), &ca.cert_pem).expect("test setup");
        write_identity(&dir.0, &ca, "first.client");
        let f = files(&dir.0, Duration::from_secs(60));
        let paused = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("test setup")
        };
        let first_runtime = paused();
        let first_user =
            first_runtime.block_on(async { CertificateProvider::shared("two-runtimes", &f) });
        let first = leaf_pem(&first_user);
        drop(first_runtime);
        paused().block_on(async {
            let second_user = CertificateProvider::shared("two-runtimes", &f);
            write_identity(&dir.0, &ca, "second.client");
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(61)).await;
            }
            assert!(
                leaf_pem(&second_user) != first,
                "the rotated certificate is read within three refresh intervals"
            );
        });
        drop(first_user);
    }
}
