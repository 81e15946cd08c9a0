//! Trends of a long run: memory growth by least-squares regression (MB per hour) and
//! throughput drift between the start and the end of the run.

/// Least-squares slope of `y` against `x` (None with fewer than 3 points or no spread).
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 3 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The least-squares slope and its standard error (the residuals' spread over the
/// spread of x): None with fewer than 3 points or a single x.
pub fn slope_se(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let b = slope(points)?;
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let a = my - b * mx;
    let sse: f64 = points.iter().map(|p| (p.1 - a - b * p.0).powi(2)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    Some((b, (sse / (n - 2.0) / sxx).sqrt()))
}

/// Whether memory (MB against hours) grows like a leak: faster than `limit` MB/h over
/// the points, by at least `min_mb` in all, and still in both halves of the time (each
/// at more than half the limit and at more than a quarter of the whole run's slope, when
/// each has 3 points or more). A step — memory taken once, say a buffer pool filled
/// mid-run — steepens one half only and is not a leak; a leak grows all along, each half
/// at about the whole run's rate. (Measured against the limit alone, the flat half of a
/// large step passed on a page or two of noise: 0.1 MB in 3 s is 120 MB/h.)
pub fn leaks(points: &[(f64, f64)], limit: f64, min_mb: f64) -> Option<f64> {
    let s = slope(points)?;
    let span = points.last()?.0 - points.first()?.0;
    if s <= limit || s * span < min_mb {
        return None;
    }
    let mid = points.first()?.0 + span / 2.0;
    // The points are in time order.
    let (a, b) = points.split_at(points.partition_point(|p| p.0 < mid));
    if a.len() >= 3 && b.len() >= 3 {
        let both = [a, b]
            .iter()
            .all(|h| slope(h).is_some_and(|hs| hs > limit / 2.0 && hs > s / 4.0));
        if !both {
            return None;
        }
    }
    Some(s)
}

/// Throughput at the start and at the end of a run: the first and last hour when the run
/// lasted at least two hours, otherwise its first and last tenth.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Drift {
    pub window_s: f64,
    pub first_per_s: f64,
    pub last_per_s: f64,
    /// (last − first) / first, in percent.
    pub change_pct: f64,
}

/// `per_interval` holds (end of interval in seconds, interval length, units accepted).
pub fn drift(per_interval: &[(f64, f64, u64)]) -> Option<Drift> {
    let end = per_interval.last()?.0;
    if per_interval.len() < 10 {
        return None;
    }
    let window = if end >= 7200.0 { 3600.0 } else { end / 10.0 };
    // The intervals that overlap (lo, hi]: the first window always has the run's first
    // interval, even one that ended after it (a late first tick on a busy machine).
    let rate = |lo: f64, hi: f64| {
        let (mut n, mut t) = (0u64, 0f64);
        for &(at, len, c) in per_interval {
            if at > lo && at - len < hi - 1e-9 {
                n += c;
                t += len;
            }
        }
        (t > 0.0).then(|| n as f64 / t)
    };
    let first = rate(0.0, window)?;
    let last = rate(end - window, end)?;
    Some(Drift {
        window_s: window,
        first_per_s: first,
        last_per_s: last,
        change_pct: if first > 0.0 {
            (last - first) / first * 100.0
        } else {
            0.0
        },
    })
}

#[cfg(test)]
mod tests {
    use super::slope_se;

    #[test]
    fn a_slope_has_its_standard_error() {
        // On a line: no error.
        let (b, se) = slope_se(&[(1.0, 3.0), (2.0, 5.0), (3.0, 7.0)]).unwrap();
        assert!((b - 2.0).abs() < 1e-12 && se.abs() < 1e-12);
        // y = 2x, with residuals +1, -1, -1, +1 at x = 1..4: slope 2, se sqrt(4/2/5).
        let (b, se) = slope_se(&[(1.0, 3.0), (2.0, 3.0), (3.0, 5.0), (4.0, 9.0)]).unwrap();
        assert!((b - 2.0).abs() < 1e-12, "{b}");
        assert!((se - (0.4f64).sqrt()).abs() < 1e-12, "{se}");
        assert!(slope_se(&[(1.0, 1.0), (2.0, 2.0)]).is_none());
    }
    use super::*;

    #[test]
    fn slope_of_a_line_with_noise() {
        let pts: Vec<(f64, f64)> = (0..100)
            .map(|i| {
                let x = i as f64;
                (x, 3.0 + 0.5 * x + if i % 2 == 0 { 0.1 } else { -0.1 })
            })
            .collect();
        assert!((slope(&pts).unwrap() - 0.5).abs() < 0.01);
        assert!(slope(&pts[..2]).is_none());
    }

    #[test]
    fn a_leak_grows_all_along_a_step_does_not() {
        // 12 s in one-second samples, as hours.
        let h = |i: usize| i as f64 / 3600.0;
        // 40 kB a message at 100/s: ~14 GB/h, all along (with a little noise).
        let leak: Vec<(f64, f64)> = (0..12)
            .map(|i| (h(i), 30.0 + 4.0 * i as f64 + (i % 2) as f64 * 0.3))
            .collect();
        let s = leaks(&leak, 100.0, 4.0).expect("a leak");
        assert!((s / 14_400.0 - 1.0).abs() < 0.05, "{s}");
        // 10 MB taken once, mid-run: steep over the whole run, flat in each half.
        let step: Vec<(f64, f64)> = (0..12)
            .map(|i| (h(i), if i < 6 { 33.0 } else { 43.0 }))
            .collect();
        assert!(slope(&step).unwrap() > 100.0);
        assert_eq!(leaks(&step, 100.0, 4.0), None);
        // The same with a page or two of growth before it (spate's own memory in a soak
        // test on a busy machine: 5 MB over the last 7 s, "growing" in both halves).
        let noisy: Vec<(f64, f64)> = (5..12)
            .map(|i| (h(i), [29.0, 29.0, 29.125, 29.25, 33.0, 34.0, 34.125][i - 5]))
            .collect();
        assert!(slope(&noisy).unwrap() > 2000.0);
        assert_eq!(leaks(&noisy, 100.0, 4.0), None);
        // Growth too small to matter, and a flat line.
        let small: Vec<(f64, f64)> = (0..12).map(|i| (h(i), 30.0 + 0.2 * i as f64)).collect();
        assert_eq!(leaks(&small, 100.0, 4.0), None);
        let flat: Vec<(f64, f64)> = (0..12).map(|i| (h(i), 30.0)).collect();
        assert_eq!(leaks(&flat, 100.0, 4.0), None);
    }

    #[test]
    fn drift_first_and_last_tenth() {
        let iv: Vec<(f64, f64, u64)> = (1..=100)
            .map(|i| (i as f64, 1.0, if i <= 50 { 100 } else { 80 }))
            .collect();
        let d = drift(&iv).unwrap();
        assert_eq!(d.window_s, 10.0);
        assert_eq!(d.first_per_s, 100.0);
        assert_eq!(d.last_per_s, 80.0);
        assert!((d.change_pct + 20.0).abs() < 1e-9);
        // 12 s whose first tick came late (at 1.3 s): the first tenth (1.2 s) is that
        // interval, not nothing.
        let iv: Vec<(f64, f64, u64)> = std::iter::once((1.3, 1.3, 130))
            .chain((2..=12).map(|i| (i as f64, if i == 2 { 0.7 } else { 1.0 }, 100)))
            .collect();
        let d = drift(&iv).unwrap();
        assert_eq!((d.first_per_s, d.last_per_s), (100.0, 100.0));
    }
}
