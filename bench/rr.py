#!/usr/bin/env python3
"""spate rr against wrk, both against the test bed's nginx authorization service on loopback.

This is a benchmark, never a test: it asserts nothing about speed, it measures and prints.

  bench/rr.sh [--reps 3] [--duration 10] [--connections 50] [--rate 30] [--rate-duration 20]
              [--only CONFIG,...] [--tools spate,wrk] [--bed DIR] [--wait-idle 20] [--keep]

One request that always hits nginx's response cache (one fixed body, POST /authz): the
service is cheap, so the generator is what is measured. Configurations (--only):
  http-ka       plain HTTP, keep-alive, --connections closed sessions, --duration s:
                spate and wrk (wrk -t2 -cN -dDs)
  http-close    plain HTTP, a new connection per request: both send `Connection: close`
                (spate --per-request, which says it by default, wrk -H 'Connection:
                close': nginx closes, the tools reconnect)
  http-client-close  plain HTTP, a new connection per request that spate closes itself
                (--per-request --client-close, no `Connection: close`): the generator's
                kernel keeps the TIME_WAIT; spate only (wrk closes only when the server
                says it will)
  https-ka      HTTPS without a client certificate (the bed's benchmark port), keep-alive:
                spate and wrk
  https-close   the same, a new connection and handshake per request, `Connection: close`
                as for http-close; both resume sessions (spate by default; wrk keeps its
                OpenSSL session across reconnects, SSL_clear)
  tls-ka        TLS with a client certificate, keep-alive: spate only
  tls-perreq    TLS with a client certificate, a new connection and handshake per request
                (session resumption on, spate's default): spate only
  tls-perreq-rate       the same at E3's load, --rate/s for --rate-duration s (open model,
                        --max-in-flight 40): generator CPU as a share of one core
  tls-perreq-rate-full  the same with --no-resumption (a full handshake every request)
wrk cannot present a client certificate and has no rate limit (wrk2, which has one, is
not in Debian): the tls rows have no wrk figure.

Figures per run: the tool's own request count and duration (wrk's "N requests" and
Requests/sec, spate's summary.json), the nginx worker's own count (/stats `requests`
delta: cross-check), the generator's CPU from its rusage (os.wait4: user+sys of the whole
process, start-up included) and the nginx worker's from /proc.

Results: bench/results/rr-latest.md (medians, min-max, ratios spate/wrk, the targets) and
bench/results/rr-latest.csv (every run).
"""

import argparse
import csv
import datetime
import http.client
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (run_note, REPO, RESULTS, bed_down, bed_env, bed_up, find_spate, fmt, loadavg,  # noqa: E402
                     log, median, proc_cpu_seconds, run_child, wait_quiet)

# One fixed request: its md5 is one cache key, so after the first request every one hits.
BODY = "subject=CN=client action=read resource=doc-bench"
RUN_LIMIT_PAD = 60  # seconds a run may exceed its planned duration before it is killed

# name, transport, policy, load ("closed" or "rate"), resumption, tools that can do it
CONFIGS = [
    ("http-ka", "plain", "keep-alive", "closed", True, ("spate", "wrk")),
    ("http-close", "plain", "per-request", "closed", True, ("spate", "wrk")),
    ("http-client-close", "plain", "client-close", "closed", True, ("spate",)),
    ("https-ka", "https", "keep-alive", "closed", True, ("spate", "wrk")),
    ("https-close", "https", "per-request", "closed", True, ("spate", "wrk")),
    ("tls-ka", "tls", "keep-alive", "closed", True, ("spate",)),
    ("tls-perreq", "tls", "per-request", "closed", True, ("spate",)),
    ("tls-perreq-rate", "tls", "per-request", "rate", True, ("spate",)),
    ("tls-perreq-rate-full", "tls", "per-request", "rate", False, ("spate",)),
]
WHY_NO_WRK = {
    "tls": "wrk cannot present a client certificate (the service requires one)",
    "rate": "wrk has no rate limit (wrk2 is not in Debian)",
    "client-close": "wrk closes a connection only when the server says it will",
}


def measured(*figures):
    """Whether every (req/s, CPU-µs/req, ...) summary was measured, both figures non-zero."""
    return all(f and f[0] and f[1] for f in figures)


