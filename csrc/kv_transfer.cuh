// KV-cache transfer (the HiCache kernels of the reference framework, SGLang): for each i, row indices_src[i] of every source buffer (K and V,
// or the one MLA buffer) is copied to row indices_dst[i] of the destination buffer, for one layer or for
// all layers in one launch. Buffers on the GPU or in pinned host memory, in any direction; layer-first
// ([rows, *row] per layer) or page-first ([pages, page_size, *row] for one layer, [pages, layers,
// page_size, *row] for all). A row is any multiple of 4 bytes, contiguous; rows may be strided.
//
// Mechanism: with the indices on the GPU, an SM kernel (block_quota CTAs at most; a host transfer
// defaults to kHostBlockQuota, or kHostWideBlockQuota over a large host pool). With the indices on the host, rows adjacent on both sides merge into one
// copy; a host transfer whose copies are long enough goes to the copy engines (cudaMemcpyBatchAsync, no
// SM), anything else to the SM kernel with the indices copied to the GPU. Out-of-range indices are skipped; validate=true raises
// IndexError for the first one instead, before anything is copied.
#pragma once

#include <jitkern/optional.h>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/utils.cuh>
#include <jitkern/utils.h>

#include <cstdint>
#ifndef __CUDACC_RTC__
#include <vector>
#endif

namespace jitkern_kv_transfer {

constexpr int kTransferThreads = 1024;
constexpr int kTransferUnroll = 4;   // vectors per buffer each thread has in flight
// CTAs of a transfer that touches host memory, unless block_quota says: 2 already reach PCIe's ~51 GB/s on
// an H100 and slow a GEMM beside them half as much as 4 (docs/benchmarks/kv_transfer.md) -- while one layer's rows lie
// in at most kHostNarrowSpanBytes of host memory. Rows scattered over more miss the GPU's address
// translation caches on most rows, and only more CTAs (on more of the GPU's translation units) keep enough
// writes in flight: H100, 32K random rows of 2 KiB (K and V) over host pools of 1 GiB, GPU to host: 2 CTAs
// 34.8 GB/s, 4 CTAs 52.2; pools of 2 GiB: 26.3 and 50.0 (docs/benchmarks/kv_transfer.md).
constexpr int kHostBlockQuota = 2;
constexpr int kHostWideBlockQuota = 4;
constexpr uint64_t kHostNarrowSpanBytes = uint64_t{512} << 20;
// Host indices go to the copy engines when their copies average this much (H100: runs of 128 KiB beat the
// SM kernel, single 2 KiB rows ran at 1-3 GB/s; docs/benchmarks/kv_transfer.md); otherwise to the SM kernel.
constexpr size_t kCopyEngineMinBytes = 64 << 10;
constexpr uint64_t kNoLimit = ~uint64_t{0};

// One side of a transfer: where row `index` of buffer b (0: K or the MLA buffer, 1: V) of a layer lives.
struct CacheSide {
  const uint64_t* tables[2];  // layer-first, all layers: each layer's base address, else null
  char* bases[2];             // otherwise: each buffer's base address (of layer 0)
  int64_t layer_stride;       // bytes from one layer to the next (page-first, all layers)
  int64_t page_stride;        // bytes from one page to the next (layer-first: the row stride)
  int64_t row_stride;         // bytes from one row of a page to the next
  uint64_t page_size;         // rows per page; 1 for layer-first
  uint64_t rows;              // indices at or past this are skipped (kNoLimit: unknown)
  const void* indices;

