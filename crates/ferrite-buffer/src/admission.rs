//! The admission set (thesis §4.2): a page evicted from DRAM is admitted to PM
//! only if it was recently denied admission. Each consideration either finds
//! the page in the set (remove it, admit) or adds it (deny: the page goes to
//! SSD). The set keeps the `capacity` most recent denials, oldest dropped first.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

pub(crate) struct AdmissionSet {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// page id → sequence number of its denial.
    set: HashMap<u64, u64>,
    /// Denials in order (stale ones are skipped when dropped).
    order: VecDeque<(u64, u64)>,
    seq: u64,
}

impl AdmissionSet {
    pub fn new(capacity: usize) -> AdmissionSet {
        AdmissionSet {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Whether `pid` is admitted to PM now.
    pub fn consider(&self, pid: u64) -> bool {
        let mut g = self.inner.lock().unwrap();
        if g.set.remove(&pid).is_some() {
            return true;
        }
        g.seq += 1;
        let s = g.seq;
        g.set.insert(pid, s);
        g.order.push_back((pid, s));
        while g.set.len() > self.capacity {
            let Some((p, s)) = g.order.pop_front() else {
                break;
            };
            if g.set.get(&p) == Some(&s) {
                g.set.remove(&p);
            }
        }
        // Stale entries of admitted pages would otherwise pile up.
        if g.order.len() > 4 * self.capacity {
            let Inner { set, order, .. } = &mut *g;
            order.retain(|(p, s)| set.get(p) == Some(s));
        }
        false
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_admitted_the_second_time_it_is_considered() {
        let a = AdmissionSet::new(2);
        assert!(!a.consider(1));
        assert!(a.consider(1));
        assert!(!a.consider(1));
        // 1 is pushed out by two newer denials.
        assert!(!a.consider(2));
        assert!(!a.consider(3));
        assert!(!a.consider(1));
        assert_eq!(a.len(), 2);
        assert!(a.consider(3));
    }
}
