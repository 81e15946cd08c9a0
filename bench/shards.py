#!/usr/bin/env python3
"""bench/shards.sh: one SMTP run split into 1, 2 and 4 shards on this machine, merged.

A benchmark, never a test: it measures and prints, asserting nothing about speed.

  bench/shards.sh scale [--reps 3] [--shards 1,2,4] [--count 60000] [--users 48] [--rate R]
  bench/shards.sh merge [--minutes 60] [--shards 4] [--rate 100] [--keep DIR]
  bench/shards.sh merge --from DIR      (time the merge of shard directories made earlier)

scale: N `spate smtp --shard I/N` processes started together (--start-at +2s with a shared
       --start-file) against one smtp-sink, connections reused, 1 KB messages; then
       `spate merge`. Per N: the merged msgs/s (from the merged summary), the sum of the
       shards' generator CPU per message (each child's own rusage), the sink's exact count
       against the merged accepted count, and the merge's wall time and peak RSS. N
       alternates within each repetition; figures are medians.
merge: N shards at --rate messages/s in all for --minutes, each keeping one-second rows for
       the whole run (--detail), against `spate serve --discard`; then `spate merge` of them,
       timed (wall, CPU, peak RSS from its rusage). Run it for 10 and for 60 minutes to see
       whether the merge's memory grows with the run's length.

Results: a markdown table on stdout and in bench/results/shards-latest.md (scale) or
bench/results/shards-merge-latest.md (merge).
"""

import argparse
import datetime
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

from harness import (RESULTS, Sink, find_spate, fmt, free_port, log, median, stop, wait_listen,
                     wait_quiet, ensure_tools, spawn, SINK_PORT, SERVE_PORT)


def reap(p, deadline):
    """Wait for a child we started (bounded by deadline, a monotonic time); its exit code,
    CPU seconds (user+sys from its own rusage) and peak RSS in KiB."""
    while True:
        pid, st, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            p.returncode = os.waitstatus_to_exitcode(st)
            p._out.close()
            return p.returncode, ru.ru_utime + ru.ru_stime, ru.ru_maxrss
        if time.monotonic() > deadline:
            log(f"pid {p.pid} over its time limit: SIGKILL")
            p.kill()
            deadline = time.monotonic() + 10
        time.sleep(0.02)


def run_shards(spate, n, target, root, run_id, extra, limit_s):
    """N shards of one run started together; per shard (dir, rc, cpu_s, maxrss_kib)."""
    start = os.path.join(root, "start")
    procs = []
    for i in range(n):
        d = os.path.join(root, f"shard-{i}")
        argv = [spate, "smtp", target, "--shard", f"{i}/{n}", "--run-id", run_id,
                "--start-at", "+2s", "--start-file", start, "-q", "-o", d, *extra]
        procs.append((d, spawn(argv, os.path.join(root, f"shard-{i}.out"))))
    deadline = time.monotonic() + limit_s
    out = []
    for d, p in procs:
        rc, cpu, rss = reap(p, deadline)
        if rc != 0:
            with open(p._out.name, "rb") as f:
                log(f"shard {d} exited {rc}: {f.read()[-500:].decode(errors='replace')}")
        out.append((d, rc, cpu, rss))
    return out


def merge(spate, dirs, out):
    """spate merge DIRS -o OUT: (rc, wall s, cpu s, peak RSS KiB, its output)."""
    t0 = time.monotonic()
    p = spawn([spate, "merge", *dirs, "-o", out], out + ".merge.out")
    rc, cpu, rss = reap(p, time.monotonic() + 600)
    wall = time.monotonic() - t0
    with open(out + ".merge.out", "rb") as f:
        text = f.read()[-1000:].decode(errors="replace")
    return rc, wall, cpu, rss, text


def read_summary(d):
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def du_kib(d):
    total = 0
    for p in glob.glob(os.path.join(d, "**"), recursive=True):
        if os.path.isfile(p):
            total += os.path.getsize(p)
    return total // 1024


def header(title, spate, extra):
    lines = [f"# {title}", "",
             f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}; host: "
             f"{platform.node()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
             f"- spate: `{spate}`"]
    return lines + extra


