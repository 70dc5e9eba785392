// host::policy_for(arch): the tuning numbers of the row-wise kernel families (norm, quant, act, the KV
// row copies, RoPE's rows) per GPU architecture, in the manner of CUB's per-arch policies.
//
// The sm_90 entry holds the numbers measured on H100/H200 (docs/benchmarks/). The sm_80, sm_100 and
// sm_120 entries are derived from the documented limits, not measured: resident threads per SM are
// 2048 on sm_80, sm_90 and sm_100 and 1536 on sm_120 (and sm_86/sm_89, which take its entry); shared
// memory per SM is 164 KB (sm_80), 228 KB (sm_90, sm_100) and 100 KB (sm_120); every one has 64K
// registers per SM and at most 1024 threads per CTA. Where an SM holds 1536 threads, a one-row CTA is
// 768 threads wide, so that two fill the SM as two 1024-thread CTAs fill a 2048-thread one.
//
// kernel-shaping numbers (template arguments, launch bounds) are the same in every entry (checked
// below), so one build of a module serves its GPU; the others (a CTA's width at launch, CTAs per SM)
// are read at launch for the launching device: host::row_policy(device).
#pragma once

namespace host {

struct RowPolicy {
  int arch;             // the entry's architecture, major * 10 + minor
  int threads_per_sm;   // resident threads an SM holds
  int smem_per_sm;      // shared memory an SM holds, bytes
  int row_threads;      // widest CTA of the one-row-per-CTA kernels at launch (norm wide rows, per-token quant)
  // Kernel-shaping numbers (the same in every entry):
  int max_cta_threads;      // a CTA's limit: the launch bound of the one-row and one-CTA kernels
  int narrow_threads;       // CTAs of rows that a few lanes each take (norm narrow rows)
  int rows_per_group;       // rows a group of lanes takes once narrow rows are many
  int wide_reg_vecs;        // 16-byte vectors a thread holds of a wide row (rmsnorm)
  int fused_reg_vecs;       // ... holding the residual as well (fused_add_rmsnorm)
  int two_widths_reg_vecs;  // ... where two row widths share a launch (QK-norm across heads)
  int token_quant_reg_vecs;  // ... of a per-token quantized row
  int tensor_quant_reg_vecs;  // ... of a tensor quantized by one CTA (dynamic per-tensor, decode sizes)
  int stream_threads;       // CTAs of the streaming kernels (per-tensor quantization)
  int group_threads;        // CTAs of the per-group kernels (group quantization, fused SiLU + group quant)
  int elementwise_threads;  // CTAs of the gated activations
  int copy_threads;         // CTAs of the KV row copies (store_cache, concat_mla)
  int rope_threads;         // a rotating CTA's threads, spread over a token's heads (rope_kernel)
  int rope_max_threads;     // ... at most (its launch bound)
  int rope_staged_threads;  // CTAs of the prefill kernel that stages a token's heads in shared memory
};

namespace detail {
// The sm_90 entry: the measured numbers (each one's measurement is where its family uses it).
inline constexpr RowPolicy kSm90Policy{90, 2048, 228 * 1024, 1024, 1024, 256, 2, 4, 2, 2, 2, 2, 512, 128, 256, 256, 64, 512, 128};
constexpr RowPolicy with_limits(int arch, int threads_per_sm, int smem_per_sm) {
  RowPolicy p = kSm90Policy;
  p.arch = arch, p.threads_per_sm = threads_per_sm, p.smem_per_sm = smem_per_sm;
  p.row_threads = threads_per_sm / 2 < p.max_cta_threads ? threads_per_sm / 2 : p.max_cta_threads;  // two CTAs per SM
  return p;
}
inline constexpr RowPolicy kRowPolicies[] = {with_limits(80, 2048, 164 * 1024), kSm90Policy, with_limits(100, 2048, 228 * 1024),
                                             with_limits(120, 1536, 100 * 1024)};
constexpr bool same_kernels(const RowPolicy& a, const RowPolicy& b) {
  return a.max_cta_threads == b.max_cta_threads && a.narrow_threads == b.narrow_threads && a.rows_per_group == b.rows_per_group &&
         a.wide_reg_vecs == b.wide_reg_vecs && a.fused_reg_vecs == b.fused_reg_vecs && a.two_widths_reg_vecs == b.two_widths_reg_vecs &&
         a.token_quant_reg_vecs == b.token_quant_reg_vecs && a.tensor_quant_reg_vecs == b.tensor_quant_reg_vecs &&
         a.stream_threads == b.stream_threads && a.group_threads == b.group_threads && a.elementwise_threads == b.elementwise_threads &&
         a.copy_threads == b.copy_threads && a.rope_threads == b.rope_threads && a.rope_max_threads == b.rope_max_threads &&
         a.rope_staged_threads == b.rope_staged_threads && a.row_threads <= a.max_cta_threads;
}
}  // namespace detail

// The entry for a compute capability (major * 10 + minor): sm_120 for 12.x and for 8.6 / 8.9 (the same
// SM limits), sm_100 for 10.x-11.x, sm_90 for 9.x, sm_80 below.
constexpr RowPolicy policy_for(int arch) {
  if (arch >= 120 || arch == 86 || arch == 89) return detail::kRowPolicies[3];
  if (arch >= 100) return detail::kRowPolicies[2];
  if (arch >= 90) return detail::kRowPolicies[1];
  return detail::kRowPolicies[0];
}

// The kernel-shaping numbers, which every entry shares (a module is built once for its GPU).
inline constexpr RowPolicy kRowKernels = detail::kSm90Policy;
static_assert(detail::same_kernels(policy_for(80), kRowKernels) && detail::same_kernels(policy_for(90), kRowKernels) &&
                  detail::same_kernels(policy_for(100), kRowKernels) && detail::same_kernels(policy_for(120), kRowKernels),
              "an entry with other kernel-shaping numbers needs kernels built per architecture");

}  // namespace host

#ifndef __CUDACC_RTC__
#include <jitkern/utils.cuh>

namespace host {
// The policy of the GPU a launch goes to.
inline RowPolicy row_policy(DLDevice device, DebugInfo where = {}) { return policy_for(runtime::get_arch(device.device_id, where)); }
}  // namespace host
#endif  // __CUDACC_RTC__
