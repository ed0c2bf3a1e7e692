//! Tables for Elf: CSV loading with order-preserving encodings (so ranges on
//! dates, decimals and strings still work), the schema stored next to the Elf, and
//! `--where` parsing.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::error::{ElfError, Result};
use crate::layout::MAX_VALUE;
use crate::query::Query;

/// How a column's values map to the codes the Elf stores.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnKind {
    /// Integers stored as `value - offset`.
    Int { offset: i64 },
    /// Numbers that are not all integers (decimals), sorted numerically; code = rank.
    Num(Vec<String>),
    /// Strings (dates included), sorted bytewise; code = rank.
    Str(Vec<String>),
}

/// One column: its name and encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub kind: ColumnKind,
}

/// Column names and encodings, in Elf column order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Schema {
    pub columns: Vec<Column>,
}

/// A dictionary-encoded table ready to build an Elf from.
#[derive(Debug, Clone)]
pub struct Table {
    pub schema: Schema,
    pub cols: Vec<Vec<u32>>,
}

fn num(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

fn cmp_num(a: &str, b: &str) -> std::cmp::Ordering {
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        _ => a.cmp(b),
    }
}

impl Column {
    /// Code range `(lo, hi)` of the values between `lo` and `hi` inclusive
    /// (`None` = unbounded); `lo > hi` when nothing can match.
    pub fn code_range(&self, lo: Option<&str>, hi: Option<&str>) -> Result<(u32, u32)> {
        let bad = |v: &str, what: &str| {
            ElfError::InvalidQuery(format!("column {}: {v:?} is not {what}", self.name))
        };
        match &self.kind {
            ColumnKind::Int { offset } => {
                let parse = |v: &str| v.trim().parse::<i64>().map_err(|_| bad(v, "an integer"));
                let l = match lo {
                    Some(v) => parse(v)?.saturating_sub(*offset).max(0),
                    None => 0,
                };
                let h = match hi {
                    Some(v) => parse(v)?.saturating_sub(*offset),
                    None => MAX_VALUE as i64,
                };
                if h < 0 || l > MAX_VALUE as i64 {
                    return Ok((1, 0));
                }
                Ok((l as u32, h.min(MAX_VALUE as i64) as u32))
            }
            ColumnKind::Num(d) => {
                let parse = |v: &str| num(v).ok_or_else(|| bad(v, "a number"));
                let l = match lo {
                    Some(v) => {
                        let x = parse(v)?;
                        d.partition_point(|s| num(s).unwrap_or(f64::NEG_INFINITY) < x)
                    }
                    None => 0,
                };
                let h = match hi {
                    Some(v) => {
                        let x = parse(v)?;
                        d.partition_point(|s| num(s).unwrap_or(f64::NEG_INFINITY) <= x)
                    }
                    None => d.len(),
                };
                Ok(span(l, h))
            }
            ColumnKind::Str(d) => {
                let l = lo.map_or(0, |v| d.partition_point(|s| s.as_str() < v));
                let h = hi.map_or(d.len(), |v| d.partition_point(|s| s.as_str() <= v));
                Ok(span(l, h))
            }
        }
    }

    /// Code of an exact value, if the column can hold it (a dictionary column
    /// only holds the values it was built with).
    pub fn encode(&self, v: &str) -> Option<u32> {
        let v = v.trim();
        match &self.kind {
            ColumnKind::Int { offset } => {
                let c = v.parse::<i64>().ok()?.checked_sub(*offset)?;
                (0..=MAX_VALUE as i64).contains(&c).then_some(c as u32)
            }
            ColumnKind::Num(d) => {
                let x = num(v)?;
                let i = d.partition_point(|s| num(s).unwrap_or(f64::NEG_INFINITY) < x);
                (d.get(i).and_then(|s| num(s)) == Some(x)).then_some(i as u32)
            }
            ColumnKind::Str(d) => d
                .binary_search_by(|s| s.as_str().cmp(v))
                .ok()
                .map(|i| i as u32),
        }
    }

    /// The original text of code `c`.
    pub fn decode(&self, c: u32) -> String {
        match &self.kind {
            ColumnKind::Int { offset } => (c as i64 + offset).to_string(),
            ColumnKind::Num(d) | ColumnKind::Str(d) => {
                d.get(c as usize).cloned().unwrap_or_default()
            }
        }
    }
}

