#!/usr/bin/env bash
# bench/timing-truth.sh — spate's phase timings against a packet capture of the same run:
# tcpdump on lo, spate serve delaying every reply by known amounts, one session sending
# 500 messages in each mode (BDAT, pipelined DATA, no pipelining); per phase p50/p99 on
# the wire and in spate's histograms, and the verdict |difference| <= 50 µs at p50.
# A benchmark, not a test. Needs tcpdump (root or CAP_NET_RAW) and a release build.
# Options: bench/timing-truth.sh --help.
set -euo pipefail
exec python3 "$(dirname "$0")/timing-truth.py" "$@"
