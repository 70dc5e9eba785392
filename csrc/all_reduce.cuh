// Tensor-parallel all-reduce (sum) of fp16/bf16/fp32 tensors over CUDA IPC buffers, for the ranks of one
// host, and the same fused with a residual add and RMSNorm.
//
// Every rank owns one buffer of GPU memory that every other rank maps (cudaIpcOpenMemHandle): a flag per
// (CTA, peer), then the push slots, then the pull data. Every CTA meets the same CTA of every other rank at
// barriers: it writes the barrier's number into its flag in each peer's buffer (st.release.sys) and waits
// until each peer's flag in its own buffer has reached it (ld.acquire.sys). The numbers only grow (each CTA
// keeps its count in its own buffer, and every rank makes the same calls), so no flag is ever reset. A CTA
// writes exactly the elements that the peers' same CTA reads, so one barrier per CTA orders the two.
//   push (small messages): each rank writes its input into its slot in every rank's buffer, barrier, each
//             rank sums the slots of its own buffer. Two sets of slots, alternating by launch: a rank
//             starts launch n + 2 only after every peer has started launch n + 1, so after every peer
//             has read the slots of launch n. One barrier, local reads.
//   one-shot: copy in, barrier, each rank sums every rank's copy, barrier (the buffers may be reused);
//   two-shot: copy in, barrier, rank r sums chunk r of every copy into its own buffer (reduce-scatter),
//             barrier, each rank gathers every chunk from its owner (all-gather), barrier.
// The sum is taken in fp32 in rank order on every rank, so every rank gets the same bits.
// A wait gives up after the communicator's timeout (%globaltimer): the CTA writes the missing peer into a
// status word in pinned host memory and returns; the host raises TimeoutError at the next call.
#pragma once

#include <jitkern/cta.cuh>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/vec.cuh>

#include <cstdint>
#include <initializer_list>

namespace jitkern_all_reduce {

using device::AlignedVector;

constexpr int kMaxRanks = 8;
constexpr int kMaxBlocks = 64;  // CTAs per launch: each has one flag per peer
constexpr int kThreads = 512;   // CTA size of the one-shot and two-shot kernels (and the fused kernel's most)
// A rank's buffer: flags[kMaxBlocks][kMaxRanks] (flag [b][q]: how many barriers CTA b of rank q has
// reached), each CTA's own barrier count, the push launch count and its CTA tally; then the push slots
// [2][world][slot_bytes] (slot [s][q]: rank q's message in the launches of parity s); then the pull data.
constexpr int64_t kCountersOffset = int64_t{kMaxBlocks} * kMaxRanks * 4;
constexpr int64_t kEpochOffset = kCountersOffset + kMaxBlocks * 4;
constexpr int64_t kSlotsOffset = 4096;
constexpr int64_t kPushSlotBytes = 512 << 10;  // the largest message of the push kernels
static_assert(kEpochOffset + 8 <= kSlotsOffset, "the flags and counters fit before the slots");

// What every kernel needs to reach the ranks' buffers.
struct Params {
  char* base[kMaxRanks];  // each rank's buffer in this process (this rank's own at [rank])
  int32_t rank, world;
  int64_t slot_bytes;   // the size of a push slot: the largest message of the push kernels
  int64_t data_offset;  // where the pull data starts in every buffer
  uint64_t timeout_ns;
  volatile int32_t* status;  // pinned host word: 0, or 1 + the peer a wait gave up on
};

template <typename T>
__device__ __forceinline__ T* data_of(const Params& p, int rank) {
  return reinterpret_cast<T*>(p.base[rank] + p.data_offset);
}

// Rank `from`'s slot of parity `phase` in `owner`'s buffer.
template <typename T>
__device__ __forceinline__ T* push_slot(const Params& p, int owner, uint32_t phase, int from) {
  return reinterpret_cast<T*>(p.base[owner] + kSlotsOffset + (int64_t{phase} * p.world + from) * p.slot_bytes);
}

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Counts wrap around: v has reached `target` when it is at most 2^31 beyond it.
__device__ __forceinline__ bool reached(uint32_t v, uint32_t target) { return static_cast<int32_t>(v - target) >= 0; }

// This CTA's barriers with the same CTA of every rank, within one launch. Construct after the PDL wait
// (the count was written by the previous launch).
class Rendezvous {
 public:
  __device__ explicit Rendezvous(const Params& p) : m_p(p) {
    __shared__ uint32_t count, epoch;
    __shared__ int failed;
    if (threadIdx.x == 0) count = *counter(), epoch = *epoch_word(), failed = 0;
    __syncthreads();
    m_count = count, m_epoch = epoch, m_failed = &failed;
  }