  __host__ __device__ char* row(int b, uint32_t layer, uint64_t index) const {
    char* base = tables[b] != nullptr ? reinterpret_cast<char*>(tables[b][layer]) : bases[b] + layer * layer_stride;
    if (page_size == 1) return base + index * page_stride;
    return base + (index / page_size) * page_stride + (index % page_size) * row_stride;
  }
  template <typename Index>
  __host__ __device__ bool take(uint32_t i, uint64_t* index) const {
    const Index value = static_cast<const Index*>(indices)[i];
    *index = static_cast<uint64_t>(value);
    return value >= 0 && *index < rows;
  }
};

struct TransferParams {
  CacheSide src, dst;
  uint32_t n;        // indices
  uint32_t layers;
  uint32_t buffers;  // 2 (K, V) or 1 (MLA)
  uint32_t vectors;  // vectors of sizeof(Vec) bytes per row
};

// Workers of kLanes threads take (layer, i) rows in turn (t = layer * n + i); each thread loads kTransferUnroll vectors of
// every buffer before it stores any, so that enough bytes are in flight to cover PCIe's latency.
template <typename Index, typename Vec, int kLanes>
__global__ void __launch_bounds__(kTransferThreads) transfer_rows_kernel(const __grid_constant__ TransferParams p) {
#ifdef __CUDACC__
  const uint32_t lane = threadIdx.x % kLanes;
  const uint32_t workers = gridDim.x * (kTransferThreads / kLanes);
  const uint32_t tasks = p.n * p.layers;
  for (uint32_t t = (blockIdx.x * kTransferThreads + threadIdx.x) / kLanes; t < tasks; t += workers) {
    const uint32_t layer = t / p.n, i = t - layer * p.n;
    uint64_t s, d;
    const bool src_ok = p.src.take<Index>(i, &s), dst_ok = p.dst.take<Index>(i, &d);
    if (!src_ok || !dst_ok) continue;
    const Vec* from[2] = {reinterpret_cast<const Vec*>(p.src.row(0, layer, s)), nullptr};
    Vec* to[2] = {reinterpret_cast<Vec*>(p.dst.row(0, layer, d)), nullptr};
    if (p.buffers == 2) {
      from[1] = reinterpret_cast<const Vec*>(p.src.row(1, layer, s));
      to[1] = reinterpret_cast<Vec*>(p.dst.row(1, layer, d));
    }
    for (uint32_t c = lane; c < p.vectors; c += kLanes * kTransferUnroll) {
      Vec v[2][kTransferUnroll];
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int u = 0; u < kTransferUnroll; ++u)
          if (b < p.buffers && c + u * kLanes < p.vectors) v[b][u] = __ldcs(from[b] + c + u * kLanes);
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int u = 0; u < kTransferUnroll; ++u)
          if (b < p.buffers && c + u * kLanes < p.vectors) __stcs(to[b] + c + u * kLanes, v[b][u]);
    }
  }
#endif
}

// The first position i whose index is out of [0, rows) (atomic minimum into *first).
template <typename Index>
__global__ void first_out_of_range_kernel(const Index* indices, uint32_t n, uint64_t rows, unsigned long long* first) {
#ifdef __CUDACC__
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (indices[i] < 0 || static_cast<uint64_t>(indices[i]) >= rows) atomicMin(first, static_cast<unsigned long long>(i));
#endif
}

#ifndef __CUDACC_RTC__  // host code: NVRTC compiles the kernels only
// What a tensor argument says about one side, before it becomes a CacheSide.
struct SideInfo {
  CacheSide side{};
  int64_t row_bytes = -1;  // -1: a pointer table (the caller gives the row size)
  int64_t layers = -1;     // -1: any (a one-layer tensor or a table fixes it otherwise)
  bool on_host = false;    // the memory, or the table, is on the host
  bool aligned16 = true;
  bool aligned4 = true;  // what the SM copy of 4-byte words needs (the copy engines take any alignment)
  DLDataType dtype{};
  int device_id = -1;      // the CUDA device of GPU memory, -1 for host memory
  uint64_t layer_span = 0;  // bytes of memory one layer's rows lie in, K and V together (kNoLimit: unknown)
};

using jitkern::Optional;
using jitkern::TensorView;

struct KvTransfer {
  // Layouts of a cache tensor.
  enum Layout : int64_t { kLayerFirst = 0, kPageFirst = 1 };

