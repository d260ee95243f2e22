#!/usr/bin/env bash
# Mutation testing (issue #17): cargo-mutants over the safety-critical code (the protocols, the
# shared mechanisms, the record formats). A mutant that the tests do not catch ("missed") is
# either killed by a new test or explained in docs/src/mutants.md.
#
#   scripts/mutants.sh                      the whole slice (hours: a periodic job, not CI)
#   scripts/mutants.sh FILE...              some files, e.g. crates/txn/src/mechanisms/validate.rs
#   MUTANTS_ARGS="--shard 1/4" scripts/mutants.sh   a quarter of it (any cargo-mutants flags)
#
# Each mutant rebuilds dtxn-txn and the tests that judge it (the txn crate's, the store's, the
# workloads' adversarial sim matrix): about a minute and a half each on 2 cores. Results go to
# target/mutants/mutants.out (missed.txt, caught.txt, timeout.txt, unviable.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo mutants --version >/dev/null 2>&1; then
  echo "== installing cargo-mutants"
  cargo install cargo-mutants --locked --version 27.1.0
fi

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(crates/txn/src/mechanisms/*.rs crates/txn/src/protocols/*.rs
    crates/txn/src/protocols/motor/*.rs crates/store/src/record.rs crates/store/src/cvt.rs)
fi
args=()
for f in "${files[@]}"; do
  args+=(--file "$f")
done
# shellcheck disable=SC2086 # MUTANTS_ARGS is a list of flags
exec cargo mutants "${args[@]}" --test-package dtxn-store,dtxn-txn,dtxn-workloads \
  --output target/mutants --timeout 600 ${MUTANTS_ARGS:-}
