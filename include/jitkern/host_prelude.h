// What the host passes of jitkern's kernel modules parse first (JitSpec host_prelude=True): the library's
// headers and, through them, CUDA's runtime and element-type headers and tvm-ffi's C API, about half of
// each host pass. Builds run many at once (jitkern.warmup, jitkern prebuild) compile it once for all of
// them instead. Only headers that every such module may see belong here.
#pragma once

#include <jitkern/cta.cuh>
#include <jitkern/export.h>
#include <jitkern/math.cuh>
#include <jitkern/optional.h>
#include <jitkern/runtime.cuh>
#include <jitkern/tensor.h>
#include <jitkern/tensor_alloc.h>
#include <jitkern/type.cuh>
#include <jitkern/utils.cuh>
#include <jitkern/utils.h>
#include <jitkern/vec.cuh>
#include <jitkern/warp.cuh>
