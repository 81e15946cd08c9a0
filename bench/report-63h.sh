#!/usr/bin/env bash
# bench/report-63h.sh — how long `spate report` takes on the results directory of a
# 63-hour `spate rr` run, and what it hands a browser. The directory is made by spate's own
# results writer fed one-second intervals whose time advances 63 hours
# (tests/report_long.rs, write_63_hour_run), so nothing waits 63 hours. A measurement,
# not a test: nothing here asserts a time.
#
#   bench/report-63h.sh [DIR]        # DIR: where to make the run (default: a new temp dir)
#   PROFILE=debug bench/report-63h.sh  # time the debug build instead of release
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-release}
flag=$([ "$profile" = release ] && echo --release || true)
target=${CARGO_TARGET_DIR:-target}
dir=${1:-$(mktemp -d)/run-63h}
if [ -e "$dir/summary.json" ]; then
    echo "using the run already in $dir"
else
    SPATE_LONG_RUN_DIR="$dir" cargo test $flag --locked --test report_long -- \
        --ignored --exact write_63_hour_run --nocapture 2>&1 | grep -E "^wrote|test result"
fi
cargo build $flag --locked --bin spate 2>&1 | tail -1
# A copy: another build in a shared target directory could replace the binary meanwhile.
spate=$(mktemp)
cp "$target/$profile/spate" "$spate" && chmod +x "$spate"
trap 'rm -f "$spate"' EXIT
echo "files:"
( cd "$dir" && wc -l intervals.csv monitor.csv && du -h ./*.hlog errors.jsonl | sort -k2 )
for i in 1 2 3; do
    /usr/bin/time -f "spate report ($profile): %e s wall, %U s user, %M KB max RSS" \
        "$spate" report "$dir" >/dev/null
done
html="$dir/report.html"
echo "report.html: $(stat -c %s "$html") bytes"
grep -o 'class="series" d="[^"]*"' "$html" |
    awk '{ n = gsub(/ L/, ""); if (n + 1 > max) max = n + 1; s++ }
         END { printf "chart series: %d, at most %d points in one\n", s, max }'
