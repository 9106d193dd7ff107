#include "ps/compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define STRATA_HAVE_X86_PATHS 1
#endif

namespace strata {
namespace {

#ifdef STRATA_HAVE_X86_PATHS
// F16C (x86 since 2012): 8 conversions per instruction, round to nearest
// even as FloatToHalf, subnormal halves included. Saturation is a clamp to
// +-65504 first; min/max return their second operand for NaN, so a NaN
// stays NaN (a quiet NaN keeping the top payload bits, where FloatToHalf
// gives 0x7e00: both are NaN). Chosen at run time: AVX (which includes the
// OS's support for its registers) by __builtin_cpu_supports, F16C by its
// CPUID bit (clang 14's builtin does not know "f16c").
bool HasF16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") &&
           __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return has;
}

__attribute__((target("avx,f16c"))) size_t EncodeHalvesF16c(const float* x,
                                                            size_t n,
                                                            uint8_t* out) {
  const __m256 hi = _mm256_set1_ps(65504.0f);
  const __m256 lo = _mm256_set1_ps(-65504.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    v = _mm256_max_ps(lo, _mm256_min_ps(hi, v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t DecodeHalvesF16c(const uint8_t* in,
                                                            size_t n,
                                                            float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(
                         reinterpret_cast<const __m128i*>(in + 2 * i))));
  }
  return i;
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// The int8 block encoder's two loops (below) for the first multiple of 8
// values of a block, as the scalar code computes them (the same rounding:
// cvtps rounds to nearest even under the default MXCSR; the same clamp,
// NaN to -127). Returns how many values it did.
__attribute__((target("avx2"))) uint32_t LargestBitsAvx2(const float* v,
                                                         size_t m,
                                                         size_t* done) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  __m256i largest = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    __m256i bits = _mm256_and_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)), abs_mask);
    bits = _mm256_andnot_si256(_mm256_cmpgt_epi32(bits, inf), bits);
    largest = _mm256_max_epu32(largest, bits);
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), largest);
  *done = i;
  return *std::max_element(lanes, lanes + 8);
}

__attribute__((target("avx2"))) size_t QuantizeAvx2(const float* v, size_t m,
                                                    float inverse, int8_t* q) {
  const __m256 scale = _mm256_set1_ps(inverse);
  const __m256 hi = _mm256_set1_ps(127.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f);
  size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    __m256 y = _mm256_mul_ps(_mm256_loadu_ps(v + i), scale);
    y = _mm256_min_ps(_mm256_max_ps(y, lo), hi);
    const __m256i w = _mm256_cvtps_epi32(y);
    const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(w),
                                      _mm256_extracti128_si256(w, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(h, h));
  }
  return i;
}
#endif

// round(q) to nearest even for |q| <= 127 without a libm call, so the
// loop vectorizes: adding and taking away 1.5 * 2^23 leaves no fraction
// bits.
inline float RoundSmall(float q) {
  constexpr float kMagic = 12582912.0f;
  return (q + kMagic) - kMagic;
}

}  // namespace

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
    case Compression::kFp16: {
      size_t i = 0;
#ifdef STRATA_HAVE_X86_PATHS
      if (HasF16c()) i = EncodeHalvesF16c(x, n, out);
#endif
      for (; i < n; ++i) {
        const uint16_t h = FloatToHalf(x[i]);
        std::memcpy(out + 2 * i, &h, sizeof(h));
      }
      return;
    }
    case Compression::kInt8:
      for (size_t b = 0; b < n; b += kInt8Block) {
        const size_t m = std::min(kInt8Block, n - b);
        const float* v = x + b;
        // The largest magnitude, on the bit patterns (for non-negative
        // floats their order; an integer maximum vectorizes); NaNs are
        // skipped.
        uint32_t largest_bits = 0;
        size_t first = 0;
#ifdef STRATA_HAVE_X86_PATHS
        if (HasAvx2()) largest_bits = LargestBitsAvx2(v, m, &first);
#endif
        for (size_t i = first; i < m; ++i) {
          uint32_t bits;
          std::memcpy(&bits, v + i, sizeof(bits));
          bits &= 0x7fffffffu;
          largest_bits =
              std::max(largest_bits, bits <= 0x7f800000u ? bits : 0u);
        }
        float largest;
        std::memcpy(&largest, &largest_bits, sizeof(largest));
        const float scale = largest / 127.0f;
        const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
        std::memcpy(out, &scale, sizeof(scale));
        out += sizeof(scale);
        int8_t* q = reinterpret_cast<int8_t*>(out);
        size_t done = 0;
#ifdef STRATA_HAVE_X86_PATHS
        if (HasAvx2()) done = QuantizeAvx2(v, m, inverse, q);
#endif
        for (size_t i = done; i < m; ++i) {
          // std::max(-127, NaN) is -127: a NaN becomes -127, not UB.
          const float clamped =
              std::min(127.0f, std::max(-127.0f, v[i] * inverse));
          q[i] = static_cast<int8_t>(RoundSmall(clamped));
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
    case Compression::kFp16: {
      size_t i = 0;
#ifdef STRATA_HAVE_X86_PATHS
      if (HasF16c()) i = DecodeHalvesF16c(in, n, out);
#endif
      for (; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, sizeof(h));
        out[i] = HalfToFloat(h);
      }
      return;
    }
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
