#pragma once

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord framing
// uses it, and TFRecord's masking of a stored CRC. Pure; thread-safe.

#include <cstddef>
#include <cstdint>

namespace strata {

// CRC-32C of [data, data + n), continuing from `crc` (0 to start).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// The masked form TFRecord stores: rotate right by 15, add 0xa282ead8.
inline uint32_t MaskCrc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace strata
