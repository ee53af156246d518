//! `agora node`: run a node (a stable contract: flags and `listening on` lines).

use std::path::PathBuf;
use std::process::ExitCode;

use agora_node::config::{Config, ConfigPatch, Kind, SETTINGS, Setting};
use clap::builder::PossibleValuesParser;
use clap::{Arg, ArgAction, ArgMatches, Args, Command};

#[derive(Debug, Args)]
pub(crate) struct NodeArgs {
    /// Configuration file (default: ./agora.toml when present).
    #[arg(long, value_name = "FILE", env = "AGORA_CONFIG")]
    config: Option<PathBuf>,
    /// Put every face and the p2p listener on a free port the system picks (port 0, on the
    /// configured addresses): a second node next to a first one. The ports are in the
    /// `listening on` lines.
    #[arg(long)]
    ephemeral_ports: bool,
    /// One flag per setting of `agora_node::config::SETTINGS`.
    #[command(flatten)]
    settings: Flags,
}

/// The settings given as flags: one flag per row of [`SETTINGS`] that has one (secrets have
/// none), built from the row, so a setting's flag, variable, default and help are written once.
/// The environment is read by [`Config::env_overrides`], not by clap, so that a bad variable is
/// an error naming it.
#[derive(Debug, Default)]
struct Flags(Box<ConfigPatch>);

