//! The configuration tests: each section layers (file, environment, overrides) and its bad
//! values are refused with an error naming the key or the variable.

use super::endpoint::is_loopback_url;
use super::*;

/// `toml` as a config file is refused with an error that starts with `key`.
fn refused(toml: &str, key: &str) {
    let err = Config::default()
        .apply_file(toml, Path::new("agora.toml"))
        .unwrap_err();
    assert!(err.to_string().starts_with(key), "{toml}: {err}");
}

#[test]
fn defaults_are_loopback_only() {
    let c = Config::default();
    for a in [c.agh_listen, c.http_listen, c.rpc_listen, c.agtp_listen] {
        assert!(a.ip().is_loopback());
    }
    assert_eq!(c.rpc_listen.port(), 3100);
    assert_eq!(c.agtp_listen.port(), 4480);
    assert_eq!(c.greet_interval, Duration::from_secs(30));
    assert_eq!(c.data, PathBuf::from("agora-data"));
}

#[test]
fn nats_settings_layer_and_are_checked() {
    let mut c = Config::default();
    c.apply_file(
        r#"
        [agh.nats]
        servers = ["nats://127.0.0.1:4222", "tls://127.0.0.1:4223"]
        user = "agora"
        password_file = "secrets/nats-password"
        ca_file = "/etc/nats/ca.pem"
        "#,
        Path::new("conf/agora.toml"),
    )
    .unwrap();
    c.validate().unwrap();
    let n = c.agh.nats().cloned().unwrap();
    assert_eq!(n.servers.len(), 2);
    assert_eq!(
        n.password,
        Some(Secret::File(PathBuf::from("conf/secrets/nats-password")))
    );
    assert_eq!(n.ca_file, Some(PathBuf::from("/etc/nats/ca.pem")));
    assert!(!n.tls_required);

    // The environment replaces the servers and adds settings; secrets never show in Debug.
    let env = Config::env_overrides(|k| match k {
        "AGORA_AGH_NATS_URL" => Some("nats://127.0.0.1:1, nats://127.0.0.1:2".into()),
        "AGORA_AGH_NATS_PASSWORD" => Some("hunter2".into()),
        "AGORA_AGH_NATS_TLS_REQUIRED" => Some("true".into()),
        _ => None,
    })
    .unwrap();
    c.apply(env).unwrap();
    c.validate().unwrap();
    let n = c.agh.nats().cloned().unwrap();
    assert_eq!(n.servers, ["nats://127.0.0.1:1", "nats://127.0.0.1:2"]);
    assert!(n.tls_required);
    assert_eq!(n.password, Some(Secret::Value("hunter2".into())));
    assert!(!format!("{c:?}").contains("hunter2"));

    // Two authentication methods, a user without a password, a lone cert, no server,
    // credentials in a URL, url and servers together.
    let token =
        Config::env_overrides(|k| (k == "AGORA_AGH_NATS_TOKEN").then(|| "t".to_owned())).unwrap();
    let mut both = c.clone();
    both.apply(token).unwrap();
    let err = both.validate().unwrap_err().to_string();
    assert!(err.contains("at most one"), "{err}");
    for (text, key) in [
        (
            "[agh.nats]\nurl = \"nats://h:1\"\nuser = \"u\"",
            "agh.nats.user",
        ),
        (
            "[agh.nats]\nurl = \"nats://h:1\"\ncert_file = \"c.pem\"",
            "agh.nats.cert_file",
        ),
        ("[agh.nats]\ntls_required = true", "no server"),
        (
            "[agh.nats]\nurl = \"nats://u:p@h:1\"",
            "credentials in the URL",
        ),
    ] {
        let mut c = Config::default();
        c.apply_file(text, Path::new("agora.toml")).unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
    let mut c = Config::default();
    let err = c
        .apply_file(
            "[agh.nats]\nurl = \"nats://h:1\"\nservers = [\"nats://h:2\"]",
            Path::new("agora.toml"),
        )
        .unwrap_err();
    assert!(err.to_string().contains("not both"), "{err}");
}

#[test]
fn layers_override_in_order() {
    let mut c = Config::default();
    c.apply_file(
        r#"
        data = "/srv/agora"
        agh_listen = "127.0.0.1:0"
        bootstrap = "/ip4/127.0.0.1/tcp/4002"
        greet_interval = 5
        [agh]
        replay_age = 60
        [agh.nats]
        url = "nats://127.0.0.1:4222"
        "#,
        Path::new("agora.toml"),
    )
    .unwrap();
    assert_eq!(c.data, PathBuf::from("/srv/agora"));
    assert_eq!(c.agh_listen.port(), 0);
    assert_eq!(c.bootstrap.len(), 1);
    assert_eq!(c.agh.replay_age, 60);
    assert_eq!(c.agh.nats().unwrap().servers, ["nats://127.0.0.1:4222"]);
    let env = Config::env_overrides(|k| match k {
        "AGORA_GREET_INTERVAL" => Some("2".into()),
        "AGORA_BOOTSTRAP" => Some("/ip4/127.0.0.1/tcp/1, /ip4/127.0.0.1/tcp/2".into()),
        _ => None,
    })
    .unwrap();
    c.apply(env).unwrap();
    assert_eq!(c.greet_interval, Duration::from_secs(2));
    assert_eq!(c.bootstrap.len(), 2);
    c.apply(ConfigPatch {
        greet_interval: Some(Duration::from_secs(1)),
        ..ConfigPatch::default()
    })
    .unwrap();
    assert_eq!(c.greet_interval, Duration::from_secs(1));
}

#[test]
fn bad_values_are_clear_errors() {
    let mut c = Config::default();
    let err = Config::env_overrides(|k| (k == "AGORA_AGH_LISTEN").then(|| "localhost".into()))
        .and_then(|o| c.apply(o))
        .unwrap_err();
    assert!(err.to_string().starts_with("agh_listen:"), "{err}");
    let err = c
        .apply_file("unknown_key = 1", Path::new("agora.toml"))
        .unwrap_err();
    assert!(err.to_string().contains("unknown"), "{err}");
    let err = Config::env_overrides(|k| (k == "AGORA_BOOTSTRAP").then(|| "not-an-addr".into()))
        .and_then(|o| c.apply(o))
        .unwrap_err();
    assert!(err.to_string().starts_with("bootstrap:"), "{err}");
    assert!(
        c.apply(ConfigPatch {
            greet_interval: Some(Duration::ZERO),
            ..ConfigPatch::default()
        })
        .is_err()
    );
}

#[test]
fn environment_values_that_do_not_parse_are_errors() {
    for (key, value) in [
        ("AGORA_GREET_INTERVAL", "30s"),
        ("AGORA_PEERS_LOW", "-1"),
        ("AGORA_PEERS_HIGH", "many"),
        ("AGORA_RPC_CONN_RATE", "fast"),
        ("AGORA_RPC_KEY_RATE", "1e"),
        ("AGORA_AGTP_TLS", "maybe"),
        ("AGORA_AGTP_INSECURE", "2"),
    ] {
        let err = Config::env_overrides(|k| (k == key).then(|| value.to_owned())).unwrap_err();
        assert!(err.to_string().starts_with(&format!("{key}:")), "{err}");
    }
    let o = Config::env_overrides(|k| match k {
        "AGORA_AGTP_TLS" => Some(" Yes ".into()),
        "AGORA_AGTP_INSECURE" => Some("off".into()),
        "AGORA_PEERS_LOW" => Some(" 3 ".into()),
        "AGORA_PEERS_HIGH" => Some(" ".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(o.agtp.tls, Some(true));
    assert_eq!(o.agtp.insecure, Some(false));
    assert_eq!(o.peers_low, Some(3));
    assert_eq!(o.peers_high, None);
}

#[test]
fn face_limits_and_access_settings_layer() {
    let mut c = Config::default();
    assert_eq!(c.faces(), FaceLimits::default());
    c.apply_file(
        r#"
        api_key = "0123456789abcdef"
        max_connections = 20
        header_timeout = 2
        allowed_origins = ["https://App.Example/"]
        allowed_hosts = "node.example"
        public_reads = true
        [agh]
        max_channels = 8
        "#,
        Path::new("agora.toml"),
    )
    .unwrap();
    assert_eq!(c.api_key.as_deref(), Some("0123456789abcdef"));
    assert_eq!(c.faces().max_connections, 20);
    assert_eq!(c.faces().header_timeout, Duration::from_secs(2));
    assert_eq!(c.allowed_origins, ["https://app.example"]);
    assert_eq!(c.allowed_hosts, ["node.example"]);
    assert!(c.public_reads);
    assert_eq!(c.agh.max_channels, 8);
    let env = Config::env_overrides(|k| match k {
        "AGORA_RPC_API_KEY" => Some("fedcba9876543210".into()),
        "AGORA_WS_IDLE_TIMEOUT" => Some("7".into()),
        "AGORA_ALLOWED_HOSTS" => Some("a.example, [::1]:8080".into()),
        _ => None,
    })
    .unwrap();
    c.apply(env).unwrap();
    assert_eq!(
        c.api_key.as_deref(),
        Some("fedcba9876543210"),
        "the older name"
    );
    assert_eq!(c.faces().ws_idle_timeout, Duration::from_secs(7));
    assert_eq!(c.allowed_hosts, ["a.example", "[::1]:8080"]);
    c.validate().unwrap();
}

#[test]
fn bad_access_settings_name_their_key() {
    for (toml, key) in [
        ("api_key = \"short\"", "api_key:"),
        ("[rpc]\napi_key = \"short\"", "rpc.api_key:"),
        ("api_key = \"with a space 0123\"", "api_key:"),
        (
            "api_key = \"0123456789abcdef\"\n[rpc]\napi_key = \"0123456789abcdeX\"",
            "api_key:",
        ),
        ("max_connections = 0", "max_connections:"),
        ("header_timeout = 0", "header_timeout:"),
        ("ws_idle_timeout = 86401", "ws_idle_timeout:"),
        ("allowed_origins = \"evil.example\"", "allowed_origins:"),
        (
            "allowed_origins = \"http://a.example/path\"",
            "allowed_origins:",
        ),
        ("allowed_hosts = [\"a b\"]", "allowed_hosts:"),
        ("allowed_hosts = \"a.example:port\"", "allowed_hosts:"),
        ("[agh]\nmax_channels = 0", "agh.max_channels:"),
    ] {
        refused(toml, key);
    }
    for face in ["agh_listen", "http_listen", "rpc_listen"] {
        let mut c = Config::default();
        c.apply_file(&format!("{face} = \"0.0.0.0:0\""), Path::new("agora.toml"))
            .unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.starts_with("api_key:") && err.contains(face), "{err}");
        c.apply_file("api_key = \"0123456789abcdef\"", Path::new("agora.toml"))
            .unwrap();
        c.validate().unwrap();
    }
}

#[test]
fn json_rpc_flow_limits_layer_and_are_checked() {
    let mut c = Config::default();
    assert_eq!(c.rpc.conn_frames, rpc::CONN_FRAMES);
    c.apply_file(
        "[rpc]\nconn_frames = 8\nconn_bytes = 2097152\nwrite_timeout_secs = 5",
        Path::new("agora.toml"),
    )
    .unwrap();
    let env =
        Config::env_overrides(|k| (k == "AGORA_RPC_TOTAL_BYTES").then(|| "16777216".to_owned()))
            .unwrap();
    c.apply(env).unwrap();
    assert_eq!(c.rpc.conn_frames, 8);
    assert_eq!(c.rpc.conn_bytes, 2 << 20);
    assert_eq!(c.rpc.total_bytes, 16 << 20);
    assert_eq!(c.rpc.write_timeout, Duration::from_secs(5));
    c.apply_file(
        "[rpc]\nguard_workers = 3\nguard_budget_ms = 500",
        Path::new("agora.toml"),
    )
    .unwrap();
    assert_eq!(c.rpc.guard_workers, 3);
    assert_eq!(c.rpc.guard_budget, Duration::from_millis(500));
    for (toml, key) in [
        ("[rpc]\nconn_frames = 0", "rpc.conn_frames:"),
        ("[rpc]\nconn_bytes = 1000", "rpc.conn_bytes:"),
        ("[rpc]\ntotal_bytes = 1000", "rpc.total_bytes:"),
        ("[rpc]\nwrite_timeout_secs = 0", "rpc.write_timeout_secs:"),
        ("[rpc]\nguard_workers = 0", "rpc.guard_workers:"),
        ("[rpc]\nguard_budget_ms = 1", "rpc.guard_budget_ms:"),
    ] {
        refused(toml, key);
    }
}

#[test]
fn memory_settings_layer_and_are_checked() {
    let mut c = Config::default();
    assert_eq!(c.memory, MemoryConfig::default());
    c.apply_file(
        "[memory]\nserve = false\nembedder = \"lexical\"\nworkers = 3\nmax_memories = 1000",
        Path::new("agora.toml"),
    )
    .unwrap();
    assert!(!c.memory.serve);
    assert_eq!(c.memory.embedder, "lexical");
    assert_eq!((c.memory.workers, c.memory.max_memories), (3, 1000));
    let env = Config::env_overrides(|k| match k {
        "AGORA_MEMORY_SERVE" => Some("on".to_owned()),
        "AGORA_MEMORY_EMBEDDER" => Some("minilm".to_owned()),
        _ => None,
    })
    .unwrap();
    c.apply(env).unwrap();
    assert!(c.memory.serve);
    assert_eq!(c.memory.embedder, "minilm");
    for (toml, key) in [
        ("[memory]\nembedder = \"gpt\"", "memory.embedder:"),
        ("[memory]\nbase_url = \"ftp://x\"", "memory.base_url:"),
        ("[memory]\nmodel = \"\"", "memory.model:"),
        ("[memory]\nworkers = 0", "memory.workers:"),
        ("[memory]\nmax_memories = 0", "memory.max_memories:"),
        ("[memory]\npeer_rate = 0.5", "memory.peer_rate:"),
    ] {
        refused(toml, key);
    }
}

#[test]
fn openai_embedder_needs_its_endpoint_and_keeps_keys_off_plain_networks() {
    let checked = |toml: &str| {
        let mut c = Config::default();
        c.apply_file(toml, Path::new("agora.toml")).unwrap();
        c.validate().map(|()| c)
    };
    let base = "[memory]\nembedder = \"openai\"\n";
    for (extra, key) in [
        ("model = \"m\"", "memory.base_url:"),
        ("base_url = \"http://127.0.0.1:11434/v1\"", "memory.model:"),
        (
            "base_url = \"http://10.0.0.5:8080/v1\"\nmodel = \"m\"\napi_key = \"k\"",
            "memory.base_url:",
        ),
    ] {
        let err = checked(&format!("{base}{extra}")).unwrap_err();
        assert!(err.to_string().starts_with(key), "{extra}: {err}");
    }
    for url in [
        "http://127.0.0.1:11434/v1",
        "http://localhost/v1",
        "http://[::1]:8080/v1",
        "https://10.0.0.5/v1",
    ] {
        let c = checked(&format!(
            "{base}base_url = \"{url}\"\nmodel = \"m\"\napi_key = \"k\""
        ))
        .unwrap();
        assert_eq!(c.memory.base_url.as_deref(), Some(url));
        assert_eq!(c.memory.api_key.as_deref(), Some("k"));
    }
    // Without a key, plain http to another host is the operator's call.
    checked(&format!(
        "{base}base_url = \"http://10.0.0.5/v1\"\nmodel = \"m\""
    ))
    .unwrap();
    assert!(!is_loopback_url("http://127.0.0.1@10.0.0.5/v1"));
    assert!(!is_loopback_url("http://[::2]:80/v1"));
    assert!(is_loopback_url("http://user@127.0.0.2:9/v1"));
}

#[test]
fn learning_settings_layer_and_are_checked() {
    let mut c = Config::default();
    assert_eq!(c.learning, LearningConfig::default());
    c.apply_file(
        "[learning]\nreflector = \"openai\"\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"\ntimeout_ms = 500\nmax_playbooks = 3\nmax_bullets = 10",
        Path::new("agora.toml"),
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.learning.reflector, "openai");
    assert_eq!(c.learning.model.as_deref(), Some("m"));
    assert_eq!(
        (
            c.learning.timeout_ms,
            c.learning.max_playbooks,
            c.learning.max_bullets
        ),
        (500, 3, 10)
    );
    for (toml, key) in [
        ("[learning]\nreflector = \"gpt\"", "learning.reflector:"),
        ("[learning]\ntimeout_ms = 5", "learning.timeout_ms:"),
        ("[learning]\nmax_bullets = 0", "learning.max_bullets:"),
        ("[learning]\nbase_url = \"x\"", "learning.base_url:"),
    ] {
        refused(toml, key);
    }
    let mut c = Config::default();
    c.apply_file(
        "[learning]\nreflector = \"openai\"",
        Path::new("agora.toml"),
    )
    .unwrap();
    let err = c.validate().unwrap_err();
    assert!(err.to_string().starts_with("learning.base_url:"), "{err}");
}

#[test]
fn improving_settings_layer_and_are_checked() {
    let mut c = Config::default();
    assert_eq!(c.improving, ImprovingConfig::default());
    assert!(!c.improving.share, "sharing is opt-in");
    c.apply_file(
        "[improving]\nshare = true\ntask_types = [\"web-research\", \"code.review\"]\nmax_library = 50\nmin_reward = 0.5\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"",
        Path::new("agora.toml"),
    )
    .unwrap();
    c.validate().unwrap();
    assert!(c.improving.share);
    assert_eq!(c.improving.task_types, ["web-research", "code.review"]);
    assert_eq!(c.improving.max_library, 50);
    let env =
        Config::env_overrides(|k| (k == "AGORA_IMPROVING_TASK_TYPES").then(|| "a, b".to_owned()))
            .unwrap();
    c.apply(env).unwrap();
    assert_eq!(c.improving.task_types, ["a", "b"]);
    for (toml, key) in [
        ("[improving]\ntask_types = \"a/b\"", "improving.task_types:"),
        ("[improving]\nmax_library = 0", "improving.max_library:"),
        ("[improving]\nmin_reward = 2.0", "improving.min_reward:"),
        ("[improving]\ntimeout_ms = 1", "improving.timeout_ms:"),
    ] {
        refused(toml, key);
    }
    let mut c = Config::default();
    c.apply_file("[improving]\nmodel = \"m\"", Path::new("agora.toml"))
        .unwrap();
    let err = c.validate().unwrap_err();
    assert!(err.to_string().starts_with("improving.base_url:"), "{err}");
}

#[test]
fn payments_settings_layer_and_are_checked() {
    let mut c = Config::default();
    assert_eq!(c.payments, PaymentsConfig::default());
    c.apply_file(
        "[payments]\nwallet_key_file = \"keys/w.key\"\nchallenge_ttl_secs = 60",
        Path::new("agora.toml"),
    )
    .unwrap();
    assert_eq!(
        c.payments.wallet_key_file,
        Some(PathBuf::from("keys/w.key"))
    );
    assert_eq!(c.payments.challenge_ttl_secs, Some(60));
    let env = Config::env_overrides(|k| {
        (k == "AGORA_PAYMENTS_CHALLENGE_TTL_SECS").then(|| "600".to_owned())
    })
    .unwrap();
    c.apply(env).unwrap();
    assert_eq!(c.payments.challenge_ttl_secs, Some(600));
    refused(
        "[payments]\nchallenge_ttl_secs = 5",
        "payments.challenge_ttl_secs:",
    );
    refused(
        "[payments]\nwallet_key_file = \"\"",
        "payments.wallet_key_file:",
    );
    refused("[payments]\nwallet = \"x\"", "");
}

#[test]
fn peer_watermarks_layer_and_are_checked_together() {
    let mut c = Config::default();
    assert_eq!(c.peers(), PeerLimits::default());
    c.validate().unwrap();
    // The file raises the low mark above the default high one; only the final
    // combination is checked, so a later layer can complete it.
    c.apply_file("peers_low = 20", Path::new("agora.toml"))
        .unwrap();
    let err = c.validate().unwrap_err();
    assert!(err.to_string().starts_with("peers_high:"), "{err}");
    c.apply(ConfigPatch {
        peers_high: Some(40),
        ..ConfigPatch::default()
    })
    .unwrap();
    c.validate().unwrap();
    assert_eq!((c.peers().low, c.peers().high), (20, 40));
    assert_eq!(c.peers().grace, PeerLimits::default().grace);
    c.apply(ConfigPatch {
        peers_low: Some(0),
        ..ConfigPatch::default()
    })
    .unwrap();
    let err = c.validate().unwrap_err();
    assert!(err.to_string().starts_with("peers_low:"), "{err}");
}

#[test]
fn agtp_scope_claims_and_population_settings() {
    use agora_agtp::scope::UnregisteredClaims;
    let mut c = Config::default();
    assert_eq!(
        c.agtp.unregistered_scope_claims,
        UnregisteredClaims::Asserted
    );
    assert!(c.agtp.population_open);
    c.apply_file(
        "[agtp]\nunregistered_scope_claims = \"refused\"\npopulation_open = false",
        Path::new("agora.toml"),
    )
    .unwrap();
    assert_eq!(
        c.agtp.unregistered_scope_claims,
        UnregisteredClaims::Refused
    );
    assert!(!c.agtp.population_open);
    refused(
        "[agtp]\nunregistered_scope_claims = \"trusted\"",
        "agtp.unregistered_scope_claims:",
    );
}

#[test]
fn in_range_names_the_key_and_keeps_the_bounds() {
    assert_eq!(in_range("k", 5, 1..=64, "must be 1..64").unwrap(), 5);
    assert_eq!(in_range("k", 64, 1..=64, "must be 1..64").unwrap(), 64);
    let err = in_range("memory.workers", 65, 1..=64, "must be 1..64").unwrap_err();
    assert_eq!(err.to_string(), "memory.workers: must be 1..64");
    assert!(in_range("k", 0, 1.., "m").is_err());
    assert!(in_range("k", f64::NAN, 1.0..=f64::MAX, "m").is_err());
    assert!(in_range("k", f64::INFINITY, 1.0..=f64::MAX, "m").is_err());
    check("k", 15, 10..=20, "m").unwrap();
    assert_eq!(
        check("k", 21, 10..=20, "m").unwrap_err().to_string(),
        "k: m"
    );
}

#[test]
fn the_settings_table_names_real_keys_once() {
    let keys = toml_keys();
    for k in [
        "data",
        "agh.nats.password_file",
        "agtp.weights.trust_tier",
        "agtp.peers[].key",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
    }
    let mut envs = std::collections::BTreeSet::new();
    let mut flags = std::collections::BTreeSet::new();
    for s in SETTINGS {
        assert!(
            keys.iter().any(|k| k == s.key),
            "{} is not a key of agora.toml",
            s.key
        );
        assert!(envs.insert(s.env), "{} twice", s.env);
        assert!(s.flag.is_none_or(|f| flags.insert(f)), "{:?} twice", s.flag);
        assert_eq!(s.kind == Kind::Secret, s.flag.is_none(), "{}", s.key);
    }
    // The environment is read through the table, and only through it.
    let asked = std::sync::Mutex::new(Vec::new());
    Config::env_overrides(|k| {
        asked.lock().unwrap().push(k.to_owned());
        None
    })
    .unwrap();
    let asked = asked.into_inner().unwrap();
    assert_eq!(asked, SETTINGS.iter().map(|s| s.env).collect::<Vec<_>>());
}