/// Codes `l..h` (exclusive end) as an inclusive pair, empty when `l >= h`.
fn span(l: usize, h: usize) -> (u32, u32) {
    if l >= h {
        (1, 0)
    } else {
        (l as u32, (h - 1) as u32)
    }
}

impl Schema {
    /// Column index by name.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Parses `name=V,name=LO..HI,...` (either bound of a range may be empty,
    /// `\,` is a comma inside a value); unnamed columns are unconstrained.
    pub fn parse_where(&self, w: &str) -> Result<Query> {
        let mut q = Query::all(self.columns.len());
        // `\,` is a literal comma inside a value.
        let mut parts = Vec::new();
        let mut cur = String::new();
        let mut chars = w.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&',') => {
                    cur.push(',');
                    chars.next();
                }
                ',' => parts.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        parts.push(cur);
        for part in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
            let (name, val) = part.split_once('=').ok_or_else(|| {
                ElfError::InvalidQuery(format!("{part:?}: expected NAME=V or NAME=LO..HI"))
            })?;
            let name = name.trim();
            let i = self.index(name).ok_or_else(|| {
                let names: Vec<&str> = self.columns.iter().map(|c| c.name.as_str()).collect();
                ElfError::InvalidQuery(format!(
                    "no column {name:?} (columns: {})",
                    names.join(", ")
                ))
            })?;
            let col = &self.columns[i];
            let (lo, hi) = match val.split_once("..") {
                Some((a, b)) => {
                    let opt = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
                    (opt(a), opt(b))
                }
                None => (Some(val.to_string()), Some(val.to_string())),
            };
            let (l, h) = col.code_range(lo.as_deref(), hi.as_deref())?;
            let b = &mut q.bounds[i];
            *b = (b.0.max(l), b.1.min(h));
        }
        Ok(q)
    }

    /// Serializes the schema (stored in the pool next to the Elf).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let put_str = |b: &mut Vec<u8>, s: &str| {
            b.extend_from_slice(&(s.len() as u32).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
        };
        b.extend_from_slice(&(self.columns.len() as u32).to_le_bytes());
        for c in &self.columns {
            put_str(&mut b, &c.name);
            match &c.kind {
                ColumnKind::Int { offset } => {
                    b.push(0);
                    b.extend_from_slice(&offset.to_le_bytes());
                }
                ColumnKind::Num(d) | ColumnKind::Str(d) => {
                    b.push(if matches!(c.kind, ColumnKind::Num(_)) {
                        1
                    } else {
                        2
                    });
                    b.extend_from_slice(&(d.len() as u32).to_le_bytes());
                    for s in d {
                        put_str(&mut b, s);
                    }
                }
            }
        }
        b
    }

    /// Parses [`Schema::to_bytes`] output.
    pub fn from_bytes(b: &[u8]) -> Result<Schema> {
        let bad = || ElfError::Corrupt("schema block is truncated or malformed".into());
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let s = b
                .get(at..at.checked_add(n).ok_or_else(bad)?)
                .ok_or_else(bad)?;
            at += n;
            Ok(s)
        };
        fn u32_of(s: &[u8]) -> u32 {
            u32::from_le_bytes([s[0], s[1], s[2], s[3]])
        }
        let n = u32_of(take(4)?) as usize;
        if n > crate::layout::MAX_COLS {
            return Err(bad());
        }
        let mut columns = Vec::with_capacity(n);
        for _ in 0..n {
            let l = u32_of(take(4)?) as usize;
            let name = String::from_utf8(take(l)?.to_vec()).map_err(|_| bad())?;
            let tag = take(1)?[0];
            let kind = match tag {
                0 => {
                    let s = take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(s);
                    ColumnKind::Int {
                        offset: i64::from_le_bytes(a),
                    }
                }
                1 | 2 => {
                    let k = u32_of(take(4)?) as usize;
                    let mut d = Vec::with_capacity(k.min(1 << 20));
                    for _ in 0..k {
                        let l = u32_of(take(4)?) as usize;
                        d.push(String::from_utf8(take(l)?.to_vec()).map_err(|_| bad())?);
                    }
                    if tag == 1 {
                        ColumnKind::Num(d)
                    } else {
                        ColumnKind::Str(d)
                    }
                }
                _ => return Err(bad()),
            };
            columns.push(Column { name, kind });
        }
        Ok(Schema { columns })
    }
}

