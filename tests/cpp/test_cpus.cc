// The CPU count the engine's rules take (src/engine/base/cpus.h): a cgroup quota read from fixture files.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>

#include "base/cpus.h"

using namespace jitkern;

TEST(Cpus, CgroupQuotaIsTheLeastAlongTheCgroupsPathRoundedUp) {
  char templ[] = "/tmp/jitkern-cgroup-XXXXXX";
  const std::string root = mkdtemp(templ);
  const auto put = [&](const std::string& dir, const std::string& name, const std::string& text) {
    std::system(("mkdir -p '" + root + dir + "'").c_str());
    FILE* f = std::fopen((root + dir + "/" + name).c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  EXPECT_EQ(cpus::cgroup_quota("0::/a/b\n", root), 0) << "no cgroup files: no quota";
  put("", "cpu.max", "max 100000\n");
  put("/a", "cpu.max", "250000 100000\n");
  put("/a/b", "cpu.max", "max 100000\n");
  EXPECT_EQ(cpus::cgroup_quota("0::/a/b\n", root), 3) << "v2: a parent's 2.5 CPUs, rounded up";
  put("/a/b", "cpu.max", "120000 100000\n");
  EXPECT_EQ(cpus::cgroup_quota("0::/a/b\n", root), 2) << "the least along the path";
  put("", "cpu.max", "400000 100000\n");
  EXPECT_EQ(cpus::cgroup_quota("0::/elsewhere\n", root), 4) << "a path this mount does not hold: its root (a container's own cgroup)";
  put("/cpu,cpuacct/docker/x", "cpu.cfs_quota_us", "150000\n");
  put("/cpu,cpuacct/docker/x", "cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cpus::cgroup_quota("4:cpu,cpuacct:/docker/x\n1:memory:/docker/x\n", root), 2) << "v1's cfs quota";
  put("/cpu,cpuacct/docker/x", "cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(cpus::cgroup_quota("4:cpu,cpuacct:/docker/x\n", root), 0) << "v1 without a quota";
  EXPECT_EQ(cpus::cgroup_quota("4:cpuacct:/docker/x\n", root), 0) << "not the cpu controller";
  std::system(("rm -rf '" + root + "'").c_str());
}
