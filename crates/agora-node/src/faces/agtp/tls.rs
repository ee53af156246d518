//! TLS for the AGTP face: the listener's certificate and the rustls configurations of both sides.
//!
//! What this module owns (AGTP base draft, TCP/TLS binding, as summarised in the research notes
//! §1.2: "TLS 1.3+ mandatory, TLS ≤1.2 rejected"; ALPN `agtp`; no early data over TCP):
//!
//! - **The listener's certificate.** Either configured files ([`load`]) or, when none is
//!   configured, a self-signed ECDSA P-256 certificate generated once and kept in the data
//!   directory as [`CERT_FILE`] (mode 0644) and [`KEY_FILE`] (mode 0600, written atomically)
//!   ([`load_or_generate`]). Its subject alternative names are `localhost`, `127.0.0.1`, `::1` and
//!   the names the operator gives (DNS names or IP literals). Clients of such a node trust that
//!   certificate explicitly ([`Roots::Pem`]), e.g. from [`ServerTls::cert_pem`].
//! - **The server configuration** ([`ServerTls::acceptor`]): TLS 1.3 only, the ring provider, ALPN
//!   `agtp`, no client authentication, no early data.
//! - **The client configuration** ([`client_config`]): TLS 1.3 only, the ring provider, ALPN
//!   `agtp`, trusting either the Mozilla roots (`webpki-roots`) or given PEM certificates.
//!
//! The provider is always passed explicitly: nothing here depends on a process-wide default
//! `CryptoProvider`.

use std::fmt;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject as _};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The generated certificate's file name in the data directory.
pub const CERT_FILE: &str = "agtp-cert.pem";

/// The generated private key's file name in the data directory.
pub const KEY_FILE: &str = "agtp-key.pem";

/// The ALPN protocol identifier of AGTP over TLS.
pub const ALPN: &[u8] = b"agtp";

/// The names every generated certificate covers.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The subject common name of generated certificates (informative only; clients check the SANs).
const COMMON_NAME: &str = "Agora AGTP node";

/// A certificate or TLS configuration problem.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A file is not valid PEM.
    #[error("cannot parse {} as PEM: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A certificate file holds no `CERTIFICATE` section.
    #[error("no certificate found in {}", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A key file holds no private key (PKCS#8, SEC1 or PKCS#1).
    #[error("no private key found in {}", path.display())]
    NoPrivateKey {
        /// The file.
        path: PathBuf,
    },
    /// A name for the generated certificate is neither a DNS name nor an IP address.
    #[error(
        "{name:?} is neither a DNS name nor an IP address; it cannot name the AGTP certificate"
    )]
    InvalidName {
        /// The name as given.
        name: String,
    },
    /// The certificate could not be generated.
    #[error("cannot generate the AGTP certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file (or the directory that should hold it).
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The certificate and key files do not make a usable server configuration (e.g. the key
    /// does not belong to the certificate, or its algorithm is not supported).
    #[error("{} and {}: {source}", cert.display(), key.display())]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Cause.
        source: rustls::Error,
    },
    /// The certificates to trust are unusable.
    #[error("trusted certificates: {0}")]
    Roots(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

// ------------------------------------------------------------------------------------------------
// Server side

/// The listener's certificate chain and private key.
pub struct ServerTls {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("chain", &self.chain.len())
            .field("key", &"<redacted>")
            .finish()
    }
}

impl ServerTls {
    /// A TLS 1.3-only acceptor (ring provider, ALPN `agtp`, no client authentication).
    pub fn acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        Ok(TlsAcceptor::from(Arc::new(self.server_config()?)))
    }

    /// The certificate chain as PEM (leaf first), e.g. for clients to trust with [`Roots::Pem`].
    pub fn cert_pem(&self) -> String {
        let mut out = String::new();
        for cert in &self.chain {
            out.push_str("-----BEGIN CERTIFICATE-----\n");
            let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
            for line in b64.as_bytes().chunks(64) {
                // Base64 output is ASCII.
                out.push_str(&String::from_utf8_lossy(line));
                out.push('\n');
            }
            out.push_str("-----END CERTIFICATE-----\n");
        }
        out
    }

    /// The certificate chain in DER, leaf first.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.chain
    }

    fn server_config(&self) -> Result<rustls::ServerConfig, rustls::Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
        config.alpn_protocols = vec![ALPN.to_vec()];
        config.max_early_data_size = 0;
        Ok(config)
    }
}

/// Loads a configured certificate chain (PEM, leaf first) and private key (PEM: PKCS#8, SEC1 or
/// PKCS#1), and checks that they make a usable server configuration.
pub fn load(cert: &Path, key: &Path) -> Result<ServerTls, TlsError> {
    let cert_pem = read(cert)?;
    let key_pem = read(key)?;
    warn_if_key_readable_by_others(key);
    let chain = parse_certs(&cert_pem).map_err(|e| match e {
        None => TlsError::NoCertificate { path: cert.into() },
        Some(message) => TlsError::Parse {
            path: cert.into(),
            message,
        },
    })?;
    let private = match PrivateKeyDer::from_pem_slice(&key_pem) {
        Ok(k) => k,
        Err(pem::Error::NoItemsFound) => return Err(TlsError::NoPrivateKey { path: key.into() }),
        Err(e) => {
            return Err(TlsError::Parse {
                path: key.into(),
                message: e.to_string(),
            });
        }
    };
    let tls = ServerTls {
        chain,
        key: private,
    };
    tls.server_config().map_err(|source| TlsError::Pair {
        cert: cert.into(),
        key: key.into(),
        source,
    })?;
    Ok(tls)
}

