//! The node's persistent Ed25519 identity: `<data>/node.key`, 32 secret bytes as hex, created
//! with mode 0600 on first start and reused afterwards. Its libp2p PeerId names the node.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use libp2p::identity::Keypair;

/// File name of the node key inside the data directory.
pub const KEY_FILE: &str = "node.key";

/// The key could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Reading or writing the key file failed.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file does not hold a key.
    #[error("{path}: not an Ed25519 node key ({why}); move it away to create a new identity")]
    Invalid {
        /// File.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The system's random source failed.
    #[error("cannot read random bytes for a new node key: {0}")]
    Random(String),
}

/// Loads the node key from `dir`, creating it (and `dir`) if absent.
pub fn load_or_create(dir: &Path) -> Result<Keypair, KeyError> {
    let path = dir.join(KEY_FILE);
    let io = |source| KeyError::Io {
        path: path.clone(),
        source,
    };
    match fs::read_to_string(&path) {
        Ok(text) => decode(text.trim()).map_err(|why| KeyError::Invalid {
            path: path.clone(),
            why,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(io)?;
            let mut secret = [0u8; 32];
            getrandom::fill(&mut secret).map_err(|e| KeyError::Random(e.to_string()))?;
            let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
            write_private(&path, format!("{hex}\n").as_bytes()).map_err(io)?;
            decode(&hex).map_err(|why| KeyError::Invalid { path, why })
        }
        Err(e) => Err(io(e)),
    }
}

fn decode(hex: &str) -> Result<Keypair, String> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("expected 64 hex digits".into());
    }
    let mut secret = [0u8; 32];
    for (i, byte) in secret.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Keypair::ed25519_from_bytes(secret).map_err(|e| e.to_string())
}

/// The node key as an Ed25519 signing key (it signs Hyperspace envelopes; its PeerId is the
/// node's).
pub fn signing_key(keypair: &Keypair) -> Result<ed25519_dalek::SigningKey, KeyError> {
    let invalid = |why: &str| KeyError::Invalid {
        path: PathBuf::from(KEY_FILE),
        why: why.to_owned(),
    };
    let ed = keypair
        .clone()
        .try_into_ed25519()
        .map_err(|_| invalid("not an Ed25519 key"))?;
    let secret: [u8; 32] = ed
        .secret()
        .as_ref()
        .try_into()
        .map_err(|_| invalid("not a 32-byte Ed25519 secret"))?;
    Ok(ed25519_dalek::SigningKey::from_bytes(&secret))
}

/// Writes `bytes` to `path` atomically (temporary file + rename) with owner-only permissions.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, bytes, 0o600)
}

/// Writes `contents` to a temporary file beside `path` (created with `mode` on unix, whatever
/// the umask), syncs it and renames it over `path`; the temporary file is removed on failure.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    let file_name = path
        .file_name()
        .map_or_else(|| "agora".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{file_name}.tmp-{}", std::process::id()));
    // A stale temporary file would keep its old mode: start afresh.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let result = (|| {
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(mode);
        }
        let mut file = options.open(&tmp)?;
        #[cfg(unix)]
        {
            // The umask may have removed bits the mode asked for (a certificate's 0644).
            use std::os::unix::fs::PermissionsExt as _;
            file.set_permissions(fs::Permissions::from_mode(mode))?;
        }
        #[cfg(not(unix))]
        let _ = mode;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = load_or_create(&dir.path().join("data")).unwrap();
        let b = load_or_create(&dir.path().join("data")).unwrap();
        let signing = signing_key(&a).unwrap();
        assert_eq!(
            agora_hyperspace::peer_id_of(&signing.verifying_key().to_bytes()),
            a.public().to_peer_id().to_string()
        );
        assert_eq!(a.public().to_peer_id(), b.public().to_peer_id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.path().join("data").join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_damaged_key_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(KEY_FILE), "not hex").unwrap();
        let err = load_or_create(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not an Ed25519 node key"), "{err}");
    }
}
