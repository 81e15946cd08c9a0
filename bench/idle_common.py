"""What bench/imap-idle.py and bench/population-memory.py share: K0 and then K sessions (or
users) of one spate generator process against a fresh `spate serve` (own process) each,
both sampled once a second, VmRSS taken once every session is open and the generator quiet,
and KiB per session = (RSS(K) - RSS(K0)) / (K - K0), for the generator and for the server.

A script gives its own `one(spate, k, args, workdir, users_file)` (the generator's command
line and what it reads from the run's summary) and its own table columns; this module does
the rest: the server, the sampling, the quiet rule, the medians, the table and the files.
"""

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (RESULTS, find_spate, fmt, free_port, log, median,  # noqa: E402
                     proc_cpu_seconds, read_json, spawn, stop, wait_listen)
from xmpp import append_csv, proc_mem, set_nofile  # noqa: E402

QUIET_CPU_S = 0.05  # the generator is quiet: under this much CPU over the last 2 s
IDLE_SAMPLES = 6  # RSS: the median of up to this many quiet samples
# one sample: t [s since the generator started], generator RSS, generator CPU [s],
# server RSS (KiB), the server's open connections
T, GEN_RSS, GEN_CPU, SERVE_RSS, OPEN = range(5)


def ports(base, n):
    """n free ports next to each other, from base plus a random step of 10 (of 500)."""
    b = base + int.from_bytes(os.urandom(2), "big") % 500 * 10
    return [free_port(b + i) for i in range(n)]


def tail(path, n=300):
    """The last n bytes of a process's output, on one line."""
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace").strip().replace("\n", " / ")
    except OSError:
        return ""


class Serve:
    """A fresh `spate serve` in its own run directory: its stats file and certificate."""

    def __init__(self, spate, rundir, listen, users_file):
        self.rundir = rundir
        self.statsf = os.path.join(rundir, "serve.json")
        self.cert = os.path.join(rundir, "serve.pem")
        self.out = os.path.join(rundir, "serve.out")
        argv = [spate, "serve", *listen, "--users-file", users_file, "--max-connections", "0",
                "--stats-file", self.statsf, "--cert-out", self.cert]
        self.proc = spawn(argv, self.out, cwd=rundir, preexec_fn=set_nofile)

    def listening(self, port_list, note):
        """Every port answers (15 s each at the most); else a note with the server's output."""
        if all(wait_listen(p, 15) for p in port_list):
            return True
        note.append(f"spate serve did not listen: {tail(self.out)}")
        return False

    def stop(self):
        stop(self.proc, "spate serve", 30)
        self.proc._out.close()


@contextlib.contextmanager
def fresh_serve(spate, workdir, prefix, listen, users_file, row, note, keep):
    """A Serve in a new run directory below workdir; on the way out the server is stopped,
    row["note"] is the notes joined and the run directory goes (unless keep)."""
    rundir = tempfile.mkdtemp(prefix=prefix, dir=workdir)
    serve = Serve(spate, rundir, listen, users_file)
    try:
        yield serve
    finally:
        serve.stop()
        row["note"] = "; ".join(note)
        if not keep:
            shutil.rmtree(rundir, ignore_errors=True)


def run_sampled(argv, serve, k, limit, out_path, note):
    """Run the generator; once a second sample its RSS and CPU, the server's RSS and the
    server's open connections. A sample is quiet once the server has counted k open
    connections for 2 s and the generator used under QUIET_CPU_S of CPU in them.
    Stopped (SIGTERM) after limit seconds. Returns (generator, samples, quiet samples
    (the first IDLE_SAMPLES), samples with every session open)."""
    t0 = time.monotonic()
    gen = spawn(argv, out_path, cwd=serve.rundir, preexec_fn=set_nofile)
    samples, idle = [], []
    while gen.poll() is None and time.monotonic() - t0 < limit:
        time.sleep(1.0)
        try:
            grss, _ = proc_mem(gen.pid)
            gcpu = proc_cpu_seconds(gen.pid)
            srss, _ = proc_mem(serve.proc.pid)
        except (OSError, ValueError, IndexError):
            break
        n = read_json(serve.statsf).get("active_connections", 0)
        samples.append((time.monotonic() - t0, grss, gcpu, srss, n))
        if (len(samples) >= 3 and n >= k and samples[-3][OPEN] >= k
                and gcpu - samples[-3][GEN_CPU] < QUIET_CPU_S and len(idle) < IDLE_SAMPLES):
            idle.append(samples[-1])
    if gen.poll() is None:
        note.append("over its time limit: stopped")
        gen.send_signal(signal.SIGTERM)
    gen.wait(timeout=120)
    gen._out.close()
    return gen, samples, idle, [s for s in samples if s[OPEN] >= k]


