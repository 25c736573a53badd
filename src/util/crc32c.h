// CRC-32C (Castagnoli), the checksum of every stoker record and the one
// TFRecord and S3 use.
//
// Uses the SSE4.2 `crc32` instruction when the CPU has it (chosen once at
// start-up) and a table-driven fallback otherwise; both give identical
// results. All functions are pure and safe for concurrent use.
#ifndef STOKER_UTIL_CRC32C_H_
#define STOKER_UTIL_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace stoker::crc32c {

// Returns the CRC-32C of data[0, n) continuing from `init`, the CRC of the
// bytes that came before (0 for none). Extend(Extend(0, a), b) == Value(a+b).
uint32_t Extend(uint32_t init, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(std::string_view s) { return Extend(0, s.data(), s.size()); }

// Returns the CRC of a+b from the CRC of a, the CRC of b and b's length,
// without touching the bytes: Combine(Value(a), Value(b), b.size()) ==
// Value(a+b). Costs about a microsecond, so a shard's CRC can be joined from
// its records' CRCs instead of reading every byte twice.
uint32_t Combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// Masking, as in leveldb and TFRecord: a CRC stored next to the bytes it
// covers is masked, so that the CRC of a string that itself contains CRCs
// does not degenerate.
inline uint32_t Mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

// True when the hardware path is in use (reported by `stoker bench`).
bool IsAccelerated();

}  // namespace stoker::crc32c

#endif  // STOKER_UTIL_CRC32C_H_