/// The certificate kept in `data_dir`: [`CERT_FILE`] and [`KEY_FILE`] when both exist, otherwise
/// a new self-signed ECDSA P-256 certificate for `localhost`, `127.0.0.1`, `::1` and `names` (DNS
/// names or IP literals, IPv6 with or without brackets), written there first (the key with mode
/// 0600 on unix, atomically; the certificate with mode 0644). `names` are not compared with an
/// existing certificate: delete the two files to generate one for new names.
pub fn load_or_generate(data_dir: &Path, names: &[String]) -> Result<ServerTls, TlsError> {
    let cert_path = data_dir.join(CERT_FILE);
    let key_path = data_dir.join(KEY_FILE);
    if cert_path.is_file() && key_path.is_file() {
        return load(&cert_path, &key_path);
    }
    let sans = subject_alt_names(names)?;
    let mut params = rcgen::CertificateParams::new(sans)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, COMMON_NAME);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key_pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let cert = params.self_signed(&key_pair)?;

    fs::create_dir_all(data_dir).map_err(|source| TlsError::Write {
        path: data_dir.into(),
        source,
    })?;
    // The key first: a crash in between leaves no certificate, so both are generated again.
    write_atomically(&key_path, key_pair.serialize_pem().as_bytes(), 0o600)?;
    write_atomically(&cert_path, cert.pem().as_bytes(), 0o644)?;
    tracing::debug!(cert = %cert_path.display(), "generated a self-signed AGTP certificate");
    Ok(ServerTls {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(key_pair.serialize_der().into()),
    })
}

/// The loopback names followed by `names`, brackets removed from IPv6 literals, validated,
/// without duplicates.
fn subject_alt_names(names: &[String]) -> Result<Vec<String>, TlsError> {
    let mut out: Vec<String> = LOOPBACK_NAMES.iter().map(|&n| n.to_owned()).collect();
    for name in names {
        let invalid = || TlsError::InvalidName { name: name.clone() };
        let canonical =
            if let Some(bracketed) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
                bracketed
                    .parse::<std::net::Ipv6Addr>()
                    .map_err(|_| invalid())?
                    .to_string()
            } else if let Ok(ip) = name.parse::<IpAddr>() {
                ip.to_string()
            } else if !name.is_empty() && ServerName::try_from(name.as_str()).is_ok() {
                name.to_ascii_lowercase()
            } else {
                return Err(invalid());
            };
        if !out.contains(&canonical) {
            out.push(canonical);
        }
    }
    Ok(out)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|source| TlsError::Read {
        path: path.into(),
        source,
    })
}

/// Every `CERTIFICATE` section; `Err(None)` when there is none, `Err(Some(message))` on bad PEM.
fn parse_certs(pem_bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, Option<String>> {
    let certs = CertificateDer::pem_slice_iter(pem_bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Some(e.to_string()))?;
    if certs.is_empty() {
        return Err(None);
    }
    Ok(certs)
}

#[cfg(unix)]
fn warn_if_key_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            key = %path.display(),
            "the AGTP private key is readable by other users (chmod 600 it)"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_key_readable_by_others(_path: &Path) {}

/// [`crate::keys::write_atomic`], naming the file in the error.
fn write_atomically(path: &Path, contents: &[u8], mode: u32) -> Result<(), TlsError> {
    crate::keys::write_atomic(path, contents, mode).map_err(|source| TlsError::Write {
        path: path.into(),
        source,
    })
}

// ------------------------------------------------------------------------------------------------
// Client side

/// The certificates an AGTP client trusts.
#[derive(Clone, PartialEq, Eq)]
pub enum Roots {
    /// The Mozilla root store (`webpki-roots`): for ANS servers with publicly issued certificates.
    WebPki,
    /// One or more PEM certificates, each trusted as an anchor: e.g. an ANS's generated,
    /// self-signed certificate ([`ServerTls::cert_pem`]) or a private CA.
    Pem(Vec<u8>),
}

impl fmt::Debug for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WebPki => f.write_str("WebPki"),
            Self::Pem(pem) => write!(f, "Pem({} bytes)", pem.len()),
        }
    }
}

