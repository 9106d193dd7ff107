#include "experiment/stats.h"

#include <algorithm>
#include <cmath>

namespace strata {

double Mean(const std::vector<double>& xs) {
  if (xs.empty()) return kNaN;
  double sum = 0;
  for (double x : xs) sum += x;
  return sum / static_cast<double>(xs.size());
}

double UnbiasedVariance(const std::vector<double>& xs) {
  if (xs.size() < 2) return kNaN;
  const double m = Mean(xs);
  double ss = 0, comp = 0;
  for (double x : xs) {
    ss += (x - m) * (x - m);
    comp += x - m;
  }
  // Corrected two-pass formula: the second term removes the rounding error
  // of the mean.
  const double n = static_cast<double>(xs.size());
  return (ss - comp * comp / n) / (n - 1);
}

double VarianceRatio(double baseline_var, double var) {
  if (std::isnan(baseline_var) || std::isnan(var) || var == 0) return kNaN;
  return baseline_var / var;
}

SampleStats Describe(const std::vector<double>& xs) {
  SampleStats s;
  s.n = static_cast<int64_t>(xs.size());
  s.mean = Mean(xs);
  s.variance = UnbiasedVariance(xs);
  if (!xs.empty()) {
    s.min = *std::min_element(xs.begin(), xs.end());
    s.max = *std::max_element(xs.begin(), xs.end());
  }
  return s;
}

namespace {
// Quantile p in [0, 1] of sorted `xs`, linear between order statistics.
double SortedQuantile(const std::vector<double>& xs, double p) {
  const double h = p * static_cast<double>(xs.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (h - static_cast<double>(lo)) * (xs[hi] - xs[lo]);
}
}  // namespace

FiveNumbers Quartiles(std::vector<double> xs) {
  FiveNumbers f;
  if (xs.empty()) return f;
  std::sort(xs.begin(), xs.end());
  f.min = xs.front();
  f.q1 = SortedQuantile(xs, 0.25);
  f.median = SortedQuantile(xs, 0.5);
  f.q3 = SortedQuantile(xs, 0.75);
  f.max = xs.back();
  return f;
}

double Interpolate(const std::vector<double>& xs, const std::vector<double>& ys,
                   double x) {
  if (xs.empty() || xs.size() != ys.size()) return kNaN;
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  auto it = std::upper_bound(xs.begin(), xs.end(), x);
  const size_t i = static_cast<size_t>(it - xs.begin());
  const double x0 = xs[i - 1], x1 = xs[i];
  if (x1 == x0) return ys[i];
  return ys[i - 1] + (x - x0) / (x1 - x0) * (ys[i] - ys[i - 1]);
}

}  // namespace strata

namespace strata {
namespace {

// Lentz's continued fraction for I_x(a, b) (valid for x < (a+1)/(a+b+2)).
double BetaFraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + num * d;
    c = 1 + num / c;
    if (std::fabs(d) < kTiny) d = kTiny;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + num * d;
    c = 1 + num / c;
    if (std::fabs(d) < kTiny) d = kTiny;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1) < 1e-14) break;
  }
  return h;
}

// The x in [lo, hi] where the increasing `cdf` reaches p (bisection).
template <typename F>
double Invert(F cdf, double p, double lo, double hi) {
  while (cdf(hi) < p && hi < 1e12) hi *= 2;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (cdf(mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::vector<double> AbsDeviationsFromMedian(std::vector<double> xs) {
  const double median = Quartiles(xs).median;
  for (double& x : xs) x = std::fabs(x - median);
  return xs;
}

}  // namespace

double IncompleteBeta(double a, double b, double x) {
  if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1)) return kNaN;
  if (x == 0 || x == 1) return x;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
               a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * BetaFraction(a, b, x) / a;
  return 1 - front * BetaFraction(b, a, 1 - x) / b;
}

double StudentTCdf(double t, double df) {
  if (!(df > 0) || std::isnan(t)) return kNaN;
  const double tail = 0.5 * IncompleteBeta(df / 2, 0.5, df / (df + t * t));
  return t >= 0 ? 1 - tail : tail;
}

double StudentTQuantile(double p, double df) {
  if (!(p > 0 && p < 1) || !(df > 0)) return kNaN;
  if (p < 0.5) return -StudentTQuantile(1 - p, df);
  return Invert([df](double t) { return StudentTCdf(t, df); }, p, 0, 16);
}

double FCdf(double f, double d1, double d2) {
  if (!(d1 > 0) || !(d2 > 0) || std::isnan(f)) return kNaN;
  if (f <= 0) return 0;
  return IncompleteBeta(d1 / 2, d2 / 2, d1 * f / (d1 * f + d2));
}

double FQuantile(double p, double d1, double d2) {
  if (!(p > 0 && p < 1) || !(d1 > 0) || !(d2 > 0)) return kNaN;
  return Invert([d1, d2](double f) { return FCdf(f, d1, d2); }, p, 0, 16);
}

double MeanCi95(const std::vector<double>& xs) {
  if (xs.size() < 2) return kNaN;
  const double n = static_cast<double>(xs.size());
  return StudentTQuantile(0.975, n - 1) * std::sqrt(UnbiasedVariance(xs) / n);
}

double FTestP(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 2 || b.size() < 2) return kNaN;
  const double va = UnbiasedVariance(a), vb = UnbiasedVariance(b);
  if (!(va > 0) || !(vb > 0)) return kNaN;
  const double cdf = FCdf(va / vb, static_cast<double>(a.size() - 1),
                          static_cast<double>(b.size() - 1));
  return std::min(1.0, 2 * std::min(cdf, 1 - cdf));
}

double BrownForsytheP(const std::vector<double>& a,
                      const std::vector<double>& b) {
  if (a.size() < 3 || b.size() < 3) return kNaN;
  // One-way ANOVA of the absolute deviations from each group's median.
  const std::vector<double> za = AbsDeviationsFromMedian(a);
  const std::vector<double> zb = AbsDeviationsFromMedian(b);
  const double na = static_cast<double>(za.size());
  const double nb = static_cast<double>(zb.size());
  const double ma = Mean(za), mb = Mean(zb);
  const double m = (na * ma + nb * mb) / (na + nb);
  const double between = na * (ma - m) * (ma - m) + nb * (mb - m) * (mb - m);
  double within = 0;
  for (double z : za) within += (z - ma) * (z - ma);
  for (double z : zb) within += (z - mb) * (z - mb);
  // Zero but for rounding (equal deviations) is zero: F would be huge.
  double scale = 0;
  for (double z : za) scale += z * z;
  for (double z : zb) scale += z * z;
  if (!(within > 1e-12 * scale)) return kNaN;
  const double f = between / (within / (na + nb - 2));
  return 1 - FCdf(f, 1, na + nb - 2);
}

int64_t RepeatsForPower80(double ratio, int64_t cap) {
  if (!(ratio > 0) || ratio == 1 || !std::isfinite(ratio)) return -1;
  const double r = ratio >= 1 ? ratio : 1 / ratio;
  for (int64_t n = 2; n <= cap; ++n) {
    const double df = static_cast<double>(n - 1);
    // Reject when var_big / var_small > F_0.975; under the alternative
    // that ratio over r is F(df, df).
    const double critical = FQuantile(0.975, df, df);
    if (1 - FCdf(critical / r, df, df) >= 0.8) return n;
  }
  return cap + 1;
}

}  // namespace strata
