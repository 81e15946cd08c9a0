#!/usr/bin/env python3
"""spate benchmark harness: spate against its peers, on loopback only.

This is a benchmark, never a test: it asserts nothing about speed, it measures and prints.

  bench/peers.sh  [--reps N] [--postal-seconds S] [--only CONFIG,...] [--tools a,b]
  bench/serve.sh  [--reps N]

peers: generators (smtp-source, postal, spate) against one smtp-sink, for 8 configurations
       (1 and 50 sessions) x (1 KB and 10 KB) x (connection reuse or one message per
       connection). Counts are taken at the receiver (smtp-sink -c), generator CPU from the
       child's own rusage (os.wait4), sink CPU from /proc/PID/stat.
serve: one generator (smtp-source -d -s 50 -m 20000 -l 1024) against smtp-sink and against
       a server command (SERVE_CMD, default spate serve); server CPU from /proc/PID/stat.

Command templates (environment), placeholders in braces:
  SPATE_CMD  default: target/release/spate smtp 127.0.0.1:{port} --users {sessions}
             --count {count} --size {size} --messages-per-connection {mpc} --quiet
             {mpc} is {count} when connections are reused. Also {size_kb}, {reuse} (1/0)
             and {reuse_flag} ("-d" or nothing: lets smtp-source stand in for spate).
  SPATE_BASE_CMD  the same template for another spate build, run as the tool
             "spate-base" (--tools smtp-source,spate,spate-base): before/after in one run
  SERVE_CMD  default: target/release/spate serve --smtp 127.0.0.1:{port} --discard
If the template's program does not exist the rows read 'spate: not built'.

Results: a markdown table per configuration on stdout and in bench/results/latest.md, every
single run in bench/results/latest.csv. Each configuration's spate/peer ratios are then
compared with the recorded table, bench/results/reference.csv (the runs the README's
figures come from; --reference FILE for another): a ratio of msgs/s that fell, or of
generator CPU per message that rose, by more than --tolerance (10 %) is marked REGRESSED,
on stdout and in latest.md. `--update-reference` makes this run the recorded table.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
TICK = os.sysconf("SC_CLK_TCK")

DEFAULT_SPATE_CMD = (
    "target/release/spate smtp 127.0.0.1:{port} --users {sessions} --count {count} "
    "--size {size} --messages-per-connection {mpc} --quiet"
)
DEFAULT_SERVE_CMD = "target/release/spate serve --smtp 127.0.0.1:{port} --discard"

# Default ports are random in 20000-29999 (not a well-known port another benchmark or a
# stray generator on this machine might also be aimed at: the sink's counts must be ours).
_rand = int.from_bytes(os.urandom(2), "big") % 1000
SINK_PORT = int(os.environ.get("BENCH_SINK_PORT", str(20000 + 10 * _rand)))
SERVE_PORT = int(os.environ.get("BENCH_SERVE_PORT", str(20001 + 10 * _rand)))
RUN_TIMEOUT = 300  # seconds: every generator run is bounded


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------- install
def ensure_tools(need_postal=True):
    missing = []
    if not shutil.which("smtp-source") or not shutil.which("smtp-sink"):
        missing.append("postfix")
    if need_postal and not shutil.which("postal"):
        missing.append("postal")
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"missing {' '.join(missing)}: as root, apt-get install -y {' '.join(missing)}")
    log(f"installing {' '.join(missing)} (waits for the dpkg lock if another apt runs)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(
        ["apt-get", "install", "-y", "-o", "DPkg::Lock::Timeout=600"] + missing,
        env=env, check=True, stdout=subprocess.DEVNULL, timeout=900,
    )


# ------------------------------------------------------------------------------- processes
def proc_cpu_seconds(pid, with_children=True):
    """utime+stime (+cutime+cstime of waited-for children) of a live process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is state (field 3); utime is field 14 -> index 11
    ut, st, cut, cst = (int(x) for x in fields[11:15])
    total = ut + st + ((cut + cst) if with_children else 0)
    return total / TICK


