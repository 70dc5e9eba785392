// <sgl_kernel/source_location.h>: std::source_location that works under every nvcc front end.
#pragma once

#include <jitkern/source_location.h>
