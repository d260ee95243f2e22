#!/usr/bin/env bash
# Mutation testing (issue #17): cargo-mutants over the safety-critical code (the protocols, the
# shared mechanisms, the record formats). A mutant that the tests do not catch ("missed") is
# either killed by a new test or explained in docs/src/mutants.md.
#
#   scripts/mutants.sh                      the whole slice (hours: a periodic job, not CI)
#   scripts/mutants.sh FILE...              some files, e.g. crates/txn/src/mechanisms/validate.rs
#   MUTANTS_ARGS="--shard 1/4" scripts/mutants.sh   a quarter of it (any cargo-mutants flags)
#   MUTANTS_TESTS=fast scripts/mutants.sh FILE...   judged by the txn crate's quick tests only
#   MUTANTS_TIMEOUT=120 MUTANTS_TESTS=fast ...       seconds before a mutant's tests count as
#                                                   hung (caught, as a timeout); default 420
#                                                   fast, 600 full
#
# The full judge: the tests of the store, txn and workloads crates (the workloads' adversarial
# sim matrix among them), each mutant in a copy of the tree (a ten-minute first build).
# MUTANTS_TESTS=fast judges each mutant by one test binary, `judge` (crates/workloads/tests/
# judge.rs: the txn crate's scripted aborts, bank runs, Hermitage, round trips, 2PL, SUNDIAL,
# MVCC, CALVIN and Motor scripts, Motor's round trips, failure, failover, insert, lease, lock-journal and recovery tests and
# the workloads' sim matrix, 187 tests in 15 to 25 s, built as one crate; with a store or txn file mutated, that crate's unit tests too), in place (the source
# tree is mutated and restored: leave it alone while it runs; its incremental build is what
# makes a mutant cost a minute, not a ten-minute copy and rebuild; the `judge` profile is the
# test profile without debug info, a third less to link), and under `nice` so that
# other builds on the machine go first. A mutant it misses may still be caught by the full
# judge; one it catches is caught.
#
# Results go to target/mutants/mutants.out (missed.txt, caught.txt, timeout.txt, unviable.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo mutants --version >/dev/null 2>&1; then
  echo "== installing cargo-mutants"
  cargo install cargo-mutants --locked --version 27.1.0
fi

# cargo-mutants creates target/mutants but not target/ (a fresh clone has none).
mkdir -p target

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(crates/txn/src/mechanisms/*.rs crates/txn/src/protocols/*.rs
    crates/txn/src/protocols/motor/*.rs crates/txn/src/control.rs crates/store/src/record.rs
    crates/store/src/cvt.rs)
fi
args=()
for f in "${files[@]}"; do
  args+=(--file "$f")
done

case "${MUTANTS_TESTS:-full}" in
  full)
    # shellcheck disable=SC2086 # MUTANTS_ARGS is a list of flags
    exec cargo mutants "${args[@]}" --test-package dtxn-store,dtxn-txn,dtxn-workloads \
      --output target/mutants --timeout "${MUTANTS_TIMEOUT:-600}" ${MUTANTS_ARGS:-}
    ;;
  fast)
    # One binary (the `judge` feature builds it; `cargo test --workspace` does not): a
    # mutant's rebuild is the mutated crate, the workloads crate and one test crate, where
    # seven test binaries took five times as long to build. A store or txn file: that crate's unit tests as well (timestamp.rs's clock, for one, is
    # tested there alone).
    packages=dtxn-workloads
    tests=(--cargo-arg=--test=judge)
    for f in "${files[@]}"; do
      for crate in store txn; do
        if [[ "$f" == crates/$crate/* && ",$packages," != *",dtxn-$crate,"* ]]; then
          packages="dtxn-$crate,$packages"
          tests=(--cargo-arg=--test=judge --cargo-arg=--lib)
        fi
      done
    done
    # shellcheck disable=SC2086 # MUTANTS_ARGS is a list of flags
    exec nice -n 10 cargo mutants "${args[@]}" --test-package "$packages" --in-place \
      --baseline skip --output target/mutants --timeout "${MUTANTS_TIMEOUT:-420}" --build-timeout 1200 \
      --profile judge --features dtxn-workloads/judge "${tests[@]}" ${MUTANTS_ARGS:-}
    ;;
  *)
    echo "MUTANTS_TESTS must be full or fast, not ${MUTANTS_TESTS}" >&2
    exit 2
    ;;
esac
