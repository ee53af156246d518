//! Encryption at rest of stored memories (spec §9.3 "Memory encryption at rest").
//!
//! Every stored entry (a live memory: content, metadata, session, tier, embedder, vector; or a
//! tombstone) is sealed with XChaCha20-Poly1305 under a 32-byte key kept in
//! `<data>/memory.key` (mode 0600, created with the system's randomness on first use). A row of
//! the `hs_memories` table is `base64(nonce ‖ ciphertext)`, with a fresh random 24-byte nonce per
//! write and the memory id as associated data, so a row cannot be moved to another id. A row that
//! does not open (another key, a damaged file) is reported and skipped at start, never served.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// File name of the memory key inside the data directory.
pub(super) const KEY_FILE: &str = "memory.key";
const NONCE_BYTES: usize = 24;

/// Sealing failed or a row did not open.
#[derive(Debug, thiserror::Error)]
pub(super) enum VaultError {
    /// The key file cannot be read or written.
    #[error("memory key {path}: {message}")]
    Key {
        /// Key file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A stored row is not base64, too short, or fails authentication.
    #[error("memory row {0:?} does not open with this node's key")]
    Open(String),
    /// No system randomness for a nonce.
    #[error("no system randomness")]
    Random,
}

/// The cipher of one node's stored memories.
pub(super) struct Vault {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vault(..)")
    }
}

impl Vault {
    /// Loads `<dir>/memory.key`, creating it (0600) when it does not exist.
    pub(super) fn open(dir: &Path) -> Result<Self, VaultError> {
        let path = dir.join(KEY_FILE);
        let err = |message: String| VaultError::Key {
            path: path.clone(),
            message,
        };
        let key = match std::fs::read(&path) {
            Ok(bytes) => <[u8; 32]>::try_from(bytes.as_slice())
                .map_err(|_| err(format!("{} bytes, expected 32", bytes.len())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).map_err(|_| VaultError::Random)?;
                crate::keys::write_private(&path, &key).map_err(|e| err(e.to_string()))?;
                key
            }
            Err(e) => return Err(err(e.to_string())),
        };
        Ok(Self::with_key(&key))
    }

    /// A vault with `key` (tests).
    pub(super) fn with_key(key: &[u8; 32]) -> Self {
        Self {
            cipher: XChaCha20Poly1305::new(key.into()),
        }
    }

    /// Seals `plain` for the row of `id`.
    pub(super) fn seal(&self, id: &str, plain: &[u8]) -> Result<String, VaultError> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|_| VaultError::Random)?;
        let sealed = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plain,
                    aad: id.as_bytes(),
                },
            )
            .map_err(|_| VaultError::Open(id.to_owned()))?;
        let mut row = Vec::with_capacity(NONCE_BYTES + sealed.len());
        row.extend_from_slice(&nonce);
        row.extend_from_slice(&sealed);
        Ok(STANDARD.encode(row))
    }

    /// Opens the row of `id`.
    pub(super) fn open_row(&self, id: &str, row: &str) -> Result<Vec<u8>, VaultError> {
        let bytes = STANDARD
            .decode(row)
            .map_err(|_| VaultError::Open(id.to_owned()))?;
        if bytes.len() < NONCE_BYTES {
            return Err(VaultError::Open(id.to_owned()));
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        self.cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: id.as_bytes(),
                },
            )
            .map_err(|_| VaultError::Open(id.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_open_only_for_their_id_and_key() {
        let v = Vault::with_key(&[7; 32]);
        let row = v.seal("mem-1", b"secret sentence").expect("seal");
        assert!(!row.contains("secret"));
        assert_eq!(v.open_row("mem-1", &row).expect("open"), b"secret sentence");
        assert!(v.open_row("mem-2", &row).is_err(), "bound to its id");
        assert!(
            Vault::with_key(&[8; 32]).open_row("mem-1", &row).is_err(),
            "bound to its key"
        );
        assert!(v.open_row("mem-1", "not base64!").is_err());
        assert!(v.open_row("mem-1", "AAAA").is_err());
    }

    #[test]
    fn the_key_file_is_created_private_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Vault::open(dir.path()).expect("create");
        let row = a.seal("mem-1", b"x").expect("seal");
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .expect("key file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = Vault::open(dir.path()).expect("reopen");
        assert_eq!(b.open_row("mem-1", &row).expect("open"), b"x");
        std::fs::write(dir.path().join(KEY_FILE), b"short").expect("write");
        assert!(matches!(
            Vault::open(dir.path()),
            Err(VaultError::Key { .. })
        ));
    }
}
