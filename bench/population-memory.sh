#!/usr/bin/env bash
# bench/population-memory.sh — 18 000 office-light users of `spate population` from one
# process against spate serve: generator and server memory per user, failures. A benchmark,
# not a test. Options: bench/population-memory.sh --help.
set -euo pipefail
# one process opens at most 20 000 files
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
exec python3 "$(dirname "$0")/population-memory.py" "$@"
