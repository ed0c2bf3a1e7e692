//! CSV loading, order-preserving encodings and `--where` parsing, end to end
//! through a pool (what `ferrite elf build` + `ferrite elf query` do).

use ferrite_elf::build::build;
use ferrite_elf::store::{CreateOptions, ElfStore};
use ferrite_elf::table::CsvOptions;
use ferrite_elf::{Table, Variant};
use ferrite_pm::{Pool, PoolOptions};

const CSV: &str = "id,name,day,price,delta\n\
                   10,\"Smith, J\",2020-01-02,1.50,-3\n\
                   11,ann,2020-01-03,2.25,0\n\
                   10,\"Smith, J\",2020-01-02,1.50,-3\n\
                   12,zoe,2021-05-06,10,7\n\
                   13,bob,2019-12-31,0.5,-3\n";

fn load() -> Table {
    Table::from_reader(CSV.as_bytes(), "t.csv", &CsvOptions::default(), |_| {}).unwrap()
}

fn tids(store: &ElfStore, w: &str) -> Vec<u32> {
    let q = store.schema().unwrap().parse_where(w).unwrap();
    let mut v = store.collect(&q, 2).unwrap();
    v.sort_unstable();
    v
}

#[test]
fn build_and_query_through_a_pool() {
    let mut t = load();
    assert_eq!(t.nrows(), 5);
    t.reorder_by_cardinality();
    let built = build(&t.slices()).unwrap();
    let pool = Pool::create_volatile(8 << 20, &PoolOptions::default()).unwrap();
    drop(
        ElfStore::create(
            &pool,
            "elf",
            &built,
            Some(&t.schema),
            &CreateOptions::default(),
            Variant::Pm,
        )
        .unwrap(),
    );
    let s = ElfStore::open(&pool, "elf", Variant::Static(2), true).unwrap();
    assert_eq!(tids(&s, "id=10"), vec![0, 2]);
    assert_eq!(tids(&s, "name=Smith\\, J"), vec![0, 2]);
    assert_eq!(tids(&s, "day=2020-01-01..2020-12-31"), vec![0, 1, 2]);
    assert_eq!(tids(&s, "price=1.5"), vec![0, 2]);
    assert_eq!(tids(&s, "price=2..100"), vec![1, 3]);
    assert_eq!(tids(&s, "price=..1"), vec![4]);
    assert_eq!(tids(&s, "delta=-3"), vec![0, 2, 4]);
    assert_eq!(tids(&s, "delta=-5..-1,id=11..13"), vec![4]);
    assert_eq!(tids(&s, "name=ann..bob"), vec![1, 4]);
    assert_eq!(tids(&s, "id=99"), Vec::<u32>::new());
    assert_eq!(tids(&s, ""), vec![0, 1, 2, 3, 4]);
    assert!(s.schema().unwrap().parse_where("nope=1").is_err());
    assert!(s.schema().unwrap().parse_where("id=x").is_err());
    assert!(s.schema().unwrap().parse_where("id").is_err());
}

#[test]
fn malformed_csv_is_a_clear_error() {
    let bad = [
        ("", "empty"),
        ("a,b\n1\n", "fields"),
        ("a,a\n1,2\n", "twice"),
        ("a,b\n1,\"2\n", "unterminated"),
    ];
    for (text, want) in bad {
        let e = Table::from_reader(text.as_bytes(), "x.csv", &CsvOptions::default(), |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
    let e = Table::from_reader(
        "a,b\n1,2\n".as_bytes(),
        "x.csv",
        &CsvOptions {
            columns: Some(vec!["c".into()]),
            ..CsvOptions::default()
        },
        |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no column"), "{e}");
}

#[test]
fn tpch_style_pipe_files_load() {
    let tbl = "a|b|\n1|x|\n2|y|\n";
    let t = Table::from_reader(tbl.as_bytes(), "l.tbl", &CsvOptions::default(), |_| {}).unwrap();
    assert_eq!(t.cols.len(), 2);
    assert_eq!(t.nrows(), 2);
}

#[test]
fn csv_inserts_use_the_schema_encodings() {
    let t = load();
    let built = build(&t.slices()).unwrap();
    let pool = Pool::create_volatile(8 << 20, &PoolOptions::default()).unwrap();
    let s = ElfStore::create(
        &pool,
        "elf",
        &built,
        Some(&t.schema),
        &CreateOptions::default(),
        Variant::Pm,
    )
    .unwrap();
    let rows = ferrite_elf::table::encode_csv_rows(
        "delta,price,name,day,id\n-3,2.25,zoe,2020-01-02,99\n".as_bytes(),
        "i.csv",
        s.schema().unwrap(),
    )
    .unwrap();
    assert_eq!(s.insert(&rows[0]).unwrap(), 5);
    assert_eq!(tids(&s, "id=99,price=2.25,name=zoe"), vec![5]);
    s.merge().unwrap();
    assert_eq!(tids(&s, "day=2020-01-02"), vec![0, 2, 5]);
    let bad = ferrite_elf::table::encode_csv_rows(
        "delta,price,name,day,id\n-3,2.25,nobody,2020-01-02,99\n".as_bytes(),
        "i.csv",
        s.schema().unwrap(),
    );
    assert!(bad.unwrap_err().to_string().contains("not representable"));
}