def memory(samples, idle, full):
    """The row's columns from the samples: open connections, how long all were open, the
    median RSS of the quiet samples, the generator's CPU."""
    return dict(
        open_max=max((s[OPEN] for s in samples), default=0),
        all_open_after_s=round(full[0][T], 1) if full else None,
        held_s=round(full[-1][T] - full[0][T], 1) if full else 0,
        gen_rss_kb=median([s[GEN_RSS] for s in idle]) if idle else None,
        serve_rss_kb=median([s[SERVE_RSS] for s in idle]) if idle else None,
        gen_cpu_s=round(samples[-1][GEN_CPU], 2) if samples else None)


def read_summary(rundir, note):
    """The run's summary.json (None, and a note, if missing or without totals); its first
    error rows go into the notes."""
    try:
        with open(os.path.join(rundir, "run", "summary.json")) as f:
            s = json.load(f)
        s["totals"]
    except (OSError, ValueError, KeyError) as e:
        note.append(f"no summary: {e}")
        return None
    errs = s.get("errors") or []
    if errs:
        note.append("errors: " + "; ".join(
            f"{e.get('phase')} {e.get('kind')} x{e.get('count')}" for e in errs[:4]))
    return s


def log_row(row, extra=""):
    log(f"K={row['k']}: open {row.get('open_max')} held {row.get('held_s')} s, generator "
        f"{fmt((row.get('gen_rss_kb') or 0) / 1024, 1)} MiB, server "
        f"{fmt((row.get('serve_rss_kb') or 0) / 1024, 1)} MiB, {extra}failed {row.get('failed')} "
        f"{row['note']}")


def render(rows, k0, title, command, against, unit, middle):
    """The Markdown table. unit: "session" or "user" (its KiB/unit columns are also set in
    each row as gen_kib_per_<unit>, serve_kib_per_<unit>); middle: (heading, cell(row))
    columns between the server's KiB/unit and the generator's CPU."""
    base = rows[0]
    cols = ["K", "open (max)", "all open after [s]", "held [s]", "generator RSS [MiB]",
            f"generator KiB/{unit}", "server RSS [MiB]", f"server KiB/{unit}",
            *(h for h, _ in middle), "generator CPU [s]", "notes"]
    out = [f"## {title}: memory per {unit} of the generator and of spate serve\n",
           f"- `spate {rows[-1].get('command', command)}` against `spate serve {against}` "
           "(own process, fresh for each K)",
           f"- KiB/{unit} = (RSS(K) - RSS({k0})) / (K - {k0}), RSS the median of up to "
           "6 samples once the server counts K open connections and the generator is quiet",
           "- open files limited to 20 000 per process\n",
           "| " + " | ".join(cols) + " |",
           "|" + "---|" * len(cols)]
    mib = (lambda v: fmt(v / 1024, 1) if v else "n/a")
    for r in rows:
        per = {}
        for side in ("gen", "serve"):
            a, b = r.get(f"{side}_rss_kb"), base.get(f"{side}_rss_kb")
            per[side] = (round((a - b) / (r["k"] - k0), 2)
                         if a and b and r["k"] != k0 else None)
            r[f"{side}_kib_per_{unit}"] = per[side]
        cells = [str(r["k"]), fmt(r.get("open_max")), fmt(r.get("all_open_after_s"), 1),
                 fmt(r.get("held_s"), 1), mib(r.get("gen_rss_kb")), fmt(per["gen"], 2),
                 mib(r.get("serve_rss_kb")), fmt(per["serve"], 2),
                 *(cell(r) for _, cell in middle), fmt(r.get("gen_cpu_s"), 2), r.get("note", "")]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    return "\n".join(out)


def run_bench(args, one, render_rows, workdir_prefix, stem):
    """K0 then K (args.k0, args.sessions, both at most 19 000: one process opens at most
    20 000 files): rows from one(), the table printed and written to
    bench/results/<stem>-latest.md, the rows appended to bench/results/<stem>.csv."""
    if args.sessions > 19000:
        sys.exit("--sessions: at most 19000 (one process opens at most 20 000 files)")
    if args.sessions <= args.k0:
        sys.exit("--sessions must be more than --k0")
    spate = find_spate()
    if not os.path.exists(spate):
        sys.exit(f"{spate}: not built (cargo build --release, or SPATE_BIN)")
    workdir = tempfile.mkdtemp(prefix=workdir_prefix)
    users = os.path.join(workdir, "users.txt")
    with open(users, "w") as f:
        for i in range(args.sessions):
            f.write(f"user{i}@example.test pw{i}\n")
    rows = [one(spate, k, args, workdir, users) for k in (args.k0, args.sessions)]
    text = render_rows(rows, args)
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{stem}-latest.md"), "w") as f:
        f.write(f"<!-- {time.strftime('%Y-%m-%d %H:%M')} {os.uname().nodename} -->\n" + text)
    append_csv(os.path.join(RESULTS, f"{stem}.csv"), rows)
    if args.keep:
        log(f"kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
