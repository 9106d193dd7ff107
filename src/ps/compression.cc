#include "ps/compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strata {

Result<Compression> ParseCompression(const std::string& name) {
  if (name == "none") return Compression::kNone;
  if (name == "fp16") return Compression::kFp16;
  if (name == "int8") return Compression::kInt8;
  return Status::InvalidArgument(
      "unknown compression '{}' (known: none, fp16, int8)", name);
}

const char* CompressionName(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kFp16:
      return "fp16";
    case Compression::kInt8:
      return "int8";
  }
  return "none";
}

size_t CompressedBytes(Compression c, size_t n) {
  switch (c) {
    case Compression::kNone:
      return n * sizeof(float);
    case Compression::kFp16:
      return n * sizeof(uint16_t);
    case Compression::kInt8: {
      const size_t blocks = (n + kInt8Block - 1) / kInt8Block;
      return blocks * sizeof(float) + n;
    }
  }
  return n * sizeof(float);
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  // Saturate: anything that rounds above 65504 (including infinity).
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7bffu);
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal half, m * 2^-24,
    // rounded to nearest even.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t mantissa = (abs & 0x007fffffu) | 0x00800000u;
    // value = mantissa * 2^(e - 150) for the biased exponent e; in units of
    // 2^-24 that is mantissa * 2^(e - 126): a right shift by 126 - e (14 to
    // 24 here).
    const int right = 126 - static_cast<int>(abs >> 23);
    const uint32_t whole = mantissa >> right;
    const uint32_t rest = mantissa & ((1u << right) - 1);
    const uint32_t half = 1u << (right - 1);
    uint32_t h = whole;
    if (rest > half || (rest == half && (whole & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Normal: rebias the exponent (127 -> 15), keep 10 mantissa bits, round
  // to nearest even (a carry into the exponent is the right result).
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mantissa == 0) {
      x = sign;
    } else {
      // Subnormal half: mantissa * 2^-24, exact in float32.
      const float v = std::ldexp(static_cast<float>(mantissa), -24);
      std::memcpy(&x, &v, sizeof(x));
      x |= sign;
    }
  } else if (exp == 0x1fu) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else {
    x = sign | ((exp + 112u) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

void Encode(Compression c, const float* x, size_t n, uint8_t* out) {
  switch (c) {
    case Compression::kNone:
      std::memcpy(out, x, n * sizeof(float));
      return;
    case Compression::kFp16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToHalf(x[i]);
        std::memcpy(out + 2 * i, &h, sizeof(h));
      }
      return;
    case Compression::kInt8:
      for (size_t b = 0; b < n; b += kInt8Block) {
        const size_t m = std::min(kInt8Block, n - b);
        float largest = 0;
        for (size_t i = 0; i < m; ++i)
          largest = std::max(largest, std::fabs(x[b + i]));
        const float scale = largest / 127.0f;
        std::memcpy(out, &scale, sizeof(scale));
        out += sizeof(scale);
        for (size_t i = 0; i < m; ++i) {
          const float q = scale > 0 ? std::nearbyint(x[b + i] / scale) : 0.0f;
          out[i] = static_cast<uint8_t>(
              static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, q))));
        }
        out += m;
      }
      return;
  }
}

void Decode(Compression c, const uint8_t* in, size_t n, float* out) {
  switch (c) {
    case Compression::kNone:
      std::memcpy(out, in, n * sizeof(float));
      return;
    case Compression::kFp16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, sizeof(h));
        out[i] = HalfToFloat(h);
      }
      return;
    case Compression::kInt8:
      for (size_t b = 0; b < n; b += kInt8Block) {
        const size_t m = std::min(kInt8Block, n - b);
        float scale;
        std::memcpy(&scale, in, sizeof(scale));
        in += sizeof(scale);
        for (size_t i = 0; i < m; ++i)
          out[b + i] = scale * static_cast<float>(static_cast<int8_t>(in[i]));
        in += m;
      }
      return;
  }
}

ErrorFeedback::ErrorFeedback(Compression c, size_t n)
    : c_(c), residual_(n, 0.0f), corrected_(n), decoded_(n) {}

void ErrorFeedback::Encode(const float* g, uint8_t* out) {
  const size_t n = residual_.size();
  for (size_t i = 0; i < n; ++i) corrected_[i] = g[i] + residual_[i];
  strata::Encode(c_, corrected_.data(), n, out);
  Decode(c_, out, n, decoded_.data());
  for (size_t i = 0; i < n; ++i) residual_[i] = corrected_[i] - decoded_[i];
}

void ErrorFeedback::SetResidual(const std::vector<float>& r) {
  STRATA_CHECK(r.size() == residual_.size());
  residual_ = r;
}

}  // namespace strata
