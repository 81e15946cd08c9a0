#!/usr/bin/env python3
"""Many simulated users of `spate population` from one process against `spate serve`:
generator and server memory per user, and failures (which must be 0).

This is a benchmark, never a test: it asserts nothing, it measures and prints.

  bench/population-memory.sh [--sessions 18000] [--k0 10] [--hold 120] [--login-rate 500]
                             [--profile office-light] [--keep]

For K0 and then K users: a fresh `spate serve --imap --smtp` (own process) with K accounts,
then `spate population --profile office-light --users K --time-scale 1 --duration HOLD
--login-rate R`. office-light users are desktop clients: each logs in when it starts and
stays logged in, in IDLE, acting very rarely, so after the login ramp the server counts K
open connections. --duration counts from when every user has started (K0: at most 30 s).
Both processes are sampled once a second; once the server counts K open connections and
the generator is quiet (under 0.05 s of CPU in 2 s, as bench/imap-idle.py decides), VmRSS of
each is taken (median of up to 6 samples). If the generator is never that quiet with every
user logged in, the median of the last 6 samples with every user logged in is taken instead,
and the row says so.
KiB/user = (RSS(K) - RSS(K0)) / (K - K0), for the generator and for the server.
Failures: the run's totals, its "login" phase count and error rows from summary.json.

--sessions is at most 19000: one process may open at most 20 000 files.
Results: bench/results/population-memory-latest.md, rows appended to
bench/results/population-memory.csv.
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
    rundir = tempfile.mkdtemp(prefix=f"pop-{k}-", dir=workdir)
    base = 24000 + int.from_bytes(os.urandom(2), "big") % 500 * 10
    imap_port = free_port(base)
    smtp_port = free_port(base + 1)
    statsf = os.path.join(rundir, "serve.json")
    cert = os.path.join(rundir, "serve.pem")
    serve_argv = [spate, "serve", "--imap", f"127.0.0.1:{imap_port}",
                  "--smtp", f"127.0.0.1:{smtp_port}", "--users-file", users_file,
                  "--max-connections", "0", "--stats-file", statsf, "--cert-out", cert]
    slog = open(os.path.join(rundir, "serve.out"), "wb")
    serve = subprocess.Popen(serve_argv, stdout=slog, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, cwd=rundir, preexec_fn=set_nofile)
    hold = args.hold if k != args.k0 else min(args.hold, 30)
    row = dict(date=time.strftime("%Y-%m-%dT%H:%M:%S"), k=k, profile=args.profile,
               hold_s=hold, login_rate=args.login_rate)
    note = []
    try:
        if not (wait_listen(imap_port, 15) and wait_listen(smtp_port, 15)):
            with open(os.path.join(rundir, "serve.out"), "rb") as f:
                tail = f.read()[-300:].decode(errors="replace").strip()
            note.append(f"spate serve did not listen: {tail}")
            return row
        row["busy_before"] = round(wait_quiet(30), 2)
        argv = [spate, "population", "--profile", args.profile, "--users", str(k),
                "--users-file", users_file, "--smtp", f"127.0.0.1:{smtp_port}",
                "--imap", f"127.0.0.1:{imap_port}", "--time-scale", "1",
                "--duration", f"{hold}s", "--login-rate", f"{args.login_rate}/s",
                "--no-populate-check", "--timeout", "60s", "--quiet",
                "-o", os.path.join(rundir, "run")]
        row["command"] = " ".join(argv[1:])
        outp = os.path.join(rundir, "population.out")
        out = open(outp, "wb")
        t0 = time.monotonic()
        gen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, cwd=rundir, preexec_fn=set_nofile)
        limit = k / args.login_rate + hold + 300
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
        if not idle and full:
            # office-light users act now and then: the generator may never be quite idle
            idle = full[-6:]
            note.append("generator never quiet with every user logged in: RSS from the last "
                        f"{len(idle)} samples with every user logged in")
        elif not idle:
            note.append("never every user logged in")
        # generator CPU while every user was logged in, per second
        busy = ((full[-1][2] - full[0][2]) / (full[-1][0] - full[0][0])
                if len(full) >= 2 and full[-1][0] > full[0][0] else None)
        row.update(
            open_max=max((s[4] for s in samples), default=0),
            all_open_after_s=round(full[0][0], 1) if full else None,
            held_s=round(full[-1][0] - full[0][0], 1) if full else 0,
            gen_rss_kb=median([s[1] for s in idle]) if idle else None,
            serve_rss_kb=median([s[3] for s in idle]) if idle else None,
            gen_cpu_s=round(samples[-1][2], 2) if samples else None,
            gen_cpu_held_pct=round(100 * busy, 2) if busy is not None else None)
        try:
            with open(os.path.join(rundir, "run", "summary.json")) as f:
                s = json.load(f)
            t = s["totals"]
            row.update(attempted=t.get("attempted"), accepted=t.get("accepted"),
                       failed=t.get("failed"))
            row["logins"] = next((p.get("count") for p in s.get("phases") or []
                                  if p.get("phase") == "login"), None)
            errs = s.get("errors") or []
            row["error_rows"] = len(errs)
            if errs:
                note.append("errors: " + "; ".join(
                    f"{e.get('phase')} {e.get('kind')} x{e.get('count')}" for e in errs[:4]))
        except (OSError, ValueError, KeyError) as e:
            note.append(f"no summary: {e}")
        if gen.returncode:
            with open(outp, "rb") as f:
                tail = f.read()[-300:].decode(errors="replace").strip().replace("\n", " / ")
            note.append(f"spate population exit {gen.returncode}"
                        + (f": {tail}" if tail else ""))
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
        f"{fmt((row.get('serve_rss_kb') or 0) / 1024, 1)} MiB, logins {row.get('logins')}, "
        f"failed {row.get('failed')} {row['note']}")
    return row


def render(rows, args):
    base = rows[0]
    out = ["## spate population: memory per user of the generator and of spate serve\n",
           f"- `spate {rows[-1].get('command', 'population ...')}` against `spate serve "
           "--imap --smtp` (own process, fresh for each K)",
           f"- KiB/user = (RSS(K) - RSS({args.k0})) / (K - {args.k0}), RSS the median of up to "
           "6 samples once the server counts K open connections and the generator is quiet",
           "- open files limited to 20 000 per process\n",
           "| K | open (max) | all open after [s] | held [s] | generator RSS [MiB] | "
           "generator KiB/user | server RSS [MiB] | server KiB/user | attempted | accepted | "
           "failed | logins | error rows | generator CPU [s] | notes |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per = {}
        for side in ("gen", "serve"):
            a, b = r.get(f"{side}_rss_kb"), base.get(f"{side}_rss_kb")
            per[side] = (round((a - b) / (r["k"] - args.k0), 2)
                         if a and b and r["k"] != args.k0 else None)
        r["gen_kib_per_user"], r["serve_kib_per_user"] = per["gen"], per["serve"]
        mib = (lambda v: fmt(v / 1024, 1) if v else "n/a")
        out.append(f"| {r['k']} | {fmt(r.get('open_max'))} | {fmt(r.get('all_open_after_s'), 1)} | "
                   f"{fmt(r.get('held_s'), 1)} | {mib(r.get('gen_rss_kb'))} | "
                   f"{fmt(per['gen'], 2)} | {mib(r.get('serve_rss_kb'))} | {fmt(per['serve'], 2)} | "
                   f"{fmt(r.get('attempted'))} | {fmt(r.get('accepted'))} | {fmt(r.get('failed'))} | "
                   f"{fmt(r.get('logins'))} | {fmt(r.get('error_rows'))} | "
                   f"{fmt(r.get('gen_cpu_s'), 2)} | {r.get('note', '')} |")
    out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=18000, help="K users (at most 19000)")
    ap.add_argument("--k0", type=int, default=10)
    ap.add_argument("--hold", type=int, default=120,
                    help="--duration in seconds, from when every user has started (K0: at most 30)")
    ap.add_argument("--login-rate", type=int, default=500, help="logins per second")
    ap.add_argument("--profile", default="office-light")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    if args.sessions > 19000:
        sys.exit("--sessions: at most 19000 (one process opens at most 20 000 files)")
    if args.sessions <= args.k0:
        sys.exit("--sessions must be more than --k0")
    spate = find_spate()
    if not os.path.exists(spate):
        sys.exit(f"{spate}: not built (cargo build --release, or SPATE_BIN)")
    workdir = tempfile.mkdtemp(prefix="spate-bench-pop-")
    users = os.path.join(workdir, "users.txt")
    with open(users, "w") as f:
        for i in range(args.sessions):
            f.write(f"user{i}@example.test pw{i}\n")
    rows = [one(spate, k, args, workdir, users) for k in (args.k0, args.sessions)]
    text = render(rows, args)
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "population-memory-latest.md"), "w") as f:
        f.write(f"<!-- {time.strftime('%Y-%m-%d %H:%M')} {os.uname().nodename} -->\n" + text)
    append_csv(os.path.join(RESULTS, "population-memory.csv"), rows)
    if args.keep:
        log(f"kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
