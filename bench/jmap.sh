#!/bin/sh
# bench/jmap.sh — spate jmap against spate imap on spate serve. A benchmark, not a test.
# Options: bench/jmap.sh --help.
exec python3 "$(dirname "$0")/jmap.py" "$@"