  // One layer: k/v [rows, *row] (layer-first) or [pages, page_size, *row] (page-first); v None for MLA.
  static void one_layer(TensorView k_dst, Optional<TensorView> v_dst, TensorView indices_dst, TensorView k_src,
                        Optional<TensorView> v_src, TensorView indices_src, int64_t dst_layout, int64_t src_layout,
                        int64_t block_quota, bool validate) {
    SideInfo dst = describe(k_dst, v_dst, "k_dst", "v_dst", dst_layout, false);
    if (v_dst.has_value()) host::check_distinct(k_dst, *v_dst, "k_dst", "v_dst");
    SideInfo src = describe(k_src, v_src, "k_src", "v_src", src_layout, false);
    run(dst, src, indices_dst, indices_src, v_dst.has_value(), v_src.has_value(), 1, -1, block_quota, validate);
  }

  // All layers: each side a pointer table (uint64/int64 [layers]: each layer's base address, layer-first,
  // rows `*_row_stride_bytes` apart) or a page-first tensor [pages, layers, page_size, *row].
  // row_bytes: the row size (needed when both sides are tables); *_rows: the tables' row counts (-1:
  // unknown, indices are not bounded).
  static void all_layers(TensorView k_dst, Optional<TensorView> v_dst, TensorView indices_dst, TensorView k_src,
                         Optional<TensorView> v_src, TensorView indices_src, int64_t dst_row_stride_bytes,
                         int64_t src_row_stride_bytes, int64_t row_bytes, int64_t dst_rows, int64_t src_rows,
                         int64_t block_quota, bool validate) {
    SideInfo dst = describe_all(k_dst, v_dst, "k_dst", "v_dst", dst_row_stride_bytes, dst_rows);
    if (v_dst.has_value()) host::check_distinct(k_dst, *v_dst, "k_dst", "v_dst");  // one table twice: K and V on the same rows
    SideInfo src = describe_all(k_src, v_src, "k_src", "v_src", src_row_stride_bytes, src_rows);
    int64_t layers = dst.layers >= 0 ? dst.layers : src.layers;
    host::RuntimeCheck(dst.layers < 0 || src.layers < 0 || dst.layers == src.layers, "k_dst has ", dst.layers,
                       " layers but k_src has ", src.layers);
    run(dst, src, indices_dst, indices_src, v_dst.has_value(), v_src.has_value(), layers, row_bytes, block_quota, validate);
  }

 private:
  static bool row_is_compact(TensorView t, int first) {
    int64_t expected = 1;
    for (int d = t.dim() - 1; d >= first; --d) {
      if (t.size(d) != 1 && t.stride(d) != expected) return false;
      expected *= t.size(d);
    }
    return true;
  }

  // The memory behind `t`: GPU memory (its device), or pinned host memory (as the GPU addresses it).
  static char* locate(TensorView t, const char* name, SideInfo* info) {
    const DLDevice dev = t.device();
    if (dev.device_type == kDLCUDA) {
      info->device_id = dev.device_id;
      return static_cast<char*>(t.data_ptr());
    }
    host::RuntimeCheck(dev.device_type == kDLCPU || dev.device_type == kDLCUDAHost, name,
                       " must be on a CUDA device or in pinned host memory, got device type ", static_cast<int>(dev.device_type));
    info->on_host = true;
    if (t.numel() == 0) return static_cast<char*>(t.data_ptr());
    cudaPointerAttributes attr{};
    host::RuntimeDeviceCheck(cudaPointerGetAttributes(&attr, t.data_ptr()));
    host::RuntimeCheck(attr.type == cudaMemoryTypeHost && attr.devicePointer != nullptr, name,
                       " is pageable host memory, which the GPU cannot read or write: allocate it pinned "
                       "(torch.empty(..., pin_memory=True)) or pin it (torch.Tensor.pin_memory(), cudaHostRegister)");
    return static_cast<char*>(attr.devicePointer);
  }

