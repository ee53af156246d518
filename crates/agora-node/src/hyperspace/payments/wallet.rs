//! The node's wallet: a secp256k1 key in `<data>/wallet.key` (64 hex digits, mode 0600),
//! generated at first start, or a file named in `[payments] wallet_key_file`. It signs the
//! channel vouchers and credentials of the node's local agents, and its address is the default
//! payee of USDC and is published in the node's capability card.

use std::path::{Path, PathBuf};

use k256::ecdsa::SigningKey;

/// Its file name in the data directory.
pub const WALLET_FILE: &str = "wallet.key";

/// Why the wallet did not open.
#[derive(Debug, thiserror::Error)]
pub enum WalletError {
    /// Reading or writing the file failed.
    #[error("wallet key {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file does not hold a key.
    #[error("wallet key {path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// Loads the key at `path`, or creates it (random, 0600) when the file does not exist.
pub fn load_or_create(path: &Path) -> Result<SigningKey, WalletError> {
    let io = |source| WalletError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let bytes = agora_hyperspace::payments::unhex::<32>(text.trim()).ok_or_else(|| {
                WalletError::Invalid {
                    path: path.to_path_buf(),
                    why: "expected 64 hex digits (a secp256k1 secret key)".into(),
                }
            })?;
            SigningKey::from_slice(&bytes).map_err(|_| WalletError::Invalid {
                path: path.to_path_buf(),
                why: "not a valid secp256k1 secret key".into(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = loop {
                let mut secret = [0u8; 32];
                getrandom::fill(&mut secret).map_err(|e| io(std::io::Error::other(e)))?;
                if let Ok(k) = SigningKey::from_slice(&secret) {
                    break k;
                }
            };
            let hex: String = key.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(io)?;
            }
            crate::keys::write_private(path, format!("{hex}\n").as_bytes()).map_err(io)?;
            Ok(key)
        }
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wallet_is_created_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WALLET_FILE);
        let a = load_or_create(&path).unwrap();
        let b = load_or_create(&path).unwrap();
        assert_eq!(a.to_bytes(), b.to_bytes());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "nope").unwrap();
        assert!(matches!(
            load_or_create(&path),
            Err(WalletError::Invalid { .. })
        ));
    }
}
