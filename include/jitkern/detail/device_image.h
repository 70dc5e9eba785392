// The symbol under which a module built with host_without_nvcc holds its device image (nvcc's fatbin
// of its kernels): the engine links it in, the module's launches load it (jitkern/utils.cuh).
#pragma once

#define JITKERN_DEVICE_IMAGE_SYMBOL jitkern_device_image
