#!/usr/bin/env bash
# Round-trip latency of pagewise's queue against Aeron IPC and Chronicle Queue
# (open-source), measured alternately in one sitting on this machine.
#
#   bench/peers/run.sh            # 3 rounds, 32 and 128 B, 1 M round trips
#   ROUNDS=5 SIZES="32 128 1024" ROUND_TRIPS=1000000 WARMUP=100000 bench/peers/run.sh
#
# Needs cargo, java 17+ and mvn (dependencies from Maven Central or ~/.m2).
# Each round runs, one after another: `pagewise bench queue --rtt` (rows
# floor, queue, queue+prepared and queue+hand-off, one trial), then the Aeron harness and the
# Chronicle harness, one JVM per size. The table gives, per harness and size, the median over rounds
# of each percentile and the min-max of p99 and p99.9 (ns). Not run in CI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
rounds="${ROUNDS:-3}"
sizes="${SIZES:-32 128}"
round_trips="${ROUND_TRIPS:-1000000}"
warmup="${WARMUP:-100000}"
dir="${DIR:-/dev/shm}"

# Chronicle on Java 17 reaches into JDK internals; Aeron's agrona needs one
# of the same. The analytics property stops Chronicle from phoning home.
java_flags=(
  --add-exports=java.base/jdk.internal.misc=ALL-UNNAMED
  --add-exports=java.base/jdk.internal.ref=ALL-UNNAMED
  --add-exports=java.base/sun.nio.ch=ALL-UNNAMED
  --add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED
  --add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
  --add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
  --add-opens=java.base/java.lang=ALL-UNNAMED
  --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED
  --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  -Dchronicle.analytics.disable=true
  -XX:+UseParallelGC -Xms512m -Xmx512m
)

echo "building pagewise and the peers ..." >&2
(cd "$root" && cargo build --release -q -p pagewise-cli)
for peer in aeron chronicle; do
  (cd "$here/$peer" && mvn -q compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt >&2)
done
pagewise="$root/target/release/pagewise"

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
csv_sizes="$(echo $sizes | tr ' ' ',')"
for round in $(seq 1 "$rounds"); do
  echo "round $round of $rounds (load average: $(cut -d' ' -f1-3 /proc/loadavg)) ..." >&2
  "$pagewise" bench queue --rtt --rtt-sizes "$csv_sizes" --only floor,queue,queue+prepared,queue+hand-off --trials 1 \
    --round-trips "$round_trips" --warmup "$warmup" --tmpfs-dir "$dir" --json -q |
    python3 -c '
import json, sys
for r in json.load(sys.stdin)["rtt"]["rows"]:
    name = "pagewise-" + r["name"]
    print("RESULT", name, r["record_bytes"], r["p50_ns"], r["p90_ns"], r["p99_ns"], r["p999_ns"], r["p9999_ns"], r["max_ns"])
' >>"$results"
  for peer in aeron chronicle; do
    main="pagewise.peers.$( [ $peer = aeron ] && echo AeronRtt || echo ChronicleRtt )"
    cp="$here/$peer/target/classes:$(cat "$here/$peer/target/classpath.txt")"
    for size in $sizes; do
      java "${java_flags[@]}" -cp "$cp" "$main" "$size" "$round_trips" "$warmup" 2>/dev/null |
        grep '^RESULT' >>"$results"
    done
  done
done

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"
python3 - "$results" "$rounds" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    _, name, size, *p = line.split()
    rows.setdefault((name, int(size)), []).append([int(x) for x in p])
order = ["pagewise-floor", "pagewise-queue", "pagewise-queue+prepared", "pagewise-queue+hand-off", "aeron", "chronicle"]
print(f"round trip, ns: median over {sys.argv[2]} rounds (min-max for p99 and p99.9)")
print(f"{'harness':<25}{'bytes':>6}{'p50':>8}{'p90':>8}{'p99':>8}{'p99 range':>18}{'p99.9':>9}{'p99.9 range':>20}{'p99.99':>10}{'max':>11}{'rounds':>7}")
for (name, size) in sorted(rows, key=lambda k: (k[1], order.index(k[0]) if k[0] in order else 9)):
    runs = rows[(name, size)]
    med = [int(statistics.median(r[i] for r in runs)) for i in range(6)]
    rng = lambda i: f"{min(r[i] for r in runs)}-{max(r[i] for r in runs)}"
    print(f"{name:<25}{size:>6}{med[0]:>8}{med[1]:>8}{med[2]:>8}{rng(2):>18}{med[3]:>9}{rng(3):>20}{med[4]:>10}{med[5]:>11}{len(runs):>7}")
PY
