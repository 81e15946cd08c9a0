#!/usr/bin/env bash
# bench/imap-vs-imaptest.sh — spate imap (a client mix) against imaptest's stress mode (default
# profile), both against the test bed's Dovecot on loopback (scripts/testbed up, brought down at
# the end), at the same client count, alternating, with medians: logins/s, commands/s,
# generator CPU per command. A benchmark, not a test. Options: bench/imap-vs-imaptest.sh --help.
# Needs imaptest (scripts/build-imaptest → /opt/imaptest/bin/imaptest, or IMAPTEST=path).
set -euo pipefail
exec python3 "$(dirname "$0")/imap.py" "$@"
