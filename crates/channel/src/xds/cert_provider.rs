//! gRFC A29's `file_watcher` certificate provider: the PEM files of one bootstrap `certificate_providers`
//! instance (`certificate_file` + `private_key_file`, the client's identity; `ca_certificate_file`, the
//! roots), read when the provider is created and again every `refresh_interval` on a tokio timer (tokio's
//! paused clock drives it in tests).
//!
//! * One provider per (instance name, config) in the process, shared by every channel that uses it and
//!   ref-counted: its timer task stops when the last user drops it (a dropped channel stops what it
//!   started).
//! * A read that fails (a file missing, too large, not PEM, a key that does not belong to the
//!   certificate) keeps the last good identity and roots and logs a WARN; a provider that never read a
//!   usable one says so, naming the file and the cause, to every connection that needs it.
//! * Each file is read up to [`MAX_PEM_FILE_BYTES`]; a larger one is a failed read.
//! * New connections get the newest material; existing connections keep theirs.
//!
//! The files are read with blocking I/O on the runtime's thread (a few KB, every few minutes). Not here:
//! Go's rule that the certificate and key sit in one directory, other plugins, A65's `tls` channel creds
//! for the management server.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use grpc_xds::CertificateFiles;
use parking_lot::{Mutex, RwLock};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

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

struct Shared {
    name: String,
    files: CertificateFiles,
    material: RwLock<Material>,
}

/// One `file_watcher` provider instance; its task stops when the last handle goes.
pub(crate) struct CertificateProvider {
    shared: Arc<Shared>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for CertificateProvider {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for CertificateProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateProvider")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

type Key = (String, CertificateFiles);

/// The process's providers (weak: a provider lives as long as its users).
static PROVIDERS: LazyLock<Mutex<HashMap<Key, Weak<CertificateProvider>>>> =
    LazyLock::new(Default::default);

impl CertificateProvider {
    /// The provider of instance `name` with `files`: the running one if some channel uses it, else a
    /// new one that reads its files now and starts its timer (on the current tokio runtime; without one,
    /// it reads once and never again).
    pub(crate) fn shared(name: &str, files: &CertificateFiles) -> Arc<CertificateProvider> {
        let mut providers = PROVIDERS.lock();
        let key = (name.to_owned(), files.clone());
        if let Some(p) = providers.get(&key).and_then(Weak::upgrade) {
            return p;
        }
        providers.retain(|_, w| w.strong_count() > 0);
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            files: files.clone(),
            material: RwLock::new(Material::default()),
        });
        shared.reload();
        let task = tokio::runtime::Handle::try_current()
            .ok()
            .map(|rt| rt.spawn(refresh(shared.clone())));
        let provider = Arc::new(CertificateProvider { shared, task });
        providers.insert(key, Arc::downgrade(&provider));
        provider
    }

    /// The newest usable identity, or why there is none.
    pub(crate) fn identity(&self) -> Result<ClientIdentity, String> {
        let m = self.shared.material.read();
        match (&m.identity, &m.identity_error) {
            (Some(id), _) => Ok(id.clone()),
            (None, why) => Err(format!(
                "certificate provider instance {:?} has no usable identity: {}",
                self.shared.name,
                why.as_deref().unwrap_or("not read yet")
            )),
        }
    }

    /// The newest usable roots, or why there are none.
    pub(crate) fn roots(&self) -> Result<Arc<RootCertStore>, String> {
        let m = self.shared.material.read();
        match (&m.roots, &m.roots_error) {
            (Some(r), _) => Ok(r.clone()),
            (None, why) => Err(format!(
                "certificate provider instance {:?} has no usable CA certificates: {}",
                self.shared.name,
                why.as_deref().unwrap_or("not read yet")
            )),
        }
    }
}

/// Reads the files again every refresh interval.
async fn refresh(shared: Arc<Shared>) {
    let every = shared.files.refresh_interval.max(MIN_REFRESH_INTERVAL);
    loop {
        tokio::time::sleep(every).await;
        shared.reload();
    }
}

impl Shared {
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

fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let certs = certificates(
        &read_bounded(path, "CA certificate")?,
        "CA certificate",
        path,
    )?;
    let mut store = RootCertStore::empty();
    for cert in certs {
        store.add(cert).map_err(|e| {
            format!(
                "a certificate of {} cannot be used as a root: {e}",
                path.display()
            )
        })?;
    }
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::*;
    use interop::tls::{TestCa, Usage};

    struct Dir(std::path::PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn temp_dir(tag: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!(
            "grpc-cert-provider-{tag}-{}-{}",
            std::process::id(),
            crate::control::clock_seed()
        ));
        std::fs::create_dir_all(&dir).expect("test setup");
        Dir(dir)
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
    /// runs on its own goroutine, whoever made it). Here the refresh task is spawned on the runtime of
    /// the first user (`CertificateProvider::shared`: `rt.spawn(refresh(..))`) and dies with it, so a
    /// channel on a live runtime that is handed the same provider never sees a rotated certificate.
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
