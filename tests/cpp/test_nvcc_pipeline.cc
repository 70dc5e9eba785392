// The nvcc dry-run parser on a recorded `nvcc --dryrun --keep` output of a real toolkit (tests/cpp/data:
// CUDA 13.0, the toolkit of the dev machines and the H100s; no 12.x toolkit was reachable to record one).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "compile/nvcc_pipeline.h"

namespace {

std::string recorded(const std::string& name) {
  std::ifstream in(std::string(JITKERN_TEST_DATA_DIR) + "/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_pipeline(const std::string& dryrun) {
  jitkern::nvcc::Pipeline p;
  ASSERT_FALSE(dryrun.empty());
  ASSERT_TRUE(jitkern::nvcc::plan(dryrun, "/tmp/scratch/it's.d", &p));
  ASSERT_EQ(p.host_chain.size(), 2u);
  EXPECT_NE(p.host_chain[0].find(".cpp4.ii\""), std::string::npos);
  EXPECT_NE(p.host_chain[0].find(" -MD -MF '/tmp/scratch/it'\\''s.d'"), std::string::npos) << "the depfile is shell-quoted";
  EXPECT_EQ(p.host_chain[1].find("--gen_module_id_file"), std::string::npos) << "cudafe++ must read the id, not write it";
  EXPECT_NE(p.device_preprocess.find(".cpp1.ii\""), std::string::npos);
  ASSERT_EQ(p.device_back.size(), 2u);
  // nvcc's cicc writes the stub the host compile includes; so does the front-end run, and nothing else
  // under a name that is read; the PTX run then sends its stub to a side file.
  EXPECT_NE(p.cicc.find("--stub_file_name \"/tmp/scratch/nvcc/device.cudafe1.stub.c\""), std::string::npos);
  EXPECT_EQ(p.cicc_frontend.rfind("\"$CICC_PATH/cicc\" --device-syntax-only ", 0), 0u) << p.cicc_frontend;
  EXPECT_NE(p.cicc_frontend.find("--stub_file_name \"/tmp/scratch/nvcc/device.cudafe1.stub.c\""), std::string::npos);
  EXPECT_NE(p.cicc_frontend.find("-o \"/tmp/scratch/nvcc/device.ptx.frontend\""), std::string::npos);
  EXPECT_NE(p.cicc_frontend.find("--gen_c_file_name \"/tmp/scratch/nvcc/device.cudafe1.c.frontend\""), std::string::npos);
  EXPECT_NE(p.cicc_ptx.find("--stub_file_name \"/tmp/scratch/nvcc/device.cudafe1.stub.c.unused\""), std::string::npos);
  EXPECT_EQ(p.cicc_ptx.find("--device-syntax-only"), std::string::npos);
  EXPECT_NE(p.cicc_ptx.find("-o \"/tmp/scratch/nvcc/device.ptx\""), std::string::npos);
  EXPECT_EQ(p.device_back[0].rfind("ptxas", 0), 0u);
  EXPECT_EQ(p.device_back[1].rfind("fatbinary", 0), 0u);
  EXPECT_EQ(p.device_back[1].find("--embedded-fatbin"), std::string::npos) << "the fatbin is linked, not included";
  EXPECT_EQ(p.fatbin_path, "/tmp/scratch/nvcc/device.fatbin");
  EXPECT_EQ(p.embedded_fatbin_path, "/tmp/scratch/nvcc/device.fatbin.c");
  EXPECT_NE(p.host_compile.find(".cudafe1.cpp"), std::string::npos);
  EXPECT_EQ(p.module_id_path, "/tmp/scratch/nvcc/device.module_id");
  bool has_cicc_path = false;
  for (const auto& e : p.env) has_cicc_path = has_cicc_path || e.rfind("CICC_PATH=", 0) == 0;
  EXPECT_TRUE(has_cicc_path);
  for (const auto& e : p.env) EXPECT_NE(e.rfind("INCLUDES=", 0), 0u) << "list variables are already expanded";
}

}  // namespace

TEST(NvccPipeline, PlansCuda13DryRun) { expect_pipeline(recorded("nvcc-13.0-dryrun.txt")); }

TEST(NvccPipeline, FatbinDryRunGivesItsFourSteps) {
  std::vector<std::string> env, steps;
  ASSERT_TRUE(jitkern::nvcc::fatbin_commands(recorded("nvcc-13.0-fatbin-dryrun.txt"), "it's.d", &env, &steps));
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_NE(steps[0].find(" -E "), std::string::npos);
  EXPECT_NE(steps[0].find(" -MD -MF 'it'\\''s.d'"), std::string::npos) << "the device preprocessing writes the depfile, shell-quoted";
  EXPECT_NE(steps[1].find("cicc"), std::string::npos);
  EXPECT_EQ(steps[2].rfind("ptxas", 0), 0u);
  EXPECT_EQ(steps[3].rfind("fatbinary", 0), 0u);
  EXPECT_TRUE(std::any_of(env.begin(), env.end(), [](const std::string& e) { return e.rfind("CICC_PATH=", 0) == 0; }));
  EXPECT_TRUE(std::none_of(env.begin(), env.end(), [](const std::string& e) { return e.rfind("INCLUDES=", 0) == 0; }));
  EXPECT_FALSE(jitkern::nvcc::fatbin_commands("#$ gcc -E x.cu\n#$ cudafe++ x\n", "d", &env, &steps)) << "an unknown step";
  EXPECT_FALSE(jitkern::nvcc::fatbin_commands("#$ gcc -E x.cu\n#$ cicc x\n", "d", &env, &steps)) << "truncated";
}

TEST(NvccPipeline, FatbinAssemblyQuotesItsPathAndDeclaresTheSymbolTheStubUses) {
  const std::string s = jitkern::nvcc::fatbin_assembly("nvcc/a\"b\\c.fatbin");
  EXPECT_NE(s.find(".incbin \"nvcc/a\\\"b\\\\c.fatbin\""), std::string::npos) << s;
  EXPECT_NE(s.find(".section .note.GNU-stack"), std::string::npos) << "no executable stack";
  const std::string d = jitkern::nvcc::fatbin_declaration();
  EXPECT_NE(d.find("jitkern_fatbin_data[]"), std::string::npos);
  EXPECT_NE(s.find("jitkern_fatbin_data:"), std::string::npos);
  EXPECT_NE(d.find("__fatDeviceText"), std::string::npos) << "the name the stub registers";
}

TEST(NvccPipeline, RewrittenHostCompileReadsThePreprocessedRewriteWithNvccsFlags) {
  jitkern::nvcc::Pipeline p;
  ASSERT_TRUE(jitkern::nvcc::plan(recorded("nvcc-13.0-dryrun.txt"), "/d", &p));
  EXPECT_EQ(p.host_preprocessed, "/tmp/scratch/nvcc/device.cpp4.ii") << "what cudafe++ reads: the rewrite's input";
  const std::string cmd = jitkern::nvcc::rewritten_host_compile(p, "nvcc/it's.ii");
  EXPECT_NE(cmd.find(" -x c++-cpp-output -Wno-attributes -fpermissive "), std::string::npos) << cmd;
  EXPECT_NE(cmd.find(" 'nvcc/it'\\''s.ii' "), std::string::npos) << cmd;
  EXPECT_EQ(cmd.find("cudafe1.cpp"), std::string::npos) << cmd;
  EXPECT_EQ(cmd.substr(cmd.find(" -o ")), p.host_compile.substr(p.host_compile.find(" -o "))) << "the same object";
  p.host_compile = "c++ -c odd.cpp -o x.o";
  EXPECT_EQ(jitkern::nvcc::rewritten_host_compile(p, "f.ii"), "") << "an unknown shape: nvcc's host chain instead";
  const std::string both = jitkern::nvcc::fatbin_and_image_assembly("nvcc/device.fatbin");
  // Both labels before the data (only directives between them): one address.
  EXPECT_NE(both.find("jitkern_fatbin_data:\n.globl jitkern_device_image\n.hidden jitkern_device_image\njitkern_device_image:\n.incbin"),
            std::string::npos)
      << both;
}

TEST(NvccPipeline, UnknownPhaseOrTruncatedDryRunFallsBack) {
  const std::string text = recorded("nvcc-13.0-dryrun.txt");
  jitkern::nvcc::Pipeline p;
  EXPECT_FALSE(jitkern::nvcc::plan(text + "#$ nvlink --something\n", "/d", &p));
  EXPECT_FALSE(jitkern::nvcc::plan(text.substr(0, text.find("#$ ptxas")), "/d", &p));
  EXPECT_FALSE(jitkern::nvcc::plan("", "/d", &p));
  std::string no_id = text;
  no_id.erase(no_id.find(" --gen_module_id_file"), 21);
  EXPECT_FALSE(jitkern::nvcc::plan(no_id, "/d", &p));
  std::string no_embedded = text;
  no_embedded.erase(no_embedded.find(" --embedded-fatbin="), 19);
  EXPECT_FALSE(jitkern::nvcc::plan(no_embedded, "/d", &p)) << "a fatbinary without --embedded-fatbin=\"...\" is not ours to split";
}