  // A one-layer cache tensor, or (all_layers) a page-first one with a layers dimension.
  static SideInfo describe(TensorView k, const Optional<TensorView>& v, const char* k_name, const char* v_name,
                           int64_t layout, bool with_layers) {
    using namespace host;
    RuntimeCheck(layout == kLayerFirst || layout == kPageFirst, k_name, ": unknown layout ", layout);
    const bool paged = layout == kPageFirst;
    const int index_dims = paged ? (with_layers ? 3 : 2) : 1;
    RuntimeCheck(k.dim() > index_dims, k_name, " must have at least ", index_dims + 1, " dimensions (",
                 paged ? (with_layers ? "pages, layers, page_size, *row" : "pages, page_size, *row") : "rows, *row", "), got ", k.dim());
    RuntimeCheck(row_is_compact(k, index_dims), k_name, ": each row (the dimensions after the first ", index_dims,
                 ") must be contiguous");
    if (v.has_value()) {
      const TensorView vv = *v;
      RuntimeCheck(vv.dim() == k.dim(), v_name, " must have ", k_name, "'s shape: ", vv.dim(), " dimensions, not ", k.dim());
      for (int d = 0; d < k.dim(); ++d) {
        RuntimeCheck(vv.size(d) == k.size(d), v_name, " must have ", k_name, "'s shape: dimension ", d, " is ", vv.size(d),
                     ", not ", k.size(d));
        RuntimeCheck(vv.size(d) == 1 || vv.stride(d) == k.stride(d), v_name, " must have ", k_name, "'s strides: dimension ", d,
                     " has stride ", vv.stride(d), ", not ", k.stride(d));
      }
      RuntimeCheck(dtype_equal(vv.dtype(), k.dtype()), v_name, " must have ", k_name, "'s dtype");
      RuntimeCheck(vv.device().device_type == k.device().device_type && vv.device().device_id == k.device().device_id, v_name,
                   " must be on ", k_name, "'s device");
    }
    SideInfo info;
    const int64_t elem = static_cast<int64_t>(dtype_bytes(k.dtype()));
    info.dtype = k.dtype();
    info.row_bytes = elem;
    for (int d = index_dims; d < k.dim(); ++d) info.row_bytes *= k.size(d);
    CacheSide& s = info.side;
    s.bases[0] = locate(k, k_name, &info);
    if (v.has_value()) s.bases[1] = locate(*v, v_name, &info);
    s.page_size = paged ? static_cast<uint64_t>(k.size(index_dims - 1)) : 1;
    s.page_stride = k.stride(0) * elem;
    s.row_stride = paged ? k.stride(index_dims - 1) * elem : s.page_stride;
    s.layer_stride = with_layers ? k.stride(1) * elem : 0;
    s.rows = static_cast<uint64_t>(k.size(0)) * s.page_size;
    info.layers = with_layers ? k.size(1) : 1;
    info.layer_span = static_cast<uint64_t>(k.size(0)) * static_cast<uint64_t>(s.page_stride) / static_cast<uint64_t>(info.layers) *
                      (v.has_value() ? 2 : 1);
    for (int b = 0; b < 2; ++b)
      info.aligned16 &= reinterpret_cast<uintptr_t>(s.bases[b]) % 16 == 0;
    info.aligned16 &= s.page_stride % 16 == 0 && s.row_stride % 16 == 0 && s.layer_stride % 16 == 0;
    for (int b = 0; b < 2; ++b)
      info.aligned4 &= reinterpret_cast<uintptr_t>(s.bases[b]) % 4 == 0;
    info.aligned4 &= s.page_stride % 4 == 0 && s.row_stride % 4 == 0 && s.layer_stride % 4 == 0;
    return info;
  }

