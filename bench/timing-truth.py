#!/usr/bin/env python3
"""Timing truth: spate's phase timings against a packet capture of the same run.

This is a benchmark, never a test: it measures, compares and prints a verdict.

  bench/timing-truth.sh [--messages 500] [--size 1k] [--modes bdat,data,nopipe,conn,ref]
                       [--keep]

One `spate serve --smtp --discard` on a free loopback port delays its replies by fixed
amounts (banner 1 ms, EHLO 2 ms, MAIL 2 ms, RCPT 3 ms, DATA 5 ms, the final reply 4 ms:
every phase has a wire time of its own, well above loopback's tens of µs). For
each mode, `tcpdump -i lo` captures the port while `spate smtp -u 1 -n N -m 0` sends N
messages over one connection:

  bdat    the default: MAIL+RCPT+BDAT LAST and the body in one write (phase `bdat`)
  data    --no-chunking: MAIL+RCPT+DATA pipelined (`envelope`, or `dot_envelope` when it
          went behind the previous message's content), then the body (`body`)
  nopipe  --no-chunking --no-pipelining: `mail`, `rcpt`, `data`, `body` each a round trip
  conn    -m 1: a connection per message (`connect`, `banner`, `ehlo`, `quit` N times)
  ref     not spate: a blocking Python client timing the same phases as nopipe with
          time.perf_counter_ns around sendall/recv, a control for the machine's floor

The capture is read here (a small pcap reader, full packets: a few MB at most). Each
direction of each connection is reassembled by sequence number; every client command (and
body, and BDAT chunk) gets the capture time of the segment that carries its first byte,
every server reply the time of the segment that carries its last byte; commands and
replies pair in order (SMTP answers each command once). A phase on the wire runs, as
DESIGN.md defines it, from the first byte of its first command to the last byte of its
last reply:

  connect     client SYN -> server SYN/ACK
  banner      server SYN/ACK -> greeting complete
  ehlo        EHLO -> its reply
  mail/rcpt/data   each command -> its reply
  envelope    MAIL -> the reply to DATA
  body        the body's first byte -> the reply after the final dot
  bdat        MAIL -> the reply to BDAT LAST
  transaction MAIL -> the message's final reply
  quit        QUIT (or, pipelined, the previous group's final reply) -> 221

spate's own figures are its summary.json percentiles (the merged per-phase HDR
histograms that the .hlog files hold; 3 significant digits). The table gives both p50s
and p99s and their differences; the verdict is |spate p50 - wire p50| <= 50 µs for every
phase. A positive difference is time spate counts that the wire does not: the write
syscall before the segment leaves, the wakeup and parse after the reply arrives.

Needs tcpdump (apt-get install tcpdump; capturing needs root or CAP_NET_RAW) and a release
build of spate (CARGO_TARGET_DIR/release/spate, target/release/spate, or SPATE_BIN).
Results: bench/results/timing-truth-latest.md.
"""

import argparse
import bisect
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (RESULTS, cpu_busy, find_spate, free_port, loadavg, log,  # noqa: E402
                     run_child, stop, wait_listen)

MODES = {
    "bdat": ["--messages-per-connection", "0"],
    "data": ["--messages-per-connection", "0", "--no-chunking"],
    "nopipe": ["--messages-per-connection", "0", "--no-chunking", "--no-pipelining"],
    # A connection per message: connect, banner, ehlo and quit get N samples too.
    "conn": ["--messages-per-connection", "1"],
    # Not spate: a blocking Python client (below), the same phases as nopipe. Its
    # differences are what any client's own clock adds on this machine (the write
    # syscall, the wakeup after the reply): the floor spate is measured against.
    "ref": None,
}
# Fixed delays, a different one per reply. Not ranges: the server's delays fall on whole
# milliseconds (its timer's tick), so a range makes a distribution of separate modes a
# millisecond apart, and a p50 that sits between two of them jumps by a millisecond when
# one sample crosses over: no comparison of p50s survives that.
SERVER_FAULTS = [
    "--banner-delay", "1ms",
    "--delay", "ehlo:2ms",
    "--delay", "mail:2ms",
    "--delay", "rcpt:3ms",
    "--delay", "data:5ms",
    "--delay", "dot:4ms",
]
TOLERANCE_US = 50
RUN_LIMIT = 300  # seconds, each spate run