def process_tree(pid):
    """pid and its live descendants."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def tree_cpu_seconds(pid):
    """CPU of a process plus its live descendants (for servers that fork)."""
    total = 0.0
    for p in process_tree(pid):
        try:
            total += proc_cpu_seconds(p)
        except OSError:
            pass
    return total


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_busy(interval=0.5):
    """Share of all CPUs busy (0..1) over a short interval, from /proc/stat."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v), idle
    t0, i0 = snap()
    time.sleep(interval)
    t1, i1 = snap()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(max_wait, threshold=0.25):
    """Wait (bounded by max_wait seconds) until other work leaves the CPUs mostly idle.
    Returns the busy share last seen, recorded with each run."""
    deadline = time.monotonic() + max_wait
    busy = cpu_busy()
    while busy > threshold and time.monotonic() < deadline:
        time.sleep(1.0)
        busy = cpu_busy()
    return busy


def wait_listen(port, secs=10.0):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def port_free(port):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port(port, tries=20):
    """The given port if free, else the next free one in steps of 10 (bounded)."""
    for i in range(tries):
        if port_free(port + 10 * i):
            if i:
                log(f"127.0.0.1:{port} is in use (another benchmark?): using {port + 10 * i}")
            return port + 10 * i
    sys.exit(f"no free port near {port}; set BENCH_SINK_PORT/BENCH_SERVE_PORT")


def read_json(path):
    """A JSON file (a server's --stats-file, a summary) as a dict; {} while it is missing or
    half written."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def spawn(argv, out_path, cwd=None, preexec_fn=None):
    """A child with its output in out_path (closed by whoever reaps it: p._out)."""
    out = open(out_path, "wb")
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         cwd=cwd, preexec_fn=preexec_fn)
    p._out = out
    return p


def stop(proc, name, secs=10):
    """SIGTERM one process we started (by PID), wait bounded, then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=secs)
    except subprocess.TimeoutExpired:
        log(f"{name} (pid {proc.pid}) ignored SIGTERM for {secs}s: SIGKILL")
        proc.kill()
        proc.wait(timeout=secs)


def settled(read, every, limit):
    """read() once it gives the same count twice `every` seconds apart (bounded by `limit`
    seconds): a receiver's counter that stopped moving."""
    last = -1
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(every)
        n = read()
        if n == last:
            return n
        last = n
    return last


class Sink:
    """smtp-sink with -c: its counter line `sess=N quit=N mesg=N\\r` is the exact count."""

    def __init__(self, port, workdir):
        port = free_port(port)
        self.port = port
        self.out_path = os.path.join(workdir, f"smtp-sink-{port}.out")
        self.out = open(self.out_path, "wb")
        cmd = ["smtp-sink", "-c"]
        if os.geteuid() == 0:
            cmd += ["-u", "postfix"]
        cmd += [f"127.0.0.1:{port}", "1024"]
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        if not wait_listen(port):
            stop(self.proc, "smtp-sink")
            sys.exit("smtp-sink did not start")
        self.cmd = " ".join(cmd)

    def _read(self):
        self.out.flush()
        with open(self.out_path, "rb") as f:
            try:
                f.seek(-200, os.SEEK_END)
            except OSError:
                f.seek(0)
            tail = f.read()
        m = re.findall(rb"mesg=(\d+)", tail)
        return int(m[-1]) if m else 0

    def count(self, settle=0.3):
        """Messages accepted so far (waits until the counter stops moving, bounded)."""
        return settled(self._read, settle, 10)

    def cpu(self):
        return proc_cpu_seconds(self.proc.pid)

    def close(self):
        stop(self.proc, "smtp-sink")
        self.out.close()


class ServeSink:
    """`spate serve --discard` as the receiver (it offers PIPELINING and CHUNKING, which
    smtp-sink does not); its --stats-file (rewritten every second) is the exact count."""

    def __init__(self, port, workdir, serve_cmd):
        port = free_port(port)
        self.port = port
        self.stats = os.path.join(workdir, f"serve-{port}.json")
        argv = fill(serve_cmd, port=port) + ["--stats-file", self.stats]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        if not wait_listen(port):
            stop(self.proc, "spate serve")
            sys.exit("spate serve did not start")
        self.cmd = " ".join(argv)

    def _read(self):
        try:
            with open(self.stats) as f:
                return json.load(f).get("messages_accepted", 0)
        except (OSError, ValueError):
            return 0

    def count(self, settle=0.3):
        """Messages accepted so far: two readings of the stats file a rewrite apart agree."""
        return settled(self._read, 1.1, 15)

    def cpu(self):
        return proc_cpu_seconds(self.proc.pid)

    def close(self):
        stop(self.proc, "spate serve")


