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
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import fmt, wait_quiet  # noqa: E402
from idle_common import (fresh_serve, log_row, memory, ports, read_summary,  # noqa: E402
                         render, run_bench, run_sampled)


def one(spate, k, args, workdir, users_file):
    port, = ports(23000, 1)
    hold = args.hold if k != args.k0 else max(20, min(args.hold, 30))
    row = dict(date=time.strftime("%Y-%m-%dT%H:%M:%S"), k=k, tls=args.tls, hold_s=hold,
               connect_rate=args.connect_rate)
    note = []
    listen = ["--imaps" if args.tls else "--imap", f"127.0.0.1:{port}"]
    with fresh_serve(spate, workdir, f"idle-{k}-", listen, users_file, row, note,
                     args.keep) as serve:
        if not serve.listening([port], note):
            return row
        row["busy_before"] = round(wait_quiet(30), 2)
        argv = [spate, "imap", f"127.0.0.1:{port}", "--users-file", users_file,
                "--users", str(k), "--count", str(k), "--idle", f"{hold}s",
                "--connect-rate", f"{args.connect_rate}/s", "--timeout", "60s",
                "--quiet", "--out", os.path.join(serve.rundir, "run")]
        if args.tls:
            argv += ["--tls", "--ca", serve.cert]
        row["command"] = " ".join(argv[1:])
        limit = k / args.connect_rate + hold + 300
        gen, samples, idle, full = run_sampled(
            argv, serve, k, limit, os.path.join(serve.rundir, "imap.out"), note)
        row.update(memory(samples, idle, full))
        if not idle:
            note.append("never quiet with every session open")
        s = read_summary(serve.rundir, note)
        if s:
            t = s["totals"]
            row.update(visits=t.get("attempted"), accepted=t.get("accepted"),
                       failed=t.get("failed"), connect_failures=t.get("connect_failures"))
        if gen.returncode:
            note.append(f"spate imap exit {gen.returncode}")
    log_row(row)
    return row


def render_rows(rows, args):
    return render(rows, args.k0, "IMAP IDLE sessions", "imap ...",
                  "--imaps" if args.tls else "--imap", "session",
                  [("visits", lambda r: fmt(r.get("visits"))),
                   ("failed", lambda r: fmt(r.get("failed")))])


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
    run_bench(args, one, render_rows, "spate-bench-idle-", "imap-idle")


if __name__ == "__main__":
    main()
