#!/usr/bin/env python3
"""Many concurrent IMAP IDLE sessions from one spate process against `spate serve`:
generator and server memory per session, and failures (which must be 0).

This is a benchmark, never a test: it asserts nothing, it measures and prints.

  bench/imap-idle.sh [--sessions 18000] [--k0 10] [--hold 300] [--connect-rate 500]
                     [--tls]

For K0 and then K sessions: a fresh `spate serve --imap` (own process) with K accounts,
then `spate imap --users K --count K --idle HOLD --connect-rate R`: every session
connects, logs in, selects INBOX and sits in IDLE for HOLD seconds, then logs out.
Both processes are sampled once a second; once the server counts K open connections
and the generator is quiet, VmRSS of each is taken (median of up to 6 samples).
KiB/session = (RSS(K) - RSS(K0)) / (K - K0), for the generator and for the server.
Failures: the run's failed visits and error classes from summary.json.

Results: bench/results/imap-idle-latest.md, rows appended to bench/results/imap-idle.csv.
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
from harness import (RESULTS, find_spate, fmt, free_port, log, median,  # noqa: E402
                     proc_cpu_seconds, read_json, wait_listen, wait_quiet)
from xmpp import append_csv, proc_mem, set_nofile  # noqa: E402


def one(spate, k, args, workdir, users_file):
    rundir = tempfile.mkdtemp(prefix=f"idle-{k}-", dir=workdir)
    port = free_port(23000 + int.from_bytes(os.urandom(2), "big") % 500 * 10)
    statsf = os.path.join(rundir, "serve.json")
    cert = os.path.join(rundir, "serve.pem")
    listen = "--imaps" if args.tls else "--imap"
    serve_argv = [spate, "serve", listen, f"127.0.0.1:{port}", "--users-file", users_file,
                  "--max-connections", "0", "--stats-file", statsf, "--cert-out", cert]
    slog = open(os.path.join(rundir, "serve.out"), "wb")
    serve = subprocess.Popen(serve_argv, stdout=slog, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, cwd=rundir, preexec_fn=set_nofile)
    hold = args.hold if k != args.k0 else max(20, min(args.hold, 30))
    row = dict(date=time.strftime("%Y-%m-%dT%H:%M:%S"), k=k, tls=args.tls, hold_s=hold,
               connect_rate=args.connect_rate)
    note = []
    try:
        if not wait_listen(port, 15):
            row["note"] = "spate serve did not listen"
            return row
        row["busy_before"] = round(wait_quiet(30), 2)
        argv = [spate, "imap", f"127.0.0.1:{port}", "--users-file", users_file,
                "--users", str(k), "--count", str(k), "--idle", f"{hold}s",
                "--connect-rate", f"{args.connect_rate}/s", "--timeout", "60s",
                "--quiet", "--out", os.path.join(rundir, "run")]
        if args.tls:
            argv += ["--tls", "--ca", cert]
        row["command"] = " ".join(argv[1:])
        out = open(os.path.join(rundir, "imap.out"), "wb")
        t0 = time.monotonic()
        gen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, cwd=rundir, preexec_fn=set_nofile)
        limit = k / args.connect_rate + hold + 300
        samples = []  # t, gen rss, gen cpu, serve rss, open connections
        idle = []
        while gen.poll() is None and time.monotonic() - t0 < limit:
            time.sleep(1.0)
            try:
                grss, _ = proc_mem(gen.pid)
                gcpu = proc_cpu_seconds(gen.pid)
                srss, _ = proc_mem(serve.pid)
            except (OSError, ValueError, IndexError):
                break
            n = read_json(statsf).get("active_connections", 0)
            samples.append((time.monotonic() - t0, grss, gcpu, srss, n))
            if (len(samples) >= 3 and n >= k and samples[-3][4] >= k
                    and gcpu - samples[-3][2] < 0.05 and len(idle) < 6):
                idle.append(samples[-1])
        if gen.poll() is None:
            note.append("over its time limit: stopped")
            gen.send_signal(signal.SIGTERM)
        gen.wait(timeout=120)
        out.close()
        full = [s for s in samples if s[4] >= k]
        row.update(
            open_max=max((s[4] for s in samples), default=0),
            all_open_after_s=round(full[0][0], 1) if full else None,
            held_s=round(full[-1][0] - full[0][0], 1) if full else 0,
            gen_rss_kb=median([s[1] for s in idle]) if idle else None,
            serve_rss_kb=median([s[3] for s in idle]) if idle else None,
            gen_cpu_s=round(samples[-1][2], 2) if samples else None)
        if not idle:
            note.append("never quiet with every session open")
        try:
            with open(os.path.join(rundir, "run", "summary.json")) as f:
                s = json.load(f)
            t = s["totals"]
            row.update(visits=t.get("attempted"), accepted=t.get("accepted"),
                       failed=t.get("failed"), connect_failures=t.get("connect_failures"))
            errs = s.get("errors") or []
            if errs:
                note.append("errors: " + "; ".join(
                    f"{e.get('phase')} {e.get('kind')} x{e.get('count')}" for e in errs[:4]))
        except (OSError, ValueError, KeyError) as e:
            note.append(f"no summary: {e}")
        if gen.returncode:
            note.append(f"spate imap exit {gen.returncode}")
    finally:
        if serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait(timeout=10)
        slog.close()
        row["note"] = "; ".join(note)
        if not args.keep:
            shutil.rmtree(rundir, ignore_errors=True)
    log(f"K={k}: open {row.get('open_max')} held {row.get('held_s')} s, generator "
        f"{fmt((row.get('gen_rss_kb') or 0) / 1024, 1)} MiB, server "
        f"{fmt((row.get('serve_rss_kb') or 0) / 1024, 1)} MiB, failed {row.get('failed')} "
        f"{row['note']}")
    return row


def render(rows, args):
    base = rows[0]
    out = ["## IMAP IDLE sessions: memory per session of the generator and of spate serve\n",
           f"- `spate {rows[-1].get('command', 'imap ...')}` against `spate serve "
           f"{'--imaps' if args.tls else '--imap'}` (own process, fresh for each K)",
           f"- KiB/session = (RSS(K) - RSS({args.k0})) / (K - {args.k0}), RSS the median of up to "
           "6 samples once the server counts K open connections and the generator is quiet",
           "- open files limited to 20 000 per process\n",
           "| K | open (max) | all open after [s] | held [s] | generator RSS [MiB] | "
           "generator KiB/session | server RSS [MiB] | server KiB/session | visits | failed | "
           "generator CPU [s] | notes |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per = {}
        for side in ("gen", "serve"):
            a, b = r.get(f"{side}_rss_kb"), base.get(f"{side}_rss_kb")
            per[side] = (round((a - b) / (r["k"] - args.k0), 2)
                         if a and b and r["k"] != args.k0 else None)
        r["gen_kib_per_session"], r["serve_kib_per_session"] = per["gen"], per["serve"]
        mib = (lambda v: fmt(v / 1024, 1) if v else "n/a")
        out.append(f"| {r['k']} | {fmt(r.get('open_max'))} | {fmt(r.get('all_open_after_s'), 1)} | "
                   f"{fmt(r.get('held_s'), 1)} | {mib(r.get('gen_rss_kb'))} | "
                   f"{fmt(per['gen'], 2)} | {mib(r.get('serve_rss_kb'))} | {fmt(per['serve'], 2)} | "
                   f"{fmt(r.get('visits'))} | {fmt(r.get('failed'))} | {fmt(r.get('gen_cpu_s'), 2)} | "
                   f"{r.get('note', '')} |")
    out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=18000)
    ap.add_argument("--k0", type=int, default=10)
    ap.add_argument("--hold", type=int, default=300, help="seconds in IDLE (K0: at most 30)")
    ap.add_argument("--connect-rate", type=int, default=500)
    ap.add_argument("--tls", action="store_true", help="IMAPS (certificate verified)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if args.sessions > 19000:
        sys.exit("--sessions: at most 19000 (one process opens at most 20 000 files)")
    spate = find_spate()
    workdir = tempfile.mkdtemp(prefix="spate-bench-idle-")
    users = os.path.join(workdir, "users.txt")
    with open(users, "w") as f:
        for i in range(args.sessions):
            f.write(f"user{i}@example.test pw{i}\n")
    rows = [one(spate, k, args, workdir, users) for k in (args.k0, args.sessions)]
    text = render(rows, args)
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "imap-idle-latest.md"), "w") as f:
        f.write(f"<!-- {time.strftime('%Y-%m-%d %H:%M')} {os.uname().nodename} -->\n" + text)
    append_csv(os.path.join(RESULTS, "imap-idle.csv"), rows)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
