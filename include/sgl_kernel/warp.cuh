// <sgl_kernel/warp.cuh>: jitkern's device::warp reductions (same call forms), and warp::kFullMask.
#pragma once

#include <sgl_kernel/utils.cuh>

#include <jitkern/warp.cuh>

namespace device::warp {
using device::kFullMask;
}