def run_child(argv, timeout=RUN_TIMEOUT, term_after=None, out_path=None, cwd=None, env=None):
    """Run a generator; return (rc, wall seconds, cpu seconds from its own rusage, output).

    term_after: send SIGTERM after this many seconds (postal never exits by itself).
    env: the child's environment (default: this one).
    """
    out = open(out_path, "wb") if out_path else subprocess.DEVNULL
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         cwd=cwd or (os.path.dirname(out_path) if out_path else None), env=env)
    deadline = t0 + (term_after if term_after else timeout)
    termed = False
    status = None
    rusage = None
    while True:
        pid, st, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            status, rusage = st, ru
            break
        now = time.monotonic()
        if now >= deadline:
            if term_after and not termed:
                p.send_signal(signal.SIGTERM)
                termed = True
                deadline = now + 10
            elif termed or not term_after:
                log(f"{argv[0]} (pid {p.pid}) over its time limit: SIGKILL")
                p.kill()
                deadline = now + 10
                term_after = None
                termed = True
        time.sleep(0.01)
    wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if out_path:
        out.close()
    cpu = rusage.ru_utime + rusage.ru_stime
    rc = p.returncode
    if termed and rc == -signal.SIGTERM:
        rc = 0  # stopped as planned
    text = ""
    if out_path:
        with open(out_path, "rb") as f:
            text = f.read()[-2000:].decode(errors="replace")
    return rc, wall, cpu, text