/// A TLS 1.3-only client configuration (ring provider, ALPN `agtp`) trusting `roots`.
pub fn client_config(roots: &Roots) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut store = rustls::RootCertStore::empty();
    match roots {
        Roots::WebPki => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Roots::Pem(pem_bytes) => {
            let certs = parse_certs(pem_bytes).map_err(|e| {
                TlsError::Roots(e.unwrap_or_else(|| "no PEM certificate found".to_owned()))
            })?;
            for cert in certs {
                store
                    .add(cert)
                    .map_err(|e| TlsError::Roots(e.to_string()))?;
            }
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.enable_early_data = false;
    Ok(Arc::new(config))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated() -> (tempfile::TempDir, ServerTls) {
        let dir = tempfile::tempdir().expect("tempdir");
        let tls = load_or_generate(
            dir.path(),
            &["ans.example.org".into(), "[2001:db8::1]".into()],
        )
        .expect("generate");
        (dir, tls)
    }

    #[test]
    fn generate_then_load_gives_the_same_certificate() {
        let (dir, first) = generated();
        assert_eq!(first.chain().len(), 1);
        let again = load_or_generate(dir.path(), &[]).expect("load");
        assert_eq!(again.chain(), first.chain());
        assert_eq!(again.cert_pem(), first.cert_pem());
        let on_disk = fs::read_to_string(dir.path().join(CERT_FILE)).expect("cert file");
        assert_eq!(
            parse_certs(on_disk.as_bytes()).expect("pem"),
            parse_certs(first.cert_pem().as_bytes()).expect("pem")
        );
        let loaded =
            load(&dir.path().join(CERT_FILE), &dir.path().join(KEY_FILE)).expect("load files");
        assert_eq!(loaded.chain(), first.chain());
        loaded.acceptor().expect("acceptor");
        // No temporary files are left behind.
        let mut names: Vec<_> = fs::read_dir(dir.path())
            .expect("read dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        names.sort();
        assert_eq!(names, [CERT_FILE, KEY_FILE]);
    }

    #[cfg(unix)]
    #[test]
    fn file_modes() {
        use std::os::unix::fs::PermissionsExt as _;
        let (dir, _) = generated();
        let mode = |f: &str| {
            fs::metadata(dir.path().join(f))
                .expect("metadata")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(KEY_FILE), 0o600);
        assert_eq!(mode(CERT_FILE), 0o644);
    }

    #[test]
    fn a_missing_file_means_a_new_certificate() {
        let (dir, first) = generated();
        fs::remove_file(dir.path().join(CERT_FILE)).expect("remove");
        let second = load_or_generate(dir.path(), &[]).expect("generate");
        assert_ne!(second.chain(), first.chain());
        assert_eq!(
            load_or_generate(dir.path(), &[]).expect("load").chain(),
            second.chain()
        );
    }

    #[test]
    fn names_are_validated_and_deduplicated() {
        let sans = subject_alt_names(&[
            "Example.org".into(),
            "[::1]".into(),
            "10.0.0.1".into(),
            "example.org".into(),
        ])
        .expect("valid");
        assert_eq!(
            sans,
            ["localhost", "127.0.0.1", "::1", "example.org", "10.0.0.1"]
        );
        for bad in ["", "a b", "exa_mple.org/x", "[nope]"] {
            let err = subject_alt_names(&[bad.into()]).expect_err(bad);
            assert!(matches!(err, TlsError::InvalidName { .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn load_errors_name_the_file() {
        let (dir, _) = generated();
        let cert = dir.path().join(CERT_FILE);
        let key = dir.path().join(KEY_FILE);
        let missing = dir.path().join("missing.pem");
        let err = load(&missing, &key).expect_err("missing");
        assert!(matches!(err, TlsError::Read { .. }));
        assert!(err.to_string().contains("missing.pem"), "{err}");
        // The key file holds no certificate, the certificate file no key.
        let err = load(&key, &key).expect_err("no cert");
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
        assert!(err.to_string().contains(KEY_FILE), "{err}");
        let err = load(&cert, &cert).expect_err("no key");
        assert!(matches!(err, TlsError::NoPrivateKey { .. }), "{err}");
        assert!(err.to_string().contains(CERT_FILE), "{err}");
        // Broken PEM.
        let broken = dir.path().join("broken.pem");
        fs::write(&broken, "-----BEGIN CERTIFICATE-----\nAAAA\n").expect("write");
        let err = load(&broken, &key).expect_err("broken");
        assert!(matches!(err, TlsError::Parse { .. }), "{err}");
        // A key that does not belong to the certificate.
        let other = tempfile::tempdir().expect("tempdir");
        load_or_generate(other.path(), &[]).expect("generate");
        let err = load(&cert, &other.path().join(KEY_FILE)).expect_err("mismatch");
        assert!(matches!(err, TlsError::Pair { .. }), "{err}");
    }

    #[test]
    fn client_configs() {
        let (_dir, tls) = generated();
        let config = client_config(&Roots::Pem(tls.cert_pem().into_bytes())).expect("pem roots");
        assert_eq!(config.alpn_protocols, [ALPN.to_vec()]);
        client_config(&Roots::WebPki).expect("webpki roots");
        let err = client_config(&Roots::Pem(b"not pem".to_vec())).expect_err("no certs");
        assert!(matches!(err, TlsError::Roots(_)), "{err}");
    }
}
