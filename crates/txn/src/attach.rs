//! Compute processes attaching to a pool: shared, or alone (for localized validation).

use dtxn_fabric::{Endpoint, FabricError};
use dtxn_store::layout::{CLAIM_EXCLUSIVE, CLAIM_OFF};

/// Why a compute process may not use the pool.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttachError {
    #[error("the pool is held by a compute process with localized validation, which needs every writer on its own version cache; stop it first")]
    HeldExclusively,
    #[error("localized validation needs the pool alone, but {0} other compute process(es) use it")]
    InUse(u64),
    #[error(transparent)]
    Fabric(#[from] FabricError),
}

/// How this process holds the pool; give it back with [`detach`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attachment {
    exclusive: bool,
}

/// Registers this compute process with the pool (one CAS on memory node 0's claim word):
/// `exclusive` for localized validation, which is correct only when no other process writes.
/// A process that dies attached leaves its claim behind (the word is in the superblock page:
/// re-formatting the pool clears it).
pub async fn attach(ep: &mut Endpoint, exclusive: bool) -> Result<Attachment, AttachError> {
    if exclusive {
        let c = ep.cas(0, CLAIM_OFF, 0, CLAIM_EXCLUSIVE);
        ep.post().await?;
        return match ep.old(c) {
            0 => Ok(Attachment { exclusive }),
            w if w & CLAIM_EXCLUSIVE != 0 => Err(AttachError::HeldExclusively),
            w => Err(AttachError::InUse(w)),
        };
    }
    let mut seen = 0;
    loop {
        let c = ep.cas(0, CLAIM_OFF, seen, seen + 1);
        ep.post().await?;
        let old = ep.old(c);
        if old == seen {
            return Ok(Attachment { exclusive });
        }
        if old & CLAIM_EXCLUSIVE != 0 {
            return Err(AttachError::HeldExclusively);
        }
        seen = old;
    }
}

/// Gives the claim back.
pub async fn detach(ep: &mut Endpoint, a: Attachment) -> Result<(), FabricError> {
    if a.exclusive {
        ep.cas(0, CLAIM_OFF, CLAIM_EXCLUSIVE, 0);
    } else {
        ep.faa(0, CLAIM_OFF, u64::MAX); // minus one
    }
    ep.post().await
}
