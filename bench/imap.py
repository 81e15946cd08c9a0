#!/usr/bin/env python3
"""spate imap against imaptest's stress mode, both against the test bed's Dovecot (loopback).

This is a benchmark, never a test: it asserts nothing about speed, it measures and prints.

  bench/imap-vs-imaptest.sh [--reps 3] [--clients 50] [--secs 10] [--accounts 100]
                            [--messages 10] [--tools spate,imaptest] [--bed DIR]
                            [--wait-idle 20] [--keep]

Both tools run --clients concurrent sessions for --secs seconds over the same --accounts
mailboxes (the bed's user0..N-1, filled with --messages messages each by `spate smtp
--lmtp` before the first run), alternating, --reps times each; figures are medians.
- imaptest (Dovecot's, commit 924f619; /opt/imaptest/bin/imaptest, or $IMAPTEST): its
  stress mode with the default profile, `host= port= user=user%d@example.test
  users=0-(N-1) pass= mbox=FILE clients=C secs=S,10` (each client: LOGIN, LIST 50 %,
  STATUS 50 %, SELECT, FETCH of a range, FETCH of a message, STORE 50 %, STORE \\Deleted,
  EXPUNGE, APPEND from the mbox, LOGOUT, with its state checks). Counts: its `Totals:`
  line (every command it completed, the final disconnect included); time: its wall
  time (start to exit). Errors: its `Error:` lines.
- spate: `spate imap` with a client mix close to that profile: `--users C --duration Ss
  -m 2 --download 50 --flag --delete 50 --append 100 --search-date 50 --search-header 50
  --structure 50 --copy 10` (per visit: LOGIN, SELECT, a SEARCH by date and one by header
  on every other visit, 2 messages FETCHed (one whole, one header), STORE \\Seen each,
  STORE \\Deleted on one, BODYSTRUCTURE+part on one, COPY on one in ten, EXPUNGE,
  APPEND, LOGOUT). Counts: summary.json, every command phase (auth, capability, select,
  search*, fetch, store, expunge, append, copy, move*, create, structure, part, logout);
  time: its elapsed_s. Errors: rejected + failed visits.
Generator CPU: user+sys of the generator process (os.wait4 rusage) / commands. Dovecot
CPU: its master process and every live descendant (children it has reaped are in its
cutime), /proc before and after, / commands.

Results: bench/results/imap-latest.md (medians, min–max, ratios spate/imaptest) and
bench/results/imap-latest.csv (every run).
"""

import argparse
import csv
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
from harness import (run_note, RESULTS, bed_down, bed_env, bed_up, find_spate, fmt, loadavg,  # noqa: E402
                     log, median, run_child, tree_cpu_seconds, wait_quiet)

IMAPTEST = os.environ.get("IMAPTEST", "/opt/imaptest/bin/imaptest")
FINAL_WAIT = 10  # imaptest: seconds its clients get to log out after secs
# Every summary.json phase that is one IMAP command (not connect, greeting, session...).
COMMAND_PHASES = {"auth", "capability", "starttls", "select", "search", "search_date",
                  "search_header", "fetch", "store", "expunge", "append", "copy", "move",
                  "move_emulated", "create", "structure", "part", "idle", "logout"}
SPATE_MIX = ["-m", "2", "--download", "50", "--flag", "--delete", "50", "--append", "100",
             "--search-date", "50", "--search-header", "50", "--structure", "50",
             "--copy", "10"]


def mbox(path, n=20):
    """An mbox of n plain messages (1-6 KB) for imaptest's APPENDs."""
    with open(path, "w") as f:
        for i in range(n):
            body = "".join(f"line {j} of imaptest message {i}, spate bench\n"
                           for j in range(25 + i * 6))
            f.write(f"From spate@example.test Wed Nov 25 22:00:00 2026\n"
                    f"From: <spate@example.test>\nTo: <user@example.test>\n"
                    f"Subject: imaptest message {i}\nDate: Wed, 25 Nov 2026 22:00:00 +0000\n"
                    f"Message-ID: <{i}.bench@spate.invalid>\n\n{body}\n")


def fill(spate, env, args, workdir):
    """--messages messages in each of the first --accounts mailboxes, over LMTP."""
    users = os.path.join(workdir, "fill-users.txt")
    with open(env["SPATE_USERS_FILE"]) as f:
        lines = [ln for ln in f if ln.strip() and not ln.startswith("#")][:args.accounts]
    with open(users, "w") as f:
        f.writelines(lines)
    n = args.accounts * args.messages
    argv = [spate, "smtp", "--lmtp", env["SPATE_LMTP"], "--to-file", users, "--pick",
            "round-robin", "--count", str(n), "--size", "500..5k", "--users", "4", "-m", "0",
            "--quiet", "-o", os.path.join(workdir, "fill")]
    rc, wall, _, text = run_child(argv, timeout=600, out_path=os.path.join(workdir, "fill.txt"))
    if rc != 0:
        sys.exit(f"filling the mailboxes failed: {text[-500:]}")
    log(f"filled {args.accounts} mailboxes with {args.messages} messages each in {wall:.1f} s")
    return users