  // The push slots this launch uses (the same on every rank: the ranks make the same push launches).
  __device__ uint32_t phase() const { return m_epoch & 1u; }

  // Arrives at the next barrier and waits until every rank's CTA has; what this CTA wrote (and read)
  // before is then visible to (and done for) the peers. False in every thread when a peer did not
  // arrive within the timeout (reported in the status word).
  __device__ bool sync() {
    const uint32_t target = ++m_count;
    __syncthreads();
    const int peer = static_cast<int>(threadIdx.x);
    if (peer < m_p.world) {
      store_release_sys(flag(m_p.base[peer], m_p.rank), target);
      const uint32_t* mine = flag(m_p.base[m_p.rank], peer);
      if (!reached(load_acquire_sys(mine), target)) {
        const uint64_t start = global_time_ns();
        while (!reached(load_acquire_sys(mine), target)) {
          if (global_time_ns() - start > m_p.timeout_ns) {
            *m_p.status = peer + 1;
            __threadfence_system();
            *m_failed = 1;
            break;
          }
        }
      }
    }
    __syncthreads();
    return *m_failed == 0;
  }

  // Keeps the barrier count for the next launch.
  __device__ void finish() const {
    if (threadIdx.x == 0) *counter() = m_count;
  }

  // finish() for a push launch: the last CTA to finish also moves the launch count on (the next launch,
  // which starts after this one has completed, takes the other slots).
  __device__ void finish_push() const {
    if (threadIdx.x != 0) return;
    *counter() = m_count;
    uint32_t* tally = epoch_word() + 1;
    if (atomicAdd(tally, 1u) == gridDim.x - 1) *tally = 0, *epoch_word() = m_epoch + 1;
  }

 private:
  __device__ uint32_t* flag(char* base, int from) const { return reinterpret_cast<uint32_t*>(base) + blockIdx.x * kMaxRanks + from; }
  __device__ uint32_t* counter() const { return reinterpret_cast<uint32_t*>(m_p.base[m_p.rank] + kCountersOffset) + blockIdx.x; }
  __device__ uint32_t* epoch_word() const { return reinterpret_cast<uint32_t*>(m_p.base[m_p.rank] + kEpochOffset); }

  const Params& m_p;
  uint32_t m_count, m_epoch;
  int* m_failed;
};

// The fp32 sum, in rank order, of vector i of every rank's copy (source(q): rank q's copy), rounded to T.
template <typename T, int kVec, typename Source>
__device__ __forceinline__ AlignedVector<T, kVec> sum_ranks(const Params& p, Source source, int64_t i) {
  AlignedVector<T, kVec> v[kMaxRanks];
#pragma unroll
  for (int q = 0; q < kMaxRanks; ++q)
    if (q < p.world) v[q].load(source(q) + i * kVec);  // every load issued before the sums
  float acc[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) acc[j] = device::cast<float>(v[0][j]);
#pragma unroll
  for (int q = 1; q < kMaxRanks; ++q)
    if (q < p.world) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[j] += device::cast<float>(v[q][j]);
    }
  AlignedVector<T, kVec> s;
#pragma unroll
  for (int j = 0; j < kVec; ++j) s[j] = device::cast<T>(acc[j]);
  return s;
}

// The caller's input and output, seen as vectors of kVec elements: 16-byte accesses where both are
// aligned, element by element where not. The vector width (and with it each CTA's share of the message)
// follows from the length alone, so it is the same on every rank whatever each rank's alignment. The
// alignment is a template argument so that the aligned kernels carry no per-access branch.
template <typename T, int kVec, bool kAligned>
struct Local {
  const T* in;
  T* out;

  __device__ __forceinline__ void load(AlignedVector<T, kVec>& v, int64_t i) const {
    if constexpr (kAligned) {
      v.load(in + i * kVec);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[j] = in[i * kVec + j];
    }
  }
  __device__ __forceinline__ void store(const AlignedVector<T, kVec>& v, int64_t i) const {
    if constexpr (kAligned) {
      v.store(out + i * kVec);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) out[i * kVec + j] = v[j];
    }
  }
};

