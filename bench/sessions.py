#!/usr/bin/env python3
"""bench/sessions.sh: many idle IMAP sessions held by shards against servers sharing a port.

A benchmark, never a test: it measures and prints, asserting nothing about speed.

  bench/sessions.sh [--total 60000] [--shards 4] [--connect-rate 2000] [--hold 90]
                    [--sources 127.0.0.2-127.0.0.5] [--keep]

N `spate serve --imap ADDR --reuse-port` processes share one loopback port (the kernel
spreads the connections over them), and N `spate imap ADDR --shard I/N` processes of one
run (--run-id, --start-at, --start-file) each log their share of --total accounts in,
select INBOX and wait in IDLE for --hold seconds, their connections spread over the
source addresses of --sources (--bind: each source address has its own local ports
towards the one destination). No process holds more files than this machine allows one
(20 000). Every second: each process's RSS and open files, and the servers' own count of
open connections. Then `spate merge` of the shards, whose summary must account for every
session (attempted = accepted + failed + ...).

Figures: sessions held at once (the servers' count), each process's peak open files and
RSS once all were held, KiB per session on each side, login time; the merged totals.
Results: a markdown table on stdout and in bench/results/sessions-latest.md.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import RESULTS, find_spate, free_port, log, median, read_json, spawn  # noqa: E402
from xmpp import proc_mem, set_nofile  # noqa: E402


def open_files(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def port_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = f.read().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--total", type=int, default=60000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--connect-rate", type=int, default=2000, help="the whole run's, per second")
    ap.add_argument("--hold", type=int, default=90, help="seconds in IDLE")
    ap.add_argument("--sources", default="127.0.0.2-127.0.0.5", help="--bind of every shard")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    per = -(-args.total // args.shards)
    if per > 19000:
        sys.exit(f"{per} sessions a process: at most 19 000 (one process opens at most 20 000 files)")
    spate = find_spate()
    work = tempfile.mkdtemp(prefix="spate-bench-sessions-")
    users = os.path.join(work, "users.txt")
    with open(users, "w") as f:
        for i in range(args.total):
            f.write(f"user{i}@example.test pw\n")
    port = free_port(24000 + int.from_bytes(os.urandom(2), "big") % 400 * 10)
    addr = f"127.0.0.1:{port}"
    servers, shards = [], []
    started = time.strftime("%Y-%m-%d %H:%M")
    try:
        for i in range(args.shards):
            sf = os.path.join(work, f"serve-{i}.json")
            argv = [spate, "serve", "--imap", addr, "--reuse-port", "--users-file", users,
                    "--max-connections", "0", "--threads", "1", "--idle-timeout", "30m",
                    "--stats-file", sf]
            servers.append((spawn(argv, os.path.join(work, f"serve-{i}.out"), work, set_nofile), sf))
        deadline = time.monotonic() + 60
        while not all(os.path.exists(sf) for _, sf in servers):
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in servers):
                sys.exit("a spate serve did not start: see " + work)
            time.sleep(0.1)
        rss0 = [proc_mem(p.pid)[0] for p, _ in servers]
        run_id = "sessions-" + os.urandom(4).hex()
        start = os.path.join(work, "start")
        command = None
        for i in range(args.shards):
            d = os.path.join(work, f"shard-{i}")
            argv = [spate, "imap", addr, "--users-file", users, "--users", str(args.total),
                    "--count", str(args.total), "--idle", f"{args.hold}s",
                    "--connect-rate", f"{args.connect_rate}/s", "--timeout", "120s",
                    "--bind", args.sources, "--shard", f"{i}/{args.shards}", "--run-id", run_id,
                    "--start-at", "+3s", "--start-file", start, "--quiet", "-o", d]
            command = command or " ".join(["spate"] + argv[1:])
            shards.append((spawn(argv, os.path.join(work, f"shard-{i}.out"), work, set_nofile), d))
        t0 = time.monotonic()
        limit = args.total / args.connect_rate + args.hold + 300
        samples = []  # t, open connections (servers), [gen rss], [gen fds], [serve rss], [serve fds]
        log(f"{args.shards} shards of {args.total} sessions against {args.shards} servers on {addr}")
        while any(p.poll() is None for p, _ in shards) and time.monotonic() - t0 < limit:
            time.sleep(1.0)
            n = sum(read_json(sf).get("active_connections", 0) for _, sf in servers)
            g = [proc_mem(p.pid)[0] if p.poll() is None else 0 for p, _ in shards]
            gf = [open_files(p.pid) for p, _ in shards]
            s = [proc_mem(p.pid)[0] for p, _ in servers]
            sf_ = [open_files(p.pid) for p, _ in servers]
            samples.append((time.monotonic() - t0, n, g, gf, s, sf_))
            if len(samples) % 10 == 0:
                log(f"  {samples[-1][0]:.0f} s: {n} open")
        for p, _ in shards:
            if p.poll() is None:
                log("a shard over its time limit: SIGTERM")
                p.send_signal(signal.SIGTERM)
        rcs = [p.wait(timeout=120) for p, _ in shards]
        merged = os.path.join(work, "merged")
        m = subprocess.run([spate, "merge", *[d for _, d in shards], "-o", merged],
                           capture_output=True, text=True, timeout=600)
        totals = {}
        if m.returncode == 0:
            with open(os.path.join(merged, "summary.json")) as f:
                totals = json.load(f)["totals"]
        else:
            log("spate merge: " + m.stderr.strip())
        full = [x for x in samples if x[1] >= args.total]
        held = full if full else sorted(samples, key=lambda x: -x[1])[:3]
        peak_open = max((x[1] for x in samples), default=0)
        per_gen = [max(x[3][i] for x in samples) for i in range(args.shards)]
        per_srv = [max(x[5][i] for x in samples) for i in range(args.shards)]
        gen_rss = sum(median([x[2][i] for x in held]) for i in range(args.shards))
        srv_rss = sum(median([x[4][i] for x in held]) for i in range(args.shards)) - sum(rss0)
        pr = port_range()
        ports = pr[1] - pr[0] + 1 if pr else None
        rows = [
            ("sessions held at once (the servers' count)", f"{peak_open} of {args.total}"),
            ("all held after", f"{full[0][0]:.0f} s" if full else "never"),
            ("held for", f"{full[-1][0] - full[0][0]:.0f} s" if full else "-"),
            ("open files, each shard (peak)", ", ".join(str(x) for x in per_gen)),
            ("open files, each server (peak)", ", ".join(str(x) for x in per_srv)),
            ("generator RSS, all shards", f"{gen_rss / 1024:.0f} MiB ({gen_rss / max(peak_open, 1):.1f} KiB a session)"),
            ("servers' RSS, all, less at start", f"{srv_rss / 1024:.0f} MiB ({srv_rss / max(peak_open, 1):.1f} KiB a session)"),
            ("source addresses (--bind)", args.sources),
            ("local ports per source and destination", f"{ports} ({pr[0]}-{pr[1]})" if pr else "unknown"),
            ("shards' exit codes", ", ".join(str(r) for r in rcs)),
            ("merged: attempted / accepted / failed / unfinished",
             " / ".join(str(totals.get(k, "-")) for k in ("attempted", "accepted", "failed", "unfinished"))),
        ]
        md = [f"# bench/sessions.sh — {started}", "",
              f"{args.shards} × `spate serve --imap {addr} --reuse-port --threads 1`; "
              f"{args.shards} × `{command.replace(f'--shard 0/{args.shards}', '--shard I/' + str(args.shards)).replace('shard-0', 'shard-I')}`", "",
              "| | |", "|---|---|"]
        md += [f"| {k} | {v} |" for k, v in rows]
        text = "\n".join(md) + "\n"
        print(text)
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, "sessions-latest.md"), "w") as f:
            f.write(text)
    finally:
        for p, _ in shards:
            if p.poll() is None:
                p.kill()
                p.wait()
        for p, _ in servers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if args.keep:
            log("kept " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
