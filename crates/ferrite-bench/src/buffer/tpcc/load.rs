//! The initial database population (spec 4.3.3.1), optionally scaled down in
//! everything but the warehouse count ([`Scale`]) for tests.

use std::time::Instant;

use ferrite_kv::KvResult;

use super::gen::{last_name, Gen, C_LAST_LOAD};
use super::schema::{self as s, Row};
use crate::buffer::txn::{Tx, TxStore};

/// Rows per table per warehouse; [`Scale::SPEC`] is TPC-C's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Items (and stock rows per warehouse).
    pub items: u32,
    /// Customers per district (and initial orders per district).
    pub customers: u32,
    /// Undelivered initial orders per district (the last ones).
    pub new_orders: u32,
}

impl Scale {
    pub const SPEC: Scale = Scale {
        items: 100_000,
        customers: 3000,
        new_orders: 900,
    };

    /// A small population for tests (same structure, 1/50 of the rows).
    pub const TINY: Scale = Scale {
        items: 2000,
        customers: 60,
        new_orders: 18,
    };

    /// Distinct last names (1000 at full scale).
    pub fn names(&self) -> u32 {
        self.customers.min(1000)
    }

    /// Rows the load writes for `warehouses` (about: order lines are random).
    pub fn rows(&self, warehouses: u16) -> u64 {
        let w = warehouses as u64;
        let per_d = self.customers as u64 * (3 + 2 + 10) + self.new_orders as u64;
        self.items as u64 + w * (1 + self.items as u64 + 10 * (1 + per_d))
    }
}

/// The date every loaded row gets (seconds; the run counts up from it).
pub const LOAD_DATE: u64 = 1_700_000_000;

/// Rows written per load transaction.
const LOAD_TX_ROWS: usize = 512;

/// Writes rows through transactions of [`LOAD_TX_ROWS`] rows.
struct Loader<'a> {
    store: &'a dyn TxStore,
    tx: Option<Box<dyn Tx + 'a>>,
    in_tx: usize,
    rows: u64,
    progress: &'a mut dyn FnMut(u64),
}

