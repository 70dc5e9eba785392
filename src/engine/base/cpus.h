// How many CPUs this process may keep busy: what the engine's CPU rules (device passes at once, a
// precompiled prelude beside a lone build, nvcc's threads) and parallel builds' default count on.
#pragma once

#include <string>

namespace jitkern::cpus {

// The CPUs this process may run on: its affinity (now), lowered to a cgroup CPU quota where one applies (a
// container's --cpus, a Kubernetes CPU limit; read once a process), rounded up.
int usable();

// The CPUs a cgroup quota allows a process whose /proc/self/cgroup reads `proc_self_cgroup`, with the
// cgroup file systems under `root`: the least over its cgroup and their parents (v2's cpu.max, v1's
// cpu.cfs_quota_us over cpu.cfs_period_us), rounded up; 0 where none applies.
int cgroup_quota(const std::string& proc_self_cgroup, const std::string& root = "/sys/fs/cgroup");

}  // namespace jitkern::cpus
