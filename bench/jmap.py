#!/usr/bin/env python3
"""spate jmap against spate imap: the same mailboxes read by the same visits over JMAP and
over IMAP, against one `spate serve` (its own process) on loopback.

This is a benchmark, never a test: it asserts nothing about speed, it measures and prints.

  bench/jmap.sh [--accounts 20] [--messages 50] [--visits 2000] [--per-visit 10] [--reps 3]

For each rep, a fresh `spate serve --smtp --imap --jmap` with --accounts accounts, each
given --messages messages by `spate smtp`; then, tools alternating, `spate imap --users N
-n VISITS -m PER_VISIT --download 100` and `spate jmap --users N -n VISITS --messages
PER_VISIT --download 100` (closed, as fast as the sessions go). Nothing is deleted, so
every run reads the same mailboxes.

The units differ, and the table says so: an IMAP visit is a whole connection (connect,
greeting, LOGIN, SELECT, FETCH of the messages, LOGOUT); a JMAP session logs in once and
keeps its connection, and a visit is its requests (the query with the header fields, the
bodies). Figures per visit: generator CPU (its summary), server CPU (its process), visits
per second; ratios JMAP against IMAP.

Results: bench/results/jmap-latest.md, rows appended to bench/results/jmap.csv.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (RESULTS, find_spate, fmt, free_port, log, median,  # noqa: E402
                     proc_cpu_seconds, wait_listen, wait_quiet)


def serve(spate, workdir, users_file):
    ports = {k: free_port(24000 + int.from_bytes(os.urandom(2), "big") % 900 * 5 + i)
             for i, k in enumerate(["smtp", "imap", "jmap"])}
    argv = [spate, "serve", "--users-file", users_file, "--domain", "example.test"]
    for k, p in ports.items():
        argv += [f"--{k}", f"127.0.0.1:{p}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, cwd=workdir)
    for p in ports.values():
        if not wait_listen(p, 15):
            proc.kill()
            sys.exit("spate serve did not listen")
    return proc, ports


def run(spate, argv, workdir, name):
    out = os.path.join(workdir, name)
    subprocess.run([spate] + argv + ["--quiet", "--out", out], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=900, check=False)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accounts", type=int, default=20)
    ap.add_argument("--messages", type=int, default=50, help="messages per account")
    ap.add_argument("--visits", type=int, default=2000)
    ap.add_argument("--per-visit", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--wait-idle", type=float, default=10.0)
    args = ap.parse_args()
    spate = find_spate()
    if not os.access(spate, os.X_OK):
        sys.exit(f"{spate}: not built (cargo build --release)")
    workdir = tempfile.mkdtemp(prefix="spate-bench-jmap-")
    users_file = os.path.join(workdir, "users.txt")
    with open(users_file, "w") as f:
        for i in range(args.accounts):
            f.write(f"user{i}@example.test pw{i}\n")
    started = datetime.datetime.now().isoformat(timespec="seconds")
    rows = []
    try:
        for rep in range(args.reps):
            proc, ports = serve(spate, workdir, users_file)
            try:
                run(spate, ["smtp", f"127.0.0.1:{ports['smtp']}", "--to", f"user{{0..{args.accounts - 1}}}@example.test",
                            "-n", str(args.accounts * args.messages), "--pick", "round-robin"], workdir, f"inject-{rep}")
                for tool in (["imap", "jmap"] if rep % 2 == 0 else ["jmap", "imap"]):
                    wait_quiet(args.wait_idle)
                    common = ["--users-file", users_file, "--users", str(args.accounts), "-n", str(args.visits),
                              "--download", "100"]
                    if tool == "imap":
                        argv = ["imap", f"127.0.0.1:{ports['imap']}", "-m", str(args.per_visit)] + common
                    else:
                        argv = ["jmap", f"http://127.0.0.1:{ports['jmap']}", "--messages", str(args.per_visit)] + common
                    cpu0 = proc_cpu_seconds(proc.pid)
                    s = run(spate, argv, workdir, f"{tool}-{rep}")
                    server = proc_cpu_seconds(proc.pid) - cpu0
                    t = s["totals"]
                    n = t.get("accepted") or 0
                    rows.append(dict(date=started, rep=rep, tool=tool, visits=n, failed=t.get("failed"),
                                     retrieved=t.get("retrieved"), visits_per_s=round(s["messages_per_s"], 1),
                                     gen_cpu_us=round(s["generator_cpu_s"] * 1e6 / n, 1) if n else None,
                                     serve_cpu_us=round(server * 1e6 / n, 1) if n else None))
                    log(f"{tool}: {rows[-1]}")
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    med = {}
    for tool in ("imap", "jmap"):
        good = [r for r in rows if r["tool"] == tool and r.get("gen_cpu_us")]
        med[tool] = {k: median([r[k] for r in good]) if good else None
                     for k in ("visits_per_s", "gen_cpu_us", "serve_cpu_us")}
    ratio = (lambda k: fmt(med["jmap"][k] / med["imap"][k], 2)
             if med["jmap"][k] and med["imap"][k] else "")
    md = [f"# spate jmap against spate imap\n",
          f"- date: {started}; host: {platform.node()}, {os.cpu_count()} CPUs; spate: {spate}",
          f"- `spate serve --smtp --imap --jmap` (own process, fresh each rep), {args.accounts} accounts of "
          f"{args.messages} messages; `spate imap … -n {args.visits} -m {args.per_visit} --download 100` and "
          f"`spate jmap … -n {args.visits} --messages {args.per_visit} --download 100`, {args.accounts} sessions, "
          f"{args.reps} reps, tools alternating; medians",
          "- an IMAP visit is a whole connection with its login; a JMAP session logs in once and keeps its "
          "connection, a visit is its two requests (query with header fields, bodies)\n",
          "| | visits/s | generator CPU [µs/visit] | server CPU [µs/visit] |",
          "|---|---|---|---|"]
    for tool in ("imap", "jmap"):
        m = med[tool]
        md.append(f"| spate {tool} | {fmt(m['visits_per_s'])} | {fmt(m['gen_cpu_us'], 1)} | {fmt(m['serve_cpu_us'], 1)} |")
    md.append(f"| jmap/imap | ×{ratio('visits_per_s')} | ×{ratio('gen_cpu_us')} | ×{ratio('serve_cpu_us')} |")
    text = "\n".join(md) + "\n"
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "jmap-latest.md"), "w") as f:
        f.write(text)
    path = os.path.join(RESULTS, "jmap.csv")
    new = not os.path.exists(path)
    import csv
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        if new:
            w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