/// A column while loading: integers until a value is not one, then interned text.
enum Loading {
    Ints(Vec<i64>),
    Text {
        ids: Vec<u32>,
        intern: HashMap<String, u32>,
        texts: Vec<String>,
    },
}

impl Loading {
    fn push(&mut self, v: &str) {
        if let Loading::Ints(xs) = self {
            if let Ok(x) = v.parse::<i64>() {
                xs.push(x);
                return;
            }
            let mut intern = HashMap::new();
            let mut texts = Vec::new();
            let mut ids = Vec::with_capacity(xs.capacity());
            for x in xs.iter() {
                let s = x.to_string();
                let id = *intern.entry(s.clone()).or_insert_with(|| {
                    texts.push(s);
                    texts.len() as u32 - 1
                });
                ids.push(id);
            }
            *self = Loading::Text { ids, intern, texts };
        }
        if let Loading::Text { ids, intern, texts } = self {
            let id = match intern.get(v) {
                Some(&id) => id,
                None => {
                    texts.push(v.to_string());
                    intern.insert(v.to_string(), texts.len() as u32 - 1);
                    texts.len() as u32 - 1
                }
            };
            ids.push(id);
        }
    }

    fn finish(self, name: String) -> Result<(Column, Vec<u32>)> {
        match self {
            Loading::Ints(xs) => {
                let min = xs.iter().copied().min().unwrap_or(0);
                let max = xs.iter().copied().max().unwrap_or(0);
                let offset = if min >= 0 && max <= MAX_VALUE as i64 {
                    0
                } else {
                    min
                };
                if (max as i128 - offset as i128) <= MAX_VALUE as i128 {
                    let codes = xs.iter().map(|&x| (x - offset) as u32).collect();
                    return Ok((
                        Column {
                            name,
                            kind: ColumnKind::Int { offset },
                        },
                        codes,
                    ));
                }
                // Too wide for 31 bits: rank the distinct values instead.
                let mut d: Vec<i64> = xs.clone();
                d.sort_unstable();
                d.dedup();
                let codes = xs
                    .iter()
                    .map(|x| d.binary_search(x).unwrap_or(0) as u32)
                    .collect();
                let texts = d.iter().map(|x| x.to_string()).collect();
                Ok((
                    Column {
                        name,
                        kind: ColumnKind::Num(texts),
                    },
                    codes,
                ))
            }
            Loading::Text { ids, texts, .. } => {
                let numeric = texts.iter().all(|s| num(s).is_some());
                let mut order: Vec<u32> = (0..texts.len() as u32).collect();
                if numeric {
                    order.sort_by(|&a, &b| cmp_num(&texts[a as usize], &texts[b as usize]));
                } else {
                    order.sort_by(|&a, &b| texts[a as usize].cmp(&texts[b as usize]));
                }
                let mut rank = vec![0u32; texts.len()];
                for (r, &id) in order.iter().enumerate() {
                    rank[id as usize] = r as u32;
                }
                let mut texts = texts;
                let sorted: Vec<String> = order
                    .iter()
                    .map(|&id| std::mem::take(&mut texts[id as usize]))
                    .collect();
                let codes = ids.iter().map(|&i| rank[i as usize]).collect();
                let kind = if numeric {
                    ColumnKind::Num(sorted)
                } else {
                    ColumnKind::Str(sorted)
                };
                Ok((Column { name, kind }, codes))
            }
        }
    }
}

