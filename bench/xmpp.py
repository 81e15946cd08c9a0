#!/usr/bin/env python3
"""spate xmpp against Tsung 1.7 (jabber plugin), both against one private ejabberd on
loopback, and spate's memory per idle logged-in session against `spate serve`.

This is a benchmark, never a test: it asserts nothing about speed, it measures and prints.

  bench/xmpp.sh [--sessions 300] [--login-rate 50] [--messages 3] [--stay 10] [--reps 3]
                [--tls starttls|plain] [--server ejabberd|prosody] [--tools spate,tsung]
                [--mem-ks 1000,5000,10000] [--mem-k0 10] [--mem-modes plain,starttls]
                [--mem-roster shared|subscriptions]
                [--tr-modes tcp,websocket,starttls,wss] [--tr-sessions 50] [--tr-messages 20000]
                [--skip-compare] [--skip-memory] [--skip-transport] [--bed DIR]

Part 1 (compare): each tool logs --sessions accounts in at --login-rate (stream, STARTTLS,
SASL PLAIN, bind, roster get, initial presence), the sessions stay --stay seconds, then
each session sends --messages chat messages (100-byte body) to other logged-in sessions;
tools alternate, --reps times, plus one 10-session run per tool for the memory baseline.
Figures: the server's own count of logged-in sessions (sampled 5 times a second) gives
the login rate; the generator's process tree is sampled for CPU and RSS, and
/usr/bin/time gives its total CPU and peak RSS.

Part 2 (memory): `spate serve --xmpp` in its own process, `spate xmpp` holding K sessions
logged in and idle; VmRSS of the generator sampled from /proc once every session is
logged in and the generator is idle; KiB/session = (RSS(K) - RSS(K0)) / (K - K0).

Part 3 (transport): spate xmpp over TCP and over WebSocket (RFC 7395), plain and TLS,
each against a fresh `spate serve`: messages per second, and CPU per message of the
generator and of the server (--tr-*; --skip-transport). Part 2's --mem-modes include
websocket and wss: memory per idle session over WebSocket.

Results: bench/results/xmpp-latest.md (tables), rows appended to bench/results/xmpp.csv,
bench/results/xmpp-transport.csv and bench/results/xmpp-memory.csv (one row per run,
with the date of the benchmark).
"""

import argparse
import csv
import datetime
import http.client
import json
import math
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (REPO, RESULTS, bed_down, bed_env, bed_up, find_spate, fmt,  # noqa: E402
                     free_port, loadavg, log, median, proc_cpu_seconds, process_tree,
                     wait_listen, wait_quiet)

NOFILE = 20000  # most files one process may open (house rule)
SAMPLE_S = 0.2  # part 1 sampling interval


# ------------------------------------------------------------------------------- processes
def set_nofile():
    """preexec for every child: at most NOFILE open files (raised to it when allowed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if os.geteuid() == 0:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
    else:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(NOFILE, hard), min(NOFILE, hard)))


def proc_mem(pid):
    """(VmRSS, VmHWM) in KiB."""
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def tree_stats(pid):
    """(CPU seconds, sum of VmRSS KiB, largest VmHWM KiB) over a live process tree."""
    cpu = rss = hwm = 0
    for p in process_tree(pid):
        try:
            cpu += proc_cpu_seconds(p)
            r, h = proc_mem(p)
            rss += r
            hwm = max(hwm, h)
        except (OSError, ValueError, IndexError):
            pass
    return cpu, rss, hwm


def stop_tree(pid, name, secs=10):
    """SIGTERM every process of the tree (by PID, leaves first), wait bounded, SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = process_tree(pid)
        if not pids:
            return
        for p in reversed(pids):
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
            time.sleep(0.1)
        if not any(os.path.exists(f"/proc/{p}") for p in pids):
            return
        log(f"{name} (pid {pid}) still there after SIGTERM: SIGKILL")


# ------------------------------------------------------------------------------- server counts
class EjabberdCount:
    """Logged-in sessions as ejabberd counts them (mod_http_api on loopback)."""

    basis = "ejabberd connected_users_number (bound sessions)"

    def __init__(self, api):
        m = re.match(r"http://(127\.[0-9.]+):(\d+)(/.*)$", api)
        if not m:
            sys.exit(f"SPATE_XMPP_API {api!r} is not a loopback URL")
        self.host, self.port, self.path = m.group(1), int(m.group(2)), m.group(3)
        self.conn = None

    def __call__(self):
        for _ in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=2)
                self.conn.request("POST", self.path + "/connected_users_number", "{}",
                                  {"Content-Type": "application/json"})
                r = self.conn.getresponse()
                return json.loads(r.read())["num_sessions"]
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                self.conn = None
        return None


class TcpCount:
    """Fallback (Prosody has no API in the bed): established connections to the port."""

    basis = "established TCP connections to the server port (not logins)"

    def __init__(self, port):
        self.hexport = f"{port:04X}"

    def __call__(self):
        n = 0
        for path in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(path) as f:
                    next(f)
                    for line in f:
                        v = line.split()
                        if v[1].endswith(":" + self.hexport) and v[3] == "01":
                            n += 1
            except OSError:
                pass
        return n


class Sampler(threading.Thread):
    """Samples (t, server sessions, generator CPU s, generator RSS KiB, HWM KiB)."""

    def __init__(self, pid, count, interval):
        super().__init__(daemon=True)
        self.pid, self.count, self.interval = pid, count, interval
        self.samples = []
        self.halt = threading.Event()
        self.t0 = time.monotonic()
        self.last = (0.0, 0, 0)

    def run(self):
        while not self.halt.is_set():
            t = time.monotonic()
            cpu, rss, hwm = tree_stats(self.pid)
            if cpu or rss:
                self.last = (max(cpu, self.last[0]), rss, max(hwm, self.last[2]))
            n = self.count()
            self.samples.append((t - self.t0, n, self.last[0], rss, self.last[2]))
            self.halt.wait(max(0.0, self.interval - (time.monotonic() - t)))


