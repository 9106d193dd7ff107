#pragma once

// safetensors files (https://github.com/huggingface/safetensors): 8 bytes of
// little-endian header length N, N bytes of JSON header (padded with spaces
// to a multiple of 8), then the tensors' raw little-endian bytes. The header
// maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end)}
// (offsets into the data section, which the tensors cover without holes or
// overlaps) and may hold "__metadata__" (string to string). Python's
// `safetensors` and PyTorch read what WriteSafetensors writes
// (docs/design/models.md). No LibTorch here.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

struct SafeTensor {
  std::string name;
  std::string dtype;  // "F32", "F64", "I64", "I32", "U8", ...
  std::vector<int64_t> shape;
  std::string data;  // raw little-endian bytes, numel x dtype size

  // A float32 tensor of `shape` from `values` (numel floats).
  static SafeTensor Floats(std::string name, std::vector<int64_t> shape,
                           const float* values);
  int64_t numel() const;
  // The float32 values; empty unless dtype is "F32".
  std::vector<float> ToFloats() const;
};

struct SafetensorsFile {
  std::vector<SafeTensor> tensors;  // in data order
  std::map<std::string, std::string> metadata;

  // The tensor named `name`, or null.
  const SafeTensor* Find(const std::string& name) const;
};

// Bytes per element of a dtype name; 0 for an unknown one.
int64_t SafetensorsDtypeSize(const std::string& dtype);

// The file's bytes: InvalidArgument for a tensor whose data size does not
// match its dtype and shape, an unknown dtype, or a repeated or empty name.
Result<std::string> EncodeSafetensors(
    const std::vector<SafeTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Writes the file atomically (temporary name, then rename): a crash leaves
// either the old file or the new one. The errors of EncodeSafetensors, or
// IoError naming the path.
Status WriteSafetensors(
    const std::string& path, const std::vector<SafeTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Parses a file's bytes. DataLoss naming `what` and the problem for a
// header length beyond the file, a header that is not JSON or not the
// format, an unknown dtype, offsets that do not match the shape, overlap,
// leave holes or pass the end of the file.
Result<SafetensorsFile> DecodeSafetensors(const std::string& bytes,
                                          const std::string& what);
// Reads and parses `path` (NotFound / IoError naming it, or the errors of
// DecodeSafetensors).
Result<SafetensorsFile> ReadSafetensors(const std::string& path);

}  // namespace strata
