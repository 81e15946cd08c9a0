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
the generator is quiet (under 0.05 s of CPU in 2 s: bench/idle_common.py, as for
bench/imap-idle.py), VmRSS of each is taken (median of up to 6 samples). If the generator
is never that quiet with every user logged in, the median of the last 6 samples with every
user logged in is taken instead, and the row says so.
KiB/user = (RSS(K) - RSS(K0)) / (K - K0), for the generator and for the server.
Failures: the run's totals, its "login" phase count and error rows from summary.json.

--sessions is at most 19000: one process may open at most 20 000 files.
Results: bench/results/population-memory-latest.md, rows appended to
bench/results/population-memory.csv.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import fmt, wait_quiet  # noqa: E402
from idle_common import (IDLE_SAMPLES, GEN_CPU, T, fresh_serve, log_row,  # noqa: E402
                         memory, ports, read_summary, render, run_bench, run_sampled, tail)


def one(spate, k, args, workdir, users_file):
    imap_port, smtp_port = ports(24000, 2)
    hold = args.hold if k != args.k0 else min(args.hold, 30)
    row = dict(date=time.strftime("%Y-%m-%dT%H:%M:%S"), k=k, profile=args.profile,
               hold_s=hold, login_rate=args.login_rate)
    note = []
    listen = ["--imap", f"127.0.0.1:{imap_port}", "--smtp", f"127.0.0.1:{smtp_port}"]
    with fresh_serve(spate, workdir, f"pop-{k}-", listen, users_file, row, note,
                     args.keep) as serve:
        if not serve.listening([imap_port, smtp_port], note):
            return row
        row["busy_before"] = round(wait_quiet(30), 2)
        argv = [spate, "population", "--profile", args.profile, "--users", str(k),
                "--users-file", users_file, "--smtp", f"127.0.0.1:{smtp_port}",
                "--imap", f"127.0.0.1:{imap_port}", "--time-scale", "1",
                "--duration", f"{hold}s", "--login-rate", f"{args.login_rate}/s",
                "--no-populate-check", "--timeout", "60s", "--quiet",
                "-o", os.path.join(serve.rundir, "run")]
        row["command"] = " ".join(argv[1:])
        outp = os.path.join(serve.rundir, "population.out")
        limit = k / args.login_rate + hold + 300
        gen, samples, idle, full = run_sampled(argv, serve, k, limit, outp, note)
        if not idle and full:
            # office-light users act now and then: the generator may never be quite idle
            idle = full[-IDLE_SAMPLES:]
            note.append("generator never quiet with every user logged in: RSS from the last "
                        f"{len(idle)} samples with every user logged in")
        elif not idle:
            note.append("never every user logged in")
        # generator CPU while every user was logged in, per second
        busy = ((full[-1][GEN_CPU] - full[0][GEN_CPU]) / (full[-1][T] - full[0][T])
                if len(full) >= 2 and full[-1][T] > full[0][T] else None)
        row.update(memory(samples, idle, full))
        row["gen_cpu_held_pct"] = round(100 * busy, 2) if busy is not None else None
        s = read_summary(serve.rundir, note)
        if s:
            t = s["totals"]
            row.update(attempted=t.get("attempted"), accepted=t.get("accepted"),
                       failed=t.get("failed"))
            row["logins"] = next((p.get("count") for p in s.get("phases") or []
                                  if p.get("phase") == "login"), None)
            row["error_rows"] = len(s.get("errors") or [])
        if gen.returncode:
            out = tail(outp)
            note.append(f"spate population exit {gen.returncode}" + (f": {out}" if out else ""))
    log_row(row, f"logins {row.get('logins')}, ")
    return row


def render_rows(rows, args):
    return render(rows, args.k0, "spate population", "population ...", "--imap --smtp", "user",
                  [(h, lambda r, key=key: fmt(r.get(key))) for h, key in (
                      ("attempted", "attempted"), ("accepted", "accepted"),
                      ("failed", "failed"), ("logins", "logins"),
                      ("error rows", "error_rows"))])


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
    run_bench(args, one, render_rows, "spate-bench-pop-", "population-memory")


if __name__ == "__main__":
    main()
