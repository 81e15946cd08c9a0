#!/usr/bin/env bash
# bench/imap-idle.sh — 18 000 concurrent IMAP IDLE sessions from one spate process against
# spate serve: generator and server memory per session, failures. A benchmark, not a test.
# Options: bench/imap-idle.sh --help.
set -euo pipefail
# one process opens at most 20 000 files
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
exec python3 "$(dirname "$0")/imap-idle.py" "$@"
