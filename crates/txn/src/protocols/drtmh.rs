//! DrTM+H (Wei et al., OSDI'18) as FORD's paper re-implemented it on disaggregated memory
//! (all one-sided; section 3.1 of the FORD digest): execute, lock and validate in one round,
//! commit backups, commit primaries and unlock: 4 RTs. The merged round alone admits write
//! skew (each transaction's READs may run before the other's CAS), so dtxn validates the
//! read-only items once more in the commit-backups round, when every lock is held, at no
//! extra round trip (rolling the backups back if that fails). It obeys `flush` and uses FORD's
//! undo log, not its backup reads: a backup it rolls back held, for a while, bytes under
//! a version number that the record's next commit reuses with other bytes, and a backup
//! reader that validates at the primary after that commit would take the rolled-back bytes
//! for it.
//!
//! RCC's OCC is this protocol (RCC built its OCC on DrTM+H's): `--protocol occ` runs this
//! code, with its stages chosen by RCC's hybrid code (`--set rcc.hybrid=CODE`) instead of
//! `ford.rpc`; that is the only difference (`RCC`).

use crate::abort::Abort;
use crate::config::TxnConfig;
use crate::item::Access;
use crate::mechanisms::absent::validate_absent;
use crate::mechanisms::fetch::Locking;
use crate::mechanisms::install::{install, Install};
use crate::mechanisms::lock::{cold_rw, lock_round, Want};
use crate::mechanisms::validate::validate_reads;
use crate::mechanisms::{fetch, insert, release, undo};
use crate::protocol::{Protocol, Row};
use crate::stage::{Stage, Stages};
use crate::tx::Tx;
use dtxn_store::log::LogStatus;
use dtxn_store::RecordFormat;

/// DrTM+H: `--protocol drtmh`; RCC's OCC (`RCC`): `--protocol occ`.
pub(crate) struct Drtmh<const RCC: bool>;

impl<const RCC: bool> Protocol for Drtmh<RCC> {
    const RECORDS: RecordFormat = RecordFormat::Single;
    const OPTIONS: Option<&'static str> = Some(if RCC { "rcc" } else { "ford" });
    const JOURNALED: bool = true;
    const RPC_FORMS: Stages = Stages::of(&Stage::COMMON);
    type Item = ();
    type Txn = ();
    type Scratch = ();

    fn rpc(cfg: &TxnConfig) -> Stages {
        if RCC {
            cfg.rcc.hybrid.rpc_stages().and(Self::RPC_FORMS)
        } else {
            cfg.ford.rpc
        }
    }

    async fn fetch(tx: &mut Tx<'_, Self>, accesses: &[Access]) -> Result<(), Abort> {
        fetch::records(tx, accesses, Locking::Optimistic { hitchhike: false }).await?;
        undo::log_undo(tx).await
    }

    async fn insert(tx: &mut Tx<'_, Self>, rows: &[Row<'_>]) -> Result<(), Abort> {
        insert::insert(tx, rows).await
    }

    /// The merged round: CAS + READ(header) of every read-write item, READ(header) of every
    /// read-only item, in one batch (so the validation of read-only items happens here).
    async fn lock(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        lock_round(tx, |it| {
            if cold_rw(it) {
                Some(Want {
                    lock: true,
                    header: true,
                })
            } else {
                let read = !it.rw && it.exists && it.offset.is_some();
                read.then_some(Want {
                    lock: false,
                    header: true,
                })
            }
        })
        .await
    }

    /// Absent keys; and, for a transaction with read-write items that writes nothing (no
    /// install round to re-validate in), the read-only items again, now that every lock is
    /// held: the merged round's read validation may have run before another's lock.
    async fn validate(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        validate_absent(tx).await?;
        if !tx.writes() && tx.items.iter().any(|i| i.rw) {
            validate_reads(tx).await?;
        }
        Ok(())
    }

    /// The backups (with the read-only items validated again in the same batch), then the
    /// primaries.
    async fn install(tx: &mut Tx<'_, Self>) -> Result<(), Abort> {
        if !tx.writes() {
            return Ok(());
        }
        let revalidate = !tx.c.cfg.ford.skip_revalidation;
        install(tx, Install::TwoPhase { revalidate }).await
    }

    fn release(tx: &mut Tx<'_, Self>) {
        release::release(tx, LogStatus::Committed);
    }

    async fn abort(tx: &mut Tx<'_, Self>) {
        release::release_on_abort(tx).await;
    }
}
