// What a host pass (host_without_nvcc: the host compiler alone, no __CUDACC__) needs: CUDA's device
// built-ins, declared for the host and defined nowhere, to parse device code it never compiles (device
// functions are inline and kernel bodies under #ifdef __CUDACC__, so none is called; a built-in
// missing here fails the host pass with its name, "was not declared": add it), and the lookup of a
// kernel stub's symbol (<jitkern/detail/module_symbols.h>).
#pragma once

#ifndef __CUDACC__
#include <cuda_runtime_api.h>
#include <jitkern/detail/module_symbols.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// Hidden: a kernel body the host pass compiles by mistake (outside #ifdef __CUDACC__) fails the link,
// naming the built-in, instead of building a library that cannot load.
#pragma GCC visibility push(hidden)
extern const uint3 threadIdx, blockIdx;
extern const dim3 blockDim, gridDim;
extern const int warpSize;

void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);
void __threadfence();
void __threadfence_block();
void __threadfence_system();
void __nanosleep(unsigned ns);
long long clock64();
unsigned __activemask();
int __any_sync(unsigned mask, int predicate);
int __all_sync(unsigned mask, int predicate);
unsigned __ballot_sync(unsigned mask, int predicate);
template <typename T>
T __shfl_sync(unsigned mask, T value, int lane, int width = 32);
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32);
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32);
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32);

float __fdividef(float x, float y);
float __expf(float x);
float __logf(float x);
float __frcp_rn(float x);
float __saturatef(float x);
float rsqrtf(float x);
unsigned __float_as_uint(float x);
float __uint_as_float(unsigned x);
int __float_as_int(float x);
float __int_as_float(int x);
int __float2int_rn(float x);
unsigned __umulhi(unsigned a, unsigned b);
unsigned long long __umul64hi(unsigned long long a, unsigned long long b);
int __popc(unsigned x);
int __ldcg(const int* ptr);
template <typename T, typename U>
T atomicAdd(T* address, U value);
template <typename T, typename U>
T atomicMax(T* address, U value);
template <typename T, typename U>
T atomicMin(T* address, U value);
template <typename T, typename U>
T atomicExch(T* address, U value);
template <typename T, typename U>
T atomicCAS(T* address, U compare, U value);
int __clz(int x);
int __ffs(int x);
#pragma GCC visibility pop
#endif