impl Args for Flags {
    fn augment_args(cmd: Command) -> Command {
        let defaults = Config::default();
        let secrets: Vec<String> = SETTINGS
            .iter()
            .filter(|s| s.flag.is_none())
            .map(|s| {
                format!(
                    "  {} ({}): {} [default: {}]",
                    s.env,
                    s.key,
                    s.help,
                    (s.default)(&defaults)
                )
            })
            .collect();
        SETTINGS
            .iter()
            .filter_map(|s| Some(flag(s, s.flag?, &defaults)))
            .fold(cmd, Command::arg)
            .after_help(format!(
                "Secrets come from the environment or agora.toml, never a flag:\n{}\n\n\
                 Precedence: defaults < agora.toml < AGORA_* variables < flags.",
                secrets.join("\n")
            ))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for Flags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut o = ConfigPatch::default();
        for setting in SETTINGS.iter().filter(|s| s.flag.is_some()) {
            let Some(raw) = matches.get_raw(setting.key) else {
                continue;
            };
            let values = raw.map(|v| v.to_string_lossy().into_owned()).collect();
            setting.read_flag(&mut o, values).map_err(|e| {
                clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{e}\n"))
            })?;
        }
        Ok(Self(Box::new(o)))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// The flag `--<long>` of `setting`; its help names the environment variable and the default.
fn flag(setting: &Setting, long: &'static str, defaults: &Config) -> Arg {
    let help = format!(
        "{}. [env: {}] [default: {}]",
        setting.help,
        setting.env,
        (setting.default)(defaults)
    );
    let arg = Arg::new(setting.key).long(long).help(help);
    match setting.kind {
        Kind::Switch => arg
            .value_name("BOOL")
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true"),
        Kind::List => arg.value_name("VALUE").action(ArgAction::Append),
        Kind::Integer => arg.value_name("N").value_parser(clap::value_parser!(u64)),
        Kind::Decimal => arg
            .value_name("N")
            .allow_negative_numbers(true)
            .value_parser(clap::value_parser!(f64)),
        Kind::Choice(words) => arg
            .value_name("WORD")
            .value_parser(PossibleValuesParser::new(words)),
        Kind::Text | Kind::Secret => arg.value_name("TEXT"),
    }
}

pub(crate) fn run(args: NodeArgs) -> ExitCode {
    let flags = *args.settings.0;
    let config = Config::load(args.config.as_deref(), ConfigPatch::default()).and_then(|mut c| {
        c.apply(Config::env_overrides(|k| std::env::var(k).ok())?)?;
        c.apply(flags)?;
        if args.ephemeral_ports {
            c.ephemeral_ports();
        }
        c.validate()?;
        Ok(c)
    });
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("agora: configuration: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(level) = &config.log.level
        && let Err(e) = tracing_subscriber::EnvFilter::try_new(level)
    {
        eprintln!("agora: configuration: log.level: {level:?} is not a tracing filter ({e})");
        return ExitCode::from(2);
    }
    init_logging(&config.log);
    // jemalloc's background thread purges freed pages (after its 10 s decay) even while the node
    // is idle: the memory of closed connections goes back to the system.
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(error = %e, "cannot start jemalloc's background thread; freed memory stays with the process");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agora: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(agora_node::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ agora_node::NodeError::Config(_)) => {
            eprintln!("agora: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("agora: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The variable of the log filter (after `RUST_LOG`, before `[log] level`).
const LOG_ENV: &str = "AGORA_LOG";

/// What is logged when neither `RUST_LOG`, `AGORA_LOG` nor `[log] level` says.
const DEFAULT_LOG_FILTER: &str = "warn,libp2p_kad=error,async_nats=off,agora_node=info";

/// Logs to stderr: `RUST_LOG`, else `AGORA_LOG`, else `[log] level`, else the default filter;
/// text with ANSI colours only when stderr is a terminal, or JSON lines.
fn init_logging(log: &agora_node::config::LogConfig) {
    use std::io::IsTerminal as _;
    // an empty variable counts as unset
    let var = |name| std::env::var(name).ok().filter(|s| !s.trim().is_empty());
    let spec = var("RUST_LOG")
        .or_else(|| var(LOG_ENV))
        .or_else(|| log.level.clone())
        .unwrap_or_else(|| DEFAULT_LOG_FILTER.to_owned());
    let filter = tracing_subscriber::EnvFilter::try_new(&spec).unwrap_or_else(|e| {
        // only an environment variable can be invalid here ([log] level was checked)
        eprintln!("agora: log filter {spec:?} is not valid ({e}); using \"info\"");
        tracing_subscriber::EnvFilter::new("info")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match log.format {
        agora_node::config::LogFormat::Json => builder
            .json()
            .flatten_event(false)
            .with_current_span(false)
            .try_init(),
        agora_node::config::LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting, one a line: its `agora.toml` key, environment variable, flag and default
    /// (`-` for none), from the code: [`SETTINGS`], the keys serde accepts, the command's flags.
    fn settings_list() -> String {
        let cmd = NodeArgs::augment_args(Command::new("node"));
        let defaults = Config::default();
        let long = |id: &str| {
            cmd.get_arguments()
                .find(|a| a.get_id() == id)
                .and_then(Arg::get_long)
                .map_or_else(|| "-".to_owned(), |l| format!("--{l}"))
        };
        let mut lines: Vec<String> = SETTINGS
            .iter()
            .map(|s| {
                let default = (s.default)(&defaults);
                format!("{} | {} | {} | {default}", s.key, s.env, long(s.key))
            })
            .collect();
        for key in agora_node::config::toml_keys() {
            if key == "log.level" {
                lines.push(format!("{key} | {LOG_ENV} | - | {DEFAULT_LOG_FILTER}"));
            } else if SETTINGS.iter().all(|s| s.key != key) {
                lines.push(format!("{key} | - | - | -"));
            }
        }
        for arg in cmd.get_arguments() {
            if SETTINGS.iter().all(|s| s.key != arg.get_id()) {
                let env = arg
                    .get_env()
                    .map_or_else(|| "-".into(), |e| e.to_string_lossy());
                lines.push(format!("- | {env} | {} | -", long(arg.get_id().as_str())));
            }
        }
        lines.sort();
        lines.join("\n") + "\n"
    }

    #[test]
    fn the_settings_list_is_the_committed_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/settings.txt");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        let body: String = committed
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        let list = settings_list();
        if std::env::var_os("AGORA_WRITE_SETTINGS").is_some() {
            let header = committed.lines().take_while(|l| l.starts_with('#'));
            let header: String = header.map(|l| format!("{l}\n")).collect();
            std::fs::write(path, header + &list).unwrap();
            return;
        }
        assert_eq!(
            body, list,
            "docs/settings.txt is stale: AGORA_WRITE_SETTINGS=1 cargo test -p agora --bins"
        );
    }

    #[test]
    fn flags_layer_over_the_environment() {
        let cmd = NodeArgs::augment_args(Command::new("node"));
        let m = cmd
            .try_get_matches_from([
                "node",
                "--peers-low",
                "3",
                "--agtp-tls",
                "--memory-serve=off",
                "--bootstrap",
                "/ip4/127.0.0.1/tcp/1",
                "--bootstrap",
                "/ip4/127.0.0.1/tcp/2",
                "--improving-min-reward",
                "-0.5",
            ])
            .unwrap();
        let o = <Flags as clap::FromArgMatches>::from_arg_matches(&m)
            .unwrap()
            .0;
        assert_eq!(o.peers_low, Some(3));
        assert_eq!(o.agtp.tls, Some(true));
        assert_eq!(o.memory.serve, Some(false));
        assert_eq!(o.bootstrap.map(|b| b.len()), Some(2));
        assert_eq!(o.improving.min_reward, Some(-0.5));
        assert_eq!(o.agtp.insecure, None);
        let bad = NodeArgs::augment_args(Command::new("node"))
            .try_get_matches_from(["node", "--memory-serve=maybe"])
            .unwrap();
        let err = <Flags as clap::FromArgMatches>::from_arg_matches(&bad).unwrap_err();
        assert!(err.to_string().contains("--memory-serve"), "{err}");
    }

    #[test]
    fn secrets_have_no_flag_and_help_names_every_variable() {
        let help = NodeArgs::augment_args(Command::new("node"))
            .render_long_help()
            .to_string();
        for s in SETTINGS {
            assert!(help.contains(s.env), "{} is not in --help", s.env);
            if s.kind == Kind::Secret {
                assert!(s.flag.is_none(), "{} has a flag", s.key);
            }
        }
    }
}