impl<'a> Loader<'a> {
    fn put(&mut self, key: &s::Key, value: &[u8]) -> KvResult<()> {
        if self.tx.is_none() {
            self.tx = Some(self.store.begin()?);
        }
        let tx = self.tx.as_mut().expect("just begun");
        if !tx.insert(key.bytes(), value)? {
            return Err(ferrite_kv::KvError::Backend(format!(
                "TPC-C load: key {:?} exists",
                key.bytes()
            )));
        }
        self.in_tx += 1;
        self.rows += 1;
        if self.in_tx >= LOAD_TX_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> KvResult<()> {
        if let Some(tx) = self.tx.take() {
            tx.commit()?;
            self.in_tx = 0;
            (self.progress)(self.rows);
        }
        Ok(())
    }
}

/// Loads `warehouses` warehouses at `scale`; returns (rows, seconds).
pub fn load(
    store: &dyn TxStore,
    warehouses: u16,
    scale: Scale,
    seed: u64,
    progress: &mut dyn FnMut(u64),
) -> KvResult<(u64, f64)> {
    let t0 = Instant::now();
    let mut g = Gen::new(seed);
    let mut l = Loader {
        store,
        tx: None,
        in_tx: 0,
        rows: 0,
        progress,
    };
    for i in 1..=scale.items {
        let it = s::Item {
            im_id: g.uniform(1, 10_000) as u32,
            name: g.astring(14, 24),
            price: g.uniform(100, 10_000) as i64,
            data: g.data_with_original(26, 50),
        };
        l.put(&s::item(i), &it.to_bytes())?;
    }
    for w in 1..=warehouses {
        load_warehouse(&mut l, &mut g, w, scale)?;
    }
    l.flush()?;
    Ok((l.rows, t0.elapsed().as_secs_f64()))
}

fn address(g: &mut Gen) -> s::Address {
    s::Address {
        street1: g.astring(10, 20),
        street2: g.astring(10, 20),
        city: g.astring(10, 20),
        state: g.astring(2, 2),
        zip: g.zip(),
    }
}

fn load_warehouse(l: &mut Loader<'_>, g: &mut Gen, w: u16, scale: Scale) -> KvResult<()> {
    let wh = s::Warehouse {
        name: g.astring(6, 10),
        address: address(g),
        tax: g.uniform(0, 2000) as u32,
        ytd: 30_000_000,
    };
    l.put(&s::warehouse(w), &wh.to_bytes())?;
    for i in 1..=scale.items {
        let st = s::Stock {
            quantity: g.uniform(10, 100) as u16,
            dist: (0..10).flat_map(|_| g.astring(24, 24)).collect(),
            ytd: 0,
            order_cnt: 0,
            remote_cnt: 0,
            data: g.data_with_original(26, 50),
        };
        l.put(&s::stock(w, i), &st.to_bytes())?;
    }
    let first_new = scale.customers - scale.new_orders + 1;
    for d in 1..=10u8 {
        let di = s::District {
            name: g.astring(6, 10),
            address: address(g),
            tax: g.uniform(0, 2000) as u32,
            ytd: 3_000_000,
            next_o_id: scale.customers + 1,
        };
        l.put(&s::district(w, d), &di.to_bytes())?;
        for c in 1..=scale.customers {
            let last = if c <= scale.names() {
                last_name(c - 1)
            } else {
                last_name(g.nurand(255, C_LAST_LOAD, 0, scale.names() as u64 - 1) as u32)
            };
            let cu = s::Customer {
                first: g.astring(8, 16),
                middle: b"OE".to_vec(),
                last,
                address: address(g),
                phone: g.nstring(16),
                since: LOAD_DATE,
                credit: if g.rng.below(10) == 0 { b"BC" } else { b"GC" }.to_vec(),
                credit_lim: 5_000_000,
                discount: g.uniform(0, 5000) as u32,
                balance: -1000,
                ytd_payment: 1000,
                payment_cnt: 1,
                delivery_cnt: 0,
                data: g.astring(300, 500),
            };
            l.put(&s::customer(w, d, c), &cu.to_bytes())?;
            l.put(&s::customer_name(w, d, &cu.last, &cu.first, c), &[])?;
            let h = s::History {
                c_id: c,
                c_d: d,
                c_w: w,
                date: LOAD_DATE,
                amount: 1000,
                data: g.astring(12, 24),
            };
            l.put(&s::history(w, d, c as u64), &h.to_bytes())?;
        }
        // Orders: one per customer, in a random permutation of customers.
        let mut perm: Vec<u32> = (1..=scale.customers).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, g.rng.below(i as u64 + 1) as usize);
        }
        for o in 1..=scale.customers {
            let c = perm[o as usize - 1];
            let delivered = o < first_new;
            let ol_cnt = g.uniform(5, 15) as u8;
            let or = s::Order {
                c_id: c,
                entry_d: LOAD_DATE,
                carrier_id: if delivered { g.uniform(1, 10) as u8 } else { 0 },
                ol_cnt,
                all_local: 1,
            };
            l.put(&s::order(w, d, o), &or.to_bytes())?;
            l.put(&s::order_customer(w, d, c, o), &[])?;
            for n in 1..=ol_cnt {
                let ol = s::OrderLine {
                    i_id: g.uniform(1, scale.items as u64) as u32,
                    supply_w_id: w,
                    delivery_d: if delivered { LOAD_DATE } else { 0 },
                    quantity: 5,
                    amount: if delivered {
                        0
                    } else {
                        g.uniform(1, 999_999) as i64
                    },
                    dist_info: g.astring(24, 24),
                };
                l.put(&s::order_line(w, d, o, n), &ol.to_bytes())?;
            }
            if !delivered {
                l.put(&s::new_order(w, d, o), &[])?;
            }
        }
    }
    Ok(())
}