  static SideInfo describe_all(TensorView k, const Optional<TensorView>& v, const char* k_name, const char* v_name,
                               int64_t row_stride_bytes, int64_t rows) {
    using namespace host;
    if (k.dim() != 1) return describe(k, v, k_name, v_name, kPageFirst, true);
    RuntimeCheck(is_type<uint64_t>(k.dtype()) || is_type<int64_t>(k.dtype()), k_name,
                 " must be a table of layer base addresses (uint64 or int64) or a page-first cache tensor");
    RuntimeCheck(row_stride_bytes > 0, k_name, " is a pointer table: give its row stride in bytes (got ", row_stride_bytes, ")");
    SideInfo info;
    info.row_bytes = -1;
    info.layers = k.size(0);
    info.on_host = k.device().device_type != kDLCUDA;
    info.device_id = info.on_host ? -1 : k.device().device_id;
    RuntimeCheck(k.stride(0) == 1 || k.size(0) <= 1, k_name, " must be contiguous");
    CacheSide& s = info.side;
    s.tables[0] = static_cast<const uint64_t*>(k.data_ptr());
    if (v.has_value()) {
      const TensorView vv = *v;
      RuntimeCheck(vv.dim() == 1 && vv.size(0) == k.size(0) && dtype_equal(vv.dtype(), k.dtype()), v_name,
                   " must be a table like ", k_name, " (", k.size(0), " layers)");
      RuntimeCheck(vv.device().device_type == k.device().device_type && vv.device().device_id == k.device().device_id, v_name,
                   " must be on ", k_name, "'s device");
      RuntimeCheck(vv.stride(0) == 1 || vv.size(0) <= 1, v_name, " must be contiguous");
      s.tables[1] = static_cast<const uint64_t*>(vv.data_ptr());
    }
    s.page_size = 1;
    s.page_stride = s.row_stride = row_stride_bytes;
    s.rows = rows < 0 ? kNoLimit : static_cast<uint64_t>(rows);
    info.layer_span = rows < 0 ? kNoLimit : s.rows * static_cast<uint64_t>(row_stride_bytes) * (v.has_value() ? 2 : 1);
    info.aligned16 = row_stride_bytes % 16 == 0;  // the table's addresses are taken to be 16-byte aligned
    info.aligned4 = row_stride_bytes % 4 == 0;
    return info;
  }

  template <typename Index>
  static void check_indices(const CacheSide& s, TensorView indices, const char* name, const char* cache, uint32_t n, int device,
                            cudaStream_t stream) {
    if (s.rows == kNoLimit || n == 0) return;
    Index bad_value = 0;
    uint64_t bad = kNoLimit;
    if (indices.device().device_type != kDLCUDA) {
      for (uint32_t i = 0; i < n && bad == kNoLimit; ++i) {
        uint64_t index;
        if (!s.take<Index>(i, &index)) bad = i, bad_value = static_cast<const Index*>(s.indices)[i];
      }
    } else {
      unsigned long long* first = nullptr;
      host::RuntimeDeviceCheck(cudaMallocAsync(reinterpret_cast<void**>(&first), sizeof *first, stream));
      host::RuntimeDeviceCheck(cudaMemsetAsync(first, 0xff, sizeof *first, stream));
      const unsigned blocks = static_cast<unsigned>(host::div_ceil(n, 256u) < 1024 ? host::div_ceil(n, 256u) : 1024);
      // On the transfer's device (its stream's), which need not be the current one.
      host::LaunchKernel(blocks, 256, DLDevice{kDLCUDA, device})(first_out_of_range_kernel<Index>, static_cast<const Index*>(s.indices), n,
                                                                 s.rows, first);
      unsigned long long position = 0;
      host::RuntimeDeviceCheck(cudaMemcpyAsync(&position, first, sizeof position, cudaMemcpyDeviceToHost, stream));
      host::RuntimeDeviceCheck(cudaFreeAsync(first, stream));
      host::RuntimeDeviceCheck(cudaStreamSynchronize(stream));
      bad = position;
      if (bad != kNoLimit) {
        host::RuntimeDeviceCheck(cudaMemcpyAsync(&bad_value, static_cast<const Index*>(s.indices) + bad, sizeof bad_value,
                                                 cudaMemcpyDeviceToHost, stream));
        host::RuntimeDeviceCheck(cudaStreamSynchronize(stream));
      }
    }
    if (bad != kNoLimit)
      host::Raise(host::ErrorKind::kIndex, name, "[", static_cast<int64_t>(bad), "] = ", static_cast<int64_t>(bad_value),
                  " is out of range for ", cache, ", which has ", static_cast<int64_t>(s.rows), " rows");
  }

