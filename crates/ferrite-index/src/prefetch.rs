//! Software prefetch: the index knows which lines it will read (a leaf, the
//! searched part of an inner node, the leaves a scan will visit) before it can
//! read them, so it asks for all of them at once ([`ferrite_pm::prefetch`]).

pub use ferrite_pm::prefetch::lines;
