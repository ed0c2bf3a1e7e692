//! [`PageGuard`]: a latched page and the only way to touch its bytes (the
//! thesis's `MakeResident`). Under a shared latch only resident lines can be
//! read (a missing line is a [`BufferError::LineFault`]: the caller restarts
//! with an exclusive latch); under an exclusive latch missing lines are loaded
//! from the page's PM frame, mini frames are extended or promoted, and every
//! write records the cache lines it touched, which the operation's log record
//! then carries ([`crate::Op::log`]).
//!
//! In PM-direct mode the guard reads the PM frame in place and collects an
//! operation's writes in a DRAM overlay, applied to the frame only after the
//! record is durable.

use std::sync::atomic::{AtomicU64, Ordering};

use ferrite_pm::AlignedBuf;

use crate::config::{LINE, MINI_SLOTS};
use crate::error::{BufferError, Result};
use crate::frame::{line_span, Fid, LineMask, MINI_BIT, NO_PARENT};
use crate::latch::Mode;
use crate::manager::BufferManager;
use crate::page::{self, OFF_KIND, OFF_VERSION, PAGE_FORMAT};
use crate::swip::{Swip, SWIZZLED};

/// Where a guarded page is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loc {
    Full(Fid),
    Mini(Fid),
    Pm(u32),
}

/// PM-direct writes of one operation.
pub(crate) struct Overlay {
    pub buf: AlignedBuf,
    /// Lines copied into the overlay.
    pub have: LineMask,
}

/// Lines a guard wrote since its last log record. Boxed on the first write:
/// a read-only guard stays small (it is moved through every level of a
/// descent), a writing one pays one allocation.
#[derive(Default)]
pub(crate) struct Touched(Option<Box<LineMask>>);

impl Touched {
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|m| m.is_empty())
    }

    pub fn set_range(&mut self, a: usize, b: usize) {
        self.0.get_or_insert_with(Default::default).set_range(a, b);
    }

    /// The written lines (`None`: none yet).
    pub fn mask(&self) -> Option<&LineMask> {
        self.0.as_deref()
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().flat_map(|m| m.iter())
    }

    pub fn clear(&mut self) {
        if let Some(m) = self.0.as_mut() {
            m.clear();
        }
    }
}

impl std::fmt::Debug for Touched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A latched page. Dropping it releases the latch.
pub struct PageGuard<'a> {
    pub(crate) bm: &'a BufferManager,
    pub(crate) loc: Loc,
    pub(crate) pid: u64,
    pub(crate) mode: Mode,
    /// Lines written since the last log record.
    pub(crate) touched: Touched,
    /// Formatted by this operation (its record zeroes the page first).
    pub(crate) fresh: bool,
    pub(crate) overlay: Option<Box<Overlay>>,
    /// The page's bytes when they were all resident in a full DRAM frame at
    /// latching: they stay so while the latch is held (a frame loses lines
    /// only when it is evicted and reused, under its exclusive latch), so
    /// reads skip the frame state's residency check. `None`: not known.
    pub(crate) whole: Option<std::ptr::NonNull<u8>>,
}

impl Drop for PageGuard<'_> {
    fn drop(&mut self) {
        debug_assert!(
            self.touched.is_empty() || std::thread::panicking(),
            "page {} dropped with unlogged changes in lines {:?}",
            self.pid,
            self.touched
        );
        self.bm.unlatch(self.loc, self.mode);
    }
}

