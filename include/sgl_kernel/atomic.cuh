// <sgl_kernel/atomic.cuh>: jitkern's device::atomic::max (float, correct for negative values).
#pragma once

#include <sgl_kernel/utils.cuh>

#include <jitkern/atomic.cuh>
