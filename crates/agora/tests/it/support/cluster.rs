//! A cluster of hosts on one machine (issue 34): each host is a network namespace with one
//! interface, `eth0`, addressed in the benchmarking range 198.18.0.0/15 (RFC 2544); the hosts'
//! links meet on a bridge inside one more namespace of the cluster's own (the hub), so traffic
//! goes only between the namespaces the test made — the machine's own namespace has no link to
//! them. Nodes run on their host's address with the default ports, the API key and AGTP over
//! TLS, and bootstrap across hosts.
//!
//! The harness cuts and heals one host's link, splits the hosts into two sides (the second
//! side's links move to a second bridge of the hub) and joins them again, kills and restarts
//! nodes, shifts one node's clock (libfaketime, preloaded into that node only) and puts one
//! host's data directory on a small tmpfs. Test code runs as a client on a host of its own
//! ([`Cluster::run`]: a runtime whose threads live in that host's namespace), so every
//! connection it opens crosses the bridge like another machine's would.
//!
//! Everything it made goes when the [`Cluster`] is dropped, also when a test fails: mounts are
//! lazily unmounted and the namespaces deleted (their links with them). Namespaces left by a
//! process that died without dropping (their name carries its pid) are deleted by the next
//! cluster.
//!
//! Needs root (`ip netns`, `mount`); [`Cluster::create`] answers `None` without it and the test
//! skips with one line through [`super::external`], unless `AGORA_REQUIRE_EXTERNAL=1`.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Log, Node, Place, TEST_API_KEY};

/// The namespaces of this process's clusters are named `agora-<pid>-<n>-…`.
const PREFIX: &str = "agora-";
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Runs `ip args…`; whether it succeeded.
fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `ip args…`, panicking with the command when it fails.
fn ip_ok(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Deletes the namespaces of clusters whose process is gone, first killing what still runs in
/// them: the nodes of a test process that was killed (not failed) outlive it, and a namespace
/// lasts as long as a process in it.
fn sweep_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or_default();
        if pid.parse::<u32>().is_ok() && !Path::new(&format!("/proc/{pid}")).exists() {
            if let Ok(pids) = Command::new("ip").args(["netns", "pids", name]).output() {
                for orphan in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-KILL", orphan]).status();
                }
            }
            ip(&["netns", "del", name]);
        }
    }
}

/// libfaketime's preload library, when Debian's `faketime` package is installed.
pub(crate) fn faketime_library() -> Option<PathBuf> {
    let dirs = std::fs::read_dir("/usr/lib").ok()?;
    dirs.flatten()
        .map(|d| d.path().join("faketime/libfaketime.so.1"))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketime.so.1")])
        .find(|p| p.exists())
}

/// One host of a cluster.
pub(crate) struct Host {
    /// Its network namespace.
    pub(crate) ns: String,
    /// Its address on the cluster's bridge.
    pub(crate) ip: Ipv4Addr,
    /// Its link's end in the hub.
    link: String,
    /// Its node's data directory.
    pub(crate) data: PathBuf,
}

/// How a node on a host is started.
#[derive(Default, Clone)]
pub(crate) struct Start {
    /// Nodes to join: `/ip4/…/tcp/4001/p2p/<id>`.
    pub(crate) bootstrap: Vec<String>,
    /// More `agora node` arguments.
    pub(crate) args: Vec<String>,
    /// More environment variables.
    pub(crate) env: Vec<(String, String)>,
    /// The node's clock runs this many seconds ahead (negative: behind).
    pub(crate) skew_secs: Option<i64>,
    /// Collect the node's log.
    pub(crate) log: Option<Log>,
    /// The AGH greet interval in seconds (remote presence lasts twice as long); 30 by default.
    pub(crate) greet_secs: Option<u64>,
}

