//! Swips (after LeanStore's `Swip.hpp`): the 8-byte child references stored in
//! pages. An unswizzled swip is a page id; a swizzled one has bit 63 set and
//! names the DRAM frame that holds the child (thesis §3.3). Swips are always
//! read and written as atomic words, because swizzling changes them under the
//! parent's shared latch. What reaches the log, PM or SSD is always a page id:
//! every copy of a page that leaves DRAM is translated ([`crate::access`]).

/// Bit 63: the swip names a DRAM frame.
pub const SWIZZLED: u64 = 1 << 63;

/// Largest page id (bit 63 is the swizzle tag).
pub const MAX_PID: u64 = SWIZZLED - 1;

/// A decoded swip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swip {
    Pid(u64),
    Frame(u32),
}

impl Swip {
    #[inline]
    pub fn decode(v: u64) -> Swip {
        if v & SWIZZLED != 0 {
            Swip::Frame(v as u32)
        } else {
            Swip::Pid(v)
        }
    }

    #[inline]
    pub fn encode(self) -> u64 {
        match self {
            Swip::Pid(p) => p,
            Swip::Frame(f) => SWIZZLED | f as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swips_round_trip() {
        for s in [
            Swip::Pid(0),
            Swip::Pid(MAX_PID),
            Swip::Frame(0),
            Swip::Frame(u32::MAX),
        ] {
            assert_eq!(Swip::decode(s.encode()), s);
        }
        assert_eq!(Swip::decode(5), Swip::Pid(5));
    }
}
