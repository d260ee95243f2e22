//! Where a transaction's time goes, phase by phase (RCC's latency breakdown, its Fig. 4):
//! measured only when asked ([`crate::Coordinator::set_breakdown`]), since it reads the clock
//! around every phase. Virtual time on the simulator, wall time elsewhere.

use serde::Serialize;

/// The phases a transaction's time is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Execution's reads (with the locks they take: hitchhiked, 2PL).
    Read,
    /// Execution's inserts.
    Insert,
    /// Commit: the locks not taken during execution.
    Lock,
    /// Commit: validation (and SUNDIAL's renewals).
    Validate,
    /// Commit: the log, where a protocol writes it at commit.
    Log,
    /// Commit: installing the new records (waiting for a background undo log included).
    Commit,
    /// Unlocking after a commit (posted, not waited for: near 0 on the critical path).
    Release,
    /// Giving everything back after an abort.
    Abort,
}

impl Phase {
    pub const ALL: [Phase; 8] = [
        Phase::Read,
        Phase::Insert,
        Phase::Lock,
        Phase::Validate,
        Phase::Log,
        Phase::Commit,
        Phase::Release,
        Phase::Abort,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Read => "read",
            Phase::Insert => "insert",
            Phase::Lock => "lock",
            Phase::Validate => "validate",
            Phase::Log => "log",
            Phase::Commit => "commit",
            Phase::Release => "release",
            Phase::Abort => "abort",
        }
    }
}

/// Nanoseconds spent in each phase ([`Phase::ALL`]'s order) by one transaction, or summed
/// over many.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Breakdown(pub [u64; Phase::ALL.len()]);

impl Breakdown {
    pub fn get(&self, p: Phase) -> u64 {
        self.0[p as usize]
    }

    pub fn add(&mut self, p: Phase, ns: u64) {
        self.0[p as usize] += ns;
    }

    /// The sum of every phase.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub fn merge(&mut self, o: &Breakdown) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_and_merge() {
        let mut b = Breakdown::default();
        b.add(Phase::Read, 5);
        b.add(Phase::Commit, 7);
        b.add(Phase::Read, 1);
        assert_eq!(
            (b.get(Phase::Read), b.get(Phase::Lock), b.total()),
            (6, 0, 13)
        );
        let mut c = b;
        c.merge(&b);
        assert_eq!(c.get(Phase::Commit), 14);
        let names: Vec<_> = Phase::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), 8);
        assert!(Phase::ALL.iter().enumerate().all(|(i, &p)| p as usize == i));
    }
}