def run_measured(argv, count, timeout, cwd, env=None, interval=SAMPLE_S):
    """Runs argv under /usr/bin/time with a sampler. Returns a dict."""
    tfile = os.path.join(cwd, "time.txt")
    out = open(os.path.join(cwd, "out.txt"), "wb")
    t0 = time.monotonic()
    p = subprocess.Popen(["/usr/bin/time", "-f", "%e %U %S %M", "-o", tfile] + argv,
                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         cwd=cwd, env=env, preexec_fn=set_nofile)
    s = Sampler(p.pid, count, interval)
    s.t0 = t0
    s.start()
    timed_out = False
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        log(f"{argv[0]} over its {timeout:.0f} s limit: stopped")
        stop_tree(p.pid, argv[0])
        p.wait(timeout=30)
    s.halt.set()
    s.join(timeout=5)
    out.close()
    wall = user = sys_ = maxrss = None
    try:
        with open(tfile) as f:
            last = f.read().strip().splitlines()[-1].split()
        wall, user, sys_, maxrss = float(last[0]), float(last[1]), float(last[2]), int(last[3])
    except (OSError, IndexError, ValueError):
        pass
    with open(os.path.join(cwd, "out.txt"), "rb") as f:
        text = f.read()[-3000:].decode(errors="replace")
    return dict(rc=p.returncode, timed_out=timed_out, wall=wall, cpu=(user or 0) + (sys_ or 0)
                if user is not None else None, maxrss_kb=maxrss, samples=s.samples, text=text)


# ------------------------------------------------------------------------------- test bed
# ------------------------------------------------------------------------------- part 1
TSUNG_XML = """<?xml version="1.0"?>
<!DOCTYPE tsung SYSTEM "/usr/share/tsung/tsung-1.0.dtd">
<!-- generated by bench/xmpp.py -->
<tsung loglevel="warning" dumptraffic="false" version="1.0">
 <clients>
  <client host="localhost" use_controller_vm="true" maxusers="{maxusers}"><ip value="127.0.0.1"/></client>
 </clients>
 <servers>
  <server host="{host}" port="{port}" type="tcp"/>
 </servers>
 <load>
  <arrivalphase phase="1" duration="{arrival_s}" unit="second">
   <users maxnumber="{n}" arrivalrate="{rate}" unit="second"/>
  </arrivalphase>
 </load>
 <options>
  <option name="idle_timeout" value="60000"/>
  <option type="ts_jabber" name="domain" value="{domain}"/>
  <option type="ts_jabber" name="userid_max" value="0"/>
  <option type="ts_jabber" name="random_from_fileid" value="userdb"/>
  <option type="ts_jabber" name="offline_from_fileid" value="userdb"/>
  <option type="ts_jabber" name="fileid_delimiter" value=";"/>
  <option name="file_server" id="userdb" value="{csv}"/>
 </options>
 <sessions>
  <session probability="100" name="login-stay-chat" type="ts_jabber" bidi="true">
   <setdynvars sourcetype="file" fileid="userdb" delimiter=";" order="iter">
    <var name="username"/>
    <var name="password"/>
   </setdynvars>
   <!-- ack="parse": wait for the answer itself ("local" acks on any packet and loses step) -->
   <request subst="true"><jabber type="connect" ack="parse" regexp="&lt;/stream:features&gt;"><xmpp_authenticate username="%%_username%%" passwd="%%_password%%"/></jabber></request>
{starttls}   <request><jabber type="auth_sasl" ack="parse" regexp="&lt;success"/></request>
   <request><jabber type="connect" ack="parse" regexp="&lt;/stream:features&gt;"/></request>
   <request><jabber type="auth_sasl_bind" ack="parse" regexp="&lt;jid&gt;"/></request>
   <request><jabber type="iq:roster:get" ack="parse" regexp="jabber:iq:roster"/></request>
   <request><jabber type="presence:initial" ack="no_ack"/></request>
   <thinktime value="{stay}" random="false"/>
   <for from="1" to="{messages}" var="i">
    <transaction name="msg">
     <request><jabber type="chat" ack="no_ack" size="{size}" destination="online"/></request>
    </transaction>
    <thinktime value="1" random="false"/>
   </for>
   <thinktime value="{hold}" random="false"/>
   <request><jabber type="close" ack="no_ack"/></request>
  </session>
 </sessions>
</tsung>
"""

TSUNG_STARTTLS = """   <request><jabber type="starttls" ack="bidi_ack"/></request>
   <request><jabber type="connect" ack="parse" regexp="&lt;/stream:features&gt;"/></request>
"""

BODY = 100  # bytes of every chat message body, both tools
COMMANDS = {}  # tool -> the last command line run (for the results' record)
MEM_COMMANDS = {}


def tsung_argv(args, n, bed, users, rundir):
    host, port = bed["SPATE_XMPP"].rsplit(":", 1)
    csv_path = os.path.join(rundir, "users.csv")
    with open(csv_path, "w") as f:
        for jid, pw in users[:n]:
            f.write(f"{jid.split('@')[0]};{pw}\n")
    rate = args.login_rate
    xml = TSUNG_XML.format(
        maxusers=n + 100, host=host, port=port, n=n,
        # Tsung's arrivals are random (exponential gaps): the phase is longer than n / rate
        # so that all n users arrive; maxnumber stops it at n
        arrival_s=math.ceil(1.5 * n / rate) + 5,
        rate=rate, domain=bed["SPATE_XMPP_DOMAIN"], csv=csv_path,
        starttls=TSUNG_STARTTLS if args.tls == "starttls" else "", stay=args.stay,
        messages=args.messages, size=BODY, hold=math.ceil(1.3 * n / rate) + 3)
    with open(os.path.join(rundir, "tsung.xml"), "w") as f:
        f.write(xml)
    # -n: no web GUI (port 8091); -I 127.0.0.1: the node is tsung_controller@127.0.0.1
    return ["tsung", "-n", "-I", "127.0.0.1", "-f", os.path.join(rundir, "tsung.xml"),
            "-l", os.path.join(rundir, "log"), "start"]