// One-shot: each CTA copies in, and then sums, the vectors i with i / blockDim.x = blockIdx.x mod gridDim.x.
template <typename T, int kVec, bool kAligned>
__global__ void __launch_bounds__(kThreads) one_shot_kernel(const __grid_constant__ Params p, const Local<T, kVec, kAligned> io, int64_t nvec) {
#ifdef __CUDACC__
  using Vec = AlignedVector<T, kVec>;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x, stride = int64_t{gridDim.x} * blockDim.x;
  T* mine = data_of<T>(p, p.rank);
  device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  Rendezvous meet(p);
  for (int64_t i = first; i < nvec; i += stride) {
    Vec v;
    io.load(v, i);
    v.store(mine + i * kVec);
  }
  if (!meet.sync()) return;
  const auto copy = [&](int q) { return data_of<T>(p, q); };
  for (int64_t i = first; i < nvec; i += stride) io.store(sum_ranks<T, kVec>(p, copy, i), i);
  if (!meet.sync()) return;
  meet.finish();
#endif
}

// Push: each CTA writes, and then sums, the vectors i with i / blockDim.x = blockIdx.x mod gridDim.x.
template <typename T, int kVec, bool kAligned>
__global__ void __launch_bounds__(kThreads) push_kernel(const __grid_constant__ Params p, const Local<T, kVec, kAligned> io, int64_t nvec) {
#ifdef __CUDACC__
  using Vec = AlignedVector<T, kVec>;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x, stride = int64_t{gridDim.x} * blockDim.x;
  device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  Rendezvous meet(p);
  const uint32_t phase = meet.phase();
  for (int64_t i = first; i < nvec; i += stride) {
    Vec v;
    io.load(v, i);
#pragma unroll
    for (int q = 0; q < kMaxRanks; ++q)
      if (q < p.world) v.store(push_slot<T>(p, q, phase, p.rank) + i * kVec);
  }
  if (!meet.sync()) return;
  const auto slot = [&](int q) { return push_slot<T>(p, p.rank, phase, q); };
  for (int64_t i = first; i < nvec; i += stride) io.store(sum_ranks<T, kVec>(p, slot, i), i);
  meet.finish_push();
#endif
}

// Two-shot: the vectors are cut into world chunks of `chunk`; each CTA takes the same positions i within
// every chunk (i / blockDim.x = blockIdx.x mod gridDim.x). Rank r owns chunk r: it sums it from every
// rank's copy into its own buffer, from which the others gather it.
template <typename T, int kVec, bool kAligned>
__global__ void __launch_bounds__(kThreads) two_shot_kernel(const __grid_constant__ Params p, const Local<T, kVec, kAligned> io, int64_t nvec) {
#ifdef __CUDACC__
  using Vec = AlignedVector<T, kVec>;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x, stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t chunk = (nvec + p.world - 1) / p.world;
  T* mine = data_of<T>(p, p.rank);
  device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  Rendezvous meet(p);
  for (int64_t i = first; i < chunk; i += stride) {
    Vec v[kMaxRanks];
#pragma unroll
    for (int q = 0; q < kMaxRanks; ++q)
      if (q < p.world && q * chunk + i < nvec) io.load(v[q], q * chunk + i);
#pragma unroll
    for (int q = 0; q < kMaxRanks; ++q)
      if (q < p.world && q * chunk + i < nvec) v[q].store(mine + (q * chunk + i) * kVec);
  }
  if (!meet.sync()) return;
  const auto copy = [&](int q) { return data_of<T>(p, q); };
  for (int64_t i = first, at = p.rank * chunk + first; i < chunk && at < nvec; i += stride, at += stride) {
    const Vec s = sum_ranks<T, kVec>(p, copy, at);
    s.store(mine + at * kVec);
    io.store(s, at);
  }
  if (!meet.sync()) return;
  for (int64_t i = first; i < chunk; i += stride) {
    Vec v[kMaxRanks];
#pragma unroll
    for (int q = 0; q < kMaxRanks; ++q)
      if (q < p.world && q != p.rank && q * chunk + i < nvec) v[q].load(data_of<T>(p, q) + (q * chunk + i) * kVec);
#pragma unroll
    for (int q = 0; q < kMaxRanks; ++q)
      if (q < p.world && q != p.rank && q * chunk + i < nvec) io.store(v[q], q * chunk + i);
  }
  if (!meet.sync()) return;
  meet.finish();
#endif
}

