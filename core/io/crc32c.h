// CRC-32C (Castagnoli), as TFRecord framing uses it, and TensorFlow's masked form of it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace trainer {

// CRC-32C of `bytes` bytes at `data` (reflected polynomial 0x82F63B78, initial value and final
// xor 0xFFFFFFFF: crc32c("123456789") = 0xE3069283), continuing from `crc` (0 to start; the CRC of
// a buffer's first part continues over the rest). Table-driven, one byte at a time: TensorBoard
// records are a few hundred bytes.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

// TFRecord's masked CRC (a CRC of bytes that embed CRCs is then not degenerate):
// ((crc >> 15) | (crc << 17)) + 0xa282ead8, modulo 2^32.
uint32_t mask_crc32c(uint32_t crc);

}  // namespace trainer
