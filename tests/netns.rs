//! Shards as separate hosts: network namespaces made by the test (root), one for the
//! embedded server and one per shard, joined by a bridge in the server's namespace with
//! loopback-range addresses that exist only inside them (127.231.0.0/24 on the links
//! between them; no route leads anywhere else).
//! Four `spate smtp --shard I/4` processes, each in its own namespace, load the server;
//! the server sees four distinct client addresses, and the merge of the shards adds up
//! to the server's own count. Every namespace (and with them the bridge and the veth
//! pairs) is deleted in a Drop guard; processes are stopped by PID.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_merge_adds_up, have, merge, run_blocking};

const SHARDS: usize = 4;
/// The number of the next test's namespaces.
static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// The subnet of the links between the test's namespaces: loopback range, which the
/// namespaces route over their links (`route_localnet`) once their own loopback keeps only
/// 127.0.0.1; nothing outside them is ever addressed, and the test checks that no
/// namespace has a route beyond that subnet.
const SUBNET: &str = "127.231.0";
/// The server's address on the bridge.
const SERVER_IP: &str = "127.231.0.1";
/// Shard I's address: SUBNET.(10 + I).
const SHARD_IP_BASE: usize = 10;

/// The test's namespaces (`spate-t<pid>-srv`, `spate-t<pid>-s0`...) and the server
/// started in one of them; all gone when dropped.
struct Net {
    prefix: String,
    created: Vec<String>,
    server: Option<Child>,
}

