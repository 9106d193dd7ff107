// Gradient compression codecs (issue 13): fp16 against the IEEE rules,
// int8 within half a quantization step, and error feedback: over 1,000
// steps of a fixed gradient stream the residual stays bounded and nothing
// is lost for good, where plain int8 loses small coordinates every step.
#include "ps/compression.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace strata {
namespace {

std::vector<float> RoundTrip(Compression c, const std::vector<float>& x) {
  std::vector<uint8_t> bytes(CompressedBytes(c, x.size()));
  Encode(c, x.data(), x.size(), bytes.data());
  std::vector<float> y(x.size());
  Decode(c, bytes.data(), x.size(), y.data());
  return y;
}

TEST(CompressionTest, NamesParseAndUnknownOnesAreRefused) {
  for (const char* name : {"none", "fp16", "int8"}) {
    auto c = ParseCompression(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_STREQ(CompressionName(*c), name);
  }
  auto bad = ParseCompression("int4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("none, fp16, int8"), std::string::npos);
}

TEST(CompressionTest, BytesOnTheWire) {
  EXPECT_EQ(CompressedBytes(Compression::kNone, 1000), 4000u);
  EXPECT_EQ(CompressedBytes(Compression::kFp16, 1000), 2000u);
  // 4 blocks of 256: 4 scales and 1000 int8 values.
  EXPECT_EQ(CompressedBytes(Compression::kInt8, 1000), 1016u);
  EXPECT_LE(CompressedBytes(Compression::kInt8, 1 << 20),
            static_cast<size_t>(0.26 * (4 << 20)));
}

TEST(CompressionTest, HalfFollowsTheIeeeRules) {
  // Exactly representable values come back unchanged.
  for (float v : {0.0f, 1.0f, -2.5f, 0.099975586f, 65504.0f, -65504.0f,
                  6.1035156e-05f /* 2^-14 */, 5.9604645e-08f /* 2^-24 */}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(v)), v) << v;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  // Round to nearest even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Saturation, underflow to zero, subnormals, NaN.
  EXPECT_EQ(HalfToFloat(FloatToHalf(1e6f)), 65504.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(-std::numeric_limits<float>::infinity())),
            -65504.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(1e-9f)), 0.0f);
  EXPECT_EQ(FloatToHalf(3 * 5.9604645e-08f), 3);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  // Relative error of normal values: at most 2^-11.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1000.0f, 1000.0f);
  for (int i = 0; i < 10000; ++i) {
    const float v = u(rng);
    if (std::fabs(v) < 1e-3f) continue;
    EXPECT_LE(std::fabs(HalfToFloat(FloatToHalf(v)) - v),
              std::fabs(v) * std::ldexp(1.0f, -11))
        << v;
  }
}

// Encode and Decode take vector paths (F16C, AVX2) where the CPU has them;
// whole arrays (lengths that are not a multiple of 8, NaN among the
// values) must come out as the scalar rules give them, element by element.
TEST(CompressionTest, WholeArraysFollowTheScalarRules) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> exponent(-30, 17);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::vector<float> x(200003);
  for (float& v : x)
    v = std::ldexp(mantissa(rng), exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
  x[3] = std::nanf("");
  x[9] = 0.0f;
  x[10] = -0.0f;
  x[11] = 65520.0f;  // rounds past the half range: saturates
  std::vector<uint8_t> half(CompressedBytes(Compression::kFp16, x.size()));
  Encode(Compression::kFp16, x.data(), x.size(), half.data());
  std::vector<float> back(x.size());
  Decode(Compression::kFp16, half.data(), x.size(), back.data());
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, half.data() + 2 * i, sizeof(h));
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(HalfToFloat(h)));
      EXPECT_TRUE(std::isnan(back[i]));
      continue;
    }
    ASSERT_EQ(h, FloatToHalf(x[i])) << i << ": " << x[i];
    ASSERT_EQ(back[i], HalfToFloat(h)) << i;
  }
  // int8 against the rule written out: scale = largest magnitude / 127
  // (NaN skipped), q = round to nearest even of x * (127 / largest),
  // clamped to +-127, NaN to -127.
  std::normal_distribution<float> g(0.0f, 0.01f);
  std::vector<float> y(1000 + 5);
  for (float& v : y) v = g(rng);
  y[7] = std::nanf("");
  std::fill(y.begin() + 256, y.begin() + 512, 0.0f);  // a block of zeros
  std::vector<uint8_t> got(CompressedBytes(Compression::kInt8, y.size()));
  Encode(Compression::kInt8, y.data(), y.size(), got.data());
  std::vector<uint8_t> want;
  for (size_t b = 0; b < y.size(); b += kInt8Block) {
    const size_t m = std::min(kInt8Block, y.size() - b);
    float largest = 0;
    for (size_t i = 0; i < m; ++i)
      if (!std::isnan(y[b + i]))
        largest = std::max(largest, std::fabs(y[b + i]));
    const float scale = largest / 127.0f;
    const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
    const uint8_t* sb = reinterpret_cast<const uint8_t*>(&scale);
    want.insert(want.end(), sb, sb + sizeof(scale));
    for (size_t i = 0; i < m; ++i) {
      const float q = y[b + i] * inverse;
      const float c = std::isnan(q) ? -127.0f : std::clamp(q, -127.0f, 127.0f);
      want.push_back(
          static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(c))));
    }
  }
  EXPECT_EQ(got, want);
}

