#!/usr/bin/env bash
# SmallBank (or any `dtxn bench` options) across network namespaces on one machine: two memory
# "hosts" and one compute "host", each with a veth port on a bridge (a "switch" namespace), all on
# 10.77.0.0/24, as the integration test builds them; everything is removed on exit. Needs root
# and iproute2.
#   [MEMNODE_OPTS="--spin-us 0"] scripts/netns-bench.sh [DTXN_BINARY] -- [dtxn bench options...]
set -euo pipefail
DTXN=${1:-target/release/dtxn}
shift || true
[ "${1:-}" = "--" ] && shift
BENCH=("$@")
[ ${#BENCH[@]} -gt 0 ] || BENCH=(--load)
P="dtxnb-$$-"
T="netns-bench-$$"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for n in m0 m1 c sw; do ip netns del "${P}$n" 2>/dev/null || true; done
}
trap cleanup EXIT
for n in m0 m1 c sw; do ip netns add "${P}$n"; done
ip -n "${P}sw" link add br0 type bridge
port=0
for x in "m0 10.77.0.1" "m1 10.77.0.5" "c 10.77.0.2"; do
  set -- $x
  ip link add v0 netns "${P}$1" type veth peer name "p$port" netns "${P}sw"
  ip -n "${P}sw" link set "p$port" master br0
  ip -n "${P}sw" link set "p$port" up
  ip -n "${P}$1" addr add "$2/24" dev v0
  ip -n "${P}$1" link set v0 up
  ip -n "${P}$1" link set lo up
  port=$((port + 1))
done
ip -n "${P}sw" link set br0 up
# Carrier comes up asynchronously: wait (bounded) until every link is up.
for x in "m0 v0" "m1 v0" "c v0" "sw br0"; do
  set -- $x
  for _ in $(seq 500); do ip -n "${P}$1" -o link show "$2" | grep -q "state UP" && break; sleep 0.02; done
done
node=0
for x in "m0 10.77.0.1" "m1 10.77.0.5"; do
  set -- $x
  log=$(mktemp)
  ip netns exec "${P}$1" "$DTXN" memnode --node $node --listen "$2:7000" --size 256M --token "$T" \
      --ucx-tls tcp --ucx-devices v0 ${MEMNODE_OPTS:-} >"$log" &
  pids+=($!)
  # Its first line, "serving ... at ADDR", says the listener is up (bounded wait).
  for _ in $(seq 1500); do grep -q serving "$log" && break; sleep 0.02; done
  head -1 "$log"
  node=$((node + 1))
done
ip netns exec "${P}c" "$DTXN" bench --backend ucx --memnodes 10.77.0.1:7000,10.77.0.5:7000 \
    --token "$T" --ucx-tls tcp --ucx-devices v0 "${BENCH[@]}"