impl Net {
    fn new() -> Net {
        Net {
            // Each test of this file its own names: they run at once.
            prefix: format!(
                "spate-t{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ),
            created: Vec::new(),
            server: None,
        }
    }

    fn ns(&self, what: &str) -> String {
        format!("{}-{what}", self.prefix)
    }

    /// `ip ARGS` (split at blanks), which must succeed.
    fn ip(&self, args: &str) {
        let argv: Vec<&str> = args.split_whitespace().collect();
        let o = run_blocking("ip", &argv, &[], Duration::from_secs(10));
        assert!(o.ok, "ip {args}: {}{}", o.stdout, o.stderr);
    }

    /// A namespace with its loopback up, holding 127.0.0.1 only, and loopback-range
    /// addresses routed over its other links (the SUBNET between the test's namespaces).
    fn add(&mut self, what: &str) -> String {
        let ns = self.ns(what);
        let o = run_blocking("ip", &["netns", "add", &ns], &[], Duration::from_secs(10));
        assert!(
            o.ok,
            "ip netns add {ns} failed: network namespaces need root (CAP_SYS_ADMIN) and a \
             kernel that allows them here: {}",
            o.stderr.trim()
        );
        self.created.push(ns.clone());
        self.ip(&format!("-n {ns} link set lo up"));
        self.ip(&format!("-n {ns} addr del 127.0.0.1/8 dev lo"));
        self.ip(&format!("-n {ns} addr add 127.0.0.1/32 dev lo"));
        let o = run_blocking(
            "ip",
            &[
                "netns",
                "exec",
                &ns,
                "sysctl",
                "-qw",
                "net.ipv4.conf.all.route_localnet=1",
            ],
            &[],
            Duration::from_secs(10),
        );
        assert!(o.ok, "route_localnet in {ns}: {}", o.stderr.trim());
        ns
    }

    /// The server's namespace with a bridge at SERVER_IP, and per shard a namespace with
    /// a veth pair from its eth0 to the bridge.
    fn build(&mut self, clients: usize) -> Vec<String> {
        let srv = self.add("srv");
        self.ip(&format!("-n {srv} link add br0 type bridge"));
        self.ip(&format!("-n {srv} addr add {SERVER_IP}/24 dev br0"));
        self.ip(&format!("-n {srv} link set br0 up"));
        let mut shards = Vec::new();
        for i in 0..clients {
            let ns = self.add(&format!("s{i}"));
            // Both ends are made inside namespaces of the test: nothing in this one.
            self.ip(&format!(
                "-n {srv} link add h{i} type veth peer name eth0 netns {ns}"
            ));
            self.ip(&format!("-n {srv} link set h{i} master br0"));
            self.ip(&format!("-n {srv} link set h{i} up"));
            let addr = format!("{SUBNET}.{}/24", SHARD_IP_BASE + i);
            self.ip(&format!("-n {ns} addr add {addr} dev eth0"));
            self.ip(&format!("-n {ns} link set eth0 up"));
            shards.push(ns);
        }
        for i in 0..clients {
            self.wait_forwarding(&srv, &format!("h{i}"));
        }
        // The addresses exist only inside the test's namespaces: none of them has a route
        // but its own subnet, so no packet of the test can leave them.
        for ns in std::iter::once(&srv).chain(&shards) {
            let o = run_blocking(
                "ip",
                &["-n", ns, "route", "show"],
                &[],
                Duration::from_secs(10),
            );
            assert!(o.ok, "{}", o.stderr);
            let routes: Vec<&str> = o.stdout.lines().collect();
            assert!(
                routes.len() == 1 && routes[0].starts_with(&format!("{SUBNET}.0/24 ")),
                "{ns} routes: {routes:?}"
            );
        }
        shards
    }

    /// Waits (bounded) until the bridge forwards on `port`: the links are ready.
    fn wait_forwarding(&self, srv: &str, port: &str) {
        let start = Instant::now();
        loop {
            let o = run_blocking(
                "ip",
                &["-n", srv, "-j", "-d", "link", "show", port],
                &[],
                Duration::from_secs(10),
            );
            let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap_or_default();
            let link = &v[0];
            if link["operstate"] == "UP"
                && link["linkinfo"]["info_slave_data"]["state"] == "forwarding"
            {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "bridge port {port} not forwarding: {}",
                o.stdout
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts `spate serve` in namespace `ns` on SERVER_IP, port 0; its address, once it
    /// printed it (the readiness signal).
    fn serve(&mut self, ns: &str, stats: &std::path::Path) -> String {
        let smtp = format!("{SERVER_IP}:0");
        self.serve_with(ns, stats, &["--discard", "--smtp", &smtp], "smtp")
    }

    /// Starts `spate serve ARGS` in namespace `ns`; the address of its `listener`, once
    /// it printed it.
    fn serve_with(
        &mut self,
        ns: &str,
        stats: &std::path::Path,
        args: &[&str],
        listener: &str,
    ) -> String {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, common::SPATE, "serve"])
            .args(args)
            .arg("--stats-file")
            .arg(stats)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // Its warning (not loopback) and the counters it prints at exit.
            .stderr(std::fs::File::create(stats.with_extension("err")).unwrap())
            .spawn()
            .expect("cannot start ip netns exec");
        let stdout = child.stdout.take().unwrap();
        // `ip netns exec` execs spate: this PID is the server's.
        self.server = Some(child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let start = Instant::now();
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
            if let Some(addr) = line.strip_prefix(&format!("spate serve: {listener} ")) {
                return addr.trim().to_string();
            }
            assert!(start.elapsed() < Duration::from_secs(30), "no address");
        }
        panic!("spate serve in {ns} printed no {listener} address within 30 s (or exited)");
    }

    /// SIGTERM to the server (by its PID) and its exit, bounded: it writes its stats file
    /// once more as it stops.
    fn stop_server(&mut self) {
        let mut child = self.server.take().expect("a server");
        // SAFETY: kill(2) on the PID of our own child, which has not been reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let status = common::wait_bounded(&mut child, Duration::from_secs(15))
            .expect("spate serve stops within 15 s of SIGTERM");
        assert!(status.success(), "spate serve: {status}");
    }

    /// Deletes every namespace made (the bridge and veth pairs go with them); the names
    /// still listed by `ip netns list` afterwards.
    fn teardown(&mut self) -> Vec<String> {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in self.created.drain(..).rev() {
            let o = run_blocking("ip", &["netns", "del", &ns], &[], Duration::from_secs(10));
            if !o.ok {
                eprintln!("ip netns del {ns}: {}", o.stderr.trim());
            }
        }
        let o = run_blocking("ip", &["netns", "list"], &[], Duration::from_secs(10));
        o.stdout
            .lines()
            .filter(|l| l.starts_with(&format!("{}-", self.prefix)))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let left = self.teardown();
        if !left.is_empty() {
            eprintln!("namespaces left behind: {left:?}");
        }
    }
}

#[test]
fn four_shards_from_four_namespaces_are_four_clients_and_add_up() {
    if !have("ip") {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::cannot_run("network namespaces need root (ip netns add)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut net = Net::new();
    let shard_ns = net.build(SHARDS);
    let stats = tmp.path().join("stats.json");
    let srv = net.ns("srv");
    let target = net.serve(&srv, &stats);
    assert!(target.starts_with(SERVER_IP), "{target}");

    let dirs: Vec<PathBuf> = (0..SHARDS)
        .map(|i| tmp.path().join(format!("shard-{i}")))
        .collect();
    let runs: Vec<_> = shard_ns
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let mut args: Vec<String> = ["netns", "exec", ns, common::SPATE]
                .iter()
                .map(|s| s.to_string())
                .collect();
            args.extend(common::shard_args(&target, i, SHARDS, tmp.path()));
            args.extend(["-n", "400", "--users", "4"].map(String::from));
            std::thread::spawn(move || run_blocking("ip", &args, &[], Duration::from_secs(60)))
        })
        .collect();
    for (i, r) in runs.into_iter().enumerate() {
        let o = r.join().unwrap();
        assert_eq!(o.code, Some(0), "shard {i}: {o:?}");
    }
    net.stop_server();
    let counts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(
        counts["client_addresses"], SHARDS,
        "one client address per shard namespace: {counts}"
    );
    let merged = tmp.path().join("merged");
    let m = merge(&dirs, &merged);
    assert!(m.ok, "{m:?}");
    let accepted = counts["messages_accepted"].as_u64().unwrap();
    assert_merge_adds_up(&merged, &dirs, accepted);
    assert_eq!(accepted, 400, "{counts}");
    assert_eq!(
        net.teardown(),
        Vec::<String>::new(),
        "every namespace deleted"
    );
}

/// Kernel faults in the server's namespace (`--fault 'kernel=… netns=…'`): 20 % packet
/// loss with nftables for 2 s, then a 2-s partition that drops everything, from a client
/// in a namespace of its own. Both are applied and taken out again (nothing of them is
/// left in the namespace), nothing gets through while the partition lasts, and the
/// client's counts reconcile with the server's.
#[test]
fn kernel_faults_in_the_servers_namespace_are_applied_and_taken_out() {
    if !have("ip") {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::cannot_run("network namespaces need root (ip netns add)");
        return;
    }
    if !have("nft") {
        common::cannot_run("nft not found (the nftables package)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut net = Net::new();
    let client = net.build(1).remove(0);
    let stats = tmp.path().join("stats.json");
    let srv = net.ns("srv");
    let target = net.serve(&srv, &stats);
    let run = tmp.path().join("run");
    let (loss, partition, rate) = (
        format!("at=2s for=2s kernel=loss:20% netns={srv}"),
        format!("at=5s for=2s kernel=partition netns={srv}"),
        // Its generated command once broke on its own quoting and was never applied.
        format!("at=8s for=1s kernel=rate:1mbit netns={srv}"),
    );
    let o = run_blocking(
        "ip",
        &[
            "netns",
            "exec",
            &client,
            common::SPATE,
            "smtp",
            &target,
            "--rate",
            "50/s",
            "-d",
            "10s",
            "--timeout",
            "1s",
            "--grace",
            "2s",
            "--fault",
            &loss,
            "--fault",
            &partition,
            "--fault",
            &rate,
            "-q",
            "-o",
            run.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    assert!(o.ended(), "{o:?}");
    let s = common::summary(&run);
    let occ = s["extra"]["faults"]["occurrences"].as_array().unwrap();
    assert_eq!(occ.len(), 3, "{s}");
    assert!(occ.iter().all(|o| o["applied"] == true), "{occ:?}");
    let p = &occ[1];
    assert!(
        p["during"]["accepted_per_s"].as_f64().unwrap()
            < p["before"]["accepted_per_s"].as_f64().unwrap() / 4.0,
        "nothing gets through a partition: {p}"
    );
    let events = std::fs::read_to_string(run.join("faults.jsonl")).unwrap();
    let done: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["event"] == "run" || e["event"] == "undo")
        .collect();
    assert_eq!(done.len(), 6, "{events}");
    assert!(done.iter().all(|e| e["ok"] == true), "{events}");
    let tables = run_blocking(
        "ip",
        &["netns", "exec", &srv, "nft", "list", "tables"],
        &[],
        Duration::from_secs(10),
    );
    assert!(
        tables.ok && !tables.stdout.contains("spate_fault"),
        "{tables:?}"
    );
    let qdiscs = run_blocking(
        "ip",
        &["netns", "exec", &srv, "tc", "qdisc", "show"],
        &[],
        Duration::from_secs(10),
    );
    assert!(qdiscs.ok && !qdiscs.stdout.contains("tbf"), "{qdiscs:?}");
    net.stop_server();
    let counts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let t = &s["totals"];
    let (accepted, indeterminate) = (
        t["accepted"].as_u64().unwrap(),
        t["indeterminate"].as_u64().unwrap(),
    );
    let server = counts["messages_accepted"].as_u64().unwrap();
    // The server took every message the client heard accepted, and at most those the
    // client sent without hearing back besides.
    assert!(
        server >= accepted && server <= accepted + indeterminate,
        "{t}\n{counts}"
    );
    // A fault that cannot be applied is refused before the run: no such namespace.
    let o = run_blocking(
        common::SPATE,
        &[
            "smtp",
            &target,
            "-n",
            "1",
            "--fault",
            "at=1s for=1s kernel=partition netns=spate-no-such-ns",
            "-o",
            tmp.path().join("no").to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr.contains("no network namespace 'spate-no-such-ns'"),
        "{}",
        o.stderr
    );
}

/// `spate xmpp` in namespace `ns` to `target` with `sessions` sessions (one message each)
/// from the source addresses `bind`: its summary.
fn xmpp_from(
    ns: &str,
    target: &str,
    sessions: usize,
    bind: &str,
    out: &std::path::Path,
) -> (Option<i32>, serde_json::Value) {
    let users = format!("--users={sessions}");
    let count = format!("-n{sessions}");
    let pattern = format!("u{{0..{}}}@example.test", sessions - 1);
    let o = run_blocking(
        "ip",
        &[
            "netns",
            "exec",
            ns,
            common::SPATE,
            "xmpp",
            target,
            "--user-pattern",
            &pattern,
            &users,
            &count,
            "--login-rate",
            "2000/s",
            "--sasl",
            "plain",
            "--wait",
            "1s",
            "--bind",
            bind,
            "-q",
            "-o",
            out.to_str().unwrap(),
        ],
        &[("SPATE_PASSWORD".to_string(), "any".to_string())],
        Duration::from_secs(240),
    );
    assert!(out.join("summary.json").exists(), "{o:?}");
    (o.code, common::summary(out))
}

#[test]
fn sessions_over_four_source_addresses_outlast_a_port_range_one_address_runs_out_of() {
    if !have("ip") {
        return;
    }
    let mut net = Net::new();
    let ns = net.add("ports");
    for i in 2..=5 {
        net.ip(&format!("-n {ns} addr add 127.0.0.{i}/32 dev lo"));
    }
    // A thousand local ports per source and destination, in this namespace alone.
    let o = run_blocking(
        "ip",
        &[
            "netns",
            "exec",
            &ns,
            "sysctl",
            "-qw",
            "net.ipv4.ip_local_port_range=41000 41999",
        ],
        &[],
        Duration::from_secs(10),
    );
    assert!(o.ok, "{}", o.stderr);
    let tmp = tempfile::tempdir().unwrap();
    let target = net.serve_with(
        &ns,
        &tmp.path().join("serve.json"),
        &[
            "--xmpp",
            "127.0.0.1:5222",
            "--max-connections",
            "0",
            "--xmpp-roster",
            "subscriptions",
        ],
        "xmpp",
    );
    // 3 000 sessions held at once over four source addresses: no connect fails.
    let (code, s) = xmpp_from(
        &ns,
        &target,
        3000,
        "127.0.0.2-127.0.0.5",
        &tmp.path().join("four"),
    );
    let t = &s["totals"];
    assert_eq!(code, Some(0), "{t}");
    assert_eq!(t["connect_failures"], 0, "{t}");
    assert_eq!(t["connections"], 3000, "{t}");
    assert_eq!(common::phase_count(&s, "bind"), 3000);
    assert_eq!(t["delivered"], 3000, "{t}");
    // From one source address: about a thousand, then the ports run out, said as such.
    let (_, s) = xmpp_from(&ns, &target, 1500, "127.0.0.2", &tmp.path().join("one"));
    let t = &s["totals"];
    let logged_in = common::phase_count(&s, "bind");
    eprintln!(
        "one source address: {logged_in} of 1500 logged in, {} connect failures",
        t["connect_failures"]
    );
    assert!(
        (900..=1000).contains(&logged_in),
        "{logged_in} logged in: {t}"
    );
    assert!(t["connect_failures"].as_u64().unwrap() >= 500, "{t}");
    let errors = s["errors"].as_array().unwrap();
    let ports = errors
        .iter()
        .find(|e| e["kind"] == "out-of-ports")
        .unwrap_or_else(|| panic!("no out-of-ports error: {errors:?}"));
    assert!(
        ports["text"].as_str().unwrap().contains(
            "out of local ports for 127.0.0.2→127.0.0.1:5222: add source addresses with --bind"
        ),
        "{ports}"
    );
    net.stop_server();
}