# ------------------------------------------------------------------------------- scale
def cmd_scale(args, spate, workdir):
    ensure_tools(need_postal=False)
    sink = Sink(SINK_PORT, workdir)
    target = f"127.0.0.1:{sink.port}"
    extra = ["--count", str(args.count), "--size", "1k",
             "--messages-per-connection", str(args.count)]
    # Saturating (closed: --users sessions back to back) measures throughput; a fixed rate
    # in all (open: each shard its share) measures CPU per message at the same pace for
    # every N, which saturation's batching effects do not blur.
    if args.rate:
        extra += ["--rate", f"{args.rate}/s", "--max-in-flight", str(args.users)]
    else:
        extra += ["--users", str(args.users)]
    rows = []
    try:
        for rep in range(args.reps):
            order = args.shards if rep % 2 == 0 else list(reversed(args.shards))
            for n in order:
                busy = wait_quiet(args.wait_idle)
                root = os.path.join(workdir, f"scale-{n}-{rep}")
                os.makedirs(root)
                before = sink.count(settle=0.2)
                shards = run_shards(spate, n, target, root, f"bench-{n}-{rep}", extra, 600)
                sunk = sink.count() - before
                ok = all(rc == 0 for _, rc, _, _ in shards)
                mrc, mwall, mcpu, mrss, mtext = merge(spate, [d for d, *_ in shards],
                                                      os.path.join(root, "merged"))
                row = {"shards": n, "rep": rep, "busy_before": round(busy, 2),
                       "shards_ok": ok, "merge_rc": mrc, "sink": sunk}
                if ok and mrc == 0:
                    s = read_summary(os.path.join(root, "merged"))
                    acc = s["totals"]["accepted"]
                    cpu = sum(c for _, _, c, _ in shards)
                    row.update(accepted=acc, msgs_per_s=s["messages_per_s"],
                               elapsed_s=s["elapsed_s"], cpu_s=cpu,
                               cpu_us_per_msg=cpu * 1e6 / max(1, acc),
                               shard_rss_kib=max(r for *_, r in shards),
                               merge_wall_s=mwall, merge_cpu_s=mcpu, merge_rss_kib=mrss)
                else:
                    log(f"{n} shards, rep {rep}: shards ok {ok}, merge {mrc}: {mtext}")
                rows.append(row)
                log(f"{n} shard(s), rep {rep}: " + ", ".join(f"{k}={v}" for k, v in row.items()
                                                            if k not in ("shards", "rep")))
                shutil.rmtree(root, ignore_errors=True)
    finally:
        sink.close()
    md = render_scale(rows, args, spate, sink)
    print(md)
    write(md, "shards-rate-latest.md" if args.rate else "shards-latest.md")


def render_scale(rows, args, spate, sink):
    out = header("spate: one run in 1, 2 and 4 shards on one machine, merged", spate, [
        f"- receiver: `{sink.cmd}`; the sink's exact counter delta is compared with the merged "
        "accepted count",
        f"- each run: `spate smtp 127.0.0.1:PORT "
        + (f"--rate {args.rate}/s --max-in-flight {args.users}" if args.rate
           else f"--users {args.users}")
        + f" --count {args.count} --size 1k --messages-per-connection {args.count} --shard I/N --run-id R "
        "--start-at +2s --start-file F -q -o DIR/shard-I`, N processes at once, then "
        "`spate merge DIR/shard-* -o DIR/merged`",
        f"- {args.reps} repetitions, N alternating; medians (min–max)",
        "- msgs/s: the merged summary's (accepted / the run's elapsed time); generator CPU: the "
        "sum of the shards' own rusage (user+sys), divided by the merged accepted count",
        "- the generators and smtp-sink share this machine's cores: more shards than cores "
        "measure the sharing, not a cluster", ""])
    out += ["| shards | runs | accepted = sink | msgs/s (median, min–max) | "
            "gen CPU-µs/msg (sum of shards) | vs 1 shard | merge wall [s] | merge peak RSS [MiB] |",
            "|---|---|---|---|---|---|---|---|"]
    base = None
    for n in args.shards:
        rs = [r for r in rows if r["shards"] == n and "accepted" in r]
        if not rs:
            out.append(f"| {n} | 0 | n/a | n/a | n/a | n/a | n/a | n/a |")
            continue
        agree = all(r["accepted"] == r["sink"] for r in rs)
        rate = [r["msgs_per_s"] for r in rs]
        cpu = median([r["cpu_us_per_msg"] for r in rs])
        if n == args.shards[0]:
            base = cpu
        ratio = f"×{cpu / base:.2f}" if base else "n/a"
        out.append(
            f"| {n} | {len(rs)} | {fmt(median([r['accepted'] for r in rs]))} "
            f"{'=' if agree else '≠'} {fmt(median([r['sink'] for r in rs]))} | "
            f"{fmt(median(rate))} ({fmt(min(rate))}–{fmt(max(rate))}) | {fmt(cpu, 1)} | {ratio} | "
            f"{fmt(median([r['merge_wall_s'] for r in rs]), 2)} | "
            f"{fmt(median([r['merge_rss_kib'] for r in rs]) / 1024, 1)} |")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------- merge