# ------------------------------------------------------------------------------- test bed, spate
def find_spate():
    if os.environ.get("SPATE_BIN"):
        return os.path.abspath(os.environ["SPATE_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    return os.path.join(target, "release", "spate")


def bed_up(workdir, *words):
    """scripts/testbed up WORDS... on free ports into WORKDIR/bed; its directory."""
    bed_dir = os.path.join(workdir, "bed")
    cmd = [os.path.join(REPO, "scripts", "testbed"), "up", *words,
           "--port-offset", "auto", "--dir", bed_dir]
    log("bed: " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        log(r.stdout[-2000:] + r.stderr[-2000:])
        sys.exit("testbed up failed")
    return bed_dir


def bed_env(bed_dir):
    r = subprocess.run([os.path.join(REPO, "scripts", "testbed"), "env", "--dir", bed_dir],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"testbed env failed: {r.stderr.strip()}")
    env = {}
    for line in r.stdout.splitlines():
        if line.startswith("export "):
            for kv in line[len("export "):].split():
                k, _, v = kv.partition("=")
                env[k] = v
    return env


def bed_down(bed_dir):
    subprocess.run([os.path.join(REPO, "scripts", "testbed"), "down", "--dir", bed_dir],
                   capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------------------------- configs
CONFIGS = [
    # name, sessions, size, reuse
    ("s50-1k-reuse", 50, 1024, True),
    ("s50-1k-1perconn", 50, 1024, False),
    ("s50-10k-reuse", 50, 10240, True),
    ("s50-10k-1perconn", 50, 10240, False),
    ("s1-1k-reuse", 1, 1024, True),
    ("s1-1k-1perconn", 1, 1024, False),
    ("s1-10k-reuse", 1, 10240, True),
    ("s1-10k-1perconn", 1, 10240, False),
]


def count_for(sessions, reuse, scale):
    # enough work for >= ~1 s per run at the rates seen here; bounded for TIME_WAIT's sake
    if sessions >= 50:
        n = 20000 if reuse else 10000
    else:
        n = 5000 if reuse else 3000
    return max(100, int(n * scale))


def template_program(template):
    argv = shlex.split(template)
    prog = argv[0] if argv else ""
    path = prog if os.path.isabs(prog) else os.path.join(REPO, prog)
    if os.sep in prog:
        return path if os.access(path, os.X_OK) else None
    return shutil.which(prog)


def fill(template, **kw):
    try:
        argv = [a.format(**kw) for a in shlex.split(template)]
    except (KeyError, IndexError, ValueError) as e:
        sys.exit(f"bad placeholder {e} in command template {template!r}; "
                 f"known: {', '.join('{' + k + '}' for k in kw)}")
    argv = [a for a in argv if a != ""]
    prog = argv[0]
    if os.sep in prog and not os.path.isabs(prog):
        argv[0] = os.path.join(REPO, prog)
    return argv


def users_file(workdir, n=100):
    path = os.path.join(workdir, "postal-users.txt")
    with open(path, "w") as f:
        for i in range(n):
            f.write(f"user{i}@example.test\n")
    return path


def generator_argv(tool, cfg, port, count, workdir, spate_cmd):
    name, sessions, size, reuse = cfg
    if tool == "smtp-source":
        argv = ["smtp-source", "-s", str(sessions), "-m", str(count), "-l", str(size),
                "-f", "sender@example.test", "-t", "user0@example.test"]
        if reuse:
            argv.insert(1, "-d")
        return argv + [f"127.0.0.1:{port}"]
    if tool == "postal":
        kb = str(size // 1024)
        return ["postal", "-t", str(sessions), "-c", "100000" if reuse else "1", "-m", kb, "-M", kb,
                "-r", "1000000", f"[127.0.0.1]{port}", users_file(workdir)]
    if tool in ("spate", "spate-base"):
        template = spate_cmd if tool == "spate" else os.environ.get("SPATE_BASE_CMD", "")
        return fill(template, port=port, sessions=sessions, count=count, size=size,
                    size_kb=size // 1024, mpc=count if reuse else 1,
                    reuse_flag="-d" if reuse else "", reuse=1 if reuse else 0)
    raise ValueError(tool)


def run_note(rc, text, counted, errors, keep_dir=None):
    """The note of one benchmark run: its exit and last line, no count found, or its
    errors; and the run's directory when it is kept."""
    note = ""
    if rc != 0:
        last = text.strip().splitlines()[-1][:100] if text.strip() else ""
        note = f"exit {rc}: {last}"
    elif not counted:
        note = "no count in the tool's output"
    elif errors:
        note = f"{errors} errors"
    if keep_dir:
        note = (note + f" dir {keep_dir}").strip()
    return note


def median(xs):
    return statistics.median(xs) if xs else None


def fmt(x, nd=0):
    if x is None:
        return "n/a"
    return f"{x:,.{nd}f}"


# ------------------------------------------------------------------------------- peers
def cmd_peers(args):
    ensure_tools(need_postal="postal" in args.tools)
    spate_cmd = os.environ.get("SPATE_CMD", DEFAULT_SPATE_CMD)
    spate_prog = template_program(spate_cmd)
    tools = list(args.tools)
    configs = [c for c in CONFIGS if not args.only or c[0] in args.only]
    os.makedirs(RESULTS, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="spate-bench-")
    if args.sink == "spate":
        sink = ServeSink(SERVE_PORT, workdir, os.environ.get("SERVE_CMD", DEFAULT_SERVE_CMD))
    else:
        sink = Sink(SINK_PORT, workdir)
    rows = []  # one per run
    started = datetime.datetime.now().isoformat(timespec="seconds")
    try:
        for cfg in configs:
            name, sessions, size, reuse = cfg
            count = count_for(sessions, reuse, args.scale)
            for rep in range(args.reps):
                # alternate: tools in a rotating order so drift hits all of them alike
                order = tools[rep % len(tools):] + tools[:rep % len(tools)]
                for tool in order:
                    row = dict(config=name, sessions=sessions, size=size,
                               mode="reuse" if reuse else "1/conn", tool=tool, rep=rep + 1,
                               count_target=count, accepted=None, wall_s=None,
                               msgs_per_s=None, gen_cpu_us=None, sink_cpu_us=None,
                               rc=None, loadavg=loadavg(), busy_before=None, note="")
                    if tool == "spate" and spate_prog is None:
                        row["note"] = "spate: not built"
                        rows.append(row)
                        continue
                    if tool == "spate-base" and template_program(os.environ.get("SPATE_BASE_CMD", "")) is None:
                        row["note"] = "spate-base: set SPATE_BASE_CMD to a built program"
                        rows.append(row)
                        continue
                    row["busy_before"] = round(wait_quiet(args.wait_idle), 2)
                    argv = generator_argv(tool, cfg, sink.port, count, workdir, spate_cmd)
                    before = sink.count(settle=0.05)
                    cpu0 = sink.cpu()
                    out_path = os.path.join(workdir, f"{tool}.out")
                    term = args.postal_seconds if tool == "postal" else None
                    rc, wall, gcpu, text = run_child(argv, term_after=term, out_path=out_path)
                    after = sink.count()
                    scpu = sink.cpu() - cpu0
                    n = after - before
                    row.update(accepted=n, wall_s=round(wall, 3), rc=rc,
                               msgs_per_s=round(n / wall, 1) if wall > 0 else None,
                               gen_cpu_us=round(gcpu * 1e6 / n, 1) if n else None,
                               sink_cpu_us=round(scpu * 1e6 / n, 1) if n else None)
                    if rc != 0:
                        row["note"] = f"exit {rc}: " + text.strip().splitlines()[-1][:80] if text.strip() else f"exit {rc}"
                    elif tool != "postal" and n != count:
                        row["note"] = f"sink counted {n} of {count}"
                    elif tool == "postal" and n / wall > 450:
                        row["note"] = "above postal's ~409/s cap: foreign traffic at the sink?"
                    rows.append(row)
                    log(f"{name:18} {tool:12} rep {rep + 1}: {fmt(row['msgs_per_s'])} msgs/s, "
                        f"gen {fmt(row['gen_cpu_us'], 1)} µs/msg, sink {fmt(row['sink_cpu_us'], 1)} µs/msg"
                        f"{'  ' + row['note'] if row['note'] else ''}")
                    time.sleep(args.pause)
    finally:
        sink.close()
        shutil.rmtree(workdir, ignore_errors=True)
    md = render_peers(rows, configs, tools, args, spate_cmd, started, sink.cmd)
    if args.sink == "smtp-sink":
        ref = args.reference or os.path.join(RESULTS, "reference.csv")
        lines, regressed = against_reference(rows, ref, args.tolerance)
        md += "\n" + "\n".join(lines)
        if regressed:
            log(f"REGRESSED: {regressed} configuration(s) against {ref} (see the table)")
    print(md)
    write_results(md, rows, "latest" if args.sink == "smtp-sink" else "latest-serve")
    if args.update_reference and rows:
        with open(os.path.join(RESULTS, "reference.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
        log("this run is now the recorded table (results/reference.csv)")


def medians_by_config(rows):
    """{config: {tool: (msgs/s, generator CPU-µs/msg)}}, medians of the runs that counted."""
    out = {}
    for r in rows:
        rate, gcpu = r.get("msgs_per_s"), r.get("gen_cpu_us")
        if rate in (None, "") or not r.get("accepted"):
            continue
        out.setdefault(r["config"], {}).setdefault(r["tool"], []).append((float(rate), float(gcpu or 0)))
    return {c: {t: (median([x[0] for x in v]), median([x[1] for x in v])) for t, v in tools.items()}
            for c, tools in out.items()}


def ratios(meds):
    """{(config, peer): (spate/peer msgs/s, spate/peer generator CPU-µs/msg)}."""
    out = {}
    for cfg, tools in meds.items():
        sp = tools.get("spate")
        for peer, pr in tools.items():
            if peer == "spate" or not sp or not pr[0] or not pr[1]:
                continue
            out[(cfg, peer)] = (sp[0] / pr[0], sp[1] / pr[1] if sp[1] else None)
    return out


def against_reference(rows, path, tolerance):
    """The markdown lines comparing this run's ratios with the recorded table's, and how
    many configurations regressed (None when there is no recorded table)."""
    try:
        with open(path, newline="") as f:
            recorded_meds = medians_by_config(list(csv.DictReader(f)))
    except OSError:
        return [f"(no recorded table at {path}: nothing to compare with)"], None
    recorded, now_meds = ratios(recorded_meds), medians_by_config(rows)
    now = ratios(now_meds)
    lines = [f"## Against the recorded table ({os.path.relpath(path, HERE)})\n",
             f"Ratios of spate to each peer measured in the same run, so that the machine's speed cancels; "
             f"REGRESSED when the msgs/s ratio fell or the generator CPU ratio rose by more than {100 * tolerance:.0f} %.\n",
             "The CPU-µs/msg columns are absolute: on the same machine they tell whether spate "
             "or the peer moved (a peer that ran faster today makes spate's ratio look worse).\n",
             "| config | peer | msgs/s ratio: recorded → now | gen CPU ratio: recorded → now | "
             "spate CPU-µs/msg: recorded → now | peer CPU-µs/msg: recorded → now | verdict |",
             "|---|---|---|---|---|---|---|"]
    regressed = 0
    for key in sorted(now):
        if key not in recorded:
            continue
        (r0, c0), (r1, c1) = recorded[key], now[key]
        why = []
        if r1 < r0 * (1 - tolerance):
            why.append(f"msgs/s ratio {100 * (r1 / r0 - 1):+.0f} %")
        if c0 and c1 and c1 > c0 * (1 + tolerance):
            why.append(f"CPU ratio {100 * (c1 / c0 - 1):+.0f} %")
        regressed += bool(why)
        verdict = ("REGRESSED: " + ", ".join(why)) if why else "held"
        cpu = lambda meds, tool: meds.get(key[0], {}).get(tool, (None, None))[1]
        lines.append(f"| {key[0]} | {key[1]} | ×{fmt(r0, 2)} → ×{fmt(r1, 2)} | "
                     f"×{fmt(c0, 2)} → ×{fmt(c1, 2)} | "
                     f"{fmt(cpu(recorded_meds, 'spate'), 1)} → {fmt(cpu(now_meds, 'spate'), 1)} | "
                     f"{fmt(cpu(recorded_meds, key[1]), 1)} → {fmt(cpu(now_meds, key[1]), 1)} | {verdict} |")
    lines.append(f"\n{regressed} configuration(s) regressed against the recorded table.\n")
    return lines, regressed


def render_peers(rows, configs, tools, args, spate_cmd, started, sink_cmd):
    out = []
    receiver = "spate serve --discard" if args.sink == "spate" else "smtp-sink"
    out.append(f"# spate vs peers — generators against {receiver} (loopback)\n")
    out.append(f"- date: {started}; host: {platform.node()}, {os.cpu_count()} CPUs, "
               f"{platform.system()} {platform.release()}")
    out.append(f"- receiver: `{sink_cmd}`; counts are the sink's exact counter deltas")
    out.append(f"- repetitions: {args.reps} per tool and configuration, tools alternating; "
               f"figures are medians (min–max of msgs/s in brackets)")
    out.append("- CPU-µs/msg: generator = the child's own rusage (user+sys) / messages; "
               "sink = the receiver's /proc utime+stime delta / messages")
    out.append(f"- postal: stopped by SIGTERM after {args.postal_seconds} s (it never exits); "
               "its -m/-M are KB; reuse = -c 100000 (random 1..100000 per connection: -c -1 sends no message at all in this version); -r 1000000")
    out.append(f"- spate: `SPATE_CMD={spate_cmd}`")
    loads = [r["loadavg"] for r in rows if r.get("loadavg") is not None]
    if loads:
        out.append(f"- 1-min load average before the runs: median {median(loads):.2f}, max {max(loads):.2f} "
                   "(other work on this machine skews the figures; see latest.csv per run)")
    busy = [r["busy_before"] for r in rows if r.get("busy_before") is not None]
    if busy:
        noisy = sum(1 for b in busy if b > 0.25)
        out.append(f"- CPU busy (all cores) in the 0.5 s before each run, after waiting up to "
                   f"{args.wait_idle:.0f} s for < 25 %: median {100 * median(busy):.0f} %, "
                   f"{noisy} of {len(busy)} runs started on a busy machine")
    out.append("- ratios are spate/peer: msgs/s (higher is better for spate) and "
               "generator CPU-µs/msg (lower is better for spate)\n")
    for cfg in configs:
        name, sessions, size, reuse = cfg
        out.append(f"## {name}: {sessions} session(s), {size // 1024} KB, "
                   f"{'connection reuse' if reuse else 'one message per connection'}\n")
        out.append("| tool | runs | accepted/run | msgs/s (median) | msgs/s (min–max) | "
                   "gen CPU-µs/msg | sink CPU-µs/msg | notes |")
        out.append("|---|---|---|---|---|---|---|---|")
        summary = {}
        for tool in tools:
            rs = [r for r in rows if r["config"] == name and r["tool"] == tool]
            good = [r for r in rs if r["msgs_per_s"] is not None and r["accepted"]]
            notes = sorted({r["note"] for r in rs if r["note"]})
            rates = [r["msgs_per_s"] for r in good]
            s = dict(rate=median(rates), gcpu=median([r["gen_cpu_us"] for r in good]),
                     scpu=median([r["sink_cpu_us"] for r in good]))
            summary[tool] = s
            rng = f"{fmt(min(rates))}–{fmt(max(rates))}" if rates else "n/a"
            out.append(f"| {tool} | {len(good)} | {fmt(median([r['accepted'] for r in good]))} | "
                       f"{fmt(s['rate'])} | {rng} | {fmt(s['gcpu'], 1)} | {fmt(s['scpu'], 1)} | "
                       f"{'; '.join(notes)} |")
        sp = summary.get("spate")
        for peer in [t for t in tools if t != "spate"]:
            pr = summary.get(peer)
            if not sp or not pr:
                continue
            r_rate = (sp["rate"] / pr["rate"]) if sp["rate"] and pr["rate"] else None
            r_cpu = (sp["gcpu"] / pr["gcpu"]) if sp["gcpu"] and pr["gcpu"] else None
            out.append(f"\nspate/{peer}: msgs/s ×{fmt(r_rate, 2)}, gen CPU-µs/msg ×{fmt(r_cpu, 2)}"
                       + ("" if sp["rate"] else " (spate: not built or no data)"))
        out.append("")
    return "\n".join(out)


def write_results(md, rows, stem):
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{stem}.md"), "w") as f:
        f.write(md + "\n")
    if rows:
        with open(os.path.join(RESULTS, f"{stem}.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    log(f"written: {os.path.join(RESULTS, stem + '.md')} and .csv")


# ------------------------------------------------------------------------------- serve
def cmd_serve(args):
    ensure_tools(need_postal=False)
    serve_cmd = os.environ.get("SERVE_CMD", DEFAULT_SERVE_CMD)
    serve_prog = template_program(serve_cmd)
    count = max(100, int(20000 * args.scale))
    gen = ["smtp-source", "-d", "-s", "50", "-m", str(count), "-l", "1024",
           "-f", "sender@example.test", "-t", "user0@example.test"]
    workdir = tempfile.mkdtemp(prefix="spate-bench-serve-")
    rows = []
    started = datetime.datetime.now().isoformat(timespec="seconds")
    servers = ["smtp-sink", "serve"]
    try:
        for rep in range(args.reps):
            for server in (servers if rep % 2 == 0 else servers[::-1]):
                row = dict(server=server, rep=rep + 1, count=count, accepted=None, wall_s=None,
                           msgs_per_s=None, server_cpu_us=None, gen_cpu_us=None, rc=None,
                           loadavg=loadavg(), busy_before=None, note="")
                if server == "smtp-sink":
                    sink = Sink(SINK_PORT, workdir)
                    pid, port, proc, closer = sink.proc.pid, sink.port, sink.proc, sink.close
                else:
                    if serve_prog is None:
                        row["note"] = "spate: not built"
                        rows.append(row)
                        continue
                    sink = None
                    serve_port = free_port(SERVE_PORT)
                    argv = fill(serve_cmd, port=serve_port)
                    slog = open(os.path.join(workdir, "serve.out"), "wb")
                    proc = subprocess.Popen(argv, stdout=slog, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
                    pid, port = proc.pid, serve_port

                    def closer(proc=proc, slog=slog):
                        stop(proc, "server")
                        slog.close()
                    if not wait_listen(port):
                        closer()
                        row["note"] = "server did not listen"
                        rows.append(row)
                        continue
                try:
                    row["busy_before"] = round(wait_quiet(args.wait_idle), 2)
                    cpu0 = tree_cpu_seconds(pid)
                    rc, wall, gcpu, text = run_child(gen + [f"127.0.0.1:{port}"],
                                                     out_path=os.path.join(workdir, "gen.out"))
                    n = sink.count() if sink else (count if rc == 0 else None)
                    time.sleep(0.2 if not sink else 0)
                    scpu = tree_cpu_seconds(pid) - cpu0
                finally:
                    closer()
                row.update(accepted=n, wall_s=round(wall, 3), rc=rc,
                           msgs_per_s=round(n / wall, 1) if n else None,
                           server_cpu_us=round(scpu * 1e6 / n, 1) if n else None,
                           gen_cpu_us=round(gcpu * 1e6 / n, 1) if n else None)
                if rc != 0:
                    row["note"] = f"smtp-source exit {rc}: {text.strip()[-80:]}"
                elif not sink:
                    row["note"] = "count = smtp-source -m (exit 0: every reply 2xx)"
                rows.append(row)
                log(f"{server:10} rep {rep + 1}: {fmt(row['msgs_per_s'])} msgs/s, server "
                    f"{fmt(row['server_cpu_us'], 1)} µs/msg, gen {fmt(row['gen_cpu_us'], 1)} µs/msg"
                    f"{'  ' + row['note'] if row['note'] else ''}")
                time.sleep(args.pause)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out = ["# spate serve vs smtp-sink — the same generator against each server (loopback)\n",
           f"- date: {started}; host: {platform.node()}, {os.cpu_count()} CPUs",
           f"- generator: `{' '.join(gen)} 127.0.0.1:PORT`",
           f"- `SERVE_CMD={serve_cmd}`",
           "- server CPU-µs/msg: /proc utime+stime (process and its children) delta / messages",
           f"- CPU busy before each run (after waiting up to {args.wait_idle:.0f} s for < 25 %): "
           + ", ".join(f"{100 * r['busy_before']:.0f} %" for r in rows if r.get("busy_before") is not None),
           f"- {args.reps} repetitions, servers alternating; medians (min–max)\n",
           "| server | runs | msgs/s (median) | msgs/s (min–max) | server CPU-µs/msg | "
           "generator CPU-µs/msg | notes |", "|---|---|---|---|---|---|---|"]
    summ = {}
    for server in servers:
        rs = [r for r in rows if r["server"] == server]
        good = [r for r in rs if r["msgs_per_s"]]
        rates = [r["msgs_per_s"] for r in good]
        summ[server] = (median(rates), median([r["server_cpu_us"] for r in good]))
        rng = f"{fmt(min(rates))}–{fmt(max(rates))}" if rates else "n/a"
        notes = "; ".join(sorted({r["note"] for r in rs if r["note"]}))
        out.append(f"| {server} | {len(good)} | {fmt(summ[server][0])} | {rng} | "
                   f"{fmt(summ[server][1], 1)} | {fmt(median([r['gen_cpu_us'] for r in good]), 1)} | {notes} |")
    a, b = summ["serve"], summ["smtp-sink"]
    if a[0] and b[0]:
        out.append(f"\nserve/smtp-sink: msgs/s ×{a[0] / b[0]:.2f}, server CPU-µs/msg ×{a[1] / b[1]:.2f}")
    else:
        out.append("\nserve/smtp-sink: n/a (spate: not built)")
    md = "\n".join(out) + "\n"
    print(md)
    write_results(md, rows, "serve-latest")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("peers", help="generators against smtp-sink")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--postal-seconds", type=float, default=5.0)
    p.add_argument("--only", type=lambda s: s.split(","), default=None,
                   help="comma-separated config names: " + ",".join(c[0] for c in CONFIGS))
    p.add_argument("--tools", type=lambda s: s.split(","), default=["smtp-source", "postal", "spate"])
    p.add_argument("--scale", type=float, default=1.0, help="multiply message counts")
    p.add_argument("--sink", choices=["smtp-sink", "spate"], default="smtp-sink",
                   help="the receiver: Postfix's smtp-sink (PIPELINING only), or spate serve "
                        "--discard (SERVE_CMD; PIPELINING and CHUNKING); results in "
                        "results/latest.md or results/latest-serve.md")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between runs")
    p.add_argument("--reference", default=None,
                   help="the recorded table to compare ratios with (default results/reference.csv)")
    p.add_argument("--tolerance", type=float, default=0.10,
                   help="a ratio that moves by more than this share is a regression (0.10)")
    p.add_argument("--update-reference", action="store_true",
                   help="make this run the recorded table")
    p.add_argument("--wait-idle", type=float, default=20.0,
                   help="before each run wait up to this many seconds for the CPUs to be < 25%% busy")
    s = sub.add_parser("serve", help="smtp-source against smtp-sink and spate serve")
    s.add_argument("--reps", type=int, default=3)
    s.add_argument("--scale", type=float, default=1.0)
    s.add_argument("--pause", type=float, default=0.5)
    s.add_argument("--wait-idle", type=float, default=20.0)
    args = ap.parse_args()
    if args.cmd == "peers":
        cmd_peers(args)
    else:
        cmd_serve(args)


if __name__ == "__main__":
    main()