// Push all-reduce of x [rows, hidden], then residual += the sum (rounded to T) and x = RMSNorm of the
// new residual * weight, as fused_add_rmsnorm computes it. Each CTA takes whole rows (row = blockIdx.x mod
// gridDim.x); each thread re-reads in the second pass the residual vectors it wrote in the first.
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads) fused_add_rmsnorm_kernel(const __grid_constant__ Params p, T* x, T* residual, const T* weight,
                                                                     int64_t rows, int64_t hvec, float eps) {
#ifdef __CUDACC__
  using Vec = AlignedVector<T, kVec>;
  const float inv_hidden = 1.0f / static_cast<float>(hvec * kVec);
  device::pdl_trigger_secondary();
  device::pdl_wait_primary();
  Rendezvous meet(p);
  const uint32_t phase = meet.phase();
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)
    for (int64_t j = threadIdx.x; j < hvec; j += blockDim.x) {
      Vec v;
      v.load(x + (row * hvec + j) * kVec);
#pragma unroll
      for (int q = 0; q < kMaxRanks; ++q)
        if (q < p.world) v.store(push_slot<T>(p, q, phase, p.rank) + (row * hvec + j) * kVec);
    }
  if (!meet.sync()) return;
  const auto slot = [&](int q) { return push_slot<T>(p, p.rank, phase, q); };
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float squares = 0.0f;
    for (int64_t j = threadIdx.x; j < hvec; j += blockDim.x) {
      const int64_t i = row * hvec + j;
      const Vec s = sum_ranks<T, kVec>(p, slot, i);
      Vec r;
      r.load(residual + i * kVec);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        r[k] = device::cast<T>(device::cast<float>(r[k]) + device::cast<float>(s[k]));
        const float v = device::cast<float>(r[k]);
        squares += v * v;
      }
      r.store(residual + i * kVec);
    }
    const float scale = rsqrtf(device::cta::reduce_sum(squares) * inv_hidden + eps);
    for (int64_t j = threadIdx.x; j < hvec; j += blockDim.x) {
      const int64_t i = row * hvec + j;
      Vec r, w, y;
      r.load(residual + i * kVec);
      w.load(weight + j * kVec);
#pragma unroll
      for (int k = 0; k < kVec; ++k) y[k] = device::cast<T>(device::cast<float>(r[k]) * scale * device::cast<float>(w[k]));
      y.store(x + i * kVec);
    }
  }
  meet.finish_push();
#endif
}

// ---- host ----

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
struct Comm {
  int32_t device, rank, world;
  int64_t capacity;      // pull data bytes of each rank's buffer
  int64_t one_shot_max;  // messages up to this many bytes take the push or the one-shot kernel
  uint64_t timeout_ns;
  int64_t push_max = 0;  // ... the push kernel up to the smaller of this and one_shot_max
  char* own = nullptr;   // this rank's buffer (cudaMalloc)
  bool opened = false;   // the peers' buffers are mapped
  Params params{};
};

Comm* comm_of(int64_t handle) {
  host::RuntimeCheck(handle != 0, "the communicator's handle is null (closed?)");
  return reinterpret_cast<Comm*>(static_cast<uintptr_t>(handle));
}


// TimeoutError if a kernel of this communicator gave up waiting (it stays unusable: its ranks no longer
// agree on the barrier counts).
void raise_if_failed(const Comm* c) {
  const int32_t status = __atomic_load_n(const_cast<const int32_t*>(c->params.status), __ATOMIC_ACQUIRE);
  if (status != 0)
    host::Raise(host::ErrorKind::kTimeout, "jitkern.AllReduce: rank ", c->rank, " waited more than ", c->timeout_ns / 1000000,
                " ms for rank ", status - 1, " to reach the same all-reduce; the communicator is unusable: close it and create a new one");
}

// Checks that `t` is a contiguous tensor on the communicator's GPU.
void check_placement(const Comm* c, const jitkern::TensorView& t, const char* name) {
  const DLDevice d = t.device();
  host::RuntimeCheck(d.device_type == kDLCUDA && d.device_id == c->device, name, " must be on cuda:", c->device,
                     " (the communicator's device), got device type ", static_cast<int>(d.device_type), " id ", d.device_id);
  host::RuntimeCheck(t.is_contiguous(), name, " must be contiguous");
}

