#!/usr/bin/env bash
# bench/verify-memory.sh — resident memory of `spate smtp --verify maildir:` over a long
# run: N messages (default 200 000) to `spate serve --maildir --discard` on loopback, one
# recipient each over B mailboxes (default 2 000, as the E2 bed), the Maildir watched
# during the run and verified after it. Prints spate smtp's RSS every 10 s and its peak
# (VmHWM, and GNU time's maximum). A benchmark, not a test (tests/verify_memory.rs is
# the regression test).
#   SPATE=target/release/spate bench/verify-memory.sh [N] [B]
# VERIFY=0: the same run without --verify (what the rest of spate smtp holds).
set -euo pipefail
SPATE=${SPATE:-target/release/spate}
N=${1:-200000}
BOXES=${2:-2000}
work=$(mktemp -d)
"$SPATE" serve --smtp 127.0.0.1:0 --maildir "$work/mail" --discard >"$work/serve.out" 2>&1 &
serve=$!
smtp=
pid=
cleanup() {
    # Each kill may find its process gone already: that must not end the cleanup early.
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
    if [ -n "$smtp" ]; then kill "$smtp" 2>/dev/null || true; fi
    kill "$serve" 2>/dev/null || true
    wait "$serve" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
addr=
for _ in $(seq 100); do
    addr=$(awk '$3 == "smtp" {print $4; exit}' "$work/serve.out" 2>/dev/null || true)
    [ -n "$addr" ] && break
    sleep 0.1
done
[ -n "$addr" ] || { echo "spate serve did not start: $(cat "$work/serve.out")" >&2; exit 1; }
verify=(--verify "maildir:$work/mail" --verify-wait 300s)
[ "${VERIFY:-1}" = 0 ] && verify=()
/usr/bin/time -f "%M kB, %U s user, %S s system, %e s elapsed" -o "$work/maxrss" "$SPATE" smtp "$addr" -n "$N" -u 8 -m 0 \
    --to "user{0..$((BOXES - 1))}@example.test" --pick round-robin --quiet \
    ${verify[@]+"${verify[@]}"} -o "$work/run" >"$work/smtp.out" 2>&1 &
smtp=$!
pid=
for _ in $(seq 100); do
    pid=$(ps -o pid= --ppid "$smtp" | tr -d " " | head -1 || true)
    [ -n "$pid" ] && break
    sleep 0.05
done
t0=$(date +%s)
echo "t_s rss_kb hwm_kb files"
last=-10
hwm=0
while kill -0 "$pid" 2>/dev/null; do
    now=$(($(date +%s) - t0))
    read -r rss h < <(awk '/VmRSS/ {r=$2} /VmHWM/ {h=$2} END {print r, h}' "/proc/$pid/status" 2>/dev/null || echo "0 0")
    [ "${h:-0}" -gt "$hwm" ] && hwm=$h
    if [ $((now - last)) -ge 10 ]; then
        files=$(find "$work/mail" -type f 2>/dev/null | wc -l || true)
        echo "$now $rss $h $files"
        last=$now
    fi
    sleep 1
done
status=0
wait "$smtp" || status=$?
grep -E "delivered|missing|latency" "$work/smtp.out" | head -5 || true
echo "exit $status; peak VmHWM seen ${hwm} kB; spate smtp (GNU time): max RSS $(tail -1 "$work/maxrss" 2>/dev/null)"
