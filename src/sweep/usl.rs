//! The Universal Scalability Law, X(N) = λN / (1 + σ(N−1) + κN(N−1)), fitted to
//! throughput against concurrency by least squares.
//!
//! For fixed σ and κ the best λ has a closed form (X is linear in λ), so the search is
//! over (σ, κ) only: a coarse grid (σ linear in [0, 1], κ logarithmic in [1e-7, 10] plus
//! 0), then repeated finer grids around the best point. Small, derivative-free and robust
//! on the handful of points a sweep produces.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Usl {
    /// Contention (serialised fraction).
    pub sigma: f64,
    /// Coherency (crosstalk) cost.
    pub kappa: f64,
    /// Throughput of one unit of concurrency.
    pub lambda: f64,
    /// Concurrency of the peak, sqrt((1−σ)/κ); None when κ = 0 (no retrograde region).
    pub peak_x: Option<f64>,
    /// Throughput at the peak (or the asymptote λ/σ when κ = 0 and σ > 0).
    pub peak_throughput: Option<f64>,
    /// Coefficient of determination of the fit.
    pub r2: f64,
}

/// The model's throughput at concurrency `n`.
pub fn model(sigma: f64, kappa: f64, lambda: f64, n: f64) -> f64 {
    lambda * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))
}

/// Best λ and the residual sum of squares for given σ, κ.
fn fit_lambda(points: &[(f64, f64)], sigma: f64, kappa: f64) -> (f64, f64) {
    let (mut fx, mut ff) = (0.0, 0.0);
    for &(n, x) in points {
        let f = model(sigma, kappa, 1.0, n);
        fx += f * x;
        ff += f * f;
    }
    let lambda = if ff > 0.0 { (fx / ff).max(0.0) } else { 0.0 };
    let sse = points
        .iter()
        .map(|&(n, x)| (x - model(sigma, kappa, lambda, n)).powi(2))
        .sum();
    (lambda, sse)
}

/// Fits (concurrency, throughput) points. None with fewer than 3 distinct concurrencies
/// or no throughput at all.
pub fn fit(points: &[(f64, f64)]) -> Option<Usl> {
    let mut ns: Vec<f64> = points.iter().map(|p| p.0).collect();
    ns.sort_by(f64::total_cmp);
    ns.dedup();
    if ns.len() < 3 || points.iter().all(|p| p.1 <= 0.0) || points.iter().any(|p| p.0 <= 0.0) {
        return None;
    }
    // Search κ on a log scale: u = log10 κ, with u below -7 standing for κ = 0.
    let kappa_of = |u: f64| if u < -7.0 { 0.0 } else { 10f64.powf(u) };
    let (mut best_s, mut best_u, mut best_sse) = (0.0, -8.0, f64::INFINITY);
    let (mut s_lo, mut s_hi, mut u_lo, mut u_hi) = (0.0f64, 1.0f64, -8.0f64, 1.0f64);
    for _round in 0..8 {
        const STEPS: usize = 60;
        for i in 0..=STEPS {
            let s = s_lo + (s_hi - s_lo) * i as f64 / STEPS as f64;
            for j in 0..=STEPS {
                let u = u_lo + (u_hi - u_lo) * j as f64 / STEPS as f64;
                let (_, sse) = fit_lambda(points, s, kappa_of(u));
                if sse < best_sse {
                    (best_s, best_u, best_sse) = (s, u, sse);
                }
            }
        }
        let (ds, du) = ((s_hi - s_lo) / 10.0, (u_hi - u_lo) / 10.0);
        s_lo = (best_s - ds).max(0.0);
        s_hi = (best_s + ds).min(1.0);
        u_lo = (best_u - du).max(-8.0);
        u_hi = (best_u + du).min(1.0);
    }
    let (sigma, kappa) = (best_s, kappa_of(best_u));
    let (lambda, sse) = fit_lambda(points, sigma, kappa);
    let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
    let sst: f64 = points.iter().map(|p| (p.1 - mean).powi(2)).sum();
    let r2 = if sst > 0.0 { 1.0 - sse / sst } else { 1.0 };
    let (peak_x, peak_throughput) = if kappa > 0.0 {
        // Contention of 1 puts the peak at 0: no fewer than one user (else 0/0 = NaN).
        let n = ((1.0 - sigma) / kappa).sqrt().max(1.0);
        (Some(n), Some(model(sigma, kappa, lambda, n)))
    } else if sigma > 0.0 {
        (None, Some(lambda / sigma))
    } else {
        (None, None)
    };
    Some(Usl {
        sigma,
        kappa,
        lambda,
        peak_x,
        peak_throughput,
        r2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_known_parameters_from_noisy_data() {
        let (s, k, l) = (0.05, 0.002, 100.0);
        // Deterministic ±2 % noise.
        let noise = [
            1.02, 0.98, 1.01, 0.99, 1.0, 1.015, 0.985, 1.005, 0.995, 1.01,
        ];
        let ns = [1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0];
        let pts: Vec<(f64, f64)> = ns
            .iter()
            .zip(noise)
            .map(|(&n, e)| (n, model(s, k, l, n) * e))
            .collect();
        let u = fit(&pts).unwrap();
        assert!((u.sigma - s).abs() < 0.02, "{u:?}");
        assert!((u.kappa - k).abs() / k < 0.35, "{u:?}");
        assert!((u.lambda - l).abs() / l < 0.05, "{u:?}");
        let peak = ((1.0 - s) / k).sqrt();
        assert!(
            (u.peak_x.unwrap() - peak).abs() / peak < 0.2,
            "{u:?} vs {peak}"
        );
        assert!(u.r2 > 0.98, "{u:?}");
    }

    #[test]
    fn linear_scaling_has_no_peak() {
        let pts: Vec<(f64, f64)> = (1..=6).map(|n| (n as f64, 50.0 * n as f64)).collect();
        let u = fit(&pts).unwrap();
        assert!(u.sigma < 1e-3 && u.kappa < 1e-6, "{u:?}");
        assert!((u.lambda - 50.0).abs() < 0.1);
        assert!(u.peak_x.is_none());
        assert!(fit(&pts[..2]).is_none());
    }

    #[test]
    fn exact_data_fits_exactly() {
        let pts: Vec<(f64, f64)> = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
            .iter()
            .map(|&n| (n, model(0.1, 0.01, 20.0, n)))
            .collect();
        let u = fit(&pts).unwrap();
        assert!((u.sigma - 0.1).abs() < 0.005, "{u:?}");
        assert!((u.kappa - 0.01).abs() < 0.001, "{u:?}");
        assert!(u.r2 > 0.9999);
    }
}
