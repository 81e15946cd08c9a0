#!/usr/bin/env bash
# bench/rr.sh — spate rr against wrk (plain HTTP, keep-alive and a connection per request),
# and spate alone over TLS with a client certificate (keep-alive, a handshake per request,
# E3's 30 req/s), all against the test bed's nginx authorization service on loopback
# (scripts/testbed up --authz --no-mail, brought down at the end), alternating, with
# medians. A benchmark, not a test. Options: bench/rr.sh --help.
set -euo pipefail
exec python3 "$(dirname "$0")/rr.py" "$@"