/// Hosts in network namespaces on one bridge; see the module doc.
pub(crate) struct Cluster {
    hub: String,
    hosts: Vec<Host>,
    mounts: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// `n` hosts, 198.18.0.11 onwards, on one bridge; `None` when this process cannot make
    /// namespaces (not root, no `ip`).
    pub(crate) fn create(n: usize) -> Option<Self> {
        sweep_stale();
        let tag = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let hub = format!("{tag}-hub");
        if !ip(&["netns", "add", &hub]) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut cluster = Self {
            hub,
            hosts: Vec::new(),
            mounts: Vec::new(),
            _dir: dir,
        };
        let hub = cluster.hub.clone();
        ip_ok(&["-n", &hub, "link", "set", "lo", "up"]);
        for br in ["br0", "br1"] {
            ip_ok(&["-n", &hub, "link", "add", br, "type", "bridge"]);
            ip_ok(&["-n", &hub, "link", "set", br, "up"]);
        }
        for i in 0..n {
            let ns = format!("{tag}-h{i}");
            let link = format!("h{i}");
            let octet = u8::try_from(11 + i).expect("at most 244 hosts");
            let addr = Ipv4Addr::new(198, 18, 0, octet);
            ip_ok(&["netns", "add", &ns]);
            ip_ok(&["-n", &ns, "link", "set", "lo", "up"]);
            ip_ok(&[
                "-n", &hub, "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ]);
            ip_ok(&["-n", &hub, "link", "set", &link, "master", "br0", "up"]);
            ip_ok(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ]);
            ip_ok(&["-n", &ns, "link", "set", "eth0", "up"]);
            let data = cluster._dir.path().join(format!("h{i}"));
            std::fs::create_dir_all(&data).unwrap();
            cluster.hosts.push(Host {
                ns,
                ip: addr,
                link,
                data,
            });
        }
        Some(cluster)
    }

    pub(crate) fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    pub(crate) fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Starts a node on host `i` with its data in the host's data directory: its faces on the
    /// host's address with the default ports, [`TEST_API_KEY`] as its API key, AGTP over TLS.
    pub(crate) fn start(&self, i: usize, start: &Start) -> Node {
        let host = &self.hosts[i];
        let ip = host.ip.to_string();
        let wrap = ["ip", "netns", "exec", host.ns.as_str()];
        let place = Place {
            wrap: &wrap,
            ip: &ip,
            default_ports: true,
        };
        let preload = start.skew_secs.map(|s| {
            let lib = faketime_library().expect("libfaketime (Debian: faketime)");
            (lib.display().to_string(), format!("{s:+}s"))
        });
        let mut env: Vec<(&str, &str)> = vec![("AGORA_API_KEY", TEST_API_KEY)];
        if let Some((lib, offset)) = &preload {
            env.extend([
                ("LD_PRELOAD", lib.as_str()),
                ("FAKETIME", offset.as_str()),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ]);
        }
        env.extend(start.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let bootstrap: Vec<&str> = start.bootstrap.iter().map(String::as_str).collect();
        let args: Vec<&str> = start.args.iter().map(String::as_str).collect();
        super::spawn_at(
            place,
            &host.data,
            &bootstrap,
            start.greet_secs.unwrap_or(30),
            &args,
            &env,
            start.log.clone(),
        )
    }

    /// Takes host `i`'s link down: it reaches nobody and nobody reaches it.
    pub(crate) fn cut(&self, i: usize) {
        ip_ok(&["-n", &self.hub, "link", "set", &self.hosts[i].link, "down"]);
    }

    /// Brings host `i`'s link back up.
    pub(crate) fn heal(&self, i: usize) {
        ip_ok(&["-n", &self.hub, "link", "set", &self.hosts[i].link, "up"]);
    }

    /// Splits the cluster: the hosts in `side` reach each other and no other host.
    pub(crate) fn split(&self, side: &[usize]) {
        for &i in side {
            ip_ok(&[
                "-n",
                &self.hub,
                "link",
                "set",
                &self.hosts[i].link,
                "master",
                "br1",
            ]);
        }
    }

    /// Ends a [`Cluster::split`]: every host reaches every other.
    pub(crate) fn join(&self) {
        for host in &self.hosts {
            ip_ok(&["-n", &self.hub, "link", "set", &host.link, "master", "br0"]);
        }
    }

    /// Puts host `i`'s data directory on a tmpfs of `size` (e.g. `"32m"`); unmounted when the
    /// cluster goes. Call before the host's node starts.
    pub(crate) fn small_disk(&mut self, i: usize, size: &str) -> &Path {
        let data = self.hosts[i].data.clone();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {out:?}");
        self.mounts.push(data);
        &self.hosts[i].data
    }

    /// A runtime whose threads live on host `i`: what it spawns runs as a client on that host
    /// (drop it outside any runtime, or shut it down in the background).
    pub(crate) fn runtime(&self, i: usize) -> tokio::runtime::Runtime {
        let ns = self.hosts[i].ns.clone();
        std::thread::scope(|scope| scope.spawn(move || runtime_in(&ns)).join().unwrap())
    }

    /// Runs the future `f` makes to its end on a thread of host `i` (with a runtime there) —
    /// the test as a client on that host. A panic in it is raised again here (the cluster is
    /// then dropped).
    pub(crate) fn run<C, F>(&self, i: usize, f: C) -> F::Output
    where
        C: FnOnce() -> F + Send,
        F: Future,
        F::Output: Send,
    {
        let ns = self.hosts[i].ns.clone();
        std::thread::scope(|scope| {
            let handle = scope.spawn(move || runtime_in(&ns).block_on(f()));
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

/// Moves the calling thread into network namespace `ns` (threads it starts inherit it) and
/// builds a runtime there.
fn runtime_in(ns: &str) -> tokio::runtime::Runtime {
    let file = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
        for host in &self.hosts {
            ip(&["netns", "del", &host.ns]);
        }
        ip(&["netns", "del", &self.hub]);
    }
}

impl Host {
    /// The p2p address of this host's node `peer_id`, for `--bootstrap`.
    pub(crate) fn p2p(&self, peer_id: &str) -> String {
        format!("/ip4/{}/tcp/4001/p2p/{peer_id}", self.ip)
    }
}
