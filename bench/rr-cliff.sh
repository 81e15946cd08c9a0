#!/usr/bin/env bash
# bench/rr-cliff.sh — E3's cache cliff on the test bed's nginx authorization service: a
# `spate sweep` over --variants (default 100,200,400,800) of `spate rr --frame http` with a
# client certificate, each step at a constant rate with the request keys taken in turn
# (round-robin), the cache emptied and the counters zeroed before each step (POST /reset),
# the nginx worker's CPU followed (--monitor-pid). With a 200-entry LRU cache, keys in turn
# fit it up to 200 variants (every request after the first pass is a hit) and miss it
# beyond (every request is a miss): the cliff shows in latency and in the worker's CPU per
# request, and the service's own hit/miss counters say why. A benchmark, not a test.
#
#   bench/rr-cliff.sh [--values 100,200,400,800] [--rate 100] [--seconds 20] [--miss-cost 3]
#
# Needs root for the bed's packages (nginx, lua, stunnel: installed when missing). The
# table goes to stdout and bench/results/rr-cliff-latest.md; the bed is brought down by
# PID at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

VALUES=100,200,400,800
RATE=100
SECONDS_PER_STEP=20
MISS_COST=3
while [ $# -gt 0 ]; do
    case "$1" in
        --values) VALUES=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --seconds) SECONDS_PER_STEP=$2; shift 2 ;;
        --miss-cost) MISS_COST=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "bench/rr-cliff.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

SPATE=${SPATE_BIN:-${CARGO_TARGET_DIR:-target}/release/spate}
[ -x "$SPATE" ] || { echo "$SPATE is not built: cargo build --release (or set SPATE_BIN)" >&2; exit 1; }
SPATE=$(readlink -f "$SPATE")

work=$(mktemp -d /tmp/spate-bench-cliff-XXXXXX)
chmod 755 "$work" # nginx and stunnel drop privileges and must reach the bed
bed="$work/bed"
cleanup() { scripts/testbed down --dir "$bed" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

scripts/testbed up --authz --no-mail --authz-miss-cost "$MISS_COST" --port-offset auto \
    --dir "$bed" >"$work/up.log" 2>&1 || { tail -20 "$work/up.log"; exit 1; }
eval "$(scripts/testbed env --dir "$bed")"
worker=$(cat "$SPATE_AUTHZ_NGINX_WORKER_PIDFILE")

# Empty the cache and zero the counters before each step; the service's counters after it.
reset="curl -sS --fail -o /dev/null -X POST --cacert $SPATE_AUTHZ_CA --cert $SPATE_AUTHZ_CERT --key $SPATE_AUTHZ_KEY $SPATE_AUTHZ_RESET_URL"
stats="curl -sS --fail --cacert $SPATE_AUTHZ_CA --cert $SPATE_AUTHZ_CERT --key $SPATE_AUTHZ_KEY $SPATE_AUTHZ_STATS_URL"

count=$((RATE * SECONDS_PER_STEP))
started=$(date -Iseconds)
"$SPATE" sweep --param variants --values "$VALUES" --cool-down 2s -o "$work/sweep" \
    --before-step "$reset" -- \
    rr "$SPATE_AUTHZ" --frame http --path /authz --tls --ca "$SPATE_AUTHZ_CA" \
    --cert "$SPATE_AUTHZ_CERT" --key "$SPATE_AUTHZ_KEY" \
    --template 'subject=CN=client action=read resource=r{variant}' --pick round-robin \
    --expect-status 200 --rate "$RATE/s" -n "$count" --monitor-pid "$worker" \
    >"$work/sweep.out" 2>&1 || { cat "$work/sweep.out"; exit 1; }
# The last step's counters are still there (the reset runs before a step, not after).
last_stats=$($stats)

out=bench/results/rr-cliff-latest.md
mkdir -p bench/results
{
    echo "# spate rr: E3's cache cliff on the bed's nginx (200-entry LRU cache)"
    echo
    echo "- date: $started; host: $(hostname), $(nproc) CPUs, $(uname -sr); spate: \`$SPATE\`"
    echo "- service: \`scripts/testbed up --authz --no-mail --authz-miss-cost $MISS_COST\` (nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), one worker, a miss costs $MISS_COST ms of CPU, TLS with a client certificate, keep-alive)"
    echo "- each step: \`spate rr --frame http --template 'subject=CN=client action=read resource=r{variant}' --pick round-robin --rate $RATE/s -n $count --monitor-pid WORKER\`, the cache emptied before it (POST /reset)"
    echo "- the last step's own counters (nginx /stats): \`$last_stats\`"
    echo
    echo '```'
    grep -v "^report: \|^results: " "$work/sweep.out"
    echo '```'
    echo
    echo "Per step (from each step's summary.json): response time from the scheduled start, the worker's CPU per request"
    echo
    echo "| variants | requests | p50 ms | p99 ms | worker CPU-µs/req |"
    echo "|---|---|---|---|---|"
    python3 - "$work/sweep" <<'EOF'
import json, os, sys
d = sys.argv[1]
sweep = json.load(open(os.path.join(d, "sweep.json")))
for row in sweep["rows"]:
    s = json.load(open(os.path.join(d, row["dir"], "summary.json")))
    r = next(p for p in s["phases"] if p["phase"] == "response")
    cpu = row.get("cpu_us_per_unit")
    cpu = f"{cpu:,.0f}" if isinstance(cpu, (int, float)) else "n/a"
    print(f"| {row['value']} | {s['totals']['accepted']:,} | {r['p50_us'] / 1000:.2f} | {r['p99_us'] / 1000:.2f} | {cpu} |")
EOF
} >"$out"
cat "$out"
echo "written: $out" >&2
