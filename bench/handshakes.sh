#!/usr/bin/env bash
# bench/handshakes.sh — what a TLS handshake costs spate, full and resumed, for smtp, imap
# and xmpp against spate serve. A benchmark, not a test. Options: --help.
set -euo pipefail
exec python3 "$(dirname "$0")/handshakes.py" "$@"
