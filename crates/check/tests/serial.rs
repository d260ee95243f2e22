//! Property: a history made by running transactions one after another on a model store is
//! serializable, strictly and under SI too, in whatever order its lines come.

use dtxn_check::serial::{SerialOp, SerialStore};
use dtxn_check::{Checker, HistoryReader, HistoryWriter, Isolation, Options, Status, Txn};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = SerialOp> {
    // Few items, so that transactions conflict, write items twice and read their own writes.
    (0..3u8, 1..3u32, 0..5u64).prop_map(|(kind, table, key)| match kind {
        0 => SerialOp::Read { table, key },
        1 => SerialOp::Write { table, key },
        _ => SerialOp::Delete { table, key },
    })
}

/// A transaction to run: session, operations, whether it commits.
type Plan = (u64, Vec<SerialOp>, bool);

/// Transactions, and an order to list them in.
fn plan() -> impl Strategy<Value = (Vec<Plan>, Vec<usize>)> {
    let txn = (
        0..4u64,
        prop::collection::vec(op(), 0..6),
        prop::bool::weighted(0.8),
    );
    prop::collection::vec(txn, 0..40).prop_flat_map(|txns| {
        let order = Just((0..txns.len()).collect::<Vec<_>>()).prop_shuffle();
        (Just(txns), order)
    })
}

proptest! {
    #[test]
    fn serial_histories_are_serializable((txns, order) in plan()) {
        let mut store = SerialStore::new();
        let history: Vec<Txn> = txns
            .iter()
            .map(|(session, ops, commit)| store.run(*session, ops, *commit))
            .collect();
        let mut w = HistoryWriter::new(Vec::new()).unwrap();
        for &i in &order {
            w.write(&history[i]).unwrap();
        }
        let bytes = w.finish().unwrap();
        let committed = history.iter().filter(|t| t.status == Status::Committed).count();
        for isolation in [Isolation::Serializable, Isolation::Snapshot] {
            for real_time in [false, true] {
                let mut c = Checker::new(Options { isolation, real_time });
                for line in HistoryReader::new(&bytes[..], "memory") {
                    c.add(&line.unwrap().1).unwrap();
                }
                let r = c.finish();
                prop_assert!(r.ok(), "{:?} real_time={}:\n{}", isolation, real_time, r);
                prop_assert_eq!(r.committed as usize, committed);
                prop_assert_eq!((r.committed + r.aborted) as usize, history.len());
            }
        }
    }
}

proptest! {
    /// Any one committed read of another transaction's version, given other bytes, is that
    /// read's torn value and nothing else: the versions still order everything.
    #[test]
    fn one_changed_read_is_one_torn_value(
        (txns, _) in plan(),
        pick in any::<prop::sample::Index>(),
    ) {
        let mut store = SerialStore::new();
        let mut history: Vec<Txn> = txns
            .iter()
            .map(|(session, ops, commit)| store.run(*session, ops, *commit))
            .collect();
        let mut reads = Vec::new();
        for (i, t) in history.iter().enumerate() {
            for (j, r) in t.reads.iter().enumerate() {
                let own = t.writes.iter().any(|w| (w.table, w.key) == (r.table, r.key)
                    && w.version == r.version);
                if t.status == Status::Committed && r.version > 0 && !own {
                    reads.push((i, j));
                }
            }
        }
        prop_assume!(!reads.is_empty());
        let (i, j) = reads[pick.index(reads.len())];
        let r = &mut history[i].reads[j];
        r.hash = r.hash.map(|h| h.wrapping_add(1));
        let report = dtxn_check::check(&history, Options::default()).unwrap();
        prop_assert_eq!(report.anomalies.len(), 1, "{}", report);
        let a = &report.anomalies[0];
        prop_assert_eq!(a.kind().name(), "torn-value");
        prop_assert_eq!(a.txns()[0].txn, history[i].txn);
    }
}
