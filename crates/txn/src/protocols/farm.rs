//! FaRM (Dragojević et al., SOSP'15) as FORD's paper re-implemented it on disaggregated
//! memory (all one-sided; section 3.1 of the FORD digest): execute (READ everything,
//! unlocked), lock (CAS), validate (READ the version of everything read), commit backups,
//! commit primaries: 5 RTs for a read-write transaction. (The unlock is the background
//! release, as in FORD, so that recovery can tell a complete commit from a partial one.) It
//! shares FORD's `ford.backup_reads`, obeys `flush`, and uses FORD's undo log: its backups are
//! rolled back only when a replica fails, never by a validation.

use crate::abort::{Abort, AbortReason};
use crate::config::TxnConfig;
use crate::item::{Access, NewValue};
use crate::mechanisms::absent::validate_absent;
use crate::mechanisms::fetch::Locking;
use crate::mechanisms::install::{install, Install};
use crate::mechanisms::lock::{cold_rw, lock_round, Want};
use crate::mechanisms::rpc::Read;
use crate::mechanisms::validate::{changed, header_of};
use crate::mechanisms::{abort, fetch, insert, release, table, undo};
use crate::protocol::{Protocol, Row};
use crate::stage::{Stage, Stages};
use crate::tx::Tx;
use dtxn_store::log::LogStatus;
use dtxn_store::record::HEADER_BYTES;
use dtxn_store::RecordFormat;

/// FaRM: `--protocol farm`.
pub(crate) struct Farm;

impl Protocol for Farm {
    const RECORDS: RecordFormat = RecordFormat::Single;
    const OPTIONS: Option<&'static str> = Some("ford");
    const JOURNALED: bool = true;
    const RPC_FORMS: Stages = Stages::of(&Stage::COMMON);
    type Item = ();
    type Txn = ();
    type Scratch = ();

    fn rpc(cfg: &TxnConfig) -> Stages {
        cfg.ford.rpc
    }

    async fn fetch(tx: &mut Tx<'_, Self>, accesses: &[Access]) -> Result<(), Abort> {
        fetch::records(tx, accesses, Locking::Optimistic { hitchhike: false }).await?;
        undo::log_undo(tx).await
    }

    async fn insert(tx: &mut Tx<'_, Self>, rows: &[Row<'_>]) -> Result<(), Abort> {
        insert::insert(tx, rows).await
    }

    /// CAS every read-write item's lock on its primary, nothing else.
    async fn lock(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        lock_round(tx, |it| {
            cold_rw(it).then_some(Want {
                lock: true,
                header: false,
            })
        })
        .await
    }

    /// Every item read (read-write ones too: their lock was a bare CAS) still has the version
    /// read; read-only items are not locked; absent keys still absent.
    async fn validate(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        let map = tx.c.map.clone();
        let word = tx.c.lock_word;
        let mut checks = std::mem::take(&mut tx.c.mech.reads);
        checks.clear();
        let via = tx.c.via(Stage::Validate);
        for (i, it) in tx.items.iter().enumerate() {
            let Some(off) = it
                .offset
                .filter(|_| it.exists || it.new == NewValue::Insert)
            else {
                continue;
            };
            let t = table(&map, it.table);
            checks.push((
                i,
                Read::post(&mut tx.c.ep, via, t.primary(), off, HEADER_BYTES),
            ));
        }
        if !checks.is_empty() && tx.c.ep.post().await.is_err() {
            return Err(abort(AbortReason::ReplicaFailure, &tx.items[checks[0].0]));
        }
        let failed = checks.iter().find_map(|&(i, read)| {
            let it = &tx.items[i];
            let Some(h) = header_of(read.bytes(&tx.c.ep)) else {
                // Only a malformed RPC reply is short: treat the memory node as failed.
                return Some(abort(AbortReason::ReplicaFailure, it));
            };
            // FaRM's lock was a bare CAS: an insert's slot must also carry our lock.
            let bad = changed(it, &h) || it.new == NewValue::Insert && h.lock != word;
            bad.then(|| abort(AbortReason::Validation, it))
        });
        tx.c.mech.reads = checks;
        if let Some(a) = failed {
            return Err(a);
        }
        validate_absent(tx).await
    }

    /// The backups, then the primaries.
    async fn install(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if !tx.writes() {
            return Ok(());
        }
        install(tx, Install::TwoPhase { revalidate: false }).await
    }

    fn release(tx: &mut Tx<'_, Self>) {
        release::release(tx, LogStatus::Committed);
    }

    async fn abort(tx: &mut Tx<'_, Self>) {
        release::release_on_abort(tx).await;
    }
}
