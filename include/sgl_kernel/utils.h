// <sgl_kernel/utils.h> for kernels written against the reference framework: its host essentials
// (RuntimeCheck, Panic, PanicError, DebugInfo, div_ceil, irange, dtype_bytes) are jitkern's, same names.
#pragma once

#include <jitkern/error.h>
#include <jitkern/utils.h>
