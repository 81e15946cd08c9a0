#!/usr/bin/env bash
# bench/open-model.sh — what the open model costs the generator: CPU per message of an
# open run (--rate) against a closed one (--users) of the same size, and the generator's
# own lag (the `lag` phase: how late each message started against its schedule) at
# 1 000/s and 10 000/s. All against `spate serve --discard` on loopback, REPS times,
# alternating, medians printed. A benchmark, not a test: figures depend on what else runs.
# Usage: bench/open-model.sh [REPS]
#   SPATE_BIN=path (default target/release/spate, built if missing)
#   SPATE_BASE_BIN=path: another build to compare (rows `base`), e.g. before a change.
set -euo pipefail
REPS=${1:-3}
cd "$(dirname "$0")/.."
[ -x /usr/bin/time ] || { echo "/usr/bin/time not installed (apt-get install time)"; exit 1; }
[ -n "${SPATE_BIN:-}" ] || cargo build --release -q
SPATE=${SPATE_BIN:-$PWD/target/release/spate}
TMP=$(mktemp -d)
"$SPATE" serve --smtp 127.0.0.1:0 --discard >"$TMP/serve.out" 2>/dev/null &
SERVE=$!
trap 'kill "$SERVE" 2>/dev/null || true; rm -rf "$TMP"' EXIT
for _ in $(seq 100); do
    grep -q ':' "$TMP/serve.out" 2>/dev/null && break
    sleep 0.05
done
ADDR=$(head -1 "$TMP/serve.out" | awk '{print $NF}')
[ -n "$ADDR" ] || { echo "spate serve printed no address"; exit 1; }

# config -> spate arguments after the address
args() {
    case $1 in
        open10k) echo "--rate 10000/s --count 30000 --max-in-flight 48 -m 0" ;;
        closed) echo "--users 48 --count 30000 -m 0" ;;
        open1k) echo "--rate 1000/s --count 10000 --max-in-flight 48 -m 0" ;;
    esac
}

run() { # bin config rep -> "attempted+dropped cpu_us_per_msg lag_p50_us lag_p99_us"
    local out="$TMP/$2.$3.$RANDOM"
    # shellcheck disable=SC2046
    /usr/bin/time -f '%U %S' -o "$out.time" "$1" smtp "$ADDR" $(args "$2") -q -o "$out" >/dev/null 2>&1
    python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
s = json.load(open(out + "/summary.json"))
u, k = map(float, open(out + ".time").read().split()[-2:])
n, dropped = s["totals"]["attempted"], s["totals"]["dropped"]
lag = next((p for p in s["phases"] if p["phase"] == "lag"), {})
print(f"{n}+{dropped}", round((u + k) * 1e6 / max(n, 1), 1), lag.get("p50_us", "-"), lag.get("p99_us", "-"))
EOF
}

bins=(spate)
[ -n "${SPATE_BASE_BIN:-}" ] && bins+=(base)
declare -A res
for rep in $(seq "$REPS"); do
    for cfg in open10k closed open1k; do
        for b in "${bins[@]}"; do
            bin=$SPATE
            [ "$b" = base ] && bin=$SPATE_BASE_BIN
            res[$b.$cfg]+="$(run "$bin" "$cfg" "$rep")"$'\n'
        done
    done
done
echo "## open model vs closed, spate serve --discard on loopback ($(date -u +%FT%TZ), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg))"
echo
echo "| build | config | attempted+dropped | CPU-µs/msg (median) | lag p50 µs | lag p99 µs |"
echo "|---|---|---|---|---|---|"
for b in "${bins[@]}"; do
    for cfg in open10k closed open1k; do
        printf '%s' "${res[$b.$cfg]}" | python3 -c '
import sys, statistics as st
rows = [l.split() for l in sys.stdin if l.strip()]
med = lambda i: st.median(float(r[i]) for r in rows) if all(r[i] != "-" for r in rows) else "-"
n = "/".join(sorted(set(r[0] for r in rows)))
b, cfg, a = sys.argv[1:4]
print(f"| {b} | {cfg} ({a}) | {n} | {med(1)} | {med(2)} | {med(3)} |")
' "$b" "$cfg" "$(args "$cfg")"
    done
done
