// The cache entry's records: manifest and failure formats (round trips, truncation, tampering) and
// the make-style dependency parser.
#include <gtest/gtest.h>

#include <string>

#include "store/manifest.h"
#include "base/sha256.h"
#include "base/text.h"

using namespace jitkern::manifest;

namespace {

Manifest sample() {
  Manifest m;
  m.request_key = jitkern::sha256_hex("request");
  m.deps = {{"/src/a.cuh", "", jitkern::sha256_hex("a"), {10, 111}},
            {"/deploy/current/dir with space/b.h", "/deploy/v2/dir with space/b.h", jitkern::sha256_hex("b"), {20, 222}}};
  m.compilers = {{"/usr/bin/g++-12", "", "", {7, 8}}, {"/opt/cuda 13/bin/nvcc", "", "", {9, 10}}};
  m.compiler_search = jitkern::sha256_hex("search");
  m.toolchain = jitkern::sha256_hex("toolchain");
  m.full_key = full_key_of(m.request_key, m.toolchain, m.deps);
  m.lib_name = library_name(m.full_key);
  m.lib_sha = jitkern::sha256_hex("library bytes");
  m.lib_sig = {4096, 333};
  m.module = "norm_bf16 t";  // the rest of its line: spaces survive
  m.spec = "norm";
  m.arch = "sm_90a";
  m.built_unix = 1763856000;
  m.build_ms = 5140;
  return m;
}

}  // namespace

TEST(Manifest, RoundTrips) {
  Manifest m = sample();
  Manifest back;
  ASSERT_TRUE(parse(serialize(m), &back));
  EXPECT_EQ(back.request_key, m.request_key);
  EXPECT_EQ(back.full_key, m.full_key);
  EXPECT_EQ(back.lib_name, m.lib_name);
  EXPECT_EQ(back.lib_sha, m.lib_sha);
  EXPECT_EQ(back.lib_sig, m.lib_sig);
  ASSERT_EQ(back.deps.size(), 2u);
  EXPECT_EQ(back.deps[1].path, "/deploy/current/dir with space/b.h");
  EXPECT_EQ(back.deps[1].resolved, "/deploy/v2/dir with space/b.h") << "where a symbolic link led";
  EXPECT_EQ(back.deps[0].resolved, "");
  EXPECT_EQ(back.deps[1].sig, (jitkern::fs::FileSig{20, 222}));
  ASSERT_EQ(back.compilers.size(), 2u);
  EXPECT_EQ(back.compilers[1].path, "/opt/cuda 13/bin/nvcc");
  EXPECT_EQ(back.compilers[1].sig, (jitkern::fs::FileSig{9, 10}));
  EXPECT_EQ(back.compiler_search, m.compiler_search);
  EXPECT_EQ(back.module, "norm_bf16 t");
  EXPECT_EQ(back.spec, "norm");
  m.spec = "norm_bf";  // no whole part of the module's name
  EXPECT_FALSE(parse(serialize(m), &back));
  EXPECT_EQ(back.arch, "sm_90a");
  EXPECT_EQ(back.built_unix, 1763856000);
  EXPECT_EQ(back.build_ms, 5140);
}

TEST(Manifest, AMissingDependencyRoundTripsAndIsNeverUnchanged) {
  Manifest m = sample();
  m.deps.push_back({"/src/gone \"q/c.h", "", kMissing, {}});
  m.full_key = full_key_of(m.request_key, m.toolchain, m.deps);
  m.lib_name = library_name(m.full_key);
  Manifest back;
  ASSERT_TRUE(parse(serialize(m), &back));
  ASSERT_EQ(back.deps.size(), 3u);
  EXPECT_EQ(back.deps[2].sha, kMissing);
  std::vector<Dep> only_missing = {back.deps[2]};
  EXPECT_FALSE(deps_unchanged(only_missing)) << "a module with a missing dependency is never found valid";
  only_missing[0].path = "/";  // there now (a directory), still recorded as missing
  EXPECT_FALSE(deps_unchanged(only_missing));
}

