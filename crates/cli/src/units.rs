//! Values with units on the command line: sizes (`512M`, `4GiB`) and durations (`5s`,
//! `200ms`).

/// A size in bytes: `4096`, `64K`, `512M`, `512MiB`, `4G`, `4GiB`, `1.5G`. Every unit is a
/// power of 1024 (`K` = `KB` = `KiB` = 1024), as memory sizes are. Parsed by `parse-size`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if negative(t) {
        return Err(format!("'{s}' is negative: a size is 0 or more bytes"));
    }
    parse_size::Config::new()
        .with_binary()
        .parse_size(t)
        .map_err(|e| match e {
            parse_size::Error::PosOverflow => format!("'{s}' is too large"),
            _ => format!("'{s}' is not a size (e.g. 4096, 64K, 512M, 512MiB, 4G)"),
        })
}

/// A duration with its unit, to nanoseconds: `5s`, `200ms`, `100us`, `50ns`, `2m`, `1.5s`.
/// A number without a unit is refused (is `5` seconds or milliseconds?), except `0`.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if negative(s) {
        return Err(format!("'{s}' is negative: give a duration of 0 or more"));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (e.g. 5s, 200ms)"))?;
    let scale = match unit.trim() {
        "" if n == 0.0 => 1.0,
        "" => {
            return Err(format!(
                "'{s}' has no unit: write {s}s for seconds or {s}ms for milliseconds"
            ))
        }
        "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        "m" | "min" => 60e9,
        other => {
            return Err(format!(
                "unknown unit '{other}' in '{s}' (ns, us, ms, s, m)"
            ))
        }
    };
    let ns = n * scale;
    if !(0.0..1e18).contains(&ns) {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(ns as u64)
}

/// `-1`, `-0.5s`: a minus and a number (not `--json`, an option where a value should be).
fn negative(s: &str) -> bool {
    s.strip_prefix('-')
        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit() || c == '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("5s"), Ok(5_000_000_000));
        assert_eq!(parse_duration("200ms"), Ok(200_000_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration("2m"), Ok(120_000_000_000));
        assert_eq!(parse_duration("0"), Ok(0));
        let e = parse_duration("5").unwrap_err();
        assert!(e.contains("write 5s for seconds or 5ms"), "{e}");
        assert!(parse_duration("-1s").unwrap_err().contains("negative"));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("1e30s").is_err());
        let e = parse_duration("--json").unwrap_err();
        assert!(e.contains("'--json' is not a duration"), "{e}");
    }

    #[test]
    fn sizes_take_binary_units_with_or_without_i() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512MB"), Ok(512 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4gib"), Ok(4 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert!(parse_size("3Q").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("-1").unwrap_err().contains("negative"));
        assert!(parse_size("99999999999T")
            .unwrap_err()
            .contains("too large"));
    }
}