# ------------------------------------------------------------------------------- pcap
def read_pcap(path):
    """(time_s, payload-of-link-layer) for each packet of a classic pcap file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return None, []
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        end = "<"
    else:
        magic = struct.unpack(">I", data[:4])[0]
        end = ">"
        if magic not in (0xA1B2C3D4, 0xA1B23C4D):
            sys.exit(f"{path}: not a pcap file (pcapng is not read here)")
    frac = 1e-9 if magic == 0xA1B23C4D else 1e-6
    linktype = struct.unpack(end + "I", data[20:24])[0]
    out = []
    off = 24
    while off + 16 <= len(data):
        sec, sub, incl, _orig = struct.unpack(end + "IIII", data[off:off + 16])
        off += 16
        out.append((sec + sub * frac, data[off:off + incl]))
        off += incl
    return linktype, out


def tcp_segment(linktype, frame):
    """(src_port, dst_port, seq, flags, payload) of a TCP/IP frame, or None."""
    if linktype == 1:  # Ethernet (lo)
        if len(frame) < 14:
            return None
        ethertype = struct.unpack(">H", frame[12:14])[0]
        ip = frame[14:]
    elif linktype == 113:  # Linux cooked
        ethertype = struct.unpack(">H", frame[14:16])[0]
        ip = frame[16:]
    elif linktype == 276:  # Linux cooked v2
        ethertype = struct.unpack(">H", frame[0:2])[0]
        ip = frame[20:]
    elif linktype == 0:  # BSD loopback
        ethertype = 0x0800 if frame[:4] in (b"\x02\x00\x00\x00", b"\x00\x00\x00\x02") else 0x86DD
        ip = frame[4:]
    else:
        sys.exit(f"link type {linktype} is not read here")
    if ethertype == 0x0800:
        if len(ip) < 20 or ip[9] != 6:
            return None
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ihl:total]
    elif ethertype == 0x86DD:
        if len(ip) < 40 or ip[6] != 6:
            return None
        plen = struct.unpack(">H", ip[4:6])[0]
        tcp = ip[40:40 + plen]
    else:
        return None
    if len(tcp) < 20:
        return None
    sport, dport, seq = struct.unpack(">HHI", tcp[:8])
    doff = (tcp[12] >> 4) * 4
    flags = tcp[13]
    return sport, dport, seq, flags, tcp[doff:]


SYN, ACK = 0x02, 0x10


class Stream:
    """One direction of one connection: its bytes in order and when each segment left."""

    def __init__(self):
        self.isn = None
        self.segs = {}  # offset -> (time, payload); a retransmit keeps the first time
        self.data = b""
        self.starts = []
        self.times = []

    def add(self, t, seq, payload):
        if self.isn is None or not payload:
            return
        off = (seq - self.isn - 1) % (1 << 32)
        if off not in self.segs:
            self.segs[off] = (t, payload)

    def build(self):
        """Concatenate in order; False when a byte is missing (a gap in the capture)."""
        parts, pos = [], 0
        for off in sorted(self.segs):
            t, p = self.segs[off]
            if off > pos:
                return False
            if off + len(p) <= pos:
                continue
            p = p[pos - off:]
            self.starts.append(pos)
            self.times.append(t)
            parts.append(p)
            pos += len(p)
        self.data = b"".join(parts)
        return True

    def time_at(self, offset):
        """When the segment carrying byte `offset` was captured."""
        return self.times[bisect.bisect_right(self.starts, offset) - 1]


class Conn:
    def __init__(self):
        self.syn = self.synack = None
        self.client = Stream()
        self.server = Stream()


def connections(path, port):
    linktype, packets = read_pcap(path)
    conns = {}
    for t, frame in packets:
        seg = tcp_segment(linktype, frame)
        if seg is None:
            continue
        sport, dport, seq, flags, payload = seg
        if dport == port:
            c = conns.setdefault(sport, Conn())
            s = c.client
            if flags & SYN and not flags & ACK:
                if c.syn is None:
                    c.syn = t
                s.isn = seq
        elif sport == port:
            c = conns.setdefault(dport, Conn())
            s = c.server
            if flags & SYN and flags & ACK:
                if c.synack is None:
                    c.synack = t
                s.isn = seq
        else:
            continue
        s.add(t, seq, payload)
    return [c for c in conns.values() if c.client.build() and c.server.build()]


# ------------------------------------------------------------------------------- SMTP
def requests(stream):
    """[(verb, time of first byte, last_chunk)] of the client's stream: commands, message
    bodies (after DATA) and BDAT chunks."""
    d, pos, out = stream.data, 0, []
    while pos < len(d):
        eol = d.find(b"\r\n", pos)
        if eol < 0:
            break
        line = d[pos:eol]
        verb = line[:4].upper().decode("ascii", "replace")
        t = stream.time_at(pos)
        if verb == "BDAT":
            words = line.split()
            size = int(words[1])
            out.append(("bdat", t, len(words) > 2 and words[2].upper() == b"LAST"))
            pos = eol + 2 + size
            continue
        out.append((verb.lower(), t, False))
        pos = eol + 2
        if verb == "DATA":
            end = d.find(b"\r\n.\r\n", pos - 2)
            if end < 0:
                break
            out.append(("body", stream.time_at(pos) if end >= pos else t, True))
            pos = end + 5
    return out


def replies(stream):
    """[(code, time of last byte)] of the server's stream."""
    d, pos, out = stream.data, 0, []
    while pos < len(d):
        eol = d.find(b"\r\n", pos)
        if eol < 0:
            break
        line = d[pos:eol]
        if len(line) < 4 or line[3:4] != b"-":
            out.append((int(line[:3]) if line[:3].isdigit() else 0, stream.time_at(eol + 1)))
        pos = eol + 2
    return out