TEST(Manifest, EveryTruncationIsRejected) {
  const std::string text = serialize(sample());
  Manifest m;
  for (std::size_t n = 0; n < text.size(); ++n) EXPECT_FALSE(parse(text.substr(0, n), &(m = Manifest{}))) << "cut at " << n;
}

TEST(Manifest, TamperingIsRejected) {
  const Manifest good = sample();
  Manifest m;
  {  // a library name pointing outside the entry
    Manifest bad = good;
    bad.lib_name = "../other/" + good.lib_name;
    EXPECT_FALSE(parse(serialize(bad), &m));
  }
  {  // a dependency's hash edited: the content key no longer follows
    Manifest bad = good;
    bad.deps[0].sha = jitkern::sha256_hex("edited");
    EXPECT_FALSE(parse(serialize(bad), &(m = Manifest{})));
  }
  {  // a dependency dropped
    Manifest bad = good;
    bad.deps.pop_back();
    EXPECT_FALSE(parse(serialize(bad), &(m = Manifest{})));
  }
  {  // the request key of another entry
    Manifest bad = good;
    bad.request_key = jitkern::sha256_hex("another request");
    EXPECT_FALSE(parse(serialize(bad), &(m = Manifest{})));
  }
  std::string text = serialize(good);
  EXPECT_FALSE(parse("jitkern-manifest 1" + text.substr(text.find('\n')), &(m = Manifest{}))) << "old format";
  EXPECT_FALSE(parse(text + "dep 1 2 " + jitkern::sha256_hex("x") + " /late\n", &(m = Manifest{}))) << "lines after end";
  std::string relative = serialize(good);
  relative.replace(relative.find("/src/a.cuh"), 10, "src/a.cuhh");
  EXPECT_FALSE(parse(relative, &(m = Manifest{}))) << "relative dependency path";
  std::string orphan = serialize(good);
  orphan.insert(orphan.find("dep "), "link /nowhere\n");
  EXPECT_FALSE(parse(orphan, &(m = Manifest{}))) << "a link line before any dependency";
  std::string garbage = serialize(good);
  garbage.replace(garbage.find("lib 4096"), 8, "lib 4x96");
  EXPECT_FALSE(parse(garbage, &(m = Manifest{})));
}

TEST(Manifest, LibraryRecordIsBoundToTheContentKey) {
  const std::string sha = jitkern::sha256_hex("library bytes");
  EXPECT_EQ(library_record(sample().full_key, sha), library_record(sample().full_key, sha));
  EXPECT_NE(library_record(sample().full_key, sha), library_record(jitkern::sha256_hex("other"), sha));
  EXPECT_NE(library_record(sample().full_key, sha), sha);
}

TEST(Failure, RoundTripsAndRejectsCorruption) {
  Failure f;
  f.request_key = jitkern::sha256_hex("r");
  f.config_key = jitkern::sha256_hex("the commands as run");
  f.deps = sample().deps;
  f.message = "error: something\nend\nmore lines\n";
  Failure back;
  ASSERT_TRUE(parse(serialize(f), &back));
  EXPECT_EQ(back.message, f.message);
  EXPECT_EQ(back.request_key, f.request_key);
  EXPECT_EQ(back.config_key, f.config_key) << "a failure is remembered against the configuration that produced it";
  EXPECT_EQ(back.deps.size(), 2u);
  EXPECT_EQ(back.spec, "") << "a record without the spec line";
  f.spec = "fill_rows";
  ASSERT_TRUE(parse(serialize(f), &(back = Failure{})));
  EXPECT_EQ(back.spec, "fill_rows") << "the JitSpec's name, as `cache rm NAME` matches it";
  const std::string text = serialize(f);
  const std::size_t body = text.find("\nend\n");
  for (std::size_t n = 0; n <= body; ++n) EXPECT_FALSE(parse(text.substr(0, n), &(back = Failure{}))) << "cut at " << n;
  EXPECT_FALSE(parse(serialize(sample()), &(back = Failure{}))) << "a manifest is not a failure record";
}

