#pragma once

// Gradient compression for pushes (issue 13; docs/design/compression.md): the
// codecs and error feedback. Pure logic, no I/O, no LibTorch. Pushes use
// them through PsClient::SetCompression (cluster.compression).
//
//   fp16  IEEE 754 half precision, round to nearest even; 2 bytes a value.
//         Values beyond the half range saturate to +-65504.
//   int8  blocks of kInt8Block values: a float32 scale (the block's largest
//         magnitude / 127), then one int8 per value, round(x / scale);
//         about 1.02 bytes a value. A value below scale / 2 becomes 0, so
//         small coordinates of a gradient next to a large one are lost in
//         that step: error feedback (below) carries them to the next.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

enum class Compression { kNone, kFp16, kInt8 };

// "none", "fp16", "int8"; InvalidArgument naming the known ones otherwise.
Result<Compression> ParseCompression(const std::string& name);
const char* CompressionName(Compression c);

inline constexpr size_t kInt8Block = 256;

// Bytes `n` floats take once encoded with `c`.
size_t CompressedBytes(Compression c, size_t n);

// Encodes `n` floats of `x` into `out` (CompressedBytes(c, n) bytes), and
// back. kNone copies the float32 bytes.
void Encode(Compression c, const float* x, size_t n, uint8_t* out);
void Decode(Compression c, const uint8_t* in, size_t n, float* out);

// One float to half precision and back (round to nearest even; NaN stays
// NaN; beyond the half range saturates to +-65504).
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

// Error feedback (Seide et al. 2014, 1-bit SGD; Karimireddy et al. 2019,
// EF-SGD): what the codec dropped from a gradient is added to the next one
// before it is encoded, so nothing is lost for good: the decoded gradients
// sum to the true ones minus the residual still held, which stays bounded
// (by half a quantization step per value). Not thread-safe; one per worker
// and range.
class ErrorFeedback {
 public:
  ErrorFeedback(Compression c, size_t n);

  // Encodes g + residual into `out` (CompressedBytes bytes) and keeps as
  // the new residual what the encoding dropped.
  void Encode(const float* g, uint8_t* out);
  const std::vector<float>& residual() const { return residual_; }
  // A residual saved with residual() (a checkpoint); the same size.
  void SetResidual(const std::vector<float>& r);
  size_t size() const { return residual_.size(); }

 private:
  const Compression c_;
  std::vector<float> residual_;
  std::vector<float> corrected_;
  std::vector<float> decoded_;
};

}  // namespace strata