// Vectors of 16 bytes where the length allows (and, for the fused kernel, every pointer), else single elements.
template <typename T>
constexpr int kVecOf = device::kVec16<T>;


// Whether a message of `bytes` takes a push kernel (the plain or the fused one).
bool pushes(const Comm* c, int64_t bytes) { return bytes <= host::min(c->one_shot_max, c->push_max); }

template <typename T, int kVec, bool kAligned>
void launch_all_reduce(const Comm* c, const void* in, void* out, int64_t nvec, DLDevice device) {
  const int64_t bytes = nvec * kVec * static_cast<int64_t>(sizeof(T));
  const auto kernel = pushes(c, bytes) ? push_kernel<T, kVec, kAligned>
                      : bytes <= c->one_shot_max ? one_shot_kernel<T, kVec, kAligned> : two_shot_kernel<T, kVec, kAligned>;
  const int64_t per_rank = bytes <= c->one_shot_max ? nvec : (nvec + c->world - 1) / c->world;  // vectors each rank's CTAs walk
  const int64_t grid = host::min<int64_t>(kMaxBlocks, host::max<int64_t>(1, host::div_ceil(per_rank, kThreads)));
  host::LaunchKernel launch(static_cast<unsigned>(grid), kThreads, device);
  launch.enable_pdl();
  launch(kernel, c->params, Local<T, kVec, kAligned>{static_cast<const T*>(in), static_cast<T*>(out)}, nvec);
}

template <typename T>
void dispatch_all_reduce(const Comm* c, const void* in, void* out, int64_t n, DLDevice device) {
  if (n % kVecOf<T> != 0)  // the width from the length alone: every rank splits the message alike (Local)
    launch_all_reduce<T, 1, true>(c, in, out, n, device);
  else if (host::vector_width(kVecOf<T>, n, {{in, sizeof(T)}, {out, sizeof(T)}}, {}) == kVecOf<T>)
    launch_all_reduce<T, kVecOf<T>, true>(c, in, out, n / kVecOf<T>, device);
  else
    launch_all_reduce<T, kVecOf<T>, false>(c, in, out, n / kVecOf<T>, device);
}

template <typename T, int kVec>
void launch_fused(const Comm* c, void* x, void* residual, const void* weight, int64_t rows, int64_t hidden, float eps, DLDevice device) {
  const int64_t hvec = hidden / kVec;
  const int threads = static_cast<int>(host::min<int64_t>(kThreads, host::div_ceil(hvec, 32) * 32));
  host::LaunchKernel launch(static_cast<unsigned>(host::min<int64_t>(rows, kMaxBlocks)), threads, device);
  launch.enable_pdl();
  launch(fused_add_rmsnorm_kernel<T, kVec>, c->params, static_cast<T*>(x), static_cast<T*>(residual), static_cast<const T*>(weight), rows,
         hvec, eps);
}

template <typename T>
void dispatch_fused(const Comm* c, void* x, void* residual, const void* weight, int64_t rows, int64_t hidden, float eps, DLDevice device) {
  if (host::vector_width(kVecOf<T>, hidden, {{x, sizeof(T)}, {residual, sizeof(T)}, {weight, sizeof(T)}}, {}) == kVecOf<T>)
    launch_fused<T, kVecOf<T>>(c, x, residual, weight, rows, hidden, eps, device);
  else
    launch_fused<T, 1>(c, x, residual, weight, rows, hidden, eps, device);
}

// ---- exported ----