TEST(Text, SplitKeepsEmptyFields) {
  EXPECT_EQ(jitkern::text::split("a::b", ':'), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(jitkern::text::split("", ':'), (std::vector<std::string>{""}));
  EXPECT_EQ(jitkern::text::split(":x", ':'), (std::vector<std::string>{"", "x"}));
}

TEST(Text, ErrorLinesPickTheErrorsElseTheFirstLines) {
  const std::string output = "In file included from a.h:1,\nb.cu:3: error: x undeclared\nnote: here\nb.cu:4: error: y\nb.cu:5: error: z\n";
  EXPECT_EQ(jitkern::text::error_lines(output), "b.cu:3: error: x undeclared\nb.cu:4: error: y");
  EXPECT_EQ(jitkern::text::error_lines("one\ntwo\nthree\nfour\n", 2), "one\ntwo");
  EXPECT_EQ(jitkern::text::error_lines(""), "no output");
}

TEST(Text, IncludeLineSpellsEveryPathTheHeaderNamesCanHold) {
  EXPECT_EQ(jitkern::text::include_line("/a b/k.cuh"), "#include \"/a b/k.cuh\"\n");
  EXPECT_EQ(jitkern::text::include_line("/a\"b/k.cuh"), "#include </a\"b/k.cuh>\n");
  EXPECT_EQ(jitkern::text::include_line("/a>b/k.cuh"), "#include \"/a>b/k.cuh\"\n");
  EXPECT_EQ(jitkern::text::include_line("/a\">b/k.cuh"), "");
  EXPECT_EQ(jitkern::text::include_line("/a\nb/k.cuh"), "");
}

TEST(Depfile, ParsesContinuationsEscapesAndSeveralRules) {
  const std::string text =
      "/tmp/x/device.o: /tmp/x/device.cu \\\n  /src/a.cuh /src/dir\\ with\\ space/b.h \\\r\n /usr/include/c++/12/cstdint\n"
      "second.o : /src/c.h\n"
      "other.o: rel/inc.h\n";
  EXPECT_EQ(parse_depfile(text), (std::vector<std::string>{"/tmp/x/device.cu", "/src/a.cuh", "/src/dir with space/b.h",
                                                          "/usr/include/c++/12/cstdint", "/src/c.h", "rel/inc.h"}));
  EXPECT_TRUE(parse_depfile("").empty());
  EXPECT_TRUE(parse_depfile("no rule here\n").empty());
  EXPECT_EQ(parse_depfile("t: a \\").size(), 2u) << "a dangling backslash at the end is a name character, not a crash";
}

TEST(Depfile, UndoesEveryEscapeOfMake) {
  // What gcc writes for /x/issue#42/k.h, /x/my$proj/k.h, /x/a:b/k.h, "/x/with space/k.h" and a name
  // ending in a backslash before a space: '#' as \#, '$' as $$, ' ' as \ , N backslashes before a
  // blank doubled plus one.
  const std::string text =
      "/c/cache\\ dir/build-1/host.o: /x/issue\\#42/k.h /x/my$$proj/k.h \\\n /x/a:b/k.h /x/with\\ space/k.h "
      "/x/back\\\\\\ slash.h /x/trailing\\\\ next.h\n";
  // A colon inside a prerequisite is part of its name; 3 backslashes and a space are one backslash and a
  // space in the name; 2 backslashes and a space are one backslash ending the name.
  EXPECT_EQ(parse_depfile(text), (std::vector<std::string>{"/x/issue#42/k.h", "/x/my$proj/k.h", "/x/a:b/k.h", "/x/with space/k.h",
                                                          "/x/back\\ slash.h", "/x/trailing\\", "next.h"}));
}

TEST(Manifest, WithoutACompilerSearchLineStillParses) {
  Manifest m = sample();
  m.compiler_search.clear();
  const std::string text = serialize(m);
  EXPECT_EQ(text.find("\nsearch "), std::string::npos);
  Manifest back;
  ASSERT_TRUE(parse(text, &back)) << "manifests written before the search line are read (their lookup searches PATH)";
  EXPECT_EQ(back.compiler_search, "");
}
