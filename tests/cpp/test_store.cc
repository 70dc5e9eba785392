// The cache store on disk (src/engine/store/store.h): a published library is found open on the file that was
// checked, and a lookup misses when the request, a dependency, the library's bytes or the compilers do not
// match; remembered failures hold for the commands that produced them; a cache others may write is refused.
// The library is a real shared object, built by the host compiler.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <string>

#include "store/dependencies.h"
#include "store/store.h"

namespace {

using namespace jitkern;

// Written and dated `age_s` ago: a file modified within the file system's timestamp granularity of its
// hashing is taken as possibly changed since. An edit has another date (as any edit but `cp -p` has).
void write(const std::string& path, const std::string& text, int age_s = 60) {
  std::ofstream(path, std::ios::trunc) << text;
  const struct timespec ago[2] = {{::time(nullptr) - age_s, 0}, {::time(nullptr) - age_s, 0}};
  ::utimensat(AT_FDCWD, path.c_str(), ago, 0);
}

const std::string kCommandsA(64, 'a');  // keys are hex digests
const store::ToolchainCheck kAnyCompilers = [](const manifest::Manifest&) { return true; };

struct StoreOnDisk : ::testing::Test {
  std::string root;

  void SetUp() override {
    char templ[] = "/tmp/jitkern-store-XXXXXX";
    root = ::mkdtemp(templ);
    write(root + "/dep.h", "inline int dep() { return 1; }\n");
    write(root + "/lib.cc", "extern \"C\" int answer() { return 42; }\n");
    ASSERT_EQ(std::system(("c++ -shared -fPIC -o " + root + "/built.so " + root + "/lib.cc").c_str()), 0);
  }
  void TearDown() override { std::system(("chmod -R u+w " + root + " && rm -rf " + root).c_str()); }

  store::Store cache() const {
    plan::Config c;
    c.cache_dir = root + "/cache", c.lock_dir = root + "/locks";
    return store::Store::writable(c);
  }
  static plan::Plan plan_of(char digit) {
    plan::Plan p;
    p.name = "probe";
    p.request_key = std::string(64, digit);
    return p;
  }
  // Publishes a copy of built.so as the library of `p`, built from dep.h.
  store::Found publish(const store::Store& s, const plan::Plan& p) const {
    s.ensure_writable(true);
    const store::Entry e = s.entry(p);
    e.prepare();
    const std::string copy = root + "/copy.so";
    EXPECT_EQ(std::system(("cp " + root + "/built.so " + copy).c_str()), 0);
    manifest::Manifest m;
    m.request_key = p.request_key, m.toolchain = std::string(64, 'f'), m.module = p.name, m.compiler_search = "search";
    m.deps = deps::hash_files({{root + "/dep.h", ""}});
    return e.publish(p, copy, m);
  }
};

TEST_F(StoreOnDisk, APublishedLibraryIsFoundOpenOnTheCheckedFile) {
  const store::Store s = cache();
  const plan::Plan p = plan_of('a');
  const store::Found published = publish(s, p);
  EXPECT_EQ(published.path.rfind(s.entry(p).dir() + "/", 0), 0u) << published.path;
  std::string why;
  const auto found = s.entry(p).lookup(p, kAnyCompilers, &why);
  ASSERT_TRUE(found.has_value()) << why;
  EXPECT_EQ(found->path, published.path);
  EXPECT_GE(found->fd.get(), 0);
  EXPECT_FALSE(s.entry(plan_of('b')).lookup(plan_of('b'), kAnyCompilers, &why).has_value()) << "another request is another entry";
}

TEST_F(StoreOnDisk, AChangedDependencyIsAMissNamingIt) {
  const store::Store s = cache();
  const plan::Plan p = plan_of('a');
  publish(s, p);
  write(root + "/dep.h", "inline int dep() { return 2; }\n", 30);
  std::string why;
  EXPECT_FALSE(s.entry(p).lookup(p, kAnyCompilers, &why).has_value());
  EXPECT_NE(why.find("dep.h"), std::string::npos) << why;
}

TEST_F(StoreOnDisk, AnAlteredLibraryIsNeverServed) {
  const store::Store s = cache();
  const plan::Plan p = plan_of('a');
  const std::string path = publish(s, p).path;
  ::chmod(path.c_str(), 0600);
  std::ofstream(path, std::ios::app) << "tampered";
  std::string why;
  EXPECT_FALSE(s.entry(p).lookup(p, kAnyCompilers, &why).has_value());
  EXPECT_FALSE(why.empty());
  EXPECT_FALSE(s.entry(p).verify().empty()) << "jitkern cache verify reports it too";
}

TEST_F(StoreOnDisk, CompilersThatCannotStandInAreAMiss) {
  const store::Store s = cache();
  const plan::Plan p = plan_of('a');
  publish(s, p);
  std::string why;
  EXPECT_FALSE(s.entry(p).lookup(p, [](const manifest::Manifest&) { return false; }, &why).has_value());
  EXPECT_FALSE(why.empty());
}

TEST_F(StoreOnDisk, AFailureIsRememberedForTheCommandsThatProducedItUntilAnInputChanges) {
  const store::Store s = cache();
  s.ensure_writable(true);
  const plan::Plan p = plan_of('c');
  const store::Entry e = s.entry(p);
  e.prepare();
  manifest::Failure f;
  f.request_key = p.request_key, f.config_key = kCommandsA, f.message = "error: no";
  f.deps = deps::hash_files({{root + "/dep.h", ""}});
  e.remember_failure(f, "the full log");
  manifest::Failure out;
  ASSERT_TRUE(e.remembered_failure(p.request_key, kCommandsA, &out));
  EXPECT_EQ(out.message, "error: no");
  EXPECT_FALSE(e.remembered_failure(p.request_key, std::string(64, 'b'), &out)) << "other commands (a fixed setting) try again";
  write(root + "/dep.h", "inline int dep() { return 3; }\n", 30);
  EXPECT_FALSE(e.remembered_failure(p.request_key, kCommandsA, &out)) << "an edited input tries again";
}

TEST_F(StoreOnDisk, ACacheOthersMayWriteIsRefused) {
  ASSERT_EQ(::mkdir((root + "/cache").c_str(), 0700), 0);
  ASSERT_EQ(::chmod((root + "/cache").c_str(), 0777), 0);
  EXPECT_ANY_THROW(cache().ensure_writable(true));
  ASSERT_EQ(::chmod((root + "/cache").c_str(), 0700), 0);
  EXPECT_NO_THROW(cache().ensure_writable(true));
}

}  // namespace