EXPECT = {"ehlo": 250, "mail": 250, "rcpt": 250, "data": 354, "body": 250, "bdat": 250,
          "quit": 221}


def wire_phases(conns):
    """Phase name -> [µs] from the capture, and how many replies did not pair as expected."""
    ph = {}
    odd = 0
    turn = []  # a server reply's last segment to the client's next command, sent after it

    def add(name, t0, t1):
        ph.setdefault(name, []).append((t1 - t0) * 1e6)

    for c in conns:
        reqs = requests(c.client)
        reps = replies(c.server)
        if not any(r[0] == "ehlo" for r in reqs):
            continue  # spate's preflight: a connection opened and closed, no phase timed
        if c.syn is not None and c.synack is not None:
            add("connect", c.syn, c.synack)
        if reps and c.synack is not None:
            add("banner", c.synack, reps[0][1])
        paired = []
        for i, (verb, t, last) in enumerate(reqs):
            if i + 1 >= len(reps):
                break
            code, tr = reps[i + 1]
            if EXPECT.get(verb) not in (None, code):
                odd += 1
            paired.append((verb, t, last, tr))
            if len(paired) > 1 and t > paired[-2][3]:
                turn.append((t - paired[-2][3]) * 1e6)
        mail = None  # when the transaction's MAIL went out (its write's start)
        chained = False  # that MAIL rode behind the previous message's content
        for i, (verb, t, last, tr) in enumerate(paired):
            if verb == "ehlo":
                add("ehlo", t, tr)
            elif verb == "mail":
                prev = paired[i - 1] if i else None
                # PIPELINING across messages: MAIL went before the previous message's
                # final reply, in the write that began with that message's content, and
                # spate times the group (`dot_envelope`) from the start of that write.
                chained = prev is not None and prev[0] == "body" and t < prev[3]
                mail = prev[1] if chained else t
                add("mail", t, tr)
            elif verb == "rcpt":
                add("rcpt", t, tr)
            elif verb == "data":
                add("data", t, tr)
                if mail is not None:
                    add("dot_envelope" if chained else "envelope", mail, tr)
            elif verb == "body":
                add("body", t, tr)
                if mail is not None:
                    add("transaction", mail, tr)
                mail = None
            elif verb == "bdat" and last:
                if mail is not None:
                    add("bdat", mail, tr)
                    add("transaction", mail, tr)
                mail = None
            elif verb == "quit":
                start = max(t, paired[i - 1][3]) if i else t
                add("quit", start, tr)
    return ph, odd, turn


