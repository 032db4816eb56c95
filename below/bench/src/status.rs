//! Whether a benchmark row measured anything, or why not.

use std::fmt;

use serde::Serialize;
use serde::Serializer;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Status {
    /// Not measured (yet).
    #[default]
    NotRun,
    Ok,
    /// Cannot run here: why.
    NotAvailable(String),
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::NotRun => f.write_str("not run"),
            Status::Ok => f.write_str("ok"),
            Status::NotAvailable(why) => write!(f, "n/a: {why}"),
        }
    }
}

/// As the text people read ("ok", "n/a: why"): what the JSON holds.
impl Serialize for Status {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