def tsung_env(rundir):
    env = dict(os.environ, HOME=rundir)
    dist = free_port(47000 + int.from_bytes(os.urandom(2), "big") % 900 * 10)
    # No epmd (it would stay behind and listen on every interface): the node listens on
    # one loopback port of its own, like the bed's ejabberd.
    env["ERL_FLAGS"] = (f"-start_epmd false -erl_epmd_port {dist} "
                        "-kernel inet_dist_use_interface {127,0,0,1}")
    return env


def tsung_counts(rundir):
    """Cumulative counters from the last dump of tsung.log: name -> total."""
    logs = [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(rundir, "log"))
            for f in fs if f == "tsung.log"]
    tot = {}
    if not logs:
        return tot
    with open(logs[0]) as f:
        for line in f:
            v = line.split()
            if len(v) >= 4 and v[0] == "stats:" and not v[1].startswith("{"):
                name = v[1]
                try:
                    if len(v) == 4:  # counter: name interval total
                        tot[name] = float(v[3])
                    else:  # sample: name count mean stddev max min meanfb countfb
                        tot[name] = tot.get(name, 0.0) + float(v[2])
                except ValueError:
                    pass
    return tot


def spate_argv(args, n, bed, spate, rundir, users_file):
    x = args.login_rate * args.messages  # aggregate msgs/s, as Tsung's sessions send them
    send_s = math.ceil(n * args.messages / x) + 5
    argv = [spate, "xmpp", bed["SPATE_XMPP"], "--users-file", users_file, "--users", str(n),
            "--login-rate", f"{args.login_rate}/s", "--roster", "--sasl", "plain",
            "--stages", f"{args.stay}s:0/s,100ms:{x}/s,{send_s}s:{x}/s",
            "--count", str(n * args.messages), "--size", str(BODY), "--timeout", "60s",
            "--quiet", "--out", os.path.join(rundir, "run")]
    if args.tls == "starttls":
        argv += ["--starttls", "--ca", bed["SPATE_CA"]]
    return argv


def crossing(samples, level):
    """Time at which the session count first reaches level (linear interpolation)."""
    prev = None
    for s in samples:
        if s[1] is not None and s[1] >= level:
            if prev is None or s[1] == prev[1]:
                return s[0]
            return prev[0] + (s[0] - prev[0]) * (level - prev[1]) / (s[1] - prev[1])
        if s[1] is not None:
            prev = s
    return None


def at(samples, t):
    """The first sample at or after t (the last one if none)."""
    for s in samples:
        if s[0] >= t:
            return s
    return samples[-1]


def windows(samples, n, stay):
    """Split the run: startup (before the first login), login (first login .. all + 1 s),
    steady (.. the first session closes), end. Returns a dict of figures."""
    ok = [s for s in samples if s[1] is not None]
    if not ok:
        return {}
    nmax = max(s[1] for s in ok)
    first = next((i for i, s in enumerate(ok) if s[1] > 0), None)
    if first is None:
        return dict(logged_in=0)
    i_all = next(i for i, s in enumerate(ok) if s[1] >= nmax)
    start = ok[max(0, first - 1)]
    t_all = ok[i_all][0]
    login_end = at(ok, t_all + 1.0)
    drop = next((s for s in ok if s[0] > login_end[0] and s[1] < nmax), ok[-1])
    # idle: after the login window, before the first message can go out (the first login
    # + the stay; spate's messages wait for every login, so they start later still)
    idle_end = at(ok, ok[first][0] + stay - 0.5)
    idle_rate = None
    if idle_end[0] - login_end[0] >= 1.0:
        idle_rate = (idle_end[2] - login_end[2]) / (idle_end[0] - login_end[0])
    r = dict(logged_in=nmax, startup_cpu=start[2], login_cpu=login_end[2] - start[2],
             steady_cpu=drop[2] - login_end[2], t_all=t_all, steady_s=drop[0] - login_end[0],
             idle_ms_per_s=round(idle_rate * 1000, 1) if idle_rate is not None else None)
    lo, hi = max(1, math.ceil(0.1 * n)), max(1, math.floor(0.9 * n))
    t_lo, t_hi = crossing(ok, lo), crossing(ok, hi)
    if n >= 20 and t_lo is not None and t_hi is not None and t_hi > t_lo:
        r["login_rate"] = (hi - lo) / (t_hi - t_lo)
    r["peak_tree_rss_kb"] = max(s[3] for s in samples)
    return r


def r3(x):
    return round(x, 3) if x is not None else None


