//! The five TPC-C transactions (spec 2.4–2.8) with their input generation and
//! the mix of spec 5.2.3 (45% New-Order, 43% Payment, 4% each of Order-Status,
//! Delivery and Stock-Level), without think or keying times.

use ferrite_kv::{KvError, KvResult};

use super::gen::Gen;
use super::load::{Scale, LOAD_DATE};
use super::schema::{self as s, Key, Row};
use crate::buffer::txn::{Tx, TxStore};

/// The transaction types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NewOrder,
    Payment,
    OrderStatus,
    Delivery,
    StockLevel,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::NewOrder,
        Kind::Payment,
        Kind::OrderStatus,
        Kind::Delivery,
        Kind::StockLevel,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::NewOrder => "new-order",
            Kind::Payment => "payment",
            Kind::OrderStatus => "order-status",
            Kind::Delivery => "delivery",
            Kind::StockLevel => "stock-level",
        }
    }
}

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    /// New-Order's 1% with an unused item: rolled back, as the spec demands.
    RolledBack,
}

fn missing(what: &str, k: &Key) -> KvError {
    KvError::Backend(format!("TPC-C: {what} row {:?} is missing", k.bytes()))
}

fn malformed(what: &str, k: &Key) -> KvError {
    KvError::corrupt(
        "TPC-C",
        format!("{what} row {:?} does not decode", k.bytes()),
    )
}

/// Reads and decodes one row; a missing row is an error.
pub fn get_row<R: Row>(tx: &mut dyn Tx, what: &str, k: &Key, buf: &mut Vec<u8>) -> KvResult<R> {
    if !tx.get(k.bytes(), buf)? {
        return Err(missing(what, k));
    }
    R::from_bytes(buf).ok_or_else(|| malformed(what, k))
}

fn put_row<R: Row>(tx: &mut dyn Tx, what: &str, k: &Key, row: &R) -> KvResult<()> {
    if tx.update(k.bytes(), &row.to_bytes())? {
        Ok(())
    } else {
        Err(missing(what, k))
    }
}

fn insert_row(tx: &mut dyn Tx, what: &str, k: &Key, v: &[u8]) -> KvResult<()> {
    if tx.insert(k.bytes(), v)? {
        Ok(())
    } else {
        Err(KvError::Backend(format!(
            "TPC-C: {what} row {:?} exists already",
            k.bytes()
        )))
    }
}

/// Draws the inputs of the transactions and runs them.
pub struct Driver {
    pub g: Gen,
    pub warehouses: u16,
    pub scale: Scale,
    /// The clock rows are stamped with (one tick per transaction).
    pub now: u64,
    /// Next HISTORY key suffix (above the load's).
    history_seq: u64,
    buf: Vec<u8>,
}

impl Driver {
    pub fn new(warehouses: u16, scale: Scale, seed: u64) -> Driver {
        Driver {
            g: Gen::new(seed ^ 0x0072_756e),
            warehouses,
            scale,
            now: LOAD_DATE + 1,
            history_seq: 1 << 40 | (seed & 0xffff) << 24,
            buf: Vec::new(),
        }
    }

    /// A transaction type by the spec's mix.
    pub fn pick(&mut self) -> Kind {
        match self.g.uniform(1, 100) {
            1..=45 => Kind::NewOrder,
            46..=88 => Kind::Payment,
            89..=92 => Kind::OrderStatus,
            93..=96 => Kind::Delivery,
            _ => Kind::StockLevel,
        }
    }

    /// Runs one transaction of the mix.
    pub fn run_one(&mut self, st: &dyn TxStore) -> KvResult<(Kind, Outcome)> {
        let k = self.pick();
        Ok((k, self.run_kind(st, k)?))
    }

    pub fn run_kind(&mut self, st: &dyn TxStore, k: Kind) -> KvResult<Outcome> {
        self.now += 1;
        match k {
            Kind::NewOrder => self.new_order(st),
            Kind::Payment => self.payment(st),
            Kind::OrderStatus => self.order_status(st),
            Kind::Delivery => self.delivery(st),
            Kind::StockLevel => self.stock_level(st),
        }
    }