// A communicator for `rank` of `world` on `device`, with a buffer of the push slots and `capacity` pull
// data bytes (the counts zeroed: every barrier count starts at 0). timeout_ms: how long a kernel waits for
// a peer.
int64_t create(int64_t device, int64_t rank, int64_t world, int64_t capacity, int64_t one_shot_max, int64_t timeout_ms) {
  host::RuntimeCheck(world >= 1 && world <= kMaxRanks, "world must be 1 to ", kMaxRanks, ", got ", world);
  host::RuntimeCheck(rank >= 0 && rank < world, "rank must be in [0, world), got ", rank);
  host::RuntimeCheck(capacity > 0 && capacity % 16 == 0, "capacity must be a positive multiple of 16 bytes, got ", capacity);
  host::RuntimeCheck(timeout_ms > 0 && timeout_ms <= int64_t{1} << 40, "timeout_ms must be positive, got ", timeout_ms);
  host::RuntimeCheck(one_shot_max >= 0, "one_shot_max must not be negative, got ", one_shot_max);
  const host::DeviceGuard scope(static_cast<int>(device));
  auto* c = new Comm{static_cast<int32_t>(device), static_cast<int32_t>(rank), static_cast<int32_t>(world), capacity, one_shot_max,
                     static_cast<uint64_t>(timeout_ms) * 1000000u};
  c->params.slot_bytes = world > 1 ? host::min(kPushSlotBytes, capacity) : 0;
  c->params.data_offset = kSlotsOffset + 2 * world * c->params.slot_bytes;
  c->push_max = c->params.slot_bytes;
  void* status = nullptr;
  if (cudaHostAlloc(&status, sizeof(int32_t), cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&c->own), c->params.data_offset + capacity) != cudaSuccess || cudaMemset(c->own, 0, kSlotsOffset) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess) {
    const cudaError_t error = cudaGetLastError();
    if (status != nullptr) cudaFreeHost(status);
    if (c->own != nullptr) cudaFree(c->own);
    delete c;
    host::RuntimeDeviceCheck(error);
  }
  *static_cast<int32_t*>(status) = 0;
  void* on_device = nullptr;
  host::RuntimeDeviceCheck(cudaHostGetDevicePointer(&on_device, status, 0));
  c->params.status = static_cast<volatile int32_t*>(on_device);
  host::RuntimeCheck(on_device == status, "pinned memory is not at the same address on the GPU (no unified addressing)");
  c->params.rank = c->rank, c->params.world = c->world, c->params.timeout_ns = c->timeout_ns;
  c->params.base[c->rank] = c->own;
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(c));
}

// Writes the IPC handle of this rank's buffer into `handle` (CPU uint8 [64]).
void ipc_handle(int64_t comm, jitkern::TensorView handle) {
  Comm* c = comm_of(comm);
  host::TensorMatcher({int64_t{sizeof(cudaIpcMemHandle_t)}}).with_dtype<uint8_t>().with_device<kDLCPU>().verify(handle, "handle");
  const host::DeviceGuard scope(c->device);
  host::RuntimeDeviceCheck(cudaIpcGetMemHandle(static_cast<cudaIpcMemHandle_t*>(handle.data_ptr()), c->own));
}

