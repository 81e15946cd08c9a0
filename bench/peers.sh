#!/usr/bin/env bash
# bench/peers.sh — spate against smtp-source and postal, all against one smtp-sink.
# A benchmark, not a test. Options: --reps N --postal-seconds S --only CFG,... --tools a,b
# --scale F. Set SPATE_CMD to adapt the spate command line (see bench/harness.py --help).
set -euo pipefail
exec python3 "$(dirname "$0")/harness.py" peers "$@"
