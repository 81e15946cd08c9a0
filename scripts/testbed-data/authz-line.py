#!/usr/bin/env python3
# authz-line.py — the test bed's line-protocol authorization service (spate rr --frame line),
# run by stunnel4 through `exec`: stunnel forks and execs one copy per TLS connection, with
# the connection's plaintext on stdin/stdout and the verified client's subject in
# SSL_CLIENT_DN. For every request line it answers one line, flushed at once:
#   PERMIT subject=<client DN> key=<sha1 of the line, hex>
# and ends at end of input (the client closed). Lines longer than 64 KiB are cut there.
# With a path as its argument it first appends `<pid> <client DN> <key>` for every request
# to that file (one write(2) with O_APPEND per line, so the copies of all connections can
# share it), before answering: once a client has its answer, the request is in the log.
import hashlib
import os
import sys

MAX_LINE = 65536


def main():
    subject = os.environ.get("SSL_CLIENT_DN", "-").encode("utf-8", "replace")
    rd, wr = sys.stdin.buffer, sys.stdout.buffer
    log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if len(sys.argv) > 1 else None
    pid = str(os.getpid()).encode()
    while True:  # one request line per turn; ends at EOF
        line = rd.readline(MAX_LINE)
        if not line:
            return 0
        line = line.rstrip(b"\r\n")
        key = hashlib.sha1(line).hexdigest().encode()
        if log is not None:
            os.write(log, b"%s %s %s\n" % (pid, subject, key))
        wr.write(b"PERMIT subject=%s key=%s\n" % (subject, key))
        wr.flush()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        sys.exit(0)
