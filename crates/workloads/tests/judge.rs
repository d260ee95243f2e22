//! The fast mutation judge (`MUTANTS_TESTS=fast scripts/mutants.sh`, issue #17): the sharpest
//! test files of the txn and workloads crates compiled as one crate, so that a mutant costs
//! one test crate's rebuild instead of one per file (seven separate binaries took five times
//! the CPU to rebuild; this one, 187 tests, about 40 s to rebuild and 15 to 25 s to run). Built only with `--features judge` (scripts/mutants.sh passes it):
//! `cargo test --workspace` runs these tests in their own binaries, once. Filter by module:
//! `judge bank::`.

// Each test file declares the helper modules it uses (`common`, `scripted`), as its own
// binary needs: here several share one crate, so those load more than once.
#![allow(clippy::duplicate_mod)]

#[path = "../../txn/tests/aborts.rs"]
mod aborts;
#[path = "../../txn/tests/bank.rs"]
mod bank;
#[path = "../../txn/tests/calvin.rs"]
mod calvin;
#[path = "../../txn/tests/control.rs"]
mod control;
#[path = "../../txn/tests/failover.rs"]
mod failover;
#[path = "../../txn/tests/failures.rs"]
mod failures;
#[path = "../../txn/tests/hermitage.rs"]
mod hermitage;
#[path = "../../txn/tests/inserts.rs"]
mod inserts;
#[path = "../../txn/tests/leases.rs"]
mod leases;
#[path = "../../txn/tests/lock_journal.rs"]
mod lock_journal;
#[path = "../../txn/tests/motor.rs"]
mod motor;
#[path = "../../txn/tests/motor_races.rs"]
mod motor_races;
#[path = "../../txn/tests/motor_round_trips.rs"]
mod motor_round_trips;
#[path = "../../txn/tests/mvcc.rs"]
mod mvcc;
#[path = "../../txn/tests/recovery.rs"]
mod recovery;
#[path = "../../txn/tests/round_trips.rs"]
mod round_trips;
#[path = "../../txn/tests/scythe_recovery.rs"]
mod scythe_recovery;
#[path = "sim.rs"]
mod sim;
#[path = "../../txn/tests/sundial.rs"]
mod sundial;
#[path = "../../txn/tests/two_pl.rs"]
mod two_pl;