/// Splits one CSV record (RFC 4180 quoting) into `out`.
fn split_record(line: &str, delim: char, out: &mut Vec<String>) -> std::result::Result<(), String> {
    out.clear();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(ch) = chars.next() {
        if quoted {
            if ch == '"' {
                if chars.peek() == Some(&'"') {
                    cur.push('"');
                    chars.next();
                } else {
                    quoted = false;
                }
            } else {
                cur.push(ch);
            }
        } else if ch == '"' && at_start {
            quoted = true;
            at_start = false;
        } else if ch == delim {
            out.push(std::mem::take(&mut cur));
            at_start = true;
        } else {
            cur.push(ch);
            at_start = false;
        }
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    out.push(cur);
    Ok(())
}

/// CSV loading options.
#[derive(Debug, Clone, Default)]
pub struct CsvOptions {
    /// Field delimiter; `None` guesses from the header (`,`, `|`, tab or `;`).
    pub delimiter: Option<char>,
    /// Columns to keep, by header name, in this order (`None` = all).
    pub columns: Option<Vec<String>>,
    /// Stop after this many data rows.
    pub limit: Option<u64>,
}

/// Reads CSV rows (header naming every schema column) and encodes them with the
/// schema's encodings, for inserts into an existing Elf.
pub fn encode_csv_rows(r: impl Read, name: &str, schema: &Schema) -> Result<Vec<Vec<u32>>> {
    let err = |line: u64, msg: String| ElfError::Csv {
        path: name.to_string(),
        line,
        msg,
    };
    let mut rd = BufReader::new(r);
    let mut line = String::new();
    if rd.read_line(&mut line).map_err(|e| err(1, e.to_string()))? == 0 {
        return Err(err(
            1,
            "the file is empty (a header row is required)".into(),
        ));
    }
    let trim = |l: &mut String| {
        while l.ends_with('\n') || l.ends_with('\r') {
            l.pop();
        }
    };
    trim(&mut line);
    let delim = [',', '|', '\t', ';']
        .into_iter()
        .max_by_key(|d| line.matches(*d).count())
        .unwrap_or(',');
    let mut fields = Vec::new();
    split_record(&line, delim, &mut fields).map_err(|m| err(1, m))?;
    let header: Vec<String> = fields.iter().map(|f| f.trim().to_string()).collect();
    let pos: Vec<usize> = schema
        .columns
        .iter()
        .map(|c| {
            header
                .iter()
                .position(|h| *h == c.name)
                .ok_or_else(|| err(1, format!("the header lacks column {:?}", c.name)))
        })
        .collect::<Result<_>>()?;
    let mut out = Vec::new();
    let mut lineno = 1u64;
    loop {
        line.clear();
        if rd
            .read_line(&mut line)
            .map_err(|e| err(lineno + 1, e.to_string()))?
            == 0
        {
            break;
        }
        lineno += 1;
        trim(&mut line);
        if line.is_empty() {
            continue;
        }
        split_record(&line, delim, &mut fields).map_err(|m| err(lineno, m))?;
        let mut row = Vec::with_capacity(pos.len());
        for (c, &p) in schema.columns.iter().zip(&pos) {
            let v = fields
                .get(p)
                .ok_or_else(|| err(lineno, format!("missing field {:?}", c.name)))?;
            row.push(c.encode(v).ok_or_else(|| {
                err(
                    lineno,
                    format!(
                        "column {}: {v:?} is not representable (dictionary columns accept only values present at build time)",
                        c.name
                    ),
                )
            })?);
        }
        out.push(row);
    }
    Ok(out)
}

impl Table {
    /// Loads a CSV file with a header row; TID = 0-based data row number.
    /// `progress(bytes)` is called now and then with the bytes read so far.
    pub fn from_csv(path: &Path, opts: &CsvOptions, progress: impl FnMut(u64)) -> Result<Table> {
        let f = std::fs::File::open(path).map_err(|e| ElfError::Csv {
            path: path.display().to_string(),
            line: 0,
            msg: format!("cannot open: {e}"),
        })?;
        Table::from_reader(f, &path.display().to_string(), opts, progress)
    }

    /// Loads CSV text from any reader (see [`Table::from_csv`]).
    pub fn from_reader(
        r: impl Read,
        name: &str,
        opts: &CsvOptions,
        mut progress: impl FnMut(u64),
    ) -> Result<Table> {
        let err = |line: u64, msg: String| ElfError::Csv {
            path: name.to_string(),
            line,
            msg,
        };
        let mut rd = BufReader::with_capacity(1 << 20, r);
        let mut line = String::new();
        let mut lineno = 0u64;
        let mut bytes = 0u64;
        let mut read_line = |line: &mut String, bytes: &mut u64| -> Result<bool> {
            line.clear();
            let n = rd
                .read_line(line)
                .map_err(|e| err(0, format!("read error: {e}")))?;
            *bytes += n as u64;
            while line.ends_with('\n') || line.ends_with('\r') {
                line.pop();
            }
            Ok(n > 0)
        };
        if !read_line(&mut line, &mut bytes)? {
            return Err(err(
                1,
                "the file is empty (a header row is required)".into(),
            ));
        }
        lineno += 1;
        let delim = opts.delimiter.unwrap_or_else(|| {
            [',', '|', '\t', ';']
                .into_iter()
                .max_by_key(|d| line.matches(*d).count())
                .unwrap_or(',')
        });
        let mut fields = Vec::new();
        split_record(&line, delim, &mut fields).map_err(|m| err(1, m))?;
        // TPC-H .tbl files end every record with a delimiter.
        let trailing = fields.last().is_some_and(|f| f.is_empty()) && fields.len() > 1;
        if trailing {
            fields.pop();
        }
        let header: Vec<String> = fields.iter().map(|s| s.trim().to_string()).collect();
        for (i, h) in header.iter().enumerate() {
            if h.is_empty() {
                return Err(err(1, format!("header field {} is empty", i + 1)));
            }
            if header[..i].contains(h) {
                return Err(err(1, format!("header names column {h:?} twice")));
            }
        }
        let pick: Vec<usize> = match &opts.columns {
            None => (0..header.len()).collect(),
            Some(names) => names
                .iter()
                .map(|n| {
                    header.iter().position(|h| h == n).ok_or_else(|| {
                        err(
                            1,
                            format!("no column {n:?} (header: {})", header.join(", ")),
                        )
                    })
                })
                .collect::<Result<_>>()?,
        };
        if pick.is_empty() || pick.len() > crate::layout::MAX_COLS {
            return Err(err(
                1,
                format!("1 to {} columns are needed", crate::layout::MAX_COLS),
            ));
        }
        let mut cols: Vec<Loading> = pick.iter().map(|_| Loading::Ints(Vec::new())).collect();
        let mut rows = 0u64;
        loop {
            if opts.limit.is_some_and(|l| rows >= l) {
                break;
            }
            if !read_line(&mut line, &mut bytes)? {
                break;
            }
            lineno += 1;
            if line.is_empty() {
                continue;
            }
            split_record(&line, delim, &mut fields).map_err(|m| err(lineno, m))?;
            if trailing && fields.last().is_some_and(|f| f.is_empty()) {
                fields.pop();
            }
            if fields.len() != header.len() {
                return Err(err(
                    lineno,
                    format!("{} fields, the header has {}", fields.len(), header.len()),
                ));
            }
            for (c, &i) in cols.iter_mut().zip(&pick) {
                c.push(fields[i].trim());
            }
            rows += 1;
            if rows > crate::layout::MAX_ROWS {
                return Err(err(lineno, "too many rows for an Elf (2^31-1)".into()));
            }
            if rows.is_multiple_of(65536) {
                progress(bytes);
            }
        }
        progress(bytes);
        let mut schema = Schema::default();
        let mut out = Vec::new();
        for (c, &i) in cols.into_iter().zip(&pick) {
            let (col, codes) = c.finish(header[i].clone())?;
            schema.columns.push(col);
            out.push(codes);
        }
        Ok(Table { schema, cols: out })
    }

    pub fn nrows(&self) -> usize {
        self.cols.first().map_or(0, Vec::len)
    }

    /// Distinct values per column.
    pub fn cardinalities(&self) -> Vec<usize> {
        self.cols
            .iter()
            .map(|c| {
                let mut v = c.clone();
                v.sort_unstable();
                v.dedup();
                v.len()
            })
            .collect()
    }

    /// Reorders the columns by ascending cardinality (the papers' choice: fewer,
    /// fuller DimensionLists near the root).
    pub fn reorder_by_cardinality(&mut self) {
        let card = self.cardinalities();
        let mut idx: Vec<usize> = (0..self.cols.len()).collect();
        idx.sort_by_key(|&i| (card[i], i));
        let cols = std::mem::take(&mut self.cols);
        let mut cols: Vec<Option<Vec<u32>>> = cols.into_iter().map(Some).collect();
        let columns = std::mem::take(&mut self.schema.columns);
        self.cols = idx
            .iter()
            .map(|&i| cols[i].take().unwrap_or_default())
            .collect();
        self.schema.columns = idx.iter().map(|&i| columns[i].clone()).collect();
    }

    /// Column slices for [`crate::build::build`].
    pub fn slices(&self) -> Vec<&[u32]> {
        self.cols.iter().map(Vec::as_slice).collect()
    }
}
