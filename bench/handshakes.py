#!/usr/bin/env python3
"""bench/handshakes.sh: what a TLS handshake costs spate, full and resumed, per protocol.

A benchmark, never a test: it measures and prints, asserting nothing about speed.

  bench/handshakes.sh [--connections 2000] [--users 20] [--reps 3]

Against one `spate serve` (its own process) with SMTPS, IMAP and XMPP listeners: for each
protocol, `spate smtp --tls -m 1` (a connection and handshake per message), `spate imap
--starttls` (a connection per visit) and `spate xmpp --starttls` (a login per session),
each run with session resumption (spate's default) and with `--no-resumption`,
alternating, --reps times. Figures from each run's summary: the handshakes (full and
resumed), the CPU this side spent in them (the thread's CPU clock around the handshake's
polls: `tls_cpu_us`), per handshake, and as a share of the generator's CPU. Medians.
Results: a markdown table on stdout and in bench/results/handshakes-latest.md.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import RESULTS, find_spate, free_port, log, median, stop, wait_listen  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    spate = find_spate()
    work = tempfile.mkdtemp(prefix="spate-bench-handshakes-")
    users = os.path.join(work, "users.txt")
    n = max(args.connections, args.users)
    with open(users, "w") as f:
        for i in range(n):
            f.write(f"user{i}@example.test pw\n")
    base = 25000 + int.from_bytes(os.urandom(2), "big") % 300 * 10
    ports = {"smtps": free_port(base), "imap": free_port(base + 3), "xmpp": free_port(base + 6)}
    cert = os.path.join(work, "ca.pem")
    serve = subprocess.Popen(
        [spate, "serve", "--smtps", f"127.0.0.1:{ports['smtps']}", "--imap",
         f"127.0.0.1:{ports['imap']}", "--xmpp", f"127.0.0.1:{ports['xmpp']}",
         "--users-file", users, "--max-connections", "0", "--discard", "--cert-out", cert],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    rows = []
    try:
        for p in ports.values():
            if not wait_listen(p, 15):
                sys.exit("spate serve did not listen")
        k, u = str(args.connections), str(args.users)
        cases = {
            "smtp (SMTPS, a connection per message)":
                ["smtp", f"127.0.0.1:{ports['smtps']}", "--tls", "--to-file", users,
                 "-u", u, "-n", k, "-m", "1"],
            "imap (STARTTLS, a connection per visit)":
                ["imap", f"127.0.0.1:{ports['imap']}", "--starttls", "--users-file", users,
                 "--users", u, "--count", k],
            "xmpp (STARTTLS, a login per session)":
                ["xmpp", f"127.0.0.1:{ports['xmpp']}", "--starttls", "--users-file", users,
                 "--users", k, "--sasl", "plain", "--login-rate", "2000/s", "--count", "1"],
        }
        for name, argv in cases.items():
            got = {"resumed": [], "full": []}
            for rep in range(args.reps):
                for mode in ("resumed", "full"):
                    out = os.path.join(work, f"run-{len(rows)}-{rep}-{mode}")
                    a = [spate, *argv, "--ca", cert, "-q", "-o", out]
                    if mode == "full":
                        a.append("--no-resumption")
                    r = subprocess.run(a, capture_output=True, text=True, timeout=600)
                    if r.returncode != 0:
                        log(f"{name} {mode}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
                        continue
                    with open(os.path.join(out, "summary.json")) as f:
                        s = json.load(f)
                    t = s["totals"]
                    hs = t.get("tls_connections", 0)
                    if not hs:
                        continue
                    got[mode].append(dict(
                        handshakes=hs, resumed=t.get("tls_resumed", 0),
                        us_each=t.get("tls_cpu_us", 0) / hs,
                        share=t.get("tls_cpu_us", 0) / 1e4 / max(s["generator_cpu_s"], 1e-9)))
                    shutil.rmtree(out, ignore_errors=True)
            rows.append((name, got))
            log(f"{name}: done")
    finally:
        stop(serve, "spate serve")
        shutil.rmtree(work, ignore_errors=True)
    started = time.strftime("%Y-%m-%d %H:%M")
    md = [f"# bench/handshakes.sh — {started}", "",
          f"`spate serve` in its own process; {args.connections} connections a run, "
          f"{args.users} sessions (xmpp: {args.connections} sessions logging in once); "
          f"medians of {args.reps}", "",
          "- full: every handshake of a `--no-resumption` run; resumed: a run with resumption "
          "(spate's default; its first handshakes are full), its full ones taken out at the "
          "full figure", "",
          "| protocol | handshakes a run (resumed, by default) | CPU-µs per full handshake | "
          "CPU-µs per resumed handshake | resumed/full | "
          "handshakes' share of the generator's CPU, default / --no-resumption |",
          "|---|---|---|---|---|---|"]
    for name, got in rows:
        r, f = got["resumed"], got["full"]
        if not r or not f:
            md.append(f"| {name} | not measured | | | | |")
            continue
        fu = median([x["us_each"] for x in f])
        # A resumed handshake: the default run's CPU less its full handshakes at `fu`.
        ru = median([(x["us_each"] * x["handshakes"] - (x["handshakes"] - x["resumed"]) * fu)
                     / max(x["resumed"], 1) for x in r])
        md.append(
            f"| {name} | {r[0]['handshakes']} ({median([x['resumed'] for x in r]):.0f}) | "
            f"{fu:.0f} | {ru:.0f} | ×{ru / fu:.2f} | "
            f"{median([x['share'] for x in r]):.0f} % / {median([x['share'] for x in f]):.0f} % |")
    text = "\n".join(md) + "\n"
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "handshakes-latest.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
