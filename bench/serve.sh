#!/usr/bin/env bash
# bench/serve.sh — smtp-source -d -s 50 -m 20000 -l 1024 against smtp-sink and against a
# server command (SERVE_CMD, default: target/release/spate serve --smtp 127.0.0.1:{port}
# --discard): msgs/s and the server's CPU-µs per message. A benchmark, not a test.
set -euo pipefail
exec python3 "$(dirname "$0")/harness.py" serve "$@"