// Maps every peer's buffer (handles: CPU uint8 [world, 64], row q from rank q). False, with nothing
// mapped, where CUDA refuses one (no peer access between these GPUs): the caller then uses NCCL.
bool open_peers(int64_t comm, jitkern::TensorView handles) {
  Comm* c = comm_of(comm);
  host::TensorMatcher({int64_t{c->world}, int64_t{sizeof(cudaIpcMemHandle_t)}}).with_dtype<uint8_t>().with_device<kDLCPU>().verify(handles,
                                                                                                                                  "handles");
  host::RuntimeCheck(!c->opened, "the peers are already open");
  const host::DeviceGuard scope(c->device);
  const auto* rows = static_cast<const cudaIpcMemHandle_t*>(handles.data_ptr());
  for (int q = 0; q < c->world; ++q) {
    if (q == c->rank) continue;
    void* peer = nullptr;
    if (cudaIpcOpenMemHandle(&peer, rows[q], cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
      cudaGetLastError();
      for (int k = 0; k < q; ++k)
        if (k != c->rank) cudaIpcCloseMemHandle(c->params.base[k]), c->params.base[k] = nullptr;
      return false;
    }
    c->params.base[q] = static_cast<char*>(peer);
  }
  c->opened = true;
  return true;
}

// Unmaps the peers' buffers (every rank must do this before any rank calls destroy).
void close_peers(int64_t comm) {
  Comm* c = comm_of(comm);
  const host::DeviceGuard scope(c->device);
  host::RuntimeDeviceCheck(cudaDeviceSynchronize());
  for (int q = 0; q < c->world; ++q)
    if (q != c->rank && c->params.base[q] != nullptr) cudaIpcCloseMemHandle(c->params.base[q]), c->params.base[q] = nullptr;
  c->opened = false;
}

// Frees this rank's buffer and the communicator.
void destroy(int64_t comm) {
  Comm* c = comm_of(comm);
  close_peers(comm);
  const host::DeviceGuard scope(c->device);
  cudaFree(c->own);
  cudaFreeHost(const_cast<int32_t*>(c->params.status));
  delete c;
}

void set_one_shot_max(int64_t comm, int64_t bytes) {
  host::RuntimeCheck(bytes >= 0, "one_shot_max_bytes must not be negative, got ", bytes);
  comm_of(comm)->one_shot_max = bytes;
}

void set_push_max(int64_t comm, int64_t bytes) {
  Comm* c = comm_of(comm);
  host::RuntimeCheck(bytes >= 0 && bytes <= kPushSlotBytes, "push_max_bytes must be in [0, ", kPushSlotBytes, "], got ", bytes);
  c->push_max = host::min(bytes, c->params.slot_bytes);
}

// The push kernel's limit in effect: set_push_max's value, at most the slot size (0 without peers).
int64_t push_max(int64_t comm) { return comm_of(comm)->push_max; }

// Raises TimeoutError if a kernel of this communicator gave up waiting for a peer.
void check(int64_t comm) { raise_if_failed(comm_of(comm)); }

// The kernels of one element type T (fp16_t, bf16_t or fp32_t), one module each, so that a build compiles
// only that type's; the communicator (create, above) is plain data that every module shares by its handle.
template <typename T>
struct Reduce {
  // out = the sum of x over the ranks (out may be x). Checks the arguments, then returns false without
  // launching where the kernels do not apply (peers not mapped, a dtype other than T, more bytes than the
  // buffer holds): the caller then uses NCCL.
  static bool all_reduce(int64_t comm, jitkern::TensorView x, jitkern::TensorView out) {
    const Comm* c = comm_of(comm);
    raise_if_failed(c);
    check_placement(c, x, "x");
    check_placement(c, out, "out");
    if (!host::dtype_equal(out.dtype(), x.dtype())) host::Raise(host::ErrorKind::kType, "out must have x's dtype ", x.dtype(), ", got ", out.dtype());
    host::RuntimeCheck(out.ndim() == x.ndim(), "out must have x's shape: ", x.ndim(), " dimensions, got ", out.ndim());
    for (int d = 0; d < x.ndim(); ++d)
      host::RuntimeCheck(out.size(d) == x.size(d), "out must have x's shape: dimension ", d, " is ", out.size(d), ", x's is ", x.size(d));
    const int64_t n = x.numel(), bytes = n * (x.dtype().bits / 8);
    if (!c->opened || !host::is_type<T>(x.dtype()) || bytes > c->capacity) return false;
    if (n == 0) return true;
    dispatch_all_reduce<T>(c, x.data_ptr(), out.data_ptr(), n, x.device());
    return true;
  }

  // residual += the sum of x over the ranks; x = RMSNorm(residual) * weight (x, residual: [rows, hidden],
  // contiguous). Returns false without launching where the push kernel does not apply (peers not mapped,
  // a dtype other than T, more bytes than the one-shot limit or a push slot): the caller then all-reduces
  // and normalises in two steps.
  static bool all_reduce_add_rmsnorm(int64_t comm, jitkern::TensorView x, jitkern::TensorView residual, jitkern::TensorView weight,
                                     double eps) {
    using namespace host;
    const Comm* c = comm_of(comm);
    raise_if_failed(c);
    SymbolicSize rows{"rows"}, hidden{"hidden"};
    SymbolicDType dtype;
    SymbolicDevice device;
    TensorMatcher({rows, hidden}).with_strides({hidden, 1}).with_dtype<fp16_t, bf16_t, fp32_t>(dtype).with_device<kDLCUDA>(device).verify(x, "x").verify(
        residual, "residual");
    TensorMatcher({hidden}).with_strides({1}).with_dtype(dtype).with_device(device).verify(weight, "weight");
    check_placement(c, x, "x");
    RuntimeCheck(eps >= 0, "eps must not be negative, got ", eps);
    const int64_t bytes = rows.unwrap() * hidden.unwrap() * (dtype.unwrap().bits / 8);
    if (!c->opened || !is_type<T>(dtype.unwrap()) || !pushes(c, bytes)) return false;
    if (bytes == 0) return true;
    dispatch_fused<T>(c, x.data_ptr(), residual.data_ptr(), weight.data_ptr(), rows.unwrap(), hidden.unwrap(), static_cast<float>(eps),
                      device.unwrap());
    return true;
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_all_reduce