TEST(CompressionTest, Int8IsWithinHalfAStepOfEachBlocksScale) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 0.01f);
  std::vector<float> x(1000);
  for (float& v : x) v = g(rng);
  x[5] = 0.5f;  // one large value sets block 0's scale
  const std::vector<float> y = RoundTrip(Compression::kInt8, x);
  for (size_t b = 0; b < x.size(); b += kInt8Block) {
    const size_t m = std::min(kInt8Block, x.size() - b);
    float largest = 0;
    for (size_t i = 0; i < m; ++i)
      largest = std::max(largest, std::fabs(x[b + i]));
    const float step = largest / 127.0f;
    for (size_t i = 0; i < m; ++i)
      EXPECT_LE(std::fabs(y[b + i] - x[b + i]), step / 2 * 1.0001f) << b + i;
  }
  EXPECT_EQ(y[5], 0.5f);  // the largest value is exact
  EXPECT_EQ(RoundTrip(Compression::kNone, x), x);
  EXPECT_EQ(RoundTrip(Compression::kInt8, std::vector<float>(300, 0.0f)),
            std::vector<float>(300, 0.0f));
}

// The point of error feedback: a coordinate far below its block's
// quantization step is rounded to 0 every step by plain int8 (lost for
// good), while with error feedback the decoded stream's sum follows the
// true sum to within the residual, which stays bounded.
TEST(CompressionTest, ErrorFeedbackKeepsTheResidualBoundedOver1000Steps) {
  constexpr size_t n = 512;
  std::vector<float> g(n);
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) g[i] = 0.001f * noise(rng);
  g[0] = 1.0f;       // sets block 0's step to 1/127
  g[1] = 0.001f;     // far below half a step: plain int8 sends 0
  g[300] = -2.0f;    // block 1
  g[301] = -0.002f;  // likewise
  ErrorFeedback ef(Compression::kInt8, n);
  std::vector<uint8_t> bytes(CompressedBytes(Compression::kInt8, n));
  std::vector<float> decoded(n), sum_ef(n, 0.0f), sum_plain(n, 0.0f);
  double worst_residual = 0;
  constexpr int kSteps = 1000;
  for (int t = 0; t < kSteps; ++t) {
    ef.Encode(g.data(), bytes.data());
    Decode(Compression::kInt8, bytes.data(), n, decoded.data());
    for (size_t i = 0; i < n; ++i) sum_ef[i] += decoded[i];
    const std::vector<float> plain = RoundTrip(Compression::kInt8, g);
    for (size_t i = 0; i < n; ++i) sum_plain[i] += plain[i];
    for (float r : ef.residual())
      worst_residual =
          std::max(worst_residual, static_cast<double>(std::fabs(r)));
  }
  // Bounded: never more than half a step of the largest block (2/127/2),
  // with a margin for the float sums.
  EXPECT_LE(worst_residual, 2.0 / 127 / 2 * 1.01);
  for (size_t i : {size_t{1}, size_t{301}}) {
    const double truth = static_cast<double>(g[i]) * kSteps;
    EXPECT_EQ(sum_plain[i], 0.0f) << i;  // plain int8 lost it every step
    EXPECT_NEAR(sum_ef[i], truth, std::fabs(truth) * 0.02 + 0.02) << i;
  }
  // Every coordinate: decoded sum = true sum - residual (to float error).
  for (size_t i = 0; i < n; ++i) {
    const double truth = static_cast<double>(g[i]) * kSteps;
    EXPECT_NEAR(sum_ef[i] + ef.residual()[i], truth,
                1e-3 * std::max(1.0, std::fabs(truth)))
        << i;
  }
}

}  // namespace
}  // namespace strata