    fn warehouse(&mut self) -> u16 {
        self.g.uniform(1, self.warehouses as u64) as u16
    }

    fn other_warehouse(&mut self, w: u16) -> u16 {
        if self.warehouses == 1 {
            return w;
        }
        let o = self.g.uniform(1, self.warehouses as u64 - 1) as u16;
        if o >= w {
            o + 1
        } else {
            o
        }
    }

    fn customer_id(&mut self) -> u32 {
        let n = self.scale.customers as u64;
        self.g.nurand(1023, super::gen::C_ID, 1, n) as u32
    }

    fn item_id(&mut self) -> u32 {
        let n = self.scale.items as u64;
        self.g.nurand(8191, super::gen::C_OL_I_ID, 1, n) as u32
    }

    fn last_name(&mut self) -> Vec<u8> {
        let n = self.scale.names() as u64;
        super::gen::last_name(self.g.nurand(255, super::gen::C_LAST_RUN, 0, n - 1) as u32)
    }

    /// The customer chosen by last name (spec 2.5.2.2: the one at position
    /// ceil(n/2) of those with that name, ordered by first name), or None
    /// when nobody has it.
    fn customer_by_name(tx: &mut dyn Tx, w: u16, d: u8, last: &[u8]) -> KvResult<Option<u32>> {
        let p = s::customer_name_prefix(w, d, last);
        let mut ids = Vec::new();
        tx.scan(p.bytes(), &p.successor(), &mut |k, _| {
            ids.push(s::tail_u32(k));
            true
        })?;
        Ok((!ids.is_empty()).then(|| ids[(ids.len() - 1) / 2]))
    }

