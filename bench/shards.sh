#!/usr/bin/env bash
# bench/shards.sh — one SMTP run in 1, 2 and 4 shards on this machine against one smtp-sink,
# merged (scale), and spate merge's time and memory on long shards (merge). A benchmark,
# not a test. Options: bench/shards.sh scale --help, bench/shards.sh merge --help.
set -euo pipefail
exec python3 "$(dirname "$0")/shards.py" "$@"