impl<'a> PageGuard<'a> {
    pub fn pid(&self) -> u64 {
        self.pid
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn page_size(&self) -> usize {
        self.bm.page_size()
    }

    /// Whether the page is in a DRAM frame (not PM-direct).
    pub fn in_dram(&self) -> bool {
        !matches!(self.loc, Loc::Pm(_))
    }

    pub(crate) fn fid(&self) -> Option<Fid> {
        match self.loc {
            Loc::Full(f) | Loc::Mini(f) => Some(f),
            Loc::Pm(_) => None,
        }
    }

    fn check_range(&self, off: usize, len: usize) -> Result<()> {
        if off.checked_add(len).is_none_or(|e| e > self.page_size()) {
            return Err(BufferError::corrupt(
                format!("page {}", self.pid),
                format!(
                    "range {off}+{len} is outside the page of {} bytes",
                    self.page_size()
                ),
            ));
        }
        Ok(())
    }

    /// Whether bytes `off..off+len` can be read without loading.
    pub fn is_resident(&self, off: usize, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        let (a, b) = line_span(off, len);
        match self.loc {
            Loc::Full(f) => {
                // SAFETY: the guard holds the frame's latch.
                let st = unsafe { self.bm.dram().full_frame(f).st() };
                st.all_resident || st.resident.has_range(a, b)
            }
            Loc::Mini(f) => {
                // SAFETY: as above.
                let st = unsafe { self.bm.dram().mini_frame(f).st() };
                mini_pos(&st.slots[..st.count as usize], a, b).is_some()
            }
            Loc::Pm(_) => true,
        }
    }

    /// Whether every line of the page is resident.
    pub fn is_full(&self) -> bool {
        if self.whole.is_some() {
            return true;
        }
        match self.loc {
            // SAFETY: the guard holds the frame's latch.
            Loc::Full(f) => unsafe { self.bm.dram().full_frame(f).st() }.all_resident,
            Loc::Mini(_) => false,
            Loc::Pm(_) => true,
        }
    }

    /// Whether reads of this page are charged line by line (PM-direct under
    /// the modelled PM read latency): searches should then read what they
    /// probe through [`PageGuard::read`], not the whole page at once.
    pub fn reads_charged(&self) -> bool {
        matches!(self.loc, Loc::Pm(_)) && self.bm.pm().models_reads()
    }

    /// Makes bytes `off..off+len` resident (the thesis's `MakeResident`).
    /// Under a shared latch a missing line is a [`BufferError::LineFault`].
    pub fn prepare(&mut self, off: usize, len: usize) -> Result<()> {
        self.check_range(off, len)?;
        if len == 0 {
            return Ok(());
        }
        if self.is_resident(off, len) {
            if let (Loc::Pm(_), Some(_)) = (self.loc, &self.overlay) {
                self.overlay_cover(off, len);
            }
            return Ok(());
        }
        if self.mode == Mode::Shared {
            return Err(BufferError::LineFault);
        }
        let (a, b) = line_span(off, len);
        match self.loc {
            Loc::Full(f) => self.bm.load_lines(f, a, b),
            Loc::Mini(f) => {
                if !self.bm.mini_extend(f, a, b) {
                    let full = self.bm.promote(f, self.pid)?;
                    self.loc = Loc::Full(full);
                    return self.prepare(off, len);
                }
                Ok(())
            }
            Loc::Pm(_) => Ok(()),
        }
    }

    /// Makes every line resident (promoting a mini frame).
    pub fn make_full(&mut self) -> Result<()> {
        let ps = self.page_size();
        if self.is_full() {
            return Ok(());
        }
        if self.mode == Mode::Shared {
            return Err(BufferError::LineFault);
        }
        if let Loc::Mini(f) = self.loc {
            let full = self.bm.promote(f, self.pid)?;
            self.loc = Loc::Full(full);
        }
        self.prepare(0, ps)
    }

    /// With an overlay (PM-direct, exclusive): copies into it the lines of
    /// `off..off+len` it lacks if it has any of them, so reads see one copy.
    fn overlay_cover(&mut self, off: usize, len: usize) {
        let (a, b) = line_span(off, len);
        let Loc::Pm(f) = self.loc else { return };
        let Some(ov) = self.overlay.as_mut() else {
            return;
        };
        if !(a..=b).any(|l| ov.have.get(l)) || ov.have.has_range(a, b) {
            return;
        }
        let src = self.bm.pm().data(f);
        self.bm.pm().model_read(f, a, b);
        for l in a..=b {
            if !ov.have.get(l) {
                // SAFETY: line l is inside the PM frame and the overlay.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.add(l * LINE),
                        ov.buf.as_mut_slice().as_mut_ptr().add(l * LINE),
                        LINE,
                    )
                };
                ov.have.set(l);
            }
        }
    }

    /// Starts loading the cache lines of bytes `off..off+len` where the page
    /// lies (a DRAM frame, or the PM frame of PM-direct): a hint for a read
    /// that follows a dependent one, so both misses overlap. Nothing is made
    /// resident or checked; out-of-page parts are ignored; minis and pages
    /// with an overlay are skipped.
    #[inline]
    pub fn prefetch(&self, off: usize, len: usize) {
        let ps = self.page_size();
        if off >= ps || len == 0 {
            return;
        }
        let end = off.saturating_add(len).min(ps);
        let base = match self.loc {
            Loc::Full(f) => self.bm.dram().buf(f),
            Loc::Pm(f) if self.overlay.is_none() => self.bm.pm().data(f),
            _ => return,
        };
        ferrite_pm::prefetch::lines(base as usize + off, end - off);
    }

    /// Address of byte `off` (resident, see `prepare`).
    fn addr(&self, off: usize) -> *mut u8 {
        match self.loc {
            Loc::Full(f) => {
                // SAFETY: off is inside the page (checked by callers).
                unsafe { self.bm.dram().buf(f).add(off) }
            }
            Loc::Mini(f) => {
                // SAFETY: the guard holds the frame's latch.
                let st = unsafe { self.bm.dram().mini_frame(f).st() };
                let l = off / LINE;
                let pos = st.slots[..st.count as usize]
                    .iter()
                    .position(|&s| s as usize == l)
                    .expect("resident line");
                // SAFETY: pos < 16 slots of the mini buffer.
                unsafe { self.bm.dram().buf(f).add(pos * LINE + off % LINE) }
            }
            Loc::Pm(f) => {
                let l = off / LINE;
                match &self.overlay {
                    Some(ov) if ov.have.get(l) => {
                        // SAFETY: off is inside the overlay page.
                        unsafe { (ov.buf.as_slice().as_ptr() as *mut u8).add(off) }
                    }
                    // SAFETY: off is inside the PM frame.
                    _ => unsafe { self.bm.pm().data(f).add(off) },
                }
            }
        }
    }

    /// PM-direct: charges the modelled PM read latency for lines of
    /// `off..off+len` read in place (not those in the overlay).
    #[inline]
    fn model_pm_read(&self, off: usize, len: usize) {
        if let Loc::Pm(f) = self.loc {
            let (a, b) = line_span(off, len);
            match &self.overlay {
                Some(ov) if ov.have.has_range(a, b) => {}
                _ => self.bm.pm().model_read(f, a, b),
            }
        }
    }

    /// Where bytes `off..off+len` lie when they can be read in place right
    /// away: inside the page, resident, no overlay to consult. `None` sends
    /// the caller down the general path (which also reports the errors).
    #[inline]
    fn resident_ptr(&self, off: usize, len: usize) -> Option<*const u8> {
        let end = off.checked_add(len)?;
        if len == 0 || end > self.page_size() {
            return None;
        }
        if let Some(p) = self.whole {
            return Some(p.as_ptr().wrapping_add(off) as *const u8);
        }
        let (a, b) = line_span(off, len);
        match self.loc {
            Loc::Full(f) => {
                let dram = self.bm.dram();
                // SAFETY: the guard holds the frame's latch.
                let st = unsafe { dram.full_frame(f).st() };
                (st.all_resident || st.resident.has_range(a, b))
                    .then(|| dram.buf(f).wrapping_add(off) as *const u8)
            }
            Loc::Mini(f) => {
                let dram = self.bm.dram();
                // SAFETY: as above.
                let st = unsafe { dram.mini_frame(f).st() };
                let p = mini_pos(&st.slots[..st.count as usize], a, b)?;
                Some(dram.buf(f).wrapping_add(p * LINE + off % LINE) as *const u8)
            }
            Loc::Pm(f) if self.overlay.is_none() => {
                Some(self.bm.pm().data(f).wrapping_add(off) as *const u8)
            }
            Loc::Pm(_) => None,
        }
    }

    /// Bytes `off..off+len` (made resident first).
    #[inline]
    pub fn read(&mut self, off: usize, len: usize) -> Result<&[u8]> {
        if let Some(p) = self.resident_ptr(off, len) {
            self.model_pm_read(off, len);
            // SAFETY: resident and inside the page (`resident_ptr` checked);
            // the latch keeps writers out while the slice lives (it borrows
            // the guard).
            return Ok(unsafe { std::slice::from_raw_parts(p, len) });
        }
        self.read_slow(off, len)
    }

    fn read_slow(&mut self, off: usize, len: usize) -> Result<&[u8]> {
        self.prepare(off, len)?;
        if len == 0 {
            return Ok(&[]);
        }
        self.model_pm_read(off, len);
        // SAFETY: resident, inside the page; the latch keeps writers out while
        // the slice lives (it borrows the guard).
        Ok(unsafe { std::slice::from_raw_parts(self.addr(off), len) })
    }

    /// Bytes of a resident range without loading (shared-latch readers that
    /// checked residency; see [`PageGuard::prepare`]).
    pub fn resident(&self, off: usize, len: usize) -> Result<&[u8]> {
        if let Some(p) = self.resident_ptr(off, len) {
            self.model_pm_read(off, len);
            // SAFETY: as in `read`.
            return Ok(unsafe { std::slice::from_raw_parts(p, len) });
        }
        self.check_range(off, len)?;
        if len == 0 {
            return Ok(&[]);
        }
        if !self.is_resident(off, len) {
            return Err(BufferError::LineFault);
        }
        self.model_pm_read(off, len);
        // SAFETY: as in `read`.
        Ok(unsafe { std::slice::from_raw_parts(self.addr(off), len) })
    }

    pub fn u16_at(&mut self, off: usize) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.read(off, 2)?.try_into().expect("2"),
        ))
    }

    pub fn u32_at(&mut self, off: usize) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.read(off, 4)?.try_into().expect("4"),
        ))
    }

    pub fn u64_at(&mut self, off: usize) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.read(off, 8)?.try_into().expect("8"),
        ))
    }

    /// The page's kind byte.
    pub fn kind(&mut self) -> Result<u8> {
        Ok(self.read(OFF_KIND, 1)?[0])
    }

    fn need_exclusive(&self) -> Result<()> {
        if self.mode != Mode::Exclusive {
            return Err(BufferError::Invalid(format!(
                "page {} written under a shared latch",
                self.pid
            )));
        }
        Ok(())
    }

    /// Prepares a write of `off..off+len`: exclusive, resident, and in the
    /// overlay when PM-direct. Returns its address; marks the lines touched.
    fn write_span(&mut self, off: usize, len: usize) -> Result<*mut u8> {
        self.need_exclusive()?;
        self.prepare(off, len)?;
        let (a, b) = line_span(off, len);
        if let Loc::Pm(f) = self.loc {
            let ps = self.page_size();
            let ov = self.overlay.get_or_insert_with(|| {
                Box::new(Overlay {
                    buf: AlignedBuf::zeroed(ps),
                    have: LineMask::default(),
                })
            });
            let src = self.bm.pm().data(f);
            if !ov.have.has_range(a, b) {
                self.bm.pm().model_read(f, a, b);
            }
            for l in a..=b {
                if !ov.have.get(l) {
                    // SAFETY: line l is inside the PM frame and the overlay.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src.add(l * LINE),
                            ov.buf.as_mut_slice().as_mut_ptr().add(l * LINE),
                            LINE,
                        )
                    };
                    ov.have.set(l);
                }
            }
            self.overlay_cover(off, len);
        }
        if len > 0 {
            self.touched.set_range(a, b);
        }
        Ok(self.addr(off))
    }

    /// Writes `src` at `off` (exclusive latch).
    pub fn write(&mut self, off: usize, src: &[u8]) -> Result<()> {
        self.check_range(off, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let p = self.write_span(off, src.len())?;
        // SAFETY: p..p+len is resident and inside the page (or overlay); the
        // exclusive latch excludes every other access.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    pub fn put_u16(&mut self, off: usize, v: u16) -> Result<()> {
        self.write(off, &v.to_le_bytes())
    }

    pub fn put_u32(&mut self, off: usize, v: u32) -> Result<()> {
        self.write(off, &v.to_le_bytes())
    }

    pub fn put_u64(&mut self, off: usize, v: u64) -> Result<()> {
        self.write(off, &v.to_le_bytes())
    }

    /// Mutable bytes `off..off+len` (exclusive latch; the lines count as written).
    pub fn bytes_mut(&mut self, off: usize, len: usize) -> Result<&mut [u8]> {
        self.check_range(off, len)?;
        if len == 0 {
            return Ok(&mut []);
        }
        let p = self.write_span(off, len)?;
        // SAFETY: as in `write`; the slice borrows the guard mutably.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    /// Moves `len` bytes from `src` to `dst` within the page (overlapping is fine).
    pub fn copy_within(&mut self, src: usize, dst: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.check_range(src, len)?;
        self.check_range(dst, len)?;
        self.need_exclusive()?;
        if matches!(self.loc, Loc::Mini(_)) {
            // The two ranges need not be contiguous in a mini frame.
            self.make_full()?;
        }
        if let Loc::Pm(_) = self.loc {
            // Both ranges from the overlay (the source lines are logged too,
            // unchanged).
            self.write_span(src, len)?;
        } else {
            self.prepare(src, len)?;
        }
        let d = self.write_span(dst, len)?;
        let s = self.addr(src);
        // SAFETY: both ranges are resident in the same buffer; ptr::copy
        // handles overlap; the exclusive latch excludes other access.
        unsafe { std::ptr::copy(s, d, len) };
        Ok(())
    }

    /// Zero-fills the page and stamps the buffer manager's header (`kind`);
    /// the operation's record will zero the page before its lines (a new page).
    pub fn format(&mut self, page_kind: u8) -> Result<()> {
        self.need_exclusive()?;
        self.make_full()?;
        let ps = self.page_size();
        let pid = self.pid;
        let b = self.bytes_mut(0, ps)?;
        b.fill(0);
        b[page::OFF_PID..page::OFF_PID + 8].copy_from_slice(&pid.to_le_bytes());
        b[OFF_KIND] = page_kind;
        b[OFF_VERSION] = PAGE_FORMAT;
        self.fresh = true;
        Ok(())
    }

    /// The swip at `off` (8-aligned, resident).
    pub fn swip(&self, off: usize) -> Result<&AtomicU64> {
        if !off.is_multiple_of(8) {
            return Err(BufferError::corrupt(
                format!("page {}", self.pid),
                format!("child reference at unaligned offset {off}"),
            ));
        }
        let b = self.resident(off, 8)?;
        // SAFETY: 8-aligned (the buffer is 64-aligned and off % 8 == 0), resident,
        // and swips are only ever accessed as whole atomic words.
        Ok(unsafe { &*(b.as_ptr() as *const AtomicU64) })
    }

    /// The child page id at swip `off` (translating a swizzled swip).
    pub fn child_pid(&self, off: usize) -> Result<u64> {
        let v = self.swip(off)?.load(Ordering::Acquire);
        match Swip::decode(v) {
            Swip::Pid(p) => Ok(p),
            Swip::Frame(f) => self.bm.frame_pid(f),
        }
    }

    /// Writes child page id `pid` at swip `off` (exclusive; an unswizzled
    /// reference, counted as a written line).
    pub fn set_child(&mut self, off: usize, pid: u64) -> Result<()> {
        self.need_exclusive()?;
        if !off.is_multiple_of(8) || pid & SWIZZLED != 0 {
            return Err(BufferError::Invalid(format!("bad child {pid} at {off}")));
        }
        self.prepare(off, 8)?;
        if self
            .swip(off)
            .is_ok_and(|w| w.load(Ordering::Acquire) & SWIZZLED != 0)
        {
            self.bm.unswizzle_at(self, off)?;
        }
        self.write(off, &pid.to_le_bytes())
    }

    /// Unswizzles every child reference of the page (before a structure
    /// change moves them).
    pub fn unswizzle_all(&mut self) -> Result<()> {
        self.need_exclusive()?;
        if let Some(f) = self.fid() {
            if self.bm.dram().common(f).children.load(Ordering::Acquire) == 0 {
                return Ok(());
            }
            self.make_full()?;
            for off in self.bm.swip_offsets(self)? {
                if self.swip(off)?.load(Ordering::Acquire) & SWIZZLED != 0 {
                    self.bm.unswizzle_at(self, off)?;
                }
            }
        }
        Ok(())
    }

    /// The whole page (every line resident: call `make_full` first). Under
    /// the PM read model the whole page counts as read.
    pub fn full(&self) -> Result<&[u8]> {
        self.resident(0, self.page_size())
    }

    /// Keeps this page in DRAM (tree roots).
    pub fn pin(&self, on: bool) {
        if let Some(f) = self.fid() {
            self.bm.dram().common(f).pinned.store(on, Ordering::Release);
        }
    }

    /// Lines of the current content for a log record / write-back: the line
    /// bytes with swizzled swips written as page ids.
    pub(crate) fn line_image(&self, l: usize, offsets: &[usize], out: &mut [u8]) {
        // SAFETY: touched lines are resident (written through this guard).
        let src = unsafe { std::slice::from_raw_parts(self.addr(l * LINE), LINE) };
        out.copy_from_slice(src);
        for &o in offsets {
            if o / LINE == l {
                let w = u64::from_le_bytes(out[o % LINE..o % LINE + 8].try_into().expect("8"));
                if let Swip::Frame(f) = Swip::decode(w) {
                    let pid = self.bm.frame_pid(f).unwrap_or(w);
                    out[o % LINE..o % LINE + 8].copy_from_slice(&pid.to_le_bytes());
                }
            }
        }
    }

    pub(crate) fn parent_code(&self, off: usize) -> u64 {
        match self.fid() {
            Some(f) => (f as u64) << 32 | off as u64,
            None => NO_PARENT,
        }
    }
}

/// Position of lines `a..=b` in a mini frame's sorted slots, if all present
/// (they are then contiguous).
pub(crate) fn mini_pos(slots: &[u16], a: usize, b: usize) -> Option<usize> {
    let p = slots.iter().position(|&s| s as usize == a)?;
    let n = b - a + 1;
    (p + n <= slots.len() && slots[p + n - 1] as usize == b).then_some(p)
}

/// Whether `fid` is a mini frame.
#[inline]
pub(crate) fn is_mini(fid: Fid) -> bool {
    fid & MINI_BIT != 0
}

const _: () = assert!(MINI_SLOTS <= 16);
