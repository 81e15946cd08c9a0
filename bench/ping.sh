#!/usr/bin/env bash
# bench/ping.sh — `spate ping` against smtpping, the latency probe both tools are: N messages
# without pause to one smtp-sink on loopback, alternating, REPS times. Prints per tool the
# mean time per message (smtpping: its cumulative "quit" average; spate: its "total"
# average) and the probe's own CPU per message (getrusage via /usr/bin/time), then the
# ratios. A benchmark, not a test. Usage: bench/ping.sh [N] [REPS]
set -euo pipefail
N=${1:-500}
REPS=${2:-3}
cd "$(dirname "$0")/.."
command -v smtpping >/dev/null || { echo "smtpping not installed (apt-get install smtpping)"; exit 1; }
command -v smtp-sink >/dev/null || { echo "smtp-sink not installed (apt-get install postfix)"; exit 1; }
[ -x /usr/bin/time ] || { echo "/usr/bin/time not installed (apt-get install time)"; exit 1; }
[ -n "${SPATE_BIN:-}" ] || cargo build --release -q
SPATE=${SPATE_BIN:-$PWD/target/release/spate}
PORT=$((20000 + RANDOM % 10000))
SINK_USER=$( [ "$(id -u)" = 0 ] && echo "-u postfix" || true )
# shellcheck disable=SC2086
smtp-sink -c $SINK_USER "127.0.0.1:$PORT" 1024 >/dev/null 2>&1 &
SINK=$!
trap 'kill "$SINK" 2>/dev/null || true' EXIT
sleep 0.5
TMP=$(mktemp -d)

run() { # tool rep -> "ms_per_msg cpu_us_per_msg"
    local out="$TMP/$1.$2" t
    case $1 in
        smtpping)
            /usr/bin/time -f '%U %S' -o "$out.time" \
                smtpping -c "$N" -w 0 -p "$PORT" -s 1 -S probe@example.test u@example.test @127.0.0.1 >"$out" 2>&1
            t=$(awk '/^quit min\/avg\/max/ {split($4, a, "/"); print a[2]}' "$out") ;;
        spate)
            /usr/bin/time -f '%U %S' -o "$out.time" \
                "$SPATE" ping "127.0.0.1:$PORT" --to u@example.test --from probe@example.test -c "$N" -w 0 --size 1k >"$out" 2>&1
            # "total  min avg max ..." with units: convert avg to ms
            t=$(awk '/^total / {v=$3; if (v ~ /µs$/) {sub(/µs$/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms$/,"",v)} else if (v ~ /s$/) {sub(/s$/,"",v); v*=1000}; print v}' "$out") ;;
    esac
    awk -v t="$t" -v n="$N" '{printf "%s %.1f\n", t, ($1 + $2) * 1e6 / n}' "$out.time"
}

declare -A MS CPU
for rep in $(seq "$REPS"); do
    for tool in smtpping spate; do
        read -r ms cpu < <(run "$tool" "$rep")
        MS[$tool]+="$ms "
        CPU[$tool]+="$cpu "
        echo "rep $rep $tool: ${ms} ms/msg, ${cpu} CPU-µs/msg"
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
echo "## spate ping vs smtpping: $N messages, 1 KiB, -w 0, $REPS reps, smtp-sink on 127.0.0.1 ($(date -Is), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg))"
echo
echo "| tool | ms/msg (median) | probe CPU-µs/msg (median) |"
echo "|---|---|---|"
for tool in smtpping spate; do
    echo "| $tool | $(echo "${MS[$tool]}" | median) | $(echo "${CPU[$tool]}" | median) |"
done
a=$(echo "${MS[spate]}" | median); b=$(echo "${MS[smtpping]}" | median)
c=$(echo "${CPU[spate]}" | median); d=$(echo "${CPU[smtpping]}" | median)
echo
awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" 'BEGIN {printf "spate/smtpping: time per message ×%.2f, probe CPU per message ×%.2f (lower is better for both)\n", a/b, c/d}'
rm -rf "$TMP"