  static void run(SideInfo& dst, SideInfo& src, TensorView indices_dst, TensorView indices_src, bool v_dst, bool v_src,
                  int64_t layers, int64_t row_bytes, int64_t block_quota, bool validate) {
    using namespace host;
    RuntimeCheck(v_dst == v_src, v_dst ? "v_src is None but v_dst is not" : "v_dst is None but v_src is not");
    const bool tensors = dst.row_bytes >= 0 && src.row_bytes >= 0;
    RuntimeCheck(!tensors || dtype_equal(dst.dtype, src.dtype), "k_dst and k_src must have the same dtype");
    if (dst.row_bytes >= 0 && src.row_bytes >= 0)
      RuntimeCheck(dst.row_bytes == src.row_bytes, "rows differ: ", dst.row_bytes, " bytes in k_dst, ", src.row_bytes,
                   " in k_src");
    const int64_t known = dst.row_bytes >= 0 ? dst.row_bytes : src.row_bytes;
    if (row_bytes < 0) {  // two pointer tables: rows as long as their (equal) strides, as the reference assumes
      RuntimeCheck(known >= 0 || dst.side.row_stride == src.side.row_stride,
                   "give row_bytes: both sides are pointer tables and their row strides differ (", dst.side.row_stride, " and ",
                   src.side.row_stride, " bytes)");
      row_bytes = known >= 0 ? known : dst.side.row_stride;
    }
    RuntimeCheck(known < 0 || known == row_bytes, "row_bytes is ", row_bytes, " but the cache rows are ", known, " bytes");
    RuntimeCheck(row_bytes > 0 && row_bytes % 4 == 0, "the row size must be a positive multiple of 4 bytes, got ", row_bytes);
    if (dst.row_bytes >= 0) {  // the rows written: distinct bytes (in K and V alike: V has K's strides)
      const CacheSide& d = dst.side;
      check_disjoint(Extents{static_cast<int64_t>(d.rows / d.page_size), dst.layers, static_cast<int64_t>(d.page_size), row_bytes},
                     Extents{d.page_stride, d.layer_stride, d.row_stride, 1}, "k_dst");
    }
    for (const SideInfo* s : {&dst, &src})
      if (s->row_bytes < 0)  // a pointer table's rows lie its row stride apart: a longer row would spill into the next
        RuntimeCheck(row_bytes <= s->side.row_stride, s == &dst ? "k_dst" : "k_src", ": rows of ", row_bytes,
                     " bytes do not fit its row stride of ", s->side.row_stride, " bytes");
    RuntimeCheck(layers >= 1 && layers <= 65535, "the number of layers must be in [1, 65535], got ", layers);
    // At most 2^22 CTAs: the kernel's worker indices (1024 a CTA) are 32-bit.
    RuntimeCheck(block_quota >= 0 && block_quota <= (int64_t{1} << 22), "block_quota must be in [1, 2^22] (or 0: the default), got ", block_quota);

    SymbolicSize N{"num_indices"};
    SymbolicDType index_dtype;
    SymbolicDevice index_device;
    TensorMatcher({N}).with_dtype<int32_t, int64_t>(index_dtype).with_device<kDLCUDA, kDLCPU, kDLCUDAHost>(index_device)
        .verify(indices_src, "indices_src")
        .verify(indices_dst, "indices_dst");
    RuntimeCheck(indices_src.size(0) <= 1 || indices_src.stride(0) == 1, "indices_src must be contiguous");
    RuntimeCheck(indices_dst.size(0) <= 1 || indices_dst.stride(0) == 1, "indices_dst must be contiguous");
    const int64_t n = N.unwrap();
    RuntimeCheck(n * layers < (int64_t{1} << 32), "too many rows: ", n, " indices x ", layers, " layers");
    const DLDevice idev = index_device.unwrap();
    const bool gpu_indices = idev.device_type == kDLCUDA;
    int device = gpu_indices ? idev.device_id : (dst.device_id >= 0 ? dst.device_id : src.device_id);
    RuntimeCheck(device >= 0, "one side of a transfer must be on the GPU (both k_dst and k_src are in host memory)");
    for (const SideInfo* s : {&dst, &src}) {
      RuntimeCheck(s->device_id < 0 || s->device_id == device, s == &dst ? "k_dst" : "k_src", " is on cuda:", s->device_id,
                   " but the transfer runs on cuda:", device);
      const bool table = s->row_bytes < 0;
      if (table)
        RuntimeCheck(s->on_host != gpu_indices, s == &dst ? "k_dst" : "k_src", " (a pointer table) must be where the indices are (",
                     gpu_indices ? "on the GPU" : "on the host", ")");
    }
    dst.side.indices = indices_dst.data_ptr();
    src.side.indices = indices_src.data_ptr();
    const cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, device));
    const bool i32 = index_dtype.is_type<int32_t>();
    if (validate) {
      (i32 ? check_indices<int32_t> : check_indices<int64_t>)(src.side, indices_src, "indices_src", "k_src", n, device, stream);
      (i32 ? check_indices<int32_t> : check_indices<int64_t>)(dst.side, indices_dst, "indices_dst", "k_dst", n, device, stream);
    }
    if (n == 0) return;
    const int buffers = v_dst ? 2 : 1;
    void* staged = nullptr;  // host indices (and tables) copied to the GPU for the kernel
    if (!gpu_indices) {
      Batch batch;
      (i32 ? merge_runs<int32_t> : merge_runs<int64_t>)(dst.side, src.side, n, layers, buffers, row_bytes, &batch);
      if (batch.sizes.empty()) return;
      if ((dst.on_host || src.on_host) && batch.bytes >= kCopyEngineMinBytes * batch.sizes.size()) {
        submit(batch, device, stream);
        return;
      }
      staged = stage(&dst.side, &src.side, n, layers, i32 ? 4 : 8, stream);
    }
    const bool wide = dst.aligned16 && src.aligned16 && row_bytes % 16 == 0;
    for (const SideInfo* s : {&dst, &src})
      RuntimeCheck(wide || s->aligned4, s == &dst ? "k_dst" : "k_src",
                   ": the SM copy moves 4-byte words, so its address and its row, page and layer strides must be multiples of 4 bytes");
    TransferParams p{src.side, dst.side, static_cast<uint32_t>(n), static_cast<uint32_t>(layers), static_cast<uint32_t>(buffers),
                     static_cast<uint32_t>(row_bytes / (wide ? 16 : 4))};
    const bool lanes32 = p.vectors >= 32 * kTransferUnroll;
    void (*kernel)(TransferParams);
    if (i32)
      kernel = wide ? (lanes32 ? transfer_rows_kernel<int32_t, int4, 32> : transfer_rows_kernel<int32_t, int4, 8>)
                    : (lanes32 ? transfer_rows_kernel<int32_t, int, 32> : transfer_rows_kernel<int32_t, int, 8>);
    else
      kernel = wide ? (lanes32 ? transfer_rows_kernel<int64_t, int4, 32> : transfer_rows_kernel<int64_t, int4, 8>)
                    : (lanes32 ? transfer_rows_kernel<int64_t, int, 32> : transfer_rows_kernel<int64_t, int, 8>);
    const int64_t workers_per_block = kTransferThreads / (lanes32 ? 32 : 8);
    int64_t blocks = div_ceil(n * layers, workers_per_block);
    const bool host_side = dst.on_host || src.on_host || dst.row_bytes < 0 || src.row_bytes < 0;
    // Pointer tables may point at host memory: their span counts as a host side's.
    uint64_t host_span = 0;
    for (const SideInfo* s : {&dst, &src})
      if (s->on_host || s->row_bytes < 0) host_span = kNoLimit - host_span <= s->layer_span ? kNoLimit : host_span + s->layer_span;
    const int64_t host_quota = host_span > kHostNarrowSpanBytes ? kHostWideBlockQuota : kHostBlockQuota;
    const int64_t limit = block_quota > 0 ? block_quota
                                          : host_side ? host_quota
                                                      : int64_t{runtime::get_sm_count(device)} *
                                                            runtime::get_blocks_per_sm(kernel, kTransferThreads);
    if (blocks > limit) blocks = limit;
    LaunchKernel(static_cast<unsigned>(blocks), kTransferThreads, DLDevice{kDLCUDA, device})(kernel, p);
    if (staged != nullptr) RuntimeDeviceCheck(cudaFreeAsync(staged, stream));
  }

  // Copies the host indices and pointer tables of both sides to one GPU buffer (stream-ordered; freed by
  // the caller after the launch) and points the sides at the copies.
  static void* stage(CacheSide* dst, CacheSide* src, int64_t n, int64_t layers, int index_bytes, cudaStream_t stream) {
    const void* pieces[6];
    const void** slots[6];
    size_t sizes[6], count = 0, total = 0;
    for (CacheSide* side : {dst, src}) {
      pieces[count] = side->indices, slots[count] = &side->indices, sizes[count++] = static_cast<size_t>(n * index_bytes);
      for (int b = 0; b < 2; ++b)
        if (side->tables[b] != nullptr)
          pieces[count] = side->tables[b], slots[count] = reinterpret_cast<const void**>(&side->tables[b]),
          sizes[count++] = static_cast<size_t>(layers * 8);
    }
    for (size_t k = 0; k < count; ++k) total += (sizes[k] + 15) / 16 * 16;
    char* buffer = nullptr;
    host::RuntimeDeviceCheck(cudaMallocAsync(reinterpret_cast<void**>(&buffer), total, stream));
    for (size_t k = 0, offset = 0; k < count; offset += (sizes[k] + 15) / 16 * 16, ++k) {
      host::RuntimeDeviceCheck(cudaMemcpyAsync(buffer + offset, pieces[k], sizes[k], cudaMemcpyHostToDevice, stream));
      *slots[k] = buffer + offset;
    }
    return buffer;
  }

  struct Batch {
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<size_t> sizes;
    size_t bytes = 0;
  };

  // The copies for the copy engines: one per run of rows adjacent in both source and destination.
  template <typename Index>
  static void merge_runs(const CacheSide& dst, const CacheSide& src, int64_t n, int64_t layers, int buffers, int64_t row_bytes,
                         Batch* batch) {
    std::vector<void*>& dsts = batch->dsts;
    std::vector<const void*>& srcs = batch->srcs;
    std::vector<size_t>& sizes = batch->sizes;
    for (uint32_t layer = 0; layer < layers; ++layer)
      for (int b = 0; b < buffers; ++b)
        for (uint32_t i = 0; i < n; ++i) {
          uint64_t s, d;
          const bool src_ok = src.take<Index>(i, &s), dst_ok = dst.take<Index>(i, &d);
          if (!src_ok || !dst_ok) continue;
          char* to = dst.row(b, layer, d);
          const char* from = src.row(b, layer, s);
          batch->bytes += static_cast<size_t>(row_bytes);
          if (!sizes.empty() && static_cast<char*>(dsts.back()) + sizes.back() == to &&
              static_cast<const char*>(srcs.back()) + sizes.back() == from) {
            sizes.back() += static_cast<size_t>(row_bytes);
            continue;
          }
          dsts.push_back(to), srcs.push_back(from), sizes.push_back(static_cast<size_t>(row_bytes));
        }
  }

  static void submit(Batch& batch, int device, cudaStream_t stream) {
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t first = 0;
    // The batch API refuses the legacy default stream; the per-thread default stream is ordered with it.
    if (stream == nullptr) stream = cudaStreamPerThread;
    const host::DeviceGuard guard(device);
    host::RuntimeDeviceCheck(
        cudaMemcpyBatchAsync(batch.dsts.data(), batch.srcs.data(), batch.sizes.data(), batch.sizes.size(), &attr, &first, 1, stream));
  }
};
#endif  // __CUDACC_RTC__

}  // namespace jitkern_kv_transfer
