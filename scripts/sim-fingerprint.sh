#!/usr/bin/env bash
# Prints one line per simulated run of a matrix of workloads x protocols x switches x seeds:
# its trace hash (every op the simulator executed: time, coordinator, node, kind, address,
# data), committed count and mean round trips. Two builds whose outputs are identical executed
# the same ops at the same virtual instants: a refactoring that changes no behaviour shows
# no difference here.
#
#   scripts/sim-fingerprint.sh target/release/dtxn > after.txt
#   diff before.txt after.txt
set -euo pipefail
bin=${1:?usage: $0 DTXN_BINARY [SEEDS]}
seeds=${2:-"1 2"}

run() {
  local label=$1; shift
  for seed in $seeds; do
    out=$("$bin" bench --backend sim --duration 2ms --seed "$seed" --json "$@" 2>/dev/null) || {
      echo "$label seed=$seed FAILED"; continue; }
    python3 -c '
import json, sys
d = json.loads(sys.argv[1])
a = d["all"]
print(sys.argv[2], "seed=" + sys.argv[3], d["sim"]["trace_hash"], "committed=%d" % a["committed"],
      "rt=%.4f" % a["round_trips"], "verbs=%.4f" % a["verbs"], "bytes=%.1f" % a["bytes"])
' "$out" "$label" "$seed"
  done
}

for w in smallbank kv tatp tpcc; do
  wl=(--workload "$w")
  [ "$w" = tpcc ] && wl+=(--warehouses 2)
  for p in ford farm drtmh motor; do
    run "$w/$p" "${wl[@]}" --protocol "$p"
  done
  run "$w/ford-nohitchhike" "${wl[@]}" --protocol ford --set ford.hitchhiked_locking=false
  run "$w/ford-backup-reads" "${wl[@]}" --protocol ford --set ford.backup_reads=true
  run "$w/ford-twophase" "${wl[@]}" --protocol ford --set ford.coalescent_commit=false
  run "$w/ford-flush-pm" "${wl[@]}" --protocol ford --set ford.flush=true --profile cx5-100g-pm
  run "$w/drtmh-flush" "${wl[@]}" --protocol drtmh --set ford.flush=true
  run "$w/ford-lv" "${wl[@]}" --protocol ford --localized-validation
  run "$w/ford-3cn" "${wl[@]}" --protocol ford --compute-nodes 3 --threads 4 --coroutines 2
  run "$w/motor-si" "${wl[@]}" --protocol motor --isolation snapshot
  run "$w/motor-local" "${wl[@]}" --protocol motor --set motor.oracle=local
  run "$w/motor-clock" "${wl[@]}" --protocol motor --set motor.start_clock_ns=5000
  run "$w/motor-3cn" "${wl[@]}" --protocol motor --compute-nodes 3 --threads 4 --coroutines 2
  run "$w/ford-benign" "${wl[@]}" --protocol ford --benign
done