def hdr_top(us):
    """The value an HDR histogram of 3 significant digits reports for `us` µs: the top of
    its bucket (1 µs wide below 2048 µs, 2 µs to 4096, 4 to 8192, 8 to 16384, 16 to
    32768, ...)."""
    v = int(round(us))
    if v < 2048:
        return v
    width = 1 << (v.bit_length() - 11)
    return v // width * width + width - 1


def pct(xs, q):
    """Nearest rank: the smallest sample with at least q of all samples at or below it
    (what an HDR histogram's value_at_quantile gives, to its precision)."""
    s = sorted(xs)
    k = max(1, -(-int(q * 1000) * len(s) // 1000))
    return s[min(k, len(s)) - 1]


# ------------------------------------------------------------------------------- control
def reference_client(port, n):
    """A plain blocking SMTP client (no pipelining, TCP_NODELAY), timing each phase from
    before its sendall to the end of its reply with perf_counter_ns: a summary.json-like
    {"phases": [...], "totals": {...}} of its own nearest-rank percentiles."""
    body = b"Subject: timing truth\r\n\r\n" + b"x" * 76 + b"\r\n"
    body = body + (b"y" * 76 + b"\r\n") * 12 + b".\r\n"
    times = {}
    deadline = time.monotonic() + RUN_LIMIT
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""

    def reply():
        nonlocal buf
        while True:
            end = 0
            while True:
                eol = buf.find(b"\r\n", end)
                if eol < 0:
                    break
                line = buf[end:eol]
                end = eol + 2
                if len(line) < 4 or line[3:4] != b"-":
                    code = int(line[:3])
                    buf = buf[end:]
                    return code
            if time.monotonic() > deadline:
                sys.exit("reference client: over its time limit")
            got = s.recv(65536)
            if not got:
                sys.exit("reference client: the server closed the connection")
            buf += got

    def step(name, data, want):
        t = time.perf_counter_ns()
        s.sendall(data)
        code = reply()
        times.setdefault(name, []).append((time.perf_counter_ns() - t) / 1000)
        if code != want:
            sys.exit(f"reference client: {name} answered {code}, not {want}")

    accepted = 0
    try:
        reply()  # the greeting
        step("ehlo", b"EHLO timing-truth.test\r\n", 250)
        for _ in range(n):
            t = time.perf_counter_ns()
            step("mail", b"MAIL FROM:<ref@example.test>\r\n", 250)
            step("rcpt", b"RCPT TO:<user@example.test>\r\n", 250)
            step("data", b"DATA\r\n", 354)
            step("body", body, 250)
            times.setdefault("transaction", []).append((time.perf_counter_ns() - t) / 1000)
            accepted += 1
        step("quit", b"QUIT\r\n", 221)
    finally:
        s.close()
    phases = [dict(phase=k, count=len(v), p50_us=round(pct(v, 0.5)), p99_us=round(pct(v, 0.99)))
              for k, v in times.items()]
    return {"phases": phases, "totals": {"accepted": accepted}}


# ------------------------------------------------------------------------------- running
def capture_start(port, pcap, errf):
    """tcpdump on lo for the port, full packets, ns stamps; returns once it listens."""
    # --immediate-mode: packets reach the file as they come (libpcap otherwise hands them
    # over in blocks, up to a second late, and SIGINT loses what it still holds).
    argv = ["tcpdump", "-i", "lo", "-w", pcap, "-s", "0", "-U", "-n", "--immediate-mode",
            "--time-stamp-precision=nano", f"tcp port {port}"]
    err = open(errf, "wb")
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if p.poll() is not None:
            with open(errf, errors="replace") as f:
                sys.exit(f"tcpdump ended at once (root or CAP_NET_RAW needed): {f.read().strip()}")
        with open(errf, errors="replace") as f:
            if "listening on" in f.read():
                return p
        time.sleep(0.05)
    stop(p, "tcpdump")
    sys.exit("tcpdump did not start listening within 10 s")


def capture_stop(p):
    """SIGINT by PID (tcpdump then writes out what it holds), bounded."""
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            stop(p, "tcpdump")


def one_mode(spate, port, mode, args, workdir):
    pcap = os.path.join(workdir, f"{mode}.pcap")
    out = os.path.join(workdir, f"{mode}-results")
    dump = capture_start(port, pcap, os.path.join(workdir, f"{mode}.tcpdump.err"))
    try:
        if MODES[mode] is None:
            t0 = time.monotonic()
            summary = reference_client(port, args.messages)
            rc, wall, text = 0, time.monotonic() - t0, ""
        else:
            argv = [spate, "smtp", f"127.0.0.1:{port}", "--users", "1", "--count",
                    str(args.messages), "--size", args.size, "--seed", "1", "-o", out,
                    "--quiet", *MODES[mode]]
            rc, wall, _cpu, text = run_child(argv, timeout=RUN_LIMIT,
                                             out_path=os.path.join(workdir, f"{mode}.out"))
        time.sleep(0.5)  # the last segments reach the capture file
    finally:
        capture_stop(dump)
    with open(os.path.join(workdir, f"{mode}.tcpdump.err"), errors="replace") as f:
        dropped = sum(int(line.split()[0]) for line in f
                      if "dropped by kernel" in line and line.split()[0].isdigit())
    if rc != 0:
        sys.exit(f"spate smtp ({mode}) exited {rc}: {text.strip()[-300:]}")
    if MODES[mode] is not None:
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
    conns = connections(pcap, port)
    wire, odd, turn = wire_phases(conns)
    spate_ph = {p["phase"]: p for p in summary["phases"]}
    rows = []
    order = ["connect", "banner", "ehlo", "mail", "rcpt", "data", "envelope", "dot_envelope",
             "body", "bdat",
             "transaction", "quit"]
    for name in order:
        s = spate_ph.get(name)
        w = wire.get(name)
        if not s or not s.get("count") or not w:
            continue
        rows.append(dict(mode=mode, phase=name, n_wire=len(w), n_spate=s["count"],
                         wire_p50=pct(w, 0.5), spate_p50=s["p50_us"],
                         wire_p99=pct(w, 0.99), spate_p99=s["p99_us"]))
    missing = [p for p in spate_ph if p in order and p not in wire and spate_ph[p]["count"]]
    note = dict(mode=mode, wall=wall, accepted=summary["totals"]["accepted"], odd=odd,
                missing=missing, connections=len(conns), dropped=dropped,
                turnaround=pct(turn, 0.5) if turn else None)
    return rows, note


def render(rows, notes, args, started, busy_before, load_before, spate):
    lines = []
    w = lines.append
    w("# Timing truth: spate's phases against a packet capture on lo")
    w("")
    w(f"{started}, {os.cpu_count()} CPUs; before the run: CPUs {busy_before * 100:.0f}% busy, "
      f"load average {load_before:.2f}; after: load average {loadavg():.2f}.")
    w("")
    w(f"`bench/timing-truth.sh --messages {args.messages} --size {args.size}`: one session, "
      f"{args.messages} messages over one connection, per mode; `spate serve --smtp --discard "
      f"{' '.join(SERVER_FAULTS)}`; spate: `{spate}`.")
    w("Wire: tcpdump on lo (full packets, ns stamps), a command's first segment to its "
      "reply's last. spate: summary.json (its HDR histograms). Differences are spate − wire, "
      "in µs, the wire's value taken as the histogram would report it (the top of its "
      "bucket: 16 µs wide at 16-32 ms); "
      f"the verdict: |p50 difference| ≤ {TOLERANCE_US} µs.")
    w("")
    w("Mode `ref` is not spate but the control: a blocking Python client's own clock "
      "against the same wire (its 'spate' columns are its figures).")
    w("")
    w("| mode | phase | n wire | n spate | wire p50 | spate p50 | diff p50 | wire p99 | "
      "spate p99 | diff p99 | verdict |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    failed = 0
    for r in rows:
        d50 = r["spate_p50"] - hdr_top(r["wire_p50"])
        d99 = r["spate_p99"] - hdr_top(r["wire_p99"])
        ok = abs(d50) <= TOLERANCE_US
        control = MODES[r["mode"]] is None
        failed += not ok and not control
        verdict = "control" if control else "ok" if ok else "OFF"
        w(f"| {r['mode']} | {r['phase']} | {r['n_wire']} | {r['n_spate']} | "
          f"{r['wire_p50']:.0f} | {r['spate_p50']} | {d50:+.0f} | {r['wire_p99']:.0f} | "
          f"{r['spate_p99']} | {d99:+.0f} | {verdict} |")
    w("")
    for n in notes:
        extra = []
        if n["odd"]:
            extra.append(f"{n['odd']} replies with an unexpected code")
        if n["missing"]:
            extra.append("spate phases not found on the wire: " + ", ".join(n["missing"]))
        if n["dropped"]:
            extra.append(f"the capture lost {n['dropped']} packets (the wire counts are short)")
        if n["turnaround"] is not None:
            extra.append(f"turnaround p50 {n['turnaround']:.0f} µs (a reply's last segment "
                         "to the client's next command on the wire)")
        w(f"- {n['mode']}: {n['accepted']} accepted in {n['wall']:.1f} s, "
          f"{n['connections']} connections in the capture"
          + ("; " + "; ".join(extra) if extra else ""))
    w("")
    verdict = ("every phase of spate within" if failed == 0
               else f"{failed} phase(s) of spate NOT within")
    w(f"**Verdict: {verdict} {TOLERANCE_US} µs at p50.**")
    return "\n".join(lines) + "\n", failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=500)
    ap.add_argument("--size", default="1k")
    ap.add_argument("--modes", default="bdat,data,nopipe,conn,ref")
    ap.add_argument("--keep", action="store_true", help="keep the captures and results")
    ap.add_argument("--out", default=os.path.join(RESULTS, "timing-truth-latest.md"))
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            sys.exit(f"--modes: unknown mode '{m}' ({', '.join(MODES)})")
    if args.messages < 1 or args.messages > 100000:
        sys.exit("--messages: 1 to 100000")
    if not shutil.which("tcpdump"):
        sys.exit("tcpdump not installed (apt-get install -y tcpdump)")
    spate = find_spate()
    if not os.access(spate, os.X_OK):
        sys.exit(f"{spate}: no spate build (cargo build --release, or SPATE_BIN)")
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    busy, load = cpu_busy(1.0), loadavg()
    workdir = tempfile.mkdtemp(prefix="timing-truth-")
    port = free_port(24000 + int.from_bytes(os.urandom(2), "big") % 500 * 10)
    serve_log = open(os.path.join(workdir, "serve.out"), "wb")
    serve = subprocess.Popen([spate, "serve", "--smtp", f"127.0.0.1:{port}", "--discard",
                              *SERVER_FAULTS], stdout=serve_log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, cwd=workdir)
    rows, notes = [], []
    try:
        if not wait_listen(port):
            sys.exit(f"spate serve did not listen on 127.0.0.1:{port} within 10 s")
        for m in modes:
            log(f"mode {m}: {args.messages} messages on 127.0.0.1:{port}")
            r, n = one_mode(spate, port, m, args, workdir)
            rows += r
            notes.append(n)
    finally:
        stop(serve, "spate serve")
        serve_log.close()
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    md, failed = render(rows, notes, args, started, busy, load, spate)
    print(md)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(md)
    log(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