def one_run(tool, n, args, bed, users, users_file, spate, workdir, count, tag):
    rundir = tempfile.mkdtemp(prefix=f"{tool}-{n}-", dir=workdir)
    if tool == "tsung":
        argv, env = tsung_argv(args, n, bed, users, rundir), tsung_env(rundir)
    else:
        argv, env = spate_argv(args, n, bed, spate, rundir, users_file), None
    limit = 2 * n / args.login_rate + args.stay + args.messages + 180
    busy = wait_quiet(args.wait_idle)
    row = dict(date=None, tool=tool, sessions=n, kind=tag, tls=args.tls, login_rate_target=args.login_rate,
               loadavg=loadavg(), busy_before=round(busy, 2))
    COMMANDS[tool] = " ".join(argv)
    res = run_measured(argv, count, limit, rundir, env=env)
    w = windows(res["samples"], n, args.stay)
    if args.keep:
        with open(os.path.join(rundir, "samples.csv"), "w") as f:
            f.write("t_s,server_sessions,cpu_s,tree_rss_kb,hwm_kb\n")
            for smp in res["samples"]:
                f.write(",".join("" if v is None else str(round(v, 3)) for v in smp) + "\n")
    msgs = None
    note = []
    if tool == "spate":
        try:
            with open(os.path.join(rundir, "run", "summary.json")) as f:
                s = json.load(f)
            t = s["totals"]
            msgs = t["accepted"]
            x = s.get("extra", {}).get("xmpp", {})
            if t["failed"] or x.get("missing") or s.get("errors"):
                note.append(f"failed {t['failed']}, missing {x.get('missing')}, "
                            f"error classes {len(s.get('errors') or [])}")
        except (OSError, ValueError, KeyError) as e:
            note.append(f"no summary: {e}")
    else:
        c = tsung_counts(rundir)
        msgs = int(c.get("tr_msg", 0))
        errs = {k: int(v) for k, v in c.items() if (k.startswith("error") or k == "timeout") and v}
        if errs:
            note.append("tsung " + ", ".join(f"{k}={v}" for k, v in sorted(errs.items())))
    if res["rc"] != 0:
        note.append(f"exit {res['rc']}: " + (res["text"].strip().splitlines() or [""])[-1][:100])
    if res["timed_out"]:
        note.append("timed out")
    if w.get("logged_in") is not None and w["logged_in"] < n:
        note.append(f"only {w['logged_in']} of {n} logged in at once")
    row.update(
        wall_s=res["wall"], cpu_s=r3(res["cpu"]), peak_rss_kb=res["maxrss_kb"],
        logged_in=w.get("logged_in"), login_rate=round(w["login_rate"], 1) if w.get("login_rate") else None,
        startup_cpu_s=r3(w.get("startup_cpu")), login_cpu_s=r3(w.get("login_cpu")),
        steady_cpu_s=r3(w.get("steady_cpu")),
        idle_cpu_ms_per_s=w.get("idle_ms_per_s"),
        messages=msgs,
        cpu_us_per_login=round(w["login_cpu"] * 1e6 / n, 1) if w.get("login_cpu") is not None else None,
        cpu_us_per_msg=round(w["steady_cpu"] * 1e6 / msgs, 1) if msgs and w.get("steady_cpu") is not None else None,
        peak_tree_rss_kb=w.get("peak_tree_rss_kb"), note="; ".join(note))
    log(f"{tool:6} n={n:<5} {tag:8}: login {fmt(row['login_rate'], 1)}/s, CPU {fmt(row['cpu_s'], 2)} s "
        f"(login {fmt(row['login_cpu_s'], 2)}, steady {fmt(row['steady_cpu_s'], 2)}), msgs {msgs}, "
        f"peak RSS {fmt((row['peak_rss_kb'] or 0) / 1024, 1)} MiB{'  ' + row['note'] if row['note'] else ''}")
    if not args.keep:
        shutil.rmtree(rundir, ignore_errors=True)
    return row


def compare(args, spate, workdir):
    bed_dir = args.bed or bed_up(workdir, "--xmpp", args.server, "--no-mail",
                                    "--users", str(max(args.sessions, 2)),
                                    "--xmpp-roster", args.roster)
    rows = []
    try:
        bed = bed_env(bed_dir)
        users_file = bed["SPATE_USERS_FILE"]
        with open(users_file) as f:
            users = [tuple(line.split()[:2]) for line in f if line.strip()]
        if len(users) < args.sessions:
            sys.exit(f"{users_file}: {len(users)} accounts, --sessions {args.sessions}")
        if bed.get("SPATE_XMPP_API") and bed.get("SPATE_XMPP_SERVER") == "ejabberd":
            count = EjabberdCount(bed["SPATE_XMPP_API"])
        else:
            count = TcpCount(int(bed["SPATE_XMPP"].rsplit(":", 1)[1]))
        if count() != 0:
            log("warning: the server has sessions already (another generator?)")
        info = dict(server=bed.get("SPATE_XMPP_SERVER"), count_basis=count.basis,
                    notes=bed.get("SPATE_XMPP_NOTES", ""))
        tools = args.tools
        for tool in tools:
            rows.append(one_run(tool, args.baseline_sessions, args, bed, users, users_file, spate, workdir, count, "baseline"))
        for rep in range(args.reps):
            order = tools if rep % 2 == 0 else tools[::-1]
            for tool in order:
                r = one_run(tool, args.sessions, args, bed, users, users_file, spate, workdir, count, "run")
                r["rep"] = rep + 1
                rows.append(r)
                time.sleep(args.pause)
    finally:
        if not args.bed:
            bed_down(bed_dir)
    return rows, info


