//! TPC-C's consistency conditions 1–4 (spec 3.3.2.1–3.3.2.4), checked by
//! scanning the database after a run.

use ferrite_kv::KvResult;

use super::schema::{self as s, Row};
use super::txns::get_row;
use crate::buffer::txn::{Tx, TxStore};

/// Checks conditions 1–4 for every warehouse and district; returns the
/// violations found (empty: consistent).
pub fn check(st: &dyn TxStore, warehouses: u16) -> KvResult<Vec<String>> {
    let mut bad = Vec::new();
    let mut tx = st.begin()?;
    let t = tx.as_mut();
    let mut buf = Vec::new();
    for w in 1..=warehouses {
        let wh: s::Warehouse = get_row(t, "WAREHOUSE", &s::warehouse(w), &mut buf)?;
        let mut d_ytd = 0i64;
        for d in 1..=10u8 {
            let di: s::District = get_row(t, "DISTRICT", &s::district(w, d), &mut buf)?;
            d_ytd += di.ytd;
            district(t, w, d, &di, &mut bad)?;
        }
        if wh.ytd != d_ytd {
            bad.push(format!(
                "condition 1: warehouse {w}: W_YTD {} != sum(D_YTD) {d_ytd}",
                wh.ytd
            ));
        }
    }
    tx.abort()?;
    Ok(bad)
}

/// Every key of `table` for (w, d), with its value, in order.
fn each(t: &mut dyn Tx, table: u8, w: u16, d: u8, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<()> {
    let p = s::Key::table(table).u16(w).u8(d);
    t.scan(p.bytes(), &p.successor(), &mut |k, v| {
        f(k, v);
        true
    })?;
    Ok(())
}

fn district(
    t: &mut dyn Tx,
    w: u16,
    d: u8,
    di: &s::District,
    bad: &mut Vec<String>,
) -> KvResult<()> {
    // Orders: max O_ID and sum(O_OL_CNT).
    let (mut max_o, mut ol_sum, mut undecodable) = (0u32, 0u64, 0u32);
    // Key layout: tag, w (2), d (1), o (4).
    each(t, s::tag::ORDER, w, d, &mut |k, v| {
        max_o = max_o.max(s::tail_u32(k));
        match s::Order::from_bytes(v) {
            Some(o) => ol_sum += o.ol_cnt as u64,
            None => undecodable += 1,
        }
    })?;
    let (mut no_min, mut no_max, mut no_count) = (u32::MAX, 0u32, 0u64);
    each(t, s::tag::NEW_ORDER, w, d, &mut |k, _| {
        let o = s::tail_u32(k);
        no_min = no_min.min(o);
        no_max = no_max.max(o);
        no_count += 1;
    })?;
    let mut lines = 0u64;
    each(t, s::tag::ORDER_LINE, w, d, &mut |_, _| lines += 1)?;
    let at = format!("warehouse {w} district {d}");
    if undecodable > 0 {
        bad.push(format!("{at}: {undecodable} ORDER rows do not decode"));
    }
    if di.next_o_id - 1 != max_o {
        bad.push(format!(
            "condition 2: {at}: D_NEXT_O_ID - 1 = {} != max(O_ID) = {max_o}",
            di.next_o_id - 1
        ));
    }
    if no_count > 0 {
        if di.next_o_id - 1 != no_max {
            bad.push(format!(
                "condition 2: {at}: D_NEXT_O_ID - 1 = {} != max(NO_O_ID) = {no_max}",
                di.next_o_id - 1
            ));
        }
        if (no_max - no_min + 1) as u64 != no_count {
            bad.push(format!(
                "condition 3: {at}: max(NO_O_ID) - min(NO_O_ID) + 1 = {} != {no_count} NEW-ORDER rows",
                no_max - no_min + 1
            ));
        }
    }
    if ol_sum != lines {
        bad.push(format!(
            "condition 4: {at}: sum(O_OL_CNT) = {ol_sum} != {lines} ORDER-LINE rows"
        ));
    }
    Ok(())
}
