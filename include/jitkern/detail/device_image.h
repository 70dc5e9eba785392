// The symbols under which a module built with host_without_nvcc holds its device images (nvcc's fatbins
// of its kernels): the engine links them in, the module's launches load them (kernel_image.h). Built in
// several device passes (BuildRequest::device_parts, at most JITKERN_MAX_DEVICE_PARTS), pass 0's image is
// under JITKERN_DEVICE_IMAGE_SYMBOL and pass k's under that name followed by _k; JITKERN_DEVICE_PASSES_SYMBOL
// holds how many images there are (an 8-byte count beside pass 0's image: 1 where one pass built them all).
#pragma once

#define JITKERN_DEVICE_IMAGE_SYMBOL jitkern_device_image
#define JITKERN_DEVICE_PASSES_SYMBOL jitkern_device_passes
#define JITKERN_MAX_DEVICE_PARTS 8