def spate_argv(spate, args, env, users, resdir):
    return [spate, "imap", env["SPATE_IMAP"], "--users-file", users, "--users",
            str(args.clients), "--duration", f"{args.secs}s", *SPATE_MIX, "--quiet",
            "-o", resdir]


def imaptest_argv(args, env, mbox_path):
    port = env["SPATE_IMAP"].rsplit(":", 1)[1]
    return [IMAPTEST, "host=127.0.0.1", f"port={port}", "user=user%d@example.test",
            f"users=0-{args.accounts - 1}", f"pass={env['SPATE_PASSWORD']}",
            f"mbox={mbox_path}", f"clients={args.clients}", f"secs={args.secs},{FINAL_WAIT}"]


def read_spate(resdir):
    """(logins, commands, elapsed s, errors, {phase: count}) from summary.json."""
    try:
        with open(os.path.join(resdir, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return None
    counts = {p["phase"]: p["count"] for p in s["phases"] if p["phase"] in COMMAND_PHASES}
    t = s["totals"]
    errors = t["rejected"] + t["failed"] + t.get("unfinished", 0)
    return counts.get("auth", 0), sum(counts.values()), s["elapsed_s"], errors, counts


def read_imaptest(text):
    """(logins, commands, errors, {state: count}) from imaptest's output."""
    errors = sum(1 for ln in text.splitlines() if ln.startswith("Error:"))
    tail = text.split("Totals:", 1)
    if len(tail) < 2:
        return None, None, errors, {}
    lines = [ln.split() for ln in tail[1].strip().splitlines()]
    names = lines[0] if lines else []
    counts_line = next((ln for ln in lines[1:] if ln and all(w.isdigit() for w in ln)), None)
    if not counts_line or len(counts_line) != len(names):
        return None, None, errors, {}
    counts = dict(zip(names, (int(x) for x in counts_line)))
    return counts.get("Logi", 0), sum(counts.values()), errors, counts


def one_run(tool, rep, args, spate, env, users, mbox_path, workdir):
    row = dict(tool=tool, rep=rep, clients=args.clients, secs=args.secs, logins=None,
               commands=None, elapsed_s=None, logins_per_s=None, commands_per_s=None,
               errors=None, gen_cpu_s=None, gen_cpu_us_per_cmd=None, gen_cpu_pct_core=None,
               dovecot_cpu_us_per_cmd=None, dovecot_cpu_pct_core=None, wall_s=None, rc=None,
               loadavg=round(loadavg(), 2), busy_before=None, counts="", note="")
    row["busy_before"] = round(wait_quiet(args.wait_idle), 2)
    rundir = os.path.join(workdir, f"{tool}-{rep}")
    os.makedirs(rundir)
    if tool == "spate":
        argv = spate_argv(spate, args, env, users, os.path.join(rundir, "res"))
        environ = None
    else:
        argv = imaptest_argv(args, env, mbox_path)
        environ = {**os.environ, "LD_LIBRARY_PATH": "/usr/lib/dovecot"}
    master = int(open(env["_DOVECOT_PIDFILE"]).read().split()[0])
    dcpu0 = tree_cpu_seconds(master)
    rc, wall, gcpu, text = run_child(argv, timeout=args.secs + FINAL_WAIT + 60,
                                     out_path=os.path.join(rundir, "out.txt"), env=environ)
    dcpu = tree_cpu_seconds(master) - dcpu0
    if tool == "spate":
        got = read_spate(os.path.join(rundir, "res"))
        logins, commands, elapsed, errors, counts = got if got else (None, None, None, None, {})
    else:
        with open(os.path.join(rundir, "out.txt"), "rb") as f:
            full = f.read().decode(errors="replace")
        logins, commands, errors, counts = read_imaptest(full)
        elapsed = wall
    row.update(rc=rc, wall_s=round(wall, 3), gen_cpu_s=round(gcpu, 3), logins=logins,
               commands=commands, errors=errors,
               elapsed_s=round(elapsed, 3) if elapsed else None,
               gen_cpu_pct_core=round(100 * gcpu / wall, 1),
               counts=" ".join(f"{k}={v}" for k, v in counts.items()))
    if commands and elapsed:
        row.update(logins_per_s=round(logins / elapsed, 1),
                   commands_per_s=round(commands / elapsed, 1),
                   gen_cpu_us_per_cmd=round(gcpu * 1e6 / commands, 1),
                   dovecot_cpu_us_per_cmd=round(dcpu * 1e6 / commands, 1),
                   dovecot_cpu_pct_core=round(100 * dcpu / elapsed, 1))
    row["note"] = run_note(rc, text, commands, errors, rundir if args.keep else None)
    log(f"{tool:8} rep {rep}: {fmt(row['logins_per_s'])} logins/s, "
        f"{fmt(row['commands_per_s'])} commands/s, gen {fmt(row['gen_cpu_us_per_cmd'], 1)} "
        f"CPU-µs/cmd ({fmt(row['gen_cpu_pct_core'], 1)} % of a core), Dovecot "
        f"{fmt(row['dovecot_cpu_us_per_cmd'], 1)} CPU-µs/cmd"
        f"{'  ' + row['note'] if row['note'] else ''}")
    return row


def render(rows, args, spate, started, bed_note):
    out = ["# spate imap vs imaptest (stress mode) — against the test bed's Dovecot (loopback)\n"]
    out.append(f"- date: {started}; host: {platform.node()}, {os.cpu_count()} CPUs, "
               f"{platform.system()} {platform.release()}; **a shared machine, busy with "
               "other builds and tests: figures are indicative, ratios more than absolutes**")
    out.append(f"- spate: `{spate}`; imaptest: `{IMAPTEST}` ({imaptest_version()})")
    out.append(f"- target: {bed_note}")
    out.append(f"- {args.clients} concurrent sessions for {args.secs} s per run, over the same "
               f"{args.accounts} mailboxes ({args.messages} messages each at the start), "
               f"{args.reps} runs per tool, tools alternating; medians, min–max in brackets")
    out.append("- imaptest: stress mode, default profile (LOGIN, LIST 50 %, STATUS 50 %, SELECT, "
               "FETCH range, FETCH message, STORE 50 %, STORE \\Deleted, EXPUNGE, APPEND, "
               "LOGOUT; state tracking on); commands = its `Totals:` line, time = its wall time")
    out.append("- spate: `spate imap --users C --duration S " + " ".join(SPATE_MIX) + "`; "
               "commands = the count of every command phase in summary.json, time = elapsed_s")
    out.append("- generator CPU: user+sys of the generator process (os.wait4) / commands; Dovecot "
               "CPU: master + live descendants (+ reaped children) from /proc / commands")
    busy = [r["busy_before"] for r in rows if r.get("busy_before") is not None]
    loads = [r["loadavg"] for r in rows if r.get("loadavg") is not None]
    if busy:
        out.append(f"- machine before each run (after waiting up to {args.wait_idle:.0f} s for "
                   f"< 25 % busy): CPU busy median {100 * median(busy):.0f} %, max "
                   f"{100 * max(busy):.0f} %; 1-min load average median {median(loads):.2f}, "
                   f"max {max(loads):.2f} (per run in imap-latest.csv)")
    out.append("")
    out.append("| tool | runs | logins/s | commands/s | gen CPU-µs/cmd | gen CPU % of a core | "
               "Dovecot CPU-µs/cmd | Dovecot CPU % | errors |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    med = {}
    for tool in args.tools:
        good = [r for r in rows if r["tool"] == tool and r["commands_per_s"] and r["rc"] == 0]
        if not good:
            notes = "; ".join(sorted({r["note"] for r in rows if r["tool"] == tool and r["note"]}))
            out.append(f"| {tool} | 0 | no data {notes} | | | | | | |")
            continue

        def m(k):
            return median([r[k] for r in good if r[k] is not None])

        def rng(k, nd=0):
            v = [r[k] for r in good if r[k] is not None]
            return f"{fmt(min(v), nd)}–{fmt(max(v), nd)}"
        med[tool] = {k: m(k) for k in ("logins_per_s", "commands_per_s", "gen_cpu_us_per_cmd")}
        out.append(f"| {tool} | {len(good)} | {fmt(m('logins_per_s'))} ({rng('logins_per_s')}) | "
                   f"{fmt(m('commands_per_s'))} ({rng('commands_per_s')}) | "
                   f"{fmt(m('gen_cpu_us_per_cmd'), 1)} ({rng('gen_cpu_us_per_cmd', 1)}) | "
                   f"{fmt(m('gen_cpu_pct_core'), 1)} | {fmt(m('dovecot_cpu_us_per_cmd'), 1)} | "
                   f"{fmt(m('dovecot_cpu_pct_core'))} | "
                   f"{fmt(sum(r['errors'] or 0 for r in good))} |")
    out.append("")
    s, i = med.get("spate"), med.get("imaptest")
    if s and i:
        out.append("Ratios spate/imaptest (medians): "
                   f"logins/s ×{s['logins_per_s'] / i['logins_per_s']:.2f}, "
                   f"commands/s ×{s['commands_per_s'] / i['commands_per_s']:.2f}, "
                   f"generator CPU-µs/command ×{s['gen_cpu_us_per_cmd'] / i['gen_cpu_us_per_cmd']:.2f} "
                   "(lower is cheaper).")
        out.append("")
    out.append("The two mixes are alike, not equal: imaptest has LIST, STATUS and range FETCHes "
               "spate does not send; spate has SEARCH, BODYSTRUCTURE+part and COPY that "
               "imaptest's default profile does not. Neither generator is near a core; "
               "Dovecot costs many times either generator's CPU per command (table), so "
               "commands/s compares what the two mixes cost the server as much as the tools.")
    return "\n".join(out) + "\n"


def imaptest_version():
    commit = os.path.join(os.path.dirname(os.path.dirname(IMAPTEST)), "COMMIT")
    try:
        with open(commit) as f:
            return "commit " + f.read().strip()
    except OSError:
        return "commit unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--secs", type=int, default=10, help="seconds of each run")
    ap.add_argument("--accounts", type=int, default=100, help="mailboxes used (<= the bed's users)")
    ap.add_argument("--messages", type=int, default=10, help="messages per mailbox at the start")
    ap.add_argument("--tools", type=lambda s: s.split(","), default=["spate", "imaptest"])
    ap.add_argument("--bed", help="use this running test bed (scripts/testbed --dir) instead of a new one")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between runs")
    ap.add_argument("--wait-idle", type=float, default=20.0,
                    help="before each run wait up to this many seconds for the CPUs to be < 25%% busy")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory (printed)")
    args = ap.parse_args()
    if not set(args.tools) <= {"spate", "imaptest"}:
        sys.exit("--tools: spate and/or imaptest")
    spate = find_spate()
    if not os.access(spate, os.X_OK):
        sys.exit(f"{spate}: not built (cargo build --release, or set SPATE_BIN / CARGO_TARGET_DIR)")
    if "imaptest" in args.tools and not os.access(IMAPTEST, os.X_OK):
        sys.exit(f"{IMAPTEST}: not built (scripts/build-imaptest, or set IMAPTEST)")
    os.makedirs(RESULTS, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="spate-bench-imap-")
    os.chmod(workdir, 0o755)  # the bed's daemons (postfix, dovecot's users) must reach the bed
    started = datetime.datetime.now().isoformat(timespec="seconds")

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    bed_dir, ours = args.bed, False
    rows = []
    try:
        if not bed_dir:
            # Ours from the start: a bed that fails half-way up is brought down too.
            bed_dir, ours = os.path.join(workdir, "bed"), True
            bed_up(workdir, "--users", str(max(100, args.accounts)))
        env = bed_env(bed_dir)
        env["_DOVECOT_PIDFILE"] = os.path.join(bed_dir, "dovecot-run", "master.pid")
        bed_note = (f"`scripts/testbed up` (Dovecot {dovecot_version()}, Maildir, imap "
                    f"{env['SPATE_IMAP']}, plain text LOGIN)")
        users = fill(spate, env, args, workdir)
        mbox_path = os.path.join(workdir, "bench.mbox")
        mbox(mbox_path)
        for rep in range(1, args.reps + 1):
            k = (rep - 1) % len(args.tools)
            for tool in args.tools[k:] + args.tools[:k]:  # alternate which tool goes first
                rows.append(one_run(tool, rep, args, spate, env, users, mbox_path, workdir))
                time.sleep(args.pause)
    finally:
        if ours:
            bed_down(bed_dir)
        if args.keep:
            log(f"run directories kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    md = render(rows, args, spate, started, bed_note)
    print(md)
    with open(os.path.join(RESULTS, "imap-latest.md"), "w") as f:
        f.write(md)
    if rows:
        with open(os.path.join(RESULTS, "imap-latest.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    log(f"written: {os.path.join(RESULTS, 'imap-latest.md')} and imap-latest.csv")


def dovecot_version():
    try:
        r = subprocess.run(["/usr/sbin/dovecot", "--version"], capture_output=True, text=True,
                           timeout=10)
        return r.stdout.strip().split()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "?"


if __name__ == "__main__":
    main()
