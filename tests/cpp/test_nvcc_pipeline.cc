// The nvcc dry-run parser on a recorded `nvcc --dryrun --keep` output of a real toolkit (tests/cpp/data:
// CUDA 13.0, the toolkit of the dev machines and the H100s; no 12.x toolkit was reachable to record one).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "nvcc_pipeline.h"

namespace {

std::string recorded(const std::string& name) {
  std::ifstream in(std::string(JITKERN_TEST_DATA_DIR) + "/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_two_chains(const std::string& dryrun) {
  jitkern::nvcc::Pipeline p;
  ASSERT_FALSE(dryrun.empty());
  ASSERT_TRUE(jitkern::nvcc::plan(dryrun, "/tmp/scratch/it's.d", &p));
  ASSERT_EQ(p.host_chain.size(), 2u);
  ASSERT_EQ(p.device_chain.size(), 4u);
  EXPECT_NE(p.host_chain[0].find(".cpp4.ii\""), std::string::npos);
  EXPECT_NE(p.host_chain[0].find(" -MD -MF '/tmp/scratch/it'\\''s.d'"), std::string::npos) << "the depfile is shell-quoted";
  EXPECT_EQ(p.host_chain[1].find("--gen_module_id_file"), std::string::npos) << "cudafe++ must read the id, not write it";
  EXPECT_NE(p.device_chain[0].find(".cpp1.ii\""), std::string::npos);
  EXPECT_NE(p.device_chain[1].find("cicc"), std::string::npos);
  EXPECT_EQ(p.device_chain[2].rfind("ptxas", 0), 0u);
  EXPECT_EQ(p.device_chain[3].rfind("fatbinary", 0), 0u);
  ASSERT_FALSE(p.finish.empty());
  EXPECT_NE(p.finish[0].find(".cudafe1.cpp"), std::string::npos);
  EXPECT_EQ(p.module_id_path, "/tmp/scratch/nvcc/device.module_id");
  bool has_cicc_path = false;
  for (const auto& e : p.env) has_cicc_path = has_cicc_path || e.rfind("CICC_PATH=", 0) == 0;
  EXPECT_TRUE(has_cicc_path);
  for (const auto& e : p.env) EXPECT_NE(e.rfind("INCLUDES=", 0), 0u) << "list variables are already expanded";
}

}  // namespace

TEST(NvccPipeline, PlansCuda13DryRun) { expect_two_chains(recorded("nvcc-13.0-dryrun.txt")); }

TEST(NvccPipeline, UnknownPhaseOrTruncatedDryRunFallsBack) {
  const std::string text = recorded("nvcc-13.0-dryrun.txt");
  jitkern::nvcc::Pipeline p;
  EXPECT_FALSE(jitkern::nvcc::plan(text + "#$ nvlink --something\n", "/d", &p));
  EXPECT_FALSE(jitkern::nvcc::plan(text.substr(0, text.find("#$ ptxas")), "/d", &p));
  EXPECT_FALSE(jitkern::nvcc::plan("", "/d", &p));
  std::string no_id = text;
  no_id.erase(no_id.find(" --gen_module_id_file"), 21);
  EXPECT_FALSE(jitkern::nvcc::plan(no_id, "/d", &p));
}