    /// New-Order (spec 2.4).
    fn new_order(&mut self, st: &dyn TxStore) -> KvResult<Outcome> {
        let w = self.warehouse();
        let d = self.g.uniform(1, 10) as u8;
        let c = self.customer_id();
        let ol_cnt = self.g.uniform(5, 15) as u8;
        let rollback = self.g.uniform(1, 100) == 1;
        let mut lines = Vec::with_capacity(ol_cnt as usize);
        for n in 0..ol_cnt {
            let i = if rollback && n + 1 == ol_cnt {
                self.scale.items + 1
            } else {
                self.item_id()
            };
            let sw = if self.g.uniform(1, 100) == 1 {
                self.other_warehouse(w)
            } else {
                w
            };
            lines.push((i, sw, self.g.uniform(1, 10) as u8));
        }
        let all_local = lines.iter().all(|&(_, sw, _)| sw == w) as u8;
        let now = self.now;
        let buf = &mut self.buf;
        let mut tx = st.begin()?;
        let t = tx.as_mut();
        let _wh: s::Warehouse = get_row(t, "WAREHOUSE", &s::warehouse(w), buf)?;
        let dk = s::district(w, d);
        let mut di: s::District = get_row(t, "DISTRICT", &dk, buf)?;
        let o = di.next_o_id;
        di.next_o_id += 1;
        put_row(t, "DISTRICT", &dk, &di)?;
        let _cu: s::Customer = get_row(t, "CUSTOMER", &s::customer(w, d, c), buf)?;
        let or = s::Order {
            c_id: c,
            entry_d: now,
            carrier_id: 0,
            ol_cnt,
            all_local,
        };
        insert_row(t, "ORDER", &s::order(w, d, o), &or.to_bytes())?;
        insert_row(t, "NEW-ORDER", &s::new_order(w, d, o), &[])?;
        insert_row(
            t,
            "ORDER (by customer)",
            &s::order_customer(w, d, c, o),
            &[],
        )?;
        for (n, &(i, sw, qty)) in lines.iter().enumerate() {
            let ik = s::item(i);
            if !t.get(ik.bytes(), buf)? {
                tx.abort()?;
                return Ok(Outcome::RolledBack);
            }
            let it = s::Item::from_bytes(buf).ok_or_else(|| malformed("ITEM", &ik))?;
            let sk = s::stock(sw, i);
            let mut sr: s::Stock = get_row(t, "STOCK", &sk, buf)?;
            sr.quantity = if sr.quantity >= qty as u16 + 10 {
                sr.quantity - qty as u16
            } else {
                sr.quantity + 91 - qty as u16
            };
            sr.ytd += qty as u32;
            sr.order_cnt = sr.order_cnt.wrapping_add(1);
            if sw != w {
                sr.remote_cnt = sr.remote_cnt.wrapping_add(1);
            }
            put_row(t, "STOCK", &sk, &sr)?;
            let ol = s::OrderLine {
                i_id: i,
                supply_w_id: sw,
                delivery_d: 0,
                quantity: qty,
                amount: qty as i64 * it.price,
                dist_info: sr.dist_info(d).to_vec(),
            };
            insert_row(
                t,
                "ORDER-LINE",
                &s::order_line(w, d, o, n as u8 + 1),
                &ol.to_bytes(),
            )?;
        }
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    /// Payment (spec 2.5).
    fn payment(&mut self, st: &dyn TxStore) -> KvResult<Outcome> {
        let w = self.warehouse();
        let d = self.g.uniform(1, 10) as u8;
        let (cw, cd) = if self.warehouses > 1 && self.g.uniform(1, 100) > 85 {
            (self.other_warehouse(w), self.g.uniform(1, 10) as u8)
        } else {
            (w, d)
        };
        let by_name = self.g.uniform(1, 100) <= 60;
        let last = self.last_name();
        let mut c = self.customer_id();
        let amount = self.g.uniform(100, 500_000) as i64;
        self.history_seq += 1;
        let (now, seq) = (self.now, self.history_seq);
        let buf = &mut self.buf;
        let mut tx = st.begin()?;
        let t = tx.as_mut();
        let wk = s::warehouse(w);
        let mut wh: s::Warehouse = get_row(t, "WAREHOUSE", &wk, buf)?;
        wh.ytd += amount;
        put_row(t, "WAREHOUSE", &wk, &wh)?;
        let dk = s::district(w, d);
        let mut di: s::District = get_row(t, "DISTRICT", &dk, buf)?;
        di.ytd += amount;
        put_row(t, "DISTRICT", &dk, &di)?;
        if by_name {
            if let Some(id) = Self::customer_by_name(t, cw, cd, &last)? {
                c = id;
            }
        }
        let ck = s::customer(cw, cd, c);
        let mut cu: s::Customer = get_row(t, "CUSTOMER", &ck, buf)?;
        cu.balance -= amount;
        cu.ytd_payment += amount;
        cu.payment_cnt += 1;
        if cu.credit == b"BC" {
            let mut data = format!("{c} {cd} {cw} {d} {w} {amount} | ").into_bytes();
            data.extend_from_slice(&cu.data);
            data.truncate(500);
            cu.data = data;
        }
        put_row(t, "CUSTOMER", &ck, &cu)?;
        let mut hdata = wh.name.clone();
        hdata.extend_from_slice(b"    ");
        hdata.extend_from_slice(&di.name);
        let h = s::History {
            c_id: c,
            c_d: cd,
            c_w: cw,
            date: now,
            amount,
            data: hdata,
        };
        insert_row(t, "HISTORY", &s::history(w, d, seq), &h.to_bytes())?;
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    /// Order-Status (spec 2.6), read-only.
    fn order_status(&mut self, st: &dyn TxStore) -> KvResult<Outcome> {
        let w = self.warehouse();
        let d = self.g.uniform(1, 10) as u8;
        let by_name = self.g.uniform(1, 100) <= 60;
        let last = self.last_name();
        let mut c = self.customer_id();
        let buf = &mut self.buf;
        let mut tx = st.begin()?;
        let t = tx.as_mut();
        if by_name {
            if let Some(id) = Self::customer_by_name(t, w, d, &last)? {
                c = id;
            }
        }
        let _cu: s::Customer = get_row(t, "CUSTOMER", &s::customer(w, d, c), buf)?;
        let p = s::Key::table(s::tag::ORDER_CUSTOMER).u16(w).u8(d).u32(c);
        let mut newest = None;
        t.scan(p.bytes(), &p.successor(), &mut |k, _| {
            newest = Some(!s::tail_u32(k));
            false
        })?;
        if let Some(o) = newest {
            let _or: s::Order = get_row(t, "ORDER", &s::order(w, d, o), buf)?;
            let lp = s::Key::table(s::tag::ORDER_LINE).u16(w).u8(d).u32(o);
            let mut bad = false;
            t.scan(lp.bytes(), &lp.successor(), &mut |_, v| {
                bad |= s::OrderLine::from_bytes(v).is_none();
                true
            })?;
            if bad {
                return Err(malformed("ORDER-LINE", &lp));
            }
        }
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    /// Delivery (spec 2.7), all ten districts in one transaction.
    fn delivery(&mut self, st: &dyn TxStore) -> KvResult<Outcome> {
        let w = self.warehouse();
        let carrier = self.g.uniform(1, 10) as u8;
        let now = self.now;
        let buf = &mut self.buf;
        let mut tx = st.begin()?;
        let t = tx.as_mut();
        for d in 1..=10u8 {
            let p = s::Key::table(s::tag::NEW_ORDER).u16(w).u8(d);
            let mut oldest = None;
            t.scan(p.bytes(), &p.successor(), &mut |k, _| {
                oldest = Some(s::tail_u32(k));
                false
            })?;
            let Some(o) = oldest else { continue };
            if !t.remove(s::new_order(w, d, o).bytes())? {
                return Err(missing("NEW-ORDER", &s::new_order(w, d, o)));
            }
            let ok = s::order(w, d, o);
            let mut or: s::Order = get_row(t, "ORDER", &ok, buf)?;
            or.carrier_id = carrier;
            put_row(t, "ORDER", &ok, &or)?;
            let lp = s::Key::table(s::tag::ORDER_LINE).u16(w).u8(d).u32(o);
            let mut lines: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            t.scan(lp.bytes(), &lp.successor(), &mut |k, v| {
                lines.push((k.to_vec(), v.to_vec()));
                true
            })?;
            let mut total = 0i64;
            for (k, v) in lines {
                let key = Key(k);
                let mut ol =
                    s::OrderLine::from_bytes(&v).ok_or_else(|| malformed("ORDER-LINE", &key))?;
                ol.delivery_d = now;
                total += ol.amount;
                put_row(t, "ORDER-LINE", &key, &ol)?;
            }
            let ck = s::customer(w, d, or.c_id);
            let mut cu: s::Customer = get_row(t, "CUSTOMER", &ck, buf)?;
            cu.balance += total;
            cu.delivery_cnt += 1;
            put_row(t, "CUSTOMER", &ck, &cu)?;
        }
        tx.commit()?;
        Ok(Outcome::Committed)
    }

    /// Stock-Level (spec 2.8), read-only.
    fn stock_level(&mut self, st: &dyn TxStore) -> KvResult<Outcome> {
        let w = self.warehouse();
        let d = self.g.uniform(1, 10) as u8;
        let threshold = self.g.uniform(10, 20) as u16;
        let buf = &mut self.buf;
        let mut tx = st.begin()?;
        let t = tx.as_mut();
        let di: s::District = get_row(t, "DISTRICT", &s::district(w, d), buf)?;
        let lo = s::order_line(w, d, di.next_o_id.saturating_sub(20), 0);
        let hi = s::order_line(w, d, di.next_o_id, 0);
        let mut items = Vec::new();
        t.scan(lo.bytes(), hi.bytes(), &mut |_, v| {
            if let Some(ol) = s::OrderLine::from_bytes(v) {
                items.push(ol.i_id);
            }
            true
        })?;
        items.sort_unstable();
        items.dedup();
        let mut low = 0u32;
        for i in items {
            let sr: s::Stock = get_row(t, "STOCK", &s::stock(w, i), buf)?;
            low += (sr.quantity < threshold) as u32;
        }
        std::hint::black_box(low);
        tx.commit()?;
        Ok(Outcome::Committed)
    }
}
