#!/usr/bin/env bash
# bench/xmpp.sh — spate xmpp against Tsung (jabber plugin), both logging the same accounts
# into one private ejabberd on loopback (scripts/testbed), alternating, with medians; then
# spate's generator memory per idle logged-in session at 1 000, 5 000 and 10 000 sessions
# against spate serve. A benchmark, not a test. Options: bench/xmpp.sh --help.
set -euo pipefail
# one process opens at most 20 000 files (10 000 sessions need 10 000 sockets)
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
exec python3 "$(dirname "$0")/xmpp.py" "$@"
