//! A transaction's stages, and for each whether it runs one-sided or as RPCs to the memory
//! nodes: what RCC calls a hybrid code, here a set of stage names (`--set ford.rpc=lock,commit`).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The stages every protocol is cut into (RCC's, whose hybrid code has a bit per stage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Execution's reads of records.
    Fetch,
    /// Taking locks: every CAS on a lock word, at execution (hitchhiked) or at commit, and
    /// every give-back of one.
    Lock,
    /// Validation's reads.
    Validate,
    /// The log's writes.
    Log,
    /// The commit's writes of new records (and a roll-back's of old ones).
    Commit,
    /// Unlocking.
    Release,
    /// SUNDIAL's lease renewals (and every other atomic on its lease words: freezes,
    /// unfreezes), RCC's RENEW stage.
    Renew,
}

impl Stage {
    pub const ALL: [Stage; 7] = [
        Stage::Fetch,
        Stage::Lock,
        Stage::Validate,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
        Stage::Renew,
    ];

    /// The stages every protocol has (all but SUNDIAL's renew).
    pub const COMMON: [Stage; 6] = [
        Stage::Fetch,
        Stage::Lock,
        Stage::Validate,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Fetch => "fetch",
            Stage::Lock => "lock",
            Stage::Validate => "validate",
            Stage::Log => "log",
            Stage::Commit => "commit",
            Stage::Release => "release",
            Stage::Renew => "renew",
        }
    }

    pub fn from_name(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|x| x.name() == s)
    }

    #[inline]
    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of stages: those that run as RPCs (the others run one-sided).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Stages(u8);

impl Stages {
    pub const NONE: Stages = Stages(0);

    pub const fn of(stages: &[Stage]) -> Stages {
        let mut b = 0;
        let mut i = 0;
        while i < stages.len() {
            b |= stages[i].bit();
            i += 1;
        }
        Stages(b)
    }

    #[inline]
    pub fn has(self, s: Stage) -> bool {
        self.0 & s.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// `self` with `s` too.
    pub const fn with(self, s: Stage) -> Stages {
        Stages(self.0 | s.bit())
    }

    /// The stages in both.
    pub fn and(self, other: Stages) -> Stages {
        Stages(self.0 & other.0)
    }

    /// The stages of `self` not in `other`.
    pub fn minus(self, other: Stages) -> Stages {
        Stages(self.0 & !other.0)
    }

    pub fn iter(self) -> impl Iterator<Item = Stage> {
        Stage::ALL.into_iter().filter(move |&s| self.has(s))
    }

    /// The names, comma-separated ("" for none).
    pub fn names(self) -> String {
        self.iter().map(Stage::name).collect::<Vec<_>>().join(",")
    }

    /// Parses `"lock,validate"` (names separated by commas; "" or "none" for none).
    pub fn parse(s: &str) -> Result<Stages, String> {
        let mut out = Stages::NONE;
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "none" {
                continue;
            }
            let st = Stage::from_name(name).ok_or_else(|| {
                let all: Vec<&str> = Stage::ALL.iter().map(|s| s.name()).collect();
                format!("unknown stage '{name}' (stages: {})", all.join(", "))
            })?;
            out.0 |= st.bit();
        }
        Ok(out)
    }
}

impl Serialize for Stages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.names())
    }
}

impl<'de> Deserialize<'de> for Stages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Stages, D::Error> {
        let s = String::deserialize(d)?;
        Stages::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_parse_print_and_refuse_unknown_names() {
        let s = Stages::parse("lock, commit").unwrap();
        assert!(s.has(Stage::Lock) && s.has(Stage::Commit) && !s.has(Stage::Fetch));
        assert_eq!(s.names(), "lock,commit");
        assert_eq!(Stages::parse("").unwrap(), Stages::NONE);
        assert_eq!(Stages::parse("none").unwrap(), Stages::NONE);
        let e = Stages::parse("lock,lokc").unwrap_err();
        assert!(
            e.contains("unknown stage 'lokc'") && e.contains("validate"),
            "{e}"
        );
        let all = Stages::of(&Stage::ALL);
        assert_eq!(Stages::parse(&all.names()).unwrap(), all);
        assert_eq!(all.minus(s).iter().count(), 5);
    }
}