def render_compare(rows, args, info, spate):
    out = []
    out.append(f"## spate xmpp vs Tsung {tsung_version()} — {args.sessions} sessions against "
               f"{info['server']} (loopback)\n")
    roster = (f"the shared roster of {args.sessions}" if args.roster == "shared"
              else "an empty roster: bed with --xmpp-roster none")
    out.append(f"- each session: stream, {'STARTTLS, ' if args.tls == 'starttls' else ''}SASL PLAIN, "
               f"bind, roster get ({roster}), initial presence; "
               f"logins at {args.login_rate}/s; stay {args.stay} s; then {args.messages} chat "
               f"messages ({BODY}-byte body) to logged-in sessions; spate at "
               f"{args.login_rate * args.messages}/s in total after every login, Tsung one a second "
               f"per session {args.stay} s after its own login")
    out.append(f"- {args.reps} repetitions per tool, alternating; medians (min–max); one "
               f"{args.baseline_sessions}-session run per tool (same schedule) is the memory baseline")
    out.append(f"- login rate: from the server's session count ({info['count_basis']}), sampled "
               f"every {SAMPLE_S} s: (90 % − 10 % of N) / time between the two crossings")
    out.append("- CPU: the generator's whole process tree (spate; tsung's bash, beam.smp and its "
               "ports) from /proc every 0.2 s; startup = before the first login; login = first "
               "login .. all logged in + 1 s, / N; per message = the time after that until the "
               f"first session closes (includes the {args.stay} s stay) / messages sent; idle = "
               "CPU rate in the stay before the first message; total = /usr/bin/time user+sys")
    out.append("- peak RSS = /usr/bin/time %M (largest process of the tree: spate, beam.smp); "
               f"RSS/session = (median peak RSS at N − peak RSS at {args.baseline_sessions} sessions) "
               f"/ (N − {args.baseline_sessions})")
    for tool, cmd in sorted(COMMANDS.items()):
        out.append(f"- {tool}: `{cmd}`" + (" (tsung.xml: bench/xmpp.py TSUNG_XML; Erlang "
                   "distribution on one loopback port, no epmd; Tsung does not verify the "
                   "server certificate, spate does)" if tool == "tsung" else ""))
    out.append(f"- bed: {info['notes']}")
    busy = [r["busy_before"] for r in rows if r.get("busy_before") is not None]
    loads = [r["loadavg"] for r in rows if r.get("loadavg") is not None]
    if busy:
        out.append(f"- CPU busy before each run (waiting up to {args.wait_idle:.0f} s for < 25 %): "
                   f"median {100 * median(busy):.0f} %, max {100 * max(busy):.0f} %; "
                   f"load average median {median(loads):.2f}")
    out.append("")
    out.append("| tool | runs | logged in | login rate [/s] | wall [s] | CPU total [s] | "
               "CPU startup [ms] | CPU-µs/login | CPU-µs/msg | CPU idle [ms/s] | msgs | peak RSS [MiB] | "
               f"RSS at {args.baseline_sessions} [MiB] | RSS/session [KiB] | notes |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    summ = {}
    for tool in args.tools:
        rs = [r for r in rows if r["tool"] == tool and r["kind"] == "run"]
        base = [r for r in rows if r["tool"] == tool and r["kind"] == "baseline"]
        good = [r for r in rs if r.get("cpu_s") is not None]

        def med(key, rs=good):
            v = [r[key] for r in rs if r.get(key) is not None]
            return median(v) if v else None

        def rng(key, nd=0):
            v = [r[key] for r in good if r.get(key) is not None]
            return f"{fmt(median(v), nd)} ({fmt(min(v), nd)}–{fmt(max(v), nd)})" if v else "n/a"
        peak, b = med("peak_rss_kb"), med("peak_rss_kb", base)
        per = (peak - b) / (args.sessions - args.baseline_sessions) if peak and b else None
        s = dict(rate=med("login_rate"), login=med("cpu_us_per_login"), msg=med("cpu_us_per_msg"),
                 peak=peak, per=per, cpu=med("cpu_s"))
        summ[tool] = s
        notes = "; ".join(sorted({r["note"] for r in rs + base if r.get("note")}))
        su = med("startup_cpu_s")
        out.append(f"| {tool} | {len(good)} | {fmt(med('logged_in'))} | {rng('login_rate', 1)} | "
                   f"{fmt(med('wall_s'), 1)} | {rng('cpu_s', 2)} | {fmt(su * 1000 if su is not None else None)} | "
                   f"{rng('cpu_us_per_login')} | {rng('cpu_us_per_msg')} | {fmt(med('idle_cpu_ms_per_s'), 1)} | "
                   f"{fmt(med('messages'))} | "
                   f"{fmt(peak / 1024 if peak else None, 1)} | {fmt(b / 1024 if b else None, 1)} | "
                   f"{fmt(per, 1)} | {notes} |")
    sp, ts = summ.get("spate"), summ.get("tsung")
    if sp and ts:
        def ratio(k):
            return fmt(sp[k] / ts[k], 2) if sp.get(k) and ts.get(k) else "n/a"
        out.append(f"\nspate/tsung: login rate ×{ratio('rate')}, CPU total ×{ratio('cpu')}, "
                   f"CPU/login ×{ratio('login')}, CPU/msg ×{ratio('msg')}, peak RSS ×{ratio('peak')}, "
                   f"RSS/session ×{ratio('per')}")
    out.append("")
    return "\n".join(out), summ


def tsung_version():
    try:
        r = subprocess.run(["tsung", "-v"], capture_output=True, text=True, timeout=20)
        return r.stdout.strip().split()[-1]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "?"


# ------------------------------------------------------------------------------- part 2
def read_stats(path):
    try:
        with open(path) as f:
            return json.load(f).get("xmpp", {})
    except (OSError, ValueError):
        return {}


def mem_run(spate, mode, k, args, workdir, users_file):
    """One K: a fresh spate serve, spate xmpp holding K idle sessions; RSS sampled."""
    rundir = tempfile.mkdtemp(prefix=f"mem-{mode}-{k}-", dir=workdir)
    listener = {"websocket": "--xmpp-ws", "wss": "--xmpp-wss"}.get(mode, "--xmpp")
    serve_argv = [spate, "serve", listener, None, "--users-file", users_file,
                  "--max-connections", "0", "--stats-file", None, "--cert-out", None,
                  "--xmpp-roster", args.mem_roster]
    port = free_port(22000 + int.from_bytes(os.urandom(2), "big") % 700 * 10)
    stats = os.path.join(rundir, "serve.json")
    cert = os.path.join(rundir, "serve.pem")
    slog = open(os.path.join(rundir, "serve.out"), "wb")
    serve_argv[3], serve_argv[9], serve_argv[11] = f"127.0.0.1:{port}", stats, cert
    MEM_COMMANDS["serve"] = " ".join(serve_argv)
    serve = subprocess.Popen(serve_argv,
                             stdout=slog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             cwd=rundir, preexec_fn=set_nofile)
    row = dict(date=None, mode=mode, k=k, login_rate=args.mem_rate, busy_before=None,
               roster=args.mem_roster)
    note = []
    try:
        if not wait_listen(port, 15):
            row["note"] = "spate serve did not listen"
            return row
        row["busy_before"] = round(wait_quiet(args.wait_idle), 2)
        target = {"websocket": f"ws://127.0.0.1:{port}/xmpp-websocket",
                  "wss": f"wss://127.0.0.1:{port}/xmpp-websocket"}.get(mode, f"127.0.0.1:{port}")
        argv = [spate, "xmpp", target, "--users-file", users_file, "--users", str(k),
                "--login-rate", f"{args.mem_rate}/s", "--sasl", "plain",
                "--stages", f"{args.mem_hold}s:0/s,1s:2/s,5s:2/s", "--count", "2",
                "--timeout", "120s", "--quiet", "--out", os.path.join(rundir, "run")]
        if mode == "starttls":
            argv += ["--starttls", "--ca", cert]
        elif mode == "wss":
            argv += ["--ca", cert]
        MEM_COMMANDS["xmpp"] = " ".join(argv)
        out = open(os.path.join(rundir, "xmpp.out"), "wb")
        t0 = time.monotonic()
        gen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               cwd=rundir, preexec_fn=set_nofile)
        limit = 2 * k / args.mem_rate + args.mem_hold + 300
        samples = []  # t, gen rss, gen hwm, gen cpu, serve rss, serve cpu, sessions
        idle_from = None
        idle = []
        overflows_idle = None
        while gen.poll() is None and time.monotonic() - t0 < limit:
            time.sleep(0.5)
            try:
                grss, ghwm = proc_mem(gen.pid)
                gcpu = proc_cpu_seconds(gen.pid)
                srss, _ = proc_mem(serve.pid)
                scpu = proc_cpu_seconds(serve.pid)
            except (OSError, ValueError, IndexError):
                break
            n = read_stats(stats).get("sessions", 0)
            t = time.monotonic() - t0
            samples.append((t, grss, ghwm, gcpu, srss, scpu, n))
            # idle: every session logged in and the generator used < 2 % of a core for 1 s
            if (len(samples) >= 3 and n >= k and samples[-3][6] >= k
                    and gcpu - samples[-3][3] < 0.02):
                if idle_from is None:
                    idle_from = t
                if len(idle) < 6:
                    idle.append(samples[-1])
                    overflows_idle = read_stats(stats).get("queue_overflows", 0)
        if gen.poll() is None:
            note.append("over its time limit: stopped")
            stop_tree(gen.pid, "spate xmpp")
        gen.wait(timeout=60)
        out.close()
        if not samples:
            row["note"] = "no sample"
            return row
        logged = [s for s in samples if s[6] >= k]
        row.update(
            rc=gen.returncode, logged_in_max=max(s[6] for s in samples),
            login_s=round(logged[0][0], 1) if logged else None,
            idle_samples=len(idle),
            rss_idle_kb=median([s[1] for s in idle]) if idle else None,
            hwm_kb=max(s[2] for s in samples),
            gen_cpu_s=round(samples[-1][3], 2),
            serve_rss_max_kb=max(s[4] for s in samples),
            serve_cpu_s=round(samples[-1][5], 2), overflows_idle=overflows_idle)
        if not idle:
            note.append("never idle with every session logged in: RSS at the last sample with all in")
            if logged:
                row["rss_idle_kb"] = logged[-1][1]
        try:
            with open(os.path.join(rundir, "run", "summary.json")) as f:
                s = json.load(f)
            t = s["totals"]
            row["connections"] = t.get("connections")
            errs = s.get("errors") or []
            if t.get("connect_failures") or errs:
                note.append(f"connect failures {t.get('connect_failures')}, error classes: "
                            + ", ".join(str(e.get("key", e))[:60] for e in errs[:3]))
        except (OSError, ValueError, KeyError) as e:
            note.append(f"no summary: {e}")
        if gen.returncode not in (0, None):
            note.append(f"spate xmpp exit {gen.returncode}")
    finally:
        if serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait(timeout=10)
        slog.close()
        st = read_stats(stats)
        row["overflows_end"] = st.get("queue_overflows")
        if st.get("queue_overflows"):
            oi = row.get("overflows_idle")
            note.append(f"server queue overflows: {oi if oi is not None else '?'} while idle, "
                        f"{st['queue_overflows']} at the end (the unavailable-presence storm as "
                        "sessions close)")
        row["note"] = "; ".join(note)
        if not args.keep:
            shutil.rmtree(rundir, ignore_errors=True)
    log(f"memory {mode:8} K={k:<6}: idle RSS {fmt((row.get('rss_idle_kb') or 0) / 1024, 1)} MiB, "
        f"logged in {row.get('logged_in_max')} after {row.get('login_s')} s, gen CPU {row.get('gen_cpu_s')} s"
        f"{'  ' + row['note'] if row.get('note') else ''}")
    return row


