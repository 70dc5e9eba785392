// host::runtime: CUDA device queries, cached per device, errors checked: the device attributes
// (<jitkern/utils.cuh>, where LaunchKernel asks them) and the occupancy queries.
#pragma once

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles device code only

#include <jitkern/utils.cuh>

#include <atomic>
#include <cstdint>

namespace host::runtime {

// Resident blocks per SM for `kernel` at this block size and dynamic shared memory.
template <typename Kernel>
inline int get_blocks_per_sm(Kernel kernel, int block_size, std::size_t dynamic_smem = 0, DebugInfo where = {}) {
  int blocks = 0;
  RuntimeDeviceCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel_handle(kernel, where), block_size, dynamic_smem), where);
  return blocks;
}

// CTAs of kKernel at `threads` a CTA and `dynamic_smem` bytes that an SM of `device` holds at once (at least
// one, else an error): the occupancy API's answer, asked once per (kernel, device, threads, bytes) and then
// read lock-free (launch paths call it on every launch).
template <auto kKernel>
inline int resident_ctas_per_sm(int threads, std::size_t dynamic_smem, int device, DebugInfo where = {}) {
  // Entries (device + 1) << 56 | threads << 40 | bytes << 8 | ctas, linear probing; a full table asks anew.
  constexpr int kSlots = 16;
  static std::atomic<uint64_t> cache[kSlots] = {};
  RuntimeCheck(where, device >= 0 && device < 255 && threads > 0 && threads < (1 << 16) && dynamic_smem < (std::size_t{1} << 32),
               "resident_ctas_per_sm: device ", device, ", ", threads, " threads, ", dynamic_smem, " bytes out of range");
  const uint64_t key = uint64_t(device + 1) << 56 | uint64_t(threads) << 40 | uint64_t(dynamic_smem) << 8;
  const uint64_t hash = (key >> 8) * 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < kSlots; ++i) {
    std::atomic<uint64_t>& slot = cache[(hash + i) % kSlots];
    const uint64_t entry = slot.load(std::memory_order_relaxed);
    if (entry >> 8 == key >> 8) return static_cast<int>(entry & 0xff);
    if (entry == 0) {
      const DeviceGuard guard(device, where);  // the occupancy API asks the current device
      const int ctas = get_blocks_per_sm(kKernel, threads, dynamic_smem, where);
      RuntimeCheck(where, ctas > 0 && ctas < 256, "a kernel cannot run with ", threads, " threads and ", dynamic_smem, " bytes of shared memory a CTA (",
                   ctas, " CTAs an SM)");
      uint64_t empty = 0;  // another thread may have filled the slot meanwhile: then the answer stands uncached
      slot.compare_exchange_strong(empty, key | uint64_t(ctas), std::memory_order_relaxed);
      return ctas;
    }
  }
  const DeviceGuard guard(device, where);
  return get_blocks_per_sm(kKernel, threads, dynamic_smem, where);
}

}  // namespace host::runtime
#endif  // __CUDACC_RTC__
