// <sgl_kernel/tile.cuh>: device::tile::Memory, jitkern's class, which also has the reference's shape
// (a (tid, tsize) constructor, warp(n), cta(n), load(ptr, i), store(ptr, v, i), in_bound(count, i)).
#pragma once

#include <sgl_kernel/utils.cuh>

#include <jitkern/tile.cuh>