def memory(args, spate, workdir):
    ks = sorted(set(args.mem_ks))
    if max(ks) > NOFILE - 1000:
        sys.exit(f"--mem-ks: at most {NOFILE - 1000} sessions (one process opens at most {NOFILE} files)")
    users_file = os.path.join(workdir, "mem-users.txt")
    with open(users_file, "w") as f:
        for i in range(max(ks + [args.mem_k0])):
            f.write(f"user{i}@example.test pw{i}\n")
    rows = []
    for mode in args.mem_modes:
        for k in [args.mem_k0] + ks:
            rows.append(mem_run(spate, mode, k, args, workdir, users_file))
            time.sleep(args.pause)
    for mode in args.mem_modes:
        base = next((r for r in rows if r["mode"] == mode and r["k"] == args.mem_k0), None)
        for r in rows:
            if r["mode"] == mode and r["k"] != args.mem_k0 and base and base.get("rss_idle_kb") \
                    and r.get("rss_idle_kb"):
                r["kib_per_session"] = round((r["rss_idle_kb"] - base["rss_idle_kb"]) / (r["k"] - args.mem_k0), 2)
    return rows


def render_memory(rows, args):
    out = [f"## spate xmpp: generator memory per idle logged-in session (against spate serve)\n",
           f"- `{MEM_COMMANDS.get('serve', 'spate serve')}`",
           f"- `{MEM_COMMANDS.get('xmpp', 'spate xmpp')}` (the last K)",
           f"- `spate serve --xmpp` (own process, fresh for each K) with {max(args.mem_ks)} accounts; "
           f"`spate xmpp --users K --login-rate {args.mem_rate}/s --sasl plain --stages "
           f"{args.mem_hold}s:0/s,1s:2/s,5s:2/s --count 2` (+ `--starttls --ca` for starttls): every "
           f"session logs in (no roster), stays idle {args.mem_hold} s, then 2 messages",
           ("- `--xmpp-roster shared`: the embedded server sends each initial presence to every "
            "available session of the domain: K logins deliver K(K+1)/2 presences (50 M at 10 000), "
            "so logins take longer than K / login rate, and the memory is what is left after that storm"
            if args.mem_roster == "shared" else
            "- `--xmpp-roster subscriptions` with no subscription: an initial presence goes to no one "
            "(no presence storm): the memory of sessions that only log in and wait"),
           "- RSS idle: median of up to 6 VmRSS samples (0.5 s apart) of the spate xmpp process once "
           "the server counts K sessions and the generator used < 2 % of a core for 1 s; "
           f"KiB/session = (RSS idle(K) − RSS idle({args.mem_k0})) / (K − {args.mem_k0})",
           "- open files limited to 20 000 per process\n",
           "| mode | K | logged in | login time [s] | RSS idle [MiB] | VmHWM [MiB] | KiB/session | "
           "generator CPU [s] | server RSS max [MiB] | server CPU [s] | notes |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mib = (lambda v: fmt(v / 1024, 1) if v else "n/a")
        out.append(f"| {r['mode']} | {r['k']} | {fmt(r.get('logged_in_max'))} | {fmt(r.get('login_s'), 1)} | "
                   f"{mib(r.get('rss_idle_kb'))} | {mib(r.get('hwm_kb'))} | {fmt(r.get('kib_per_session'), 2)} | "
                   f"{fmt(r.get('gen_cpu_s'), 2)} | {mib(r.get('serve_rss_max_kb'))} | "
                   f"{fmt(r.get('serve_cpu_s'), 2)} | {r.get('note', '')} |")
    out.append("")
    return "\n".join(out)



# ------------------------------------------------------------------------------- transport
TRANSPORTS = {
    # mode: (spate serve's listener, the target, TLS options for spate xmpp)
    "tcp": ("--xmpp", "127.0.0.1:{port}", []),
    "websocket": ("--xmpp-ws", "ws://127.0.0.1:{port}/xmpp-websocket", []),
    "starttls": ("--xmpp", "127.0.0.1:{port}", ["--starttls", "--ca", "{cert}"]),
    "wss": ("--xmpp-wss", "wss://127.0.0.1:{port}/xmpp-websocket", ["--ca", "{cert}"]),
}


def transport_run(spate, mode, args, workdir, users_file):
    """One run: a fresh spate serve; spate xmpp sends --tr-messages as fast as its
    --tr-sessions sessions can (closed); CPU per stanza of both, from their own clocks."""
    listener, target, tls = TRANSPORTS[mode]
    rundir = tempfile.mkdtemp(prefix=f"tr-{mode}-", dir=workdir)
    port = free_port(23000 + int.from_bytes(os.urandom(2), "big") % 700 * 10)
    cert = os.path.join(rundir, "serve.pem")
    serve = subprocess.Popen([spate, "serve", listener, f"127.0.0.1:{port}", "--users-file", users_file,
                              "--cert-out", cert, "--xmpp-roster", "subscriptions"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, cwd=rundir, preexec_fn=set_nofile)
    row = dict(date=None, mode=mode, sessions=args.tr_sessions, messages=args.tr_messages)
    try:
        if not wait_listen(port, 15):
            row["note"] = "spate serve did not listen"
            return row
        wait_quiet(args.wait_idle)
        argv = [spate, "xmpp", target.format(port=port), "--users-file", users_file,
                "--users", str(args.tr_sessions), "--sasl", "plain", "-n", str(args.tr_messages),
                "--quiet", "--out", os.path.join(rundir, "run")]
        argv += [a.format(cert=cert) for a in tls]
        TR_COMMANDS[mode] = " ".join(argv)
        cpu0 = proc_cpu_seconds(serve.pid)
        rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=rundir, preexec_fn=set_nofile, timeout=600).returncode
        serve_cpu = proc_cpu_seconds(serve.pid) - cpu0
        with open(os.path.join(rundir, "run", "summary.json")) as f:
            sm = json.load(f)
        t = sm["totals"]
        n = t.get("accepted") or 0
        row.update(rc=rc, accepted=n, delivered=t.get("delivered"), msgs_per_s=round(sm["messages_per_s"], 1),
                   gen_cpu_us=round(sm["generator_cpu_s"] * 1e6 / n, 1) if n else None,
                   serve_cpu_us=round(serve_cpu * 1e6 / n, 1) if n else None,
                   p50_us=next((p["p50_us"] for p in sm["phases"] if p["phase"] == "arrival"), None))
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        row["note"] = f"failed: {e}"
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
        if not args.keep:
            shutil.rmtree(rundir, ignore_errors=True)
    log(f"transport {mode:9}: {row.get('msgs_per_s')} msg/s, generator {row.get('gen_cpu_us')} µs/msg, "
        f"server {row.get('serve_cpu_us')} µs/msg {row.get('note', '')}")
    return row


TR_COMMANDS = {}


def transports(args, spate, workdir):
    users_file = os.path.join(workdir, "tr-users.txt")
    with open(users_file, "w") as f:
        for i in range(args.tr_sessions):
            f.write(f"user{i}@example.test pw{i}\n")
    rows = []
    for _ in range(args.tr_reps):
        for mode in args.tr_modes:
            rows.append(transport_run(spate, mode, args, workdir, users_file))
            time.sleep(args.pause)
    return rows


def render_transports(rows, args):
    out = ["## spate xmpp over WebSocket (RFC 7395) against TCP: CPU per stanza\n",
           f"- `spate serve` (own process, fresh each run) with the listener of each mode; "
           f"`spate xmpp TARGET --users {args.tr_sessions} --sasl plain -n {args.tr_messages}` "
           f"(closed: every session sends its next message as soon as the last is written), "
           f"modes alternating, {args.tr_reps} runs each; medians",
           "- generator CPU per message: summary.json's generator_cpu_s / accepted (logins "
           "included); server CPU per message: the spate serve process's CPU over the run / accepted",
           "- ratios: WebSocket against TCP (websocket/tcp, wss/starttls)\n",
           "| mode | runs | msg/s | generator CPU [µs/msg] | server CPU [µs/msg] | arrival p50 [µs] | × generator CPU | × server CPU |",
           "|---|---|---|---|---|---|---|---|"]
    base = {"websocket": "tcp", "wss": "starttls"}
    med = {}
    for mode in args.tr_modes:
        good = [r for r in rows if r["mode"] == mode and r.get("gen_cpu_us")]
        med[mode] = {k: median([r[k] for r in good]) if good else None
                     for k in ("msgs_per_s", "gen_cpu_us", "serve_cpu_us", "p50_us")}
        med[mode]["runs"] = len(good)
    for mode in args.tr_modes:
        m = med[mode]
        b = med.get(base.get(mode, ""), {})
        ratio = (lambda k: fmt(m[k] / b[k], 2) if m.get(k) and b.get(k) else "")
        out.append(f"| {mode} | {m['runs']} | {fmt(m['msgs_per_s'])} | {fmt(m['gen_cpu_us'], 1)} | "
                   f"{fmt(m['serve_cpu_us'], 1)} | {fmt(m['p50_us'])} | {ratio('gen_cpu_us')} | {ratio('serve_cpu_us')} |")
    out.append("")
    for mode, cmd in TR_COMMANDS.items():
        out.append(f"- {mode}: `{cmd}`")
    out.append("")
    return "\n".join(out)

# ------------------------------------------------------------------------------- main
def append_csv(path, rows):
    if not rows:
        return
    keys = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    new = not os.path.exists(path)
    if not new:
        with open(path) as f:
            head = f.readline().strip().split(",")
        if head != keys:  # columns changed: keep the old file beside
            os.replace(path, path + ".old")
            new = True
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        if new:
            w.writeheader()
        w.writerows(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=300, help="part 1: sessions (accounts of the bed)")
    ap.add_argument("--login-rate", type=int, default=50, help="part 1: logins per second")
    ap.add_argument("--messages", type=int, default=3, help="part 1: chat messages per session")
    ap.add_argument("--stay", type=int, default=10, help="part 1: seconds logged in before the messages")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tls", choices=["starttls", "plain"], default="starttls")
    ap.add_argument("--server", choices=["ejabberd", "prosody"], default="ejabberd")
    ap.add_argument("--roster", choices=["shared", "none"], default="none",
                    help="the bed's roster: every account in one group, or none")
    ap.add_argument("--baseline-sessions", type=int, default=10,
                    help="part 1: sessions of the memory baseline run (>= 8: spate's 8 recorder "
                         "shards each allocate their histograms on first use)")
    ap.add_argument("--tools", type=lambda s: s.split(","), default=["spate", "tsung"])
    ap.add_argument("--bed", help="use this running test bed (scripts/testbed --dir) instead of a new one")
    ap.add_argument("--mem-ks", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 5000, 10000])
    ap.add_argument("--mem-k0", type=int, default=10)
    ap.add_argument("--mem-rate", type=int, default=500, help="part 2: logins per second")
    ap.add_argument("--mem-hold", type=int, default=10, help="part 2: idle seconds after the last login")
    ap.add_argument("--mem-modes", type=lambda s: s.split(","),
                    default=["plain", "starttls", "websocket", "wss"],
                    help="part 2: plain and starttls over TCP; websocket (ws://) and wss (RFC 7395)")
    ap.add_argument("--mem-roster", choices=["shared", "subscriptions"], default="shared",
                    help="part 2: the server's rosters (shared: every login's presence goes to "
                         "every session; subscriptions: to no one)")
    ap.add_argument("--tr-modes", type=lambda s: s.split(","),
                    default=["tcp", "websocket", "starttls", "wss"],
                    help="part 3: transports compared (tcp, websocket, starttls, wss)")
    ap.add_argument("--tr-sessions", type=int, default=50, help="part 3: sessions")
    ap.add_argument("--tr-messages", type=int, default=20000, help="part 3: messages a run")
    ap.add_argument("--tr-reps", type=int, default=3, help="part 3: runs of each transport")
    ap.add_argument("--skip-transport", action="store_true")
    ap.add_argument("--skip-compare", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--pause", type=float, default=1.0)
    ap.add_argument("--wait-idle", type=float, default=20.0,
                    help="before each run wait up to this many seconds for the CPUs to be < 25%% busy")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory (printed)")
    args = ap.parse_args()
    if args.sessions < 20 or args.sessions <= args.baseline_sessions:
        sys.exit("--sessions: at least 20 (the login rate is taken between 10 % and 90 %) "
                 "and more than --baseline-sessions")
    spate = find_spate()
    if not os.access(spate, os.X_OK):
        sys.exit(f"{spate}: not built (cargo build --release, or set SPATE_BIN / CARGO_TARGET_DIR)")
    if not os.access("/usr/bin/time", os.X_OK):
        sys.exit("/usr/bin/time missing: apt-get install -y time")
    if not args.skip_compare and "tsung" in args.tools and not shutil.which("tsung"):
        sys.exit("tsung missing: apt-get install -y tsung")
    os.makedirs(RESULTS, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="spate-bench-xmpp-")
    os.chmod(workdir, 0o755)  # the bed's ejabberd user must reach the bed directory
    started = datetime.datetime.now().isoformat(timespec="seconds")

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    md = [f"# spate xmpp — against Tsung, and memory per session\n",
          f"- date: {started}; host: {platform.node()}, {os.cpu_count()} CPUs, "
          f"{platform.system()} {platform.release()}; spate: {spate}\n"]
    try:
        if not args.skip_compare:
            rows, info = compare(args, spate, workdir)
            for r in rows:
                r["date"] = started
            text, _ = render_compare(rows, args, info, spate)
            md.append(text)
            append_csv(os.path.join(RESULTS, "xmpp.csv"), rows)
            with open(os.path.join(RESULTS, "xmpp-latest.md"), "w") as f:
                f.write("\n".join(md) + "\n")
        if not args.skip_transport:
            trows = transports(args, spate, workdir)
            for r in trows:
                r["date"] = started
            md.append(render_transports(trows, args))
            append_csv(os.path.join(RESULTS, "xmpp-transport.csv"), trows)
        if not args.skip_memory:
            mrows = memory(args, spate, workdir)
            for r in mrows:
                r["date"] = started
            md.append(render_memory(mrows, args))
            append_csv(os.path.join(RESULTS, "xmpp-memory.csv"), mrows)
    finally:
        if args.keep:
            log(f"run directories kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    text = "\n".join(md)
    print(text)
    with open(os.path.join(RESULTS, "xmpp-latest.md"), "w") as f:
        f.write(text + "\n")
    log(f"written: {os.path.join(RESULTS, 'xmpp-latest.md')}, rows appended to xmpp.csv / xmpp-memory.csv")


if __name__ == "__main__":
    main()
