//! Shared CLI helpers: exit codes, size parsing, error formatting.

use ferrite_pm::PmError;

pub const EXIT_ERROR: i32 = 1;
pub const EXIT_BAD_POOL: i32 = 2;
pub const EXIT_VIOLATIONS: i32 = 3;
/// `ferrite check` found nothing wrong but could not check every object.
pub const EXIT_UNCHECKED: i32 = 4;
pub const EXIT_USAGE: i32 = 64;

/// The PM-layer error behind `cause`, looking through the other crates'
/// wrappers (which display it transparently).
fn pm_error<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a PmError> {
    if let Some(pe) = cause.downcast_ref::<PmError>() {
        return Some(pe);
    }
    if let Some(ke) = cause.downcast_ref::<ferrite_kv::KvError>() {
        return ke.storage_error().and_then(|s| s.downcast_ref::<PmError>());
    }
    if let Some(ferrite_pmio::PmioError::Pm(pe)) = cause.downcast_ref::<ferrite_pmio::PmioError>() {
        return Some(pe);
    }
    if let Some(ferrite_elf::ElfError::Pm(pe)) = cause.downcast_ref::<ferrite_elf::ElfError>() {
        return Some(pe);
    }
    None
}

/// Whether `cause` reports corruption (any crate's spelling of it).
fn is_corrupt(cause: &(dyn std::error::Error + 'static)) -> bool {
    cause
        .downcast_ref::<ferrite_kv::KvError>()
        .is_some_and(|k| k.is_corrupt())
        || matches!(
            cause.downcast_ref::<ferrite_pmio::PmioError>(),
            Some(ferrite_pmio::PmioError::Corrupt { .. })
        )
        || matches!(
            cause.downcast_ref::<ferrite_elf::ElfError>(),
            Some(ferrite_elf::ElfError::Corrupt(_))
        )
}

/// Exit status for an error: 2 when the root cause is a missing, bad or
/// corrupt pool, or a pool another process holds.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if is_corrupt(cause) {
            return EXIT_BAD_POOL;
        }
        if let Some(pe) = pm_error(cause) {
            if pe.is_bad_pool() || matches!(pe, PmError::InUse { .. }) {
                return EXIT_BAD_POOL;
            }
            if let PmError::Io { source, .. } = pe {
                if source.kind() == std::io::ErrorKind::NotFound {
                    return EXIT_BAD_POOL;
                }
            }
        }
    }
    EXIT_ERROR
}

/// The error and its causes on one line.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in e.chain() {
        let s = c.to_string().replace('\n', " ");
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    parts.join(": ")
}

/// Parses sizes like `4096`, `64K`, `256M`, `2G`, `1GiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 64M, 2G)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("unknown size unit in {s:?} (use K, M, G or T)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Human-readable bytes.
pub fn human(bytes: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(10), "10 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(64 << 20), "64.0 MiB");
    }
}
