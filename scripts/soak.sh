#!/usr/bin/env bash
# Soak test (README "Serving", #26): `ember serve` under steady streaming load for MINUTES
# (default 30), in rounds of ember_loadgen; prints one line per round (throughput, TTFT and
# inter-token percentiles, the server's resident memory, KV blocks in use after the round) and
# fails when memory grew more than 10% over the first round's or the last round's p99 TTFT is
# more than 3x the first round's. The first round (ROUND_REQUESTS requests, default 4096) is the
# warm-up the others are compared with: by its end the KV pool's pages have been touched (the
# prefix cache keeps freed blocks, so new ones come from untouched memory until the pool has gone
# round once), and so have the worker threads' stacks. Bounded: it stops the server and exits
# when the time is up.
#
#   scripts/soak.sh [MINUTES] [MODEL] [extra `ember serve` flags...]
#   scripts/soak.sh 1                               # a quick check
# Needs the release build (cmake --preset release && cmake --build build).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
model=${2:-../shared/models/stories260K/stories260K.gguf}
shift 2 2>/dev/null || shift $# || true
[ -x build/ember ] && [ -x build/bench/ember_loadgen ] || {
  echo "soak: build/ember and build/bench/ember_loadgen are missing: build the release preset" >&2
  exit 1
}
log=$(mktemp)
build/ember serve -m "$model" --port 0 "$@" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 300); do
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "soak: the server did not start" >&2; cat "$log" >&2; exit 1; }

rss_kb() { awk '/^VmRSS/ {print $2}' /proc/$pid/status; }
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

end=$(( $(date +%s) + minutes * 60 ))
round=0 status=0 first_rss="" first_p99=""
printf '%5s %8s %9s %10s %10s %10s %9s %6s\n' round "req/s" "tok/s" "ttft p50" "ttft p99" "itl p99" "rss MiB" kv
while [ "$(date +%s)" -lt "$end" ]; do
  round=$((round + 1))
  out=$(build/bench/ember_loadgen --port "$port" -c 16 -n "${ROUND_REQUESTS:-4096}" --prompt-len 32 \
    --max-tokens 64 --json)
  read -r rps tps p50 p99 itl failed < <(/usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
print(s["requests_per_second"], s["output_tokens_per_second"], s["ttft_ms"]["p50"],
      s["ttft_ms"]["p99"], s["inter_token_ms"]["p99"], s["failed"])' <<<"$out")
  rss=$(rss_kb)
  kv=$(metric ember_kv_blocks_used)
  printf '%5d %8.1f %9.0f %8.1fms %8.1fms %8.2fms %9.1f %6s\n' "$round" "$rps" "$tps" "$p50" "$p99" \
    "$itl" "$(echo "$rss / 1024" | bc -l)" "$kv"
  [ -z "$first_rss" ] && first_rss=$rss && first_p99=$p99
  if [ "$failed" != "0" ]; then echo "soak: $failed requests failed in round $round" >&2; status=1; fi
done
last_rss=$(rss_kb)
growth=$(echo "($last_rss - $first_rss) * 100 / $first_rss" | bc -l)
printf 'memory: %.1f MiB after round 1, %.1f MiB at the end (%+.1f%%)\n' \
  "$(echo "$first_rss / 1024" | bc -l)" "$(echo "$last_rss / 1024" | bc -l)" "$growth"
if [ "$(echo "$growth > 10" | bc -l)" = 1 ]; then echo "soak: memory grew by more than 10%" >&2; status=1; fi
if [ "$(echo "$p99 > 3 * $first_p99" | bc -l)" = 1 ]; then
  echo "soak: the last round's p99 TTFT is more than 3x the first round's" >&2
  status=1
fi
exit $status
