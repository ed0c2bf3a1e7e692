//! TPC-C's nine tables (and two secondary indexes) as key ranges of one ordered
//! key space: a one-byte table tag, then the primary key's columns big-endian,
//! so each table is one contiguous range and every composite key sorts in its
//! columns' order. Rows are compact binary records ([`Row`]).

/// Table tags (the first key byte).
pub mod tag {
    pub const WAREHOUSE: u8 = 1;
    pub const DISTRICT: u8 = 2;
    pub const CUSTOMER: u8 = 3;
    /// Secondary index: (w, d, last, first, c) → ().
    pub const CUSTOMER_NAME: u8 = 4;
    pub const HISTORY: u8 = 5;
    pub const NEW_ORDER: u8 = 6;
    pub const ORDER: u8 = 7;
    /// Secondary index: (w, d, c, !o) → () (a customer's newest order first).
    pub const ORDER_CUSTOMER: u8 = 8;
    pub const ORDER_LINE: u8 = 9;
    pub const ITEM: u8 = 10;
    pub const STOCK: u8 = 11;
}

/// Bytes of the name columns in the customer-name index (padded with zeros).
pub const NAME_KEY: usize = 16;

/// Builds a key: a table tag, then columns appended big-endian.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key(pub Vec<u8>);

impl Key {
    pub fn table(tag: u8) -> Key {
        let mut v = Vec::with_capacity(24);
        v.push(tag);
        Key(v)
    }
    pub fn u8(mut self, x: u8) -> Key {
        self.0.push(x);
        self
    }
    pub fn u16(mut self, x: u16) -> Key {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }
    pub fn u32(mut self, x: u32) -> Key {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }
    pub fn u64(mut self, x: u64) -> Key {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }
    /// A name column padded (or cut) to [`NAME_KEY`] bytes.
    pub fn name(mut self, s: &[u8]) -> Key {
        let n = s.len().min(NAME_KEY);
        self.0.extend_from_slice(&s[..n]);
        self.0.resize(self.0.len() + NAME_KEY - n, 0);
        self
    }
    /// The first key after every key that starts with this one.
    pub fn successor(&self) -> Vec<u8> {
        let mut v = self.0.clone();
        while let Some(last) = v.pop() {
            if last < 0xff {
                v.push(last + 1);
                return v;
            }
        }
        vec![0xff; 32]
    }
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

pub fn warehouse(w: u16) -> Key {
    Key::table(tag::WAREHOUSE).u16(w)
}
pub fn district(w: u16, d: u8) -> Key {
    Key::table(tag::DISTRICT).u16(w).u8(d)
}
pub fn customer(w: u16, d: u8, c: u32) -> Key {
    Key::table(tag::CUSTOMER).u16(w).u8(d).u32(c)
}
/// The name-index prefix of every customer of (w, d) with last name `last`.
pub fn customer_name_prefix(w: u16, d: u8, last: &[u8]) -> Key {
    Key::table(tag::CUSTOMER_NAME).u16(w).u8(d).name(last)
}
pub fn customer_name(w: u16, d: u8, last: &[u8], first: &[u8], c: u32) -> Key {
    customer_name_prefix(w, d, last).name(first).u32(c)
}
pub fn history(w: u16, d: u8, seq: u64) -> Key {
    Key::table(tag::HISTORY).u16(w).u8(d).u64(seq)
}
pub fn new_order(w: u16, d: u8, o: u32) -> Key {
    Key::table(tag::NEW_ORDER).u16(w).u8(d).u32(o)
}
pub fn order(w: u16, d: u8, o: u32) -> Key {
    Key::table(tag::ORDER).u16(w).u8(d).u32(o)
}
pub fn order_customer(w: u16, d: u8, c: u32, o: u32) -> Key {
    Key::table(tag::ORDER_CUSTOMER).u16(w).u8(d).u32(c).u32(!o)
}
pub fn order_line(w: u16, d: u8, o: u32, ol: u8) -> Key {
    Key::table(tag::ORDER_LINE).u16(w).u8(d).u32(o).u8(ol)
}
pub fn item(i: u32) -> Key {
    Key::table(tag::ITEM).u32(i)
}
pub fn stock(w: u16, i: u32) -> Key {
    Key::table(tag::STOCK).u16(w).u32(i)
}

/// The last 4 bytes of a key as a big-endian u32 (a customer id of the name
/// index, an inverted order id of the order-customer index).
pub fn tail_u32(k: &[u8]) -> u32 {
    let n = k.len();
    u32::from_be_bytes([k[n - 4], k[n - 3], k[n - 2], k[n - 1]])
}

/// A compact binary row: fixed-width little-endian numbers and
/// length-prefixed strings, in declaration order.
pub trait Row: Sized {
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(r: &mut Reader<'_>) -> Option<Self>;
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64);
        self.encode(&mut v);
        v
    }
    fn from_bytes(b: &[u8]) -> Option<Self> {
        let mut r = Reader(b);
        let x = Self::decode(&mut r)?;
        r.0.is_empty().then_some(x)
    }
}

