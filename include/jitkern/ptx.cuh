// Every inline PTX instruction the headers and kernels use, in one place (device::ptx).
#pragma once

#ifdef __CUDACC_RTC__
#include <jitkern/detail/rtc_std.h>  // NVRTC has no standard library
#else
#include <cstdint>
#endif

#define JITKERN_DEVICE __forceinline__ __device__

namespace device::ptx {

// griddepcontrol (sm_90+, programmatic dependent launch); no-ops below sm_90.
JITKERN_DEVICE void griddepcontrol_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
JITKERN_DEVICE void griddepcontrol_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Asks L2 for the line holding `ptr` (global memory); no registers wait for it.
JITKERN_DEVICE void prefetch_global_l2(const void* ptr) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(ptr)));
#endif
}

// One 16-byte store of four 32-bit words to a generic address (global or shared); the "memory"
// clobber keeps it ordered with other accesses.
JITKERN_DEVICE void st_v4_b32(void* ptr, unsigned int w0, unsigned int w1, unsigned int w2, unsigned int w3) {
  asm volatile("st.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(w0), "r"(w1), "r"(w2), "r"(w3) : "memory");
}
// The same to global memory (`ptr` must point there): st.global, not a generic store.
JITKERN_DEVICE void st_global_v4_b32(void* ptr, unsigned int w0, unsigned int w1, unsigned int w2, unsigned int w3) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(ptr)), "r"(w0), "r"(w1), "r"(w2), "r"(w3)
               : "memory");
#endif
}

// Thread-block clusters (sm_90+; no-ops below): the cluster barrier's phases (arrive relaxed or releasing, wait
// acquiring) and one CTA's access to another's shared memory (distributed shared memory: `local` is this CTA's
// address of the variable, `rank` the other CTA's in the cluster).
JITKERN_DEVICE void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
JITKERN_DEVICE void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
JITKERN_DEVICE void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
JITKERN_DEVICE unsigned int cluster_shared_address(const void* local, unsigned int rank) {
  unsigned int remote = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(static_cast<unsigned int>(__cvta_generic_to_shared(local))), "r"(rank));
#endif
  return remote;
}
JITKERN_DEVICE int ld_shared_cluster_s32(const int* local, unsigned int rank) {
  int v = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.s32 %0, [%1];" : "=r"(v) : "r"(cluster_shared_address(local, rank)) : "memory");
#endif
  return v;
}
JITKERN_DEVICE void st_shared_cluster_f32(float* local, unsigned int rank, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(cluster_shared_address(local, rank)), "f"(v) : "memory");
#endif
}

// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80+; below,
// an ordinary copy); both addresses 16-byte aligned. cp_async_wait_all waits for this thread's copies.
JITKERN_DEVICE void cp_async_16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<unsigned int>(__cvta_generic_to_shared(smem))), "l"(gmem)
               : "memory");
#else
  *static_cast<int4*>(smem) = *static_cast<const int4*>(gmem);
#endif
}
JITKERN_DEVICE void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
// Closes this thread's copies issued since the last commit into a group; cp_async_wait_group<N> waits until
// at most N of its groups are pending (a pipeline of N + 1 stages).
JITKERN_DEVICE void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
JITKERN_DEVICE void cp_async_wait_group() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// mbarriers and bulk copies (cp.async.bulk, the TMA; sm_90+, declared there only: no fallback). An mbarrier of
// shared memory with one arrival a phase: after init, fence_mbarrier_init before other threads or copies use it;
// mbarrier_arrive_expect_tx arrives and expects `bytes` of copies; mbarrier_wait_parity spins until the phase of
// that parity completes. bulk_load: `bytes` (a multiple of 16, both addresses 16-byte aligned) from global into
// shared memory, completing on `bar`; bulk_store: shared to global as one group of this thread, bulk_wait_read until
// its sources may be overwritten, bulk_wait until written.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
JITKERN_DEVICE unsigned int shared_address(const void* p) { return static_cast<unsigned int>(__cvta_generic_to_shared(p)); }
JITKERN_DEVICE void mbarrier_init_one(uint64_t* bar) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory"); }
JITKERN_DEVICE void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
JITKERN_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
}
JITKERN_DEVICE void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  asm volatile("{\n\t.reg .pred done;\n\tWAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t@!done bra WAIT;\n\t}" ::"r"(
                   shared_address(bar)),
               "r"(parity)
               : "memory");
}
JITKERN_DEVICE void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(shared_address(dst)), "l"(src),
               "r"(bytes), "r"(shared_address(bar))
               : "memory");
}
JITKERN_DEVICE void bulk_store(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(shared_address(src)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
JITKERN_DEVICE void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
JITKERN_DEVICE void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
#endif

}  // namespace device::ptx