def cmd_merge(args, spate, workdir):
    if args.from_dir:
        dirs = sorted(glob.glob(os.path.join(args.from_dir, "shard-*")))
        dirs = [d for d in dirs if os.path.isdir(d)]
        if not dirs:
            sys.exit(f"no shard-* directories in {args.from_dir}")
        made = f"(shards made earlier in {args.from_dir})"
    else:
        root = args.keep or os.path.join(workdir, "merge")
        os.makedirs(root, exist_ok=True)
        port = free_port(SERVE_PORT)
        srv = subprocess.Popen([spate, "serve", "--smtp", f"127.0.0.1:{port}", "--discard"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL)
        try:
            if not wait_listen(port):
                sys.exit("spate serve did not start")
            secs = int(args.minutes * 60)
            extra = ["--max-in-flight", "50", "--rate", f"{args.rate}/s",
                     "--duration", f"{secs}s", "--detail", f"{secs + 60}s", "--size", "1k"]
            log(f"{args.shards} shards for {args.minutes} min at {args.rate}/s in all into {root}")
            shards = run_shards(spate, args.shards, f"127.0.0.1:{port}", root,
                                f"bench-merge-{secs}", extra, secs + 120)
        finally:
            stop(srv, "spate serve")
        if not all(rc == 0 for _, rc, _, _ in shards):
            sys.exit("a shard failed; see its .out file in " + root)
        dirs = [d for d, *_ in shards]
        made = (f"{args.shards} shards × {args.minutes} min at {args.rate}/s in all against "
                f"`spate serve --discard`, one-second rows for the whole run (--detail)")
    out = os.path.join(workdir, "merged")
    rc, wall, cpu, rss, text = merge(spate, dirs, out)
    if rc != 0:
        sys.exit(f"spate merge failed ({rc}): {text}")
    s = read_summary(out)
    with open(os.path.join(out, "intervals.csv")) as f:
        rows = sum(1 for _ in f) - 1
    lines = header("spate merge: time and memory", spate, [f"- shards: {made}", ""])
    lines += ["| shards | run [min] | input [MiB] | intervals | accepted | merge wall [s] | "
              "merge CPU [s] | merge peak RSS [MiB] |", "|---|---|---|---|---|---|---|---|",
              f"| {len(dirs)} | {fmt(s['elapsed_s'] / 60, 1)} | "
              f"{fmt(sum(du_kib(d) for d in dirs) / 1024, 1)} | {fmt(rows)} | "
              f"{fmt(s['totals']['accepted'])} | {fmt(wall, 2)} | {fmt(cpu, 2)} | "
              f"{fmt(rss / 1024, 1)} |"]
    md = "\n".join(lines) + "\n"
    print(md)
    write(md, f"shards-merge-{int(round(s['elapsed_s'] / 60))}min-latest.md")


def write(md, name):
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, name), "w") as f:
        f.write(md)
    log(f"written: {os.path.join(RESULTS, name)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sc = sub.add_parser("scale", help="1, 2, 4 shards against one smtp-sink, merged")
    sc.add_argument("--reps", type=int, default=3)
    sc.add_argument("--shards", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    sc.add_argument("--count", type=int, default=60000)
    sc.add_argument("--users", type=int, default=48,
                    help="sessions in all (with --rate: --max-in-flight in all)")
    sc.add_argument("--rate", type=int, default=0,
                    help="messages/s in all, shared by the shards (default: saturate)")
    sc.add_argument("--wait-idle", type=float, default=20.0,
                    help="before each run wait up to this many seconds for the CPUs to be < 25%% busy")
    mg = sub.add_parser("merge", help="time and memory of spate merge on long shards")
    mg.add_argument("--minutes", type=float, default=60.0)
    mg.add_argument("--shards", type=int, default=4)
    mg.add_argument("--rate", type=int, default=100, help="messages/s, all shards together")
    mg.add_argument("--keep", help="write the shards here (kept) instead of a temporary directory")
    mg.add_argument("--from", dest="from_dir", help="merge the shard-* directories in DIR")
    args = ap.parse_args()
    spate = find_spate()
    if not os.access(spate, os.X_OK):
        sys.exit(f"{spate} is not built: cargo build --release (or set SPATE_BIN)")
    with tempfile.TemporaryDirectory(prefix="spate-bench-shards-") as workdir:
        if args.cmd == "scale":
            cmd_scale(args, spate, workdir)
        else:
            cmd_merge(args, spate, workdir)


if __name__ == "__main__":
    main()
