//! Writes a serial history for timing `dtxn check`:
//!
//! ```sh
//! cargo run --release -p dtxn-check --example serial_history -- /tmp/h.jsonl 1000000 100000
//! ```
//!
//! Arguments: path, transactions (default 1,000,000), keys (100,000), stale reads per million
//! (0). Each transaction reads 2 keys and writes 2 others; one in a hundred aborts; 64 sessions
//! take turns. Stale reads (the version before the one a read saw) make the history
//! non-serializable, to time the checker on a history full of cycles.

use dtxn_check::serial::{SerialOp, SerialStore};
use dtxn_check::HistoryWriter;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().map_or("history.jsonl", String::as_str);
    let number =
        |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (txns, keys) = (number(1, 1_000_000), number(2, 100_000).max(1));
    let stale_per_million = number(3, 0);
    // splitmix64: a fixed, dependency-free sequence, so the same arguments give the same file.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut store = SerialStore::new();
    let mut out = HistoryWriter::create(path)?;
    for i in 0..txns {
        let mut key = || next() % keys;
        let ops = [
            SerialOp::Read {
                table: 1,
                key: key(),
            },
            SerialOp::Read {
                table: 1,
                key: key(),
            },
            SerialOp::Write {
                table: 1,
                key: key(),
            },
            SerialOp::Write {
                table: 1,
                key: key(),
            },
        ];
        let commit = next() % 100 != 0;
        let mut txn = store.run(i % 64, &ops, commit);
        for r in &mut txn.reads {
            if stale_per_million > 0 && r.version > 0 && next() % 1_000_000 < stale_per_million {
                r.version -= 1;
            }
        }
        out.write(&txn)?;
    }
    out.finish()?;
    Ok(())
}