/// Reads the fields of a [`Row`] in order.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub fn str(&mut self) -> Option<Vec<u8>> {
        let n = self.u16()? as usize;
        Some(self.take(n)?.to_vec())
    }
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s);
}

/// Street, city, state, zip.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Address {
    pub street1: Vec<u8>,
    pub street2: Vec<u8>,
    pub city: Vec<u8>,
    pub state: Vec<u8>,
    pub zip: Vec<u8>,
}

impl Address {
    fn encode(&self, out: &mut Vec<u8>) {
        for s in [
            &self.street1,
            &self.street2,
            &self.city,
            &self.state,
            &self.zip,
        ] {
            put_str(out, s);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Option<Address> {
        Some(Address {
            street1: r.str()?,
            street2: r.str()?,
            city: r.str()?,
            state: r.str()?,
            zip: r.str()?,
        })
    }
}

/// Money is in cents, rates (tax, discount) in 1/10,000.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Warehouse {
    pub name: Vec<u8>,
    pub address: Address,
    pub tax: u32,
    pub ytd: i64,
}

impl Row for Warehouse {
    fn encode(&self, out: &mut Vec<u8>) {
        put_str(out, &self.name);
        self.address.encode(out);
        out.extend_from_slice(&self.tax.to_le_bytes());
        out.extend_from_slice(&self.ytd.to_le_bytes());
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Warehouse {
            name: r.str()?,
            address: Address::decode(r)?,
            tax: r.u32()?,
            ytd: r.i64()?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct District {
    pub name: Vec<u8>,
    pub address: Address,
    pub tax: u32,
    pub ytd: i64,
    pub next_o_id: u32,
}

impl Row for District {
    fn encode(&self, out: &mut Vec<u8>) {
        put_str(out, &self.name);
        self.address.encode(out);
        out.extend_from_slice(&self.tax.to_le_bytes());
        out.extend_from_slice(&self.ytd.to_le_bytes());
        out.extend_from_slice(&self.next_o_id.to_le_bytes());
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(District {
            name: r.str()?,
            address: Address::decode(r)?,
            tax: r.u32()?,
            ytd: r.i64()?,
            next_o_id: r.u32()?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Customer {
    pub first: Vec<u8>,
    pub middle: Vec<u8>,
    pub last: Vec<u8>,
    pub address: Address,
    pub phone: Vec<u8>,
    pub since: u64,
    /// `GC` or `BC`.
    pub credit: Vec<u8>,
    pub credit_lim: i64,
    pub discount: u32,
    pub balance: i64,
    pub ytd_payment: i64,
    pub payment_cnt: u32,
    pub delivery_cnt: u32,
    pub data: Vec<u8>,
}

impl Row for Customer {
    fn encode(&self, out: &mut Vec<u8>) {
        put_str(out, &self.first);
        put_str(out, &self.middle);
        put_str(out, &self.last);
        self.address.encode(out);
        put_str(out, &self.phone);
        out.extend_from_slice(&self.since.to_le_bytes());
        put_str(out, &self.credit);
        out.extend_from_slice(&self.credit_lim.to_le_bytes());
        out.extend_from_slice(&self.discount.to_le_bytes());
        out.extend_from_slice(&self.balance.to_le_bytes());
        out.extend_from_slice(&self.ytd_payment.to_le_bytes());
        out.extend_from_slice(&self.payment_cnt.to_le_bytes());
        out.extend_from_slice(&self.delivery_cnt.to_le_bytes());
        put_str(out, &self.data);
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Customer {
            first: r.str()?,
            middle: r.str()?,
            last: r.str()?,
            address: Address::decode(r)?,
            phone: r.str()?,
            since: r.u64()?,
            credit: r.str()?,
            credit_lim: r.i64()?,
            discount: r.u32()?,
            balance: r.i64()?,
            ytd_payment: r.i64()?,
            payment_cnt: r.u32()?,
            delivery_cnt: r.u32()?,
            data: r.str()?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct History {
    pub c_id: u32,
    pub c_d: u8,
    pub c_w: u16,
    pub date: u64,
    pub amount: i64,
    pub data: Vec<u8>,
}

impl Row for History {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.c_id.to_le_bytes());
        out.push(self.c_d);
        out.extend_from_slice(&self.c_w.to_le_bytes());
        out.extend_from_slice(&self.date.to_le_bytes());
        out.extend_from_slice(&self.amount.to_le_bytes());
        put_str(out, &self.data);
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(History {
            c_id: r.u32()?,
            c_d: r.u8()?,
            c_w: r.u16()?,
            date: r.u64()?,
            amount: r.i64()?,
            data: r.str()?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Order {
    pub c_id: u32,
    pub entry_d: u64,
    /// 0: not delivered yet (null).
    pub carrier_id: u8,
    pub ol_cnt: u8,
    pub all_local: u8,
}

impl Row for Order {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.c_id.to_le_bytes());
        out.extend_from_slice(&self.entry_d.to_le_bytes());
        out.push(self.carrier_id);
        out.push(self.ol_cnt);
        out.push(self.all_local);
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Order {
            c_id: r.u32()?,
            entry_d: r.u64()?,
            carrier_id: r.u8()?,
            ol_cnt: r.u8()?,
            all_local: r.u8()?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct OrderLine {
    pub i_id: u32,
    pub supply_w_id: u16,
    /// 0: not delivered yet (null).
    pub delivery_d: u64,
    pub quantity: u8,
    pub amount: i64,
    pub dist_info: Vec<u8>,
}

impl Row for OrderLine {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.i_id.to_le_bytes());
        out.extend_from_slice(&self.supply_w_id.to_le_bytes());
        out.extend_from_slice(&self.delivery_d.to_le_bytes());
        out.push(self.quantity);
        out.extend_from_slice(&self.amount.to_le_bytes());
        put_str(out, &self.dist_info);
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(OrderLine {
            i_id: r.u32()?,
            supply_w_id: r.u16()?,
            delivery_d: r.u64()?,
            quantity: r.u8()?,
            amount: r.i64()?,
            dist_info: r.str()?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Item {
    pub im_id: u32,
    pub name: Vec<u8>,
    pub price: i64,
    pub data: Vec<u8>,
}

impl Row for Item {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.im_id.to_le_bytes());
        put_str(out, &self.name);
        out.extend_from_slice(&self.price.to_le_bytes());
        put_str(out, &self.data);
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Item {
            im_id: r.u32()?,
            name: r.str()?,
            price: r.i64()?,
            data: r.str()?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stock {
    pub quantity: u16,
    /// S_DIST_01 .. S_DIST_10, 24 bytes each.
    pub dist: Vec<u8>,
    pub ytd: u32,
    pub order_cnt: u16,
    pub remote_cnt: u16,
    pub data: Vec<u8>,
}

impl Stock {
    /// S_DIST_xx of district `d` (1..=10).
    pub fn dist_info(&self, d: u8) -> &[u8] {
        let i = (d as usize - 1) * 24;
        self.dist.get(i..i + 24).unwrap_or(&[])
    }
}

impl Row for Stock {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.quantity.to_le_bytes());
        put_str(out, &self.dist);
        out.extend_from_slice(&self.ytd.to_le_bytes());
        out.extend_from_slice(&self.order_cnt.to_le_bytes());
        out.extend_from_slice(&self.remote_cnt.to_le_bytes());
        put_str(out, &self.data);
    }
    fn decode(r: &mut Reader<'_>) -> Option<Self> {
        Some(Stock {
            quantity: r.u16()?,
            dist: r.str()?,
            ytd: r.u32()?,
            order_cnt: r.u16()?,
            remote_cnt: r.u16()?,
            data: r.str()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_table_then_columns() {
        assert!(order_line(1, 2, 300, 15).0 < order_line(1, 2, 301, 1).0);
        assert!(order_line(1, 10, 1, 1).0 < order_line(2, 1, 1, 1).0);
        assert!(customer(9, 9, 9).0 < customer_name(0, 0, b"", b"", 0).0);
        // Newest order of a customer first.
        assert!(order_customer(1, 1, 5, 10).0 < order_customer(1, 1, 5, 9).0);
        assert_eq!(!tail_u32(&order_customer(1, 1, 5, 10).0), 10);
        let p = customer_name_prefix(1, 2, b"BARBAR");
        let k = customer_name(1, 2, b"BARBAR", b"x", 7);
        assert!(k.0.starts_with(&p.0) && k.0 < p.successor());
        assert_eq!(tail_u32(&k.0), 7);
        assert_eq!(Key(vec![1, 0xff]).successor(), vec![2]);
    }

    #[test]
    fn rows_round_trip_and_reject_garbage() {
        let c = Customer {
            first: b"f".to_vec(),
            last: b"BARBARBAR".to_vec(),
            credit: b"GC".to_vec(),
            balance: -1000,
            data: vec![b'x'; 400],
            ..Customer::default()
        };
        let b = c.to_bytes();
        assert_eq!(Customer::from_bytes(&b), Some(c));
        assert_eq!(Customer::from_bytes(&b[..b.len() - 1]), None);
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(Customer::from_bytes(&longer), None);
        let s = Stock {
            quantity: 50,
            dist: vec![b'd'; 240],
            ..Stock::default()
        };
        assert_eq!(Stock::from_bytes(&s.to_bytes()), Some(s.clone()));
        assert_eq!(s.dist_info(10).len(), 24);
        let o = OrderLine {
            i_id: 3,
            amount: 99,
            dist_info: vec![b'a'; 24],
            ..OrderLine::default()
        };
        assert_eq!(OrderLine::from_bytes(&o.to_bytes()), Some(o));
    }
}