def why_no_wrk(transport, policy):
    if policy == "client-close":
        return WHY_NO_WRK["client-close"]
    return WHY_NO_WRK["tls" if transport == "tls" else "rate"]


# ------------------------------------------------------------------------------- bed
class Service:
    """The bed's nginx: its plain-HTTP benchmark port for /stats and warming the cache."""

    def __init__(self, env):
        for k in ("SPATE_AUTHZ_HTTP_PORT", "SPATE_AUTHZ_TLS", "SPATE_AUTHZ_PORT", "SPATE_AUTHZ_CA"):
            if k not in env:
                sys.exit(f"the bed's env lacks {k}: a bed from before the benchmark ports? "
                         "(scripts/testbed down, then up again)")
        self.env = env
        self.http_port = int(env["SPATE_AUTHZ_HTTP_PORT"])

    def call(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
        try:
            c.request(method, path, body)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def requests(self):
        status, text = self.call("GET", "/stats")
        if status != 200:
            sys.exit(f"/stats answered {status}")
        return json.loads(text)["requests"]

    def warm(self):
        """One request with the benchmark body: from then on it is a cache hit."""
        status, text = self.call("POST", "/authz", BODY)
        if status != 200 or not text.startswith(b"Permit"):
            sys.exit(f"/authz answered {status} {text[:80]!r}")

    def worker_pid(self):
        with open(self.env["SPATE_AUTHZ_NGINX_WORKER_PIDFILE"]) as f:
            return int(f.read().split()[0])


# ------------------------------------------------------------------------------- tools
# The bed's variable naming each transport's address: plain HTTP and HTTPS without a
# client certificate (benchmark ports), HTTPS with one (the service's own port).
TARGET = {"plain": "SPATE_AUTHZ_HTTP", "https": "SPATE_AUTHZ_TLS", "tls": "SPATE_AUTHZ"}
LABEL = {"plain": "HTTP", "https": "HTTPS, no client cert", "tls": "TLS+client cert"}


def spate_argv(spate, cfg, args, env, resdir):
    name, transport, policy, load, resumption, _ = cfg
    argv = [spate, "rr", env[TARGET[transport]], "--frame", "http", "--method", "POST",
            "--path", "/authz", "--template", BODY, "--quiet", "-o", resdir]
    if transport != "plain":
        argv += ["--tls", "--ca", env["SPATE_AUTHZ_CA"]]
    if transport == "tls":
        argv += ["--cert", env["SPATE_AUTHZ_CERT"], "--key", env["SPATE_AUTHZ_KEY"]]
    if policy == "per-request":
        # over HTTP it says `Connection: close` by itself, as wrk is told to: the server
        # closes (http-client-close measures the other way)
        argv.append("--per-request")
    if policy == "client-close":
        # spate closes each connection itself (no `Connection: close`): the active
        # close's TIME_WAIT is this host's, and so is its cost
        argv += ["--per-request", "--client-close"]
    if not resumption:
        argv.append("--no-resumption")
    if load == "closed":
        argv += ["--users", str(args.connections), "--duration", f"{args.duration}s"]
    else:
        argv += ["--rate", f"{args.rate}/s", "--duration", f"{args.rate_duration}s",
                 "--max-in-flight", "40"]
    return argv


def wrk_script(workdir):
    path = os.path.join(workdir, "post.lua")
    with open(path, "w") as f:
        f.write('wrk.method = "POST"\n')
        f.write(f'wrk.body = "{BODY}"\n')
    return path


def wrk_argv(cfg, args, env, script):
    name, transport, policy, load, _, _ = cfg
    argv = ["wrk", "-t2", f"-c{args.connections}", f"-d{args.duration}s", "-s", script]
    if policy == "per-request":
        argv += ["-H", "Connection: close"]
    scheme = "https" if transport == "https" else "http"
    return argv + [f"{scheme}://{env[TARGET[transport]]}/authz"]


def parse_wrk(text):
    """(requests, requests/s, errors) from wrk's report."""
    m = re.search(r"(\d+) requests in ", text)
    rps = re.search(r"Requests/sec:\s*([\d.]+)", text)
    if not m or not rps:
        return None, None, None
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors += int(non2xx.group(1)) if non2xx else 0
    return int(m.group(1)), float(rps.group(1)), errors


def read_spate(resdir):
    """(accepted, elapsed s, errors, handshakes, resumed) from spate's summary.json."""
    try:
        with open(os.path.join(resdir, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return None
    t = s["totals"]
    rr = s.get("extra", {}).get("rr", {})
    errors = t["rejected"] + t["failed"] + t.get("unfinished", 0)
    return (t["accepted"], s["elapsed_s"], errors, rr.get("handshakes"),
            rr.get("resumed_handshakes"))


# ------------------------------------------------------------------------------- one run
def cpu_snapshot():
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v) - idle, sum(v)


def one_run(tool, cfg, rep, args, spate, env, svc, workdir, script):
    name, transport, policy, load, resumption, _ = cfg
    planned = args.duration if load == "closed" else args.rate_duration
    row = dict(config=name, tool=tool, rep=rep, transport=transport, policy=policy,
               load=(f"{args.connections} connections" if load == "closed" else f"{args.rate}/s"),
               requests=None, errors=None, elapsed_s=None, req_per_s=None, wall_s=None,
               gen_cpu_s=None, gen_cpu_us_per_req=None, gen_cpu_pct_core=None,
               server_requests=None, server_minus_tool=None, server_cpu_us_per_req=None,
               server_cpu_pct_core=None, machine_busy_pct=None, others_cpu_pct_core=None,
               handshakes=None, resumed=None, rc=None,
               loadavg=round(loadavg(), 2), busy_before=None, note="")
    svc.warm()
    row["busy_before"] = round(wait_quiet(args.wait_idle), 2)
    rundir = os.path.join(workdir, f"{name}-{tool}-{rep}")
    os.makedirs(rundir)
    if tool == "spate":
        argv = spate_argv(spate, cfg, args, env, os.path.join(rundir, "res"))
    else:
        argv = wrk_argv(cfg, args, env, script)
    worker = svc.worker_pid()
    before = svc.requests()
    wcpu0 = proc_cpu_seconds(worker, with_children=False)
    busy0, total0 = cpu_snapshot()
    rc, wall, gcpu, text = run_child(argv, timeout=planned + RUN_LIMIT_PAD,
                                     out_path=os.path.join(rundir, "out.txt"))
    busy1, total1 = cpu_snapshot()
    wcpu = proc_cpu_seconds(worker, with_children=False) - wcpu0
    # The whole machine during the run, and what neither the generator nor the nginx
    # worker used (other work on the machine, and softirq time charged to no process).
    machine = (busy1 - busy0) / max(1, total1 - total0)
    others = machine * (os.cpu_count() or 1) * wall - gcpu - wcpu
    row.update(machine_busy_pct=round(100 * machine, 1),
               others_cpu_pct_core=round(100 * others / wall, 1))
    served = svc.requests() - before
    if tool == "spate":
        got = read_spate(os.path.join(rundir, "res"))
        n, elapsed, errors, hs, resumed = got if got else (None, None, None, None, None)
        row.update(handshakes=hs, resumed=resumed)
    else:
        n, rps, errors = parse_wrk(text)
        elapsed = n / rps if n and rps else None
    row.update(rc=rc, wall_s=round(wall, 3), gen_cpu_s=round(gcpu, 3), requests=n,
               errors=errors, elapsed_s=round(elapsed, 3) if elapsed else None,
               server_requests=served, gen_cpu_pct_core=round(100 * gcpu / wall, 2),
               server_cpu_pct_core=round(100 * wcpu / elapsed, 1) if elapsed else None)
    if n:
        row.update(req_per_s=round(n / elapsed, 1),
                   gen_cpu_us_per_req=round(gcpu * 1e6 / n, 2),
                   server_cpu_us_per_req=round(wcpu * 1e6 / n, 2),
                   server_minus_tool=served - n)
    row["note"] = run_note(rc, text, n, errors, rundir if args.keep else None)
    log(f"{name:21} {tool:5} rep {rep}: {fmt(row['req_per_s'])} req/s, gen "
        f"{fmt(row['gen_cpu_us_per_req'], 1)} µs/req ({fmt(row['gen_cpu_pct_core'], 1)} % of a core), "
        f"nginx {fmt(row['server_cpu_pct_core'])} %, others {fmt(row['others_cpu_pct_core'])} %, "
        f"server−tool {row['server_minus_tool']}"
        f"{'  ' + row['note'] if row['note'] else ''}")
    return row


# ------------------------------------------------------------------------------- report
def summarise(rows, name, tool):
    good = [r for r in rows if r["config"] == name and r["tool"] == tool
            and r["req_per_s"] and r["rc"] == 0]

    def med(k):
        return median([r[k] for r in good if r[k] is not None])

    def rng(k, nd=0):
        v = [r[k] for r in good if r[k] is not None]
        return f"{fmt(min(v), nd)}–{fmt(max(v), nd)}" if v else "n/a"
    return good, med, rng


def paired_ratios(rows, name):
    """Median spate/wrk ratios of req/s and CPU-µs/req over repetitions, each repetition's
    two runs back to back (less exposed to drift on a shared machine than the medians)."""
    by_rep = {}
    for r in rows:
        if r["config"] == name and r["req_per_s"] and r["rc"] == 0:
            by_rep.setdefault(r["rep"], {})[r["tool"]] = r
    pairs = [(p["spate"], p["wrk"]) for p in by_rep.values() if "spate" in p and "wrk" in p]
    if not pairs:
        return None
    rps = [a["req_per_s"] / b["req_per_s"] for a, b in pairs]
    cpu = [a["gen_cpu_us_per_req"] / b["gen_cpu_us_per_req"] for a, b in pairs]
    return median(rps), median(cpu), rps


def render(rows, configs, args, spate, started, bed_note):
    out = ["# spate rr vs wrk — against the test bed's nginx authorization service (loopback)\n"]
    out.append(f"- date: {started}; host: {platform.node()}, {os.cpu_count()} CPUs, "
               f"{platform.system()} {platform.release()}; spate: `{spate}`; {wrk_version()}")
    out.append(f"- target: {bed_note}; one nginx worker (one core at most), the other core "
               "is the generator's")
    out.append(f"- request: `POST /authz` with the fixed body `{BODY}`: a cache hit every time "
               "(the cache is warmed before each run), so the service is cheap")
    out.append(f"- {args.reps} repetitions per tool and configuration, tools alternating; "
               "figures are medians, min–max in brackets")
    out.append("- req/s: the tool's own count / its own duration (wrk: `N requests` and "
               "Requests/sec; spate: summary.json accepted / elapsed_s). server−tool: nginx's "
               "/stats `requests` delta minus the tool's count (wrk leaves requests in flight "
               "uncounted at its end; spate finishes them)")
    out.append("- generator CPU: user+sys of the generator process (os.wait4 rusage, start-up "
               "and result writing included) / requests, and / its wall time as % of one core; "
               "nginx CPU: the worker's /proc utime+stime delta (10 ms ticks); others CPU: "
               "all cores' busy time from /proc/stat during the run less the generator's and "
               "the worker's, as % of one core (other work on the machine, and softirq time "
               "charged to no process: loopback networking shows there)")
    busy = [r["busy_before"] for r in rows if r.get("busy_before") is not None]
    loads = [r["loadavg"] for r in rows if r.get("loadavg") is not None]
    if busy:
        out.append(f"- machine before each run (after waiting up to {args.wait_idle:.0f} s for "
                   f"< 25 % busy): CPU busy median {100 * median(busy):.0f} %, max "
                   f"{100 * max(busy):.0f} %, {sum(1 for b in busy if b > 0.25)} of {len(busy)} "
                   f"runs started busy; 1-min load average median {median(loads):.2f}, max "
                   f"{max(loads):.2f} (per run in rr-latest.csv)")
    others = [r["others_cpu_pct_core"] for r in rows if r.get("others_cpu_pct_core") is not None]
    if others:
        out.append(f"- others CPU during the runs: median {median(others):.0f} % of a core, "
                   f"{sum(1 for o in others if o > 25)} of {len(others)} runs above 25 % "
                   "(work besides the benchmark's: those runs' figures are not the tools' own)")
    out.append("")
    out.append("| configuration | tool | runs | req/s | gen CPU-µs/req | gen CPU % of a core | "
               "nginx CPU-µs/req | nginx CPU % | others CPU % | server−tool | errors | "
               "handshakes (resumed) |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for cfg in configs:
        name, transport, policy, load, resumption, can = cfg
        what = (f"{LABEL[transport]}, {policy}"
                + ("" if resumption else ", no resumption") + ", "
                + (f"{args.connections} conn." if load == "closed" else f"{args.rate}/s"))
        for tool in args.tools:
            if tool not in can:
                why = why_no_wrk(transport, policy)
                out.append(f"| {name} ({what}) | {tool} | – | {why} | | | | | | | | |")
                continue
            good, med, rng = summarise(rows, name, tool)
            summary[(name, tool)] = (med("req_per_s"), med("gen_cpu_us_per_req"),
                                     med("gen_cpu_pct_core"))
            if not good:
                notes = "; ".join(sorted({r["note"] for r in rows
                                          if r["config"] == name and r["tool"] == tool and r["note"]}))
                out.append(f"| {name} ({what}) | {tool} | 0 | no data {notes} | | | | | | | | |")
                continue
            hs = ""
            if med("handshakes") is not None and transport != "plain":
                hs = f"{fmt(med('handshakes'))} ({fmt(med('resumed'))})"
            out.append(
                f"| {name} ({what}) | {tool} | {len(good)} | {fmt(med('req_per_s'))} "
                f"({rng('req_per_s')}) | {fmt(med('gen_cpu_us_per_req'), 1)} "
                f"({rng('gen_cpu_us_per_req', 1)}) | {fmt(med('gen_cpu_pct_core'), 1)} "
                f"({rng('gen_cpu_pct_core', 1)}) | {fmt(med('server_cpu_us_per_req'), 1)} | "
                f"{fmt(med('server_cpu_pct_core'))} | {fmt(med('others_cpu_pct_core'))} "
                f"({rng('others_cpu_pct_core')}) | {rng('server_minus_tool')} | "
                f"{fmt(sum(r['errors'] or 0 for r in good))} | {hs} |")
    out.append("")
    ratios = []
    for cfg in configs:
        name = cfg[0]
        s, w = summary.get((name, "spate")), summary.get((name, "wrk"))
        if measured(s, w):
            paired = paired_ratios(rows, name)
            ratios.append(f"- {name}: spate/wrk req/s ×{s[0] / w[0]:.2f}, "
                          f"generator CPU-µs/req ×{s[1] / w[1]:.2f}"
                          + (f"; paired by repetition (the two runs back to back), median "
                             f"req/s ×{paired[0]:.2f}, CPU-µs/req ×{paired[1]:.2f} "
                             f"(req/s ×{min(paired[2]):.2f}–×{max(paired[2]):.2f})"
                             if paired else ""))
    own, srv = summary.get(("http-client-close", "spate")), summary.get(("http-close", "spate"))
    if measured(own, srv):
        ratios.append(f"- spate closing each connection itself (http-client-close) against the "
                      f"server closing it (http-close): req/s ×{own[0] / srv[0]:.2f}, "
                      f"generator CPU-µs/req ×{own[1] / srv[1]:.2f} (the active close's "
                      f"TIME_WAIT is the generator's)")
    if ratios:
        out.append("Ratios spate/wrk (medians; req/s higher is better for spate, CPU-µs/req lower):\n")
        out += ratios
        out.append("")
    out.append("Targets:\n")
    for name in ("http-ka", "http-close", "https-ka", "https-close"):
        s, w = summary.get((name, "spate")), summary.get((name, "wrk"))
        if measured(s, w):
            met = s[0] >= w[0] and s[1] <= w[1]
            out.append(f"- {name}, {args.connections} connections: spate ≥ wrk's req/s at ≤ its "
                       f"CPU-µs/req: {'met' if met else 'NOT met'} (req/s {fmt(s[0])} vs "
                       f"{fmt(w[0])}, CPU-µs/req {fmt(s[1], 1)} vs {fmt(w[1], 1)})")
        else:
            out.append(f"- {name}: not measured (not run with both tools)")
    e3 = summary.get(("tls-perreq-rate", "spate"))
    if e3 and e3[2] is not None:
        out.append(f"- E3's load ({args.rate}/s, TLS per request): generator "
                   f"{e3[2]:.2f} % of a core, target < 5 %: {'met' if e3[2] < 5 else 'NOT met'}")
    e3f = summary.get(("tls-perreq-rate-full", "spate"))
    if e3f and e3f[2] is not None:
        out.append(f"- the same with full handshakes (--no-resumption): {e3f[2]:.2f} % of a core")
    out.append("")
    out.append("wrk cannot present a client certificate (the tls rows are spate only; the "
               "https rows use the bed's port that asks for none) and "
               "has no rate limit (wrk2 is not in Debian), so there is no wrk figure at a "
               "constant rate.")
    return "\n".join(out) + "\n"


def wrk_version():
    try:
        r = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=10)
        first = (r.stdout + r.stderr).splitlines()[0]
        return "wrk " + first.split()[1]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "wrk: not found"


# ------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10, help="seconds of each closed-model run")
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--rate", type=int, default=30, help="requests/s of the rate runs (E3: 30)")
    ap.add_argument("--rate-duration", type=int, default=20, help="seconds of each rate run")
    ap.add_argument("--only", type=lambda s: s.split(","), default=None,
                    help="configurations: " + ",".join(c[0] for c in CONFIGS))
    ap.add_argument("--tools", type=lambda s: s.split(","), default=["spate", "wrk"])
    ap.add_argument("--bed", help="use this running test bed (scripts/testbed --dir) instead of a new one")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between runs")
    ap.add_argument("--wait-idle", type=float, default=20.0,
                    help="before each run wait up to this many seconds for the CPUs to be < 25%% busy")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory (printed)")
    args = ap.parse_args()
    configs = [c for c in CONFIGS if not args.only or c[0] in args.only]
    if args.only and len(configs) != len(args.only):
        sys.exit(f"--only: known configurations are {', '.join(c[0] for c in CONFIGS)}")
    if not set(args.tools) <= {"spate", "wrk"}:
        sys.exit("--tools: spate and/or wrk")
    spate = find_spate()
    if "spate" in args.tools and not os.access(spate, os.X_OK):
        sys.exit(f"{spate}: not built (cargo build --release, or set SPATE_BIN / CARGO_TARGET_DIR)")
    if "wrk" in args.tools and not shutil.which("wrk"):
        sys.exit("wrk missing: apt-get install -y wrk")
    os.makedirs(RESULTS, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="spate-bench-rr-")
    os.chmod(workdir, 0o755)  # the bed's nginx worker runs as nobody: it must reach the bed
    started = datetime.datetime.now().isoformat(timespec="seconds")

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    bed_dir, ours = args.bed, False
    rows = []
    try:
        if not bed_dir:
            bed_dir, ours = bed_up(workdir, "--authz", "--no-mail"), True
        env = bed_env(bed_dir)
        svc = Service(env)
        bed_note = (f"`scripts/testbed up --authz --no-mail` (nginx {nginx_version()}, "
                    f"https {env['SPATE_AUTHZ']}, plain http {env['SPATE_AUTHZ_HTTP']}, "
                    f"https without a client certificate {env['SPATE_AUTHZ_TLS']})")
        script = wrk_script(workdir)
        for cfg in configs:
            tools = [t for t in args.tools if t in cfg[5]]
            for rep in range(1, args.reps + 1):
                k = (rep - 1) % len(tools)
                for tool in tools[k:] + tools[:k]:  # alternate which tool goes first
                    rows.append(one_run(tool, cfg, rep, args, spate, env, svc, workdir, script))
                    time.sleep(args.pause)
    finally:
        if ours:
            bed_down(bed_dir)
        if args.keep:
            log(f"run directories kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    md = render(rows, configs, args, spate, started, bed_note)
    print(md)
    with open(os.path.join(RESULTS, "rr-latest.md"), "w") as f:
        f.write(md)
    if rows:
        with open(os.path.join(RESULTS, "rr-latest.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    log(f"written: {os.path.join(RESULTS, 'rr-latest.md')} and rr-latest.csv")


def nginx_version():
    try:
        r = subprocess.run(["/usr/sbin/nginx", "-v"], capture_output=True, text=True, timeout=10)
        return r.stderr.strip().split("/")[-1]
    except (OSError, subprocess.SubprocessError):
        return "?"


if __name__ == "__main__":
    main()
