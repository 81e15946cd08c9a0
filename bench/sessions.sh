#!/usr/bin/env bash
# bench/sessions.sh — many idle IMAP sessions held by N shards against N spate serve
# processes sharing one port (--reuse-port). A benchmark, not a test. Options: --help.
set -euo pipefail
exec python3 "$(dirname "$0")/sessions.py" "$@"
