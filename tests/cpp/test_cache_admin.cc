// Cache administration's entry selection, removal and counts (src/engine/store/cache_admin.h) on a store whose
// entries are made by hand: an incomplete entry and a remembered failure need no compiler.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <string>

#include "store/cache_admin.h"

namespace {

using jitkern::cache::Outcome;

struct AdminStore : ::testing::Test {
  std::string root;
  void SetUp() override {
    char templ[] = "/tmp/jitkern-admin-XXXXXX";
    root = mkdtemp(templ);
    ::mkdir((root + "/cache").c_str(), 0700);
    for (const char* stem : {"scale_2-0123456789abcdef0123", "scale_2-89abcdef0123456789ab", "other-0123ffffffffffffffff"})
      ::mkdir((root + "/cache/" + stem).c_str(), 0755);
  }
  jitkern::store::Store store() const {
    jitkern::plan::Config config;
    config.cache_dir = root + "/cache", config.lock_dir = root + "/locks";
    return jitkern::store::Store::writable(config);
  }
  static std::vector<std::string> stems(const std::vector<jitkern::cache::Entry>& entries) {
    std::vector<std::string> out;
    for (const auto& e : entries) out.push_back(e.stem);
    return out;
  }
};

TEST_F(AdminStore, FindsEntriesByModuleNameEntryNameOrKeyPrefix) {
  const auto s = store();
  EXPECT_EQ(stems(jitkern::cache::find(s, {"scale_2"})),
            (std::vector<std::string>{"scale_2-0123456789abcdef0123", "scale_2-89abcdef0123456789ab"}));
  EXPECT_EQ(stems(jitkern::cache::find(s, {"0123"})), (std::vector<std::string>{"other-0123ffffffffffffffff", "scale_2-0123456789abcdef0123"}));
  EXPECT_EQ(stems(jitkern::cache::find(s, {"89ab", "scale_2-89abcdef0123456789ab"})), (std::vector<std::string>{"scale_2-89abcdef0123456789ab"}));
  EXPECT_THROW(jitkern::cache::find(s, {"012"}), std::invalid_argument);  // fewer than kMinKeyPrefix digits name nothing
  EXPECT_THROW(jitkern::cache::find(s, {"scale"}), std::invalid_argument);
}

TEST_F(AdminStore, RemovesWhatItNamesAndNothingWhenOneNamesNothing) {
  const auto s = store();
  EXPECT_THROW(jitkern::cache::remove(s, {"other", "nonesuch"}, false), std::invalid_argument);
  EXPECT_EQ(s.stems().size(), 3u);
  const std::vector<Outcome> dry = jitkern::cache::remove(s, {"other"}, true);
  ASSERT_EQ(dry.size(), 1u);
  EXPECT_EQ(dry[0].action, "would remove");
  EXPECT_EQ(s.stems().size(), 3u);
  const std::vector<Outcome> done = jitkern::cache::remove(s, {"other", "0123ffff"}, false);
  ASSERT_EQ(done.size(), 1u);  // named twice, removed once
  EXPECT_EQ(done[0].action, "removed");
  EXPECT_EQ(s.stems(), (std::vector<std::string>{"scale_2-0123456789abcdef0123", "scale_2-89abcdef0123456789ab"}));
}

TEST_F(AdminStore, RefusesToChangeAnotherUsersCache) {
  if (::geteuid() != 0) GTEST_SKIP() << "NOT RUN: needs root to give the cache to another user";
  ASSERT_EQ(::chown((root + "/cache").c_str(), 65534, 65534), 0);
  const auto s = store();
  const auto refused = [&](const char* op, const auto& f) {
    try {
      f();
      ADD_FAILURE() << op << " acted on uid 65534's cache";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("belongs to uid 65534"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("`jitkern cache ") + op + "`"), std::string::npos) << e.what();
    }
  };
  refused("verify", [&] { jitkern::cache::verify(s); });  // its entries, having no manifest, would be removed
  refused("prune", [&] { jitkern::cache::prune(s, 0, -1, false); });
  refused("clear", [&] { jitkern::cache::clear(s, false); });
  refused("rm", [&] { jitkern::cache::remove(s, {"other"}, false); });
  EXPECT_EQ(s.stems().size(), 3u);
  struct stat st;
  EXPECT_NE(::lstat((root + "/locks").c_str(), &st), 0) << "a lock directory of root's was created";
  EXPECT_EQ(jitkern::cache::list(s).size(), 3u);  // reading it is not refused
}

TEST_F(AdminStore, CountsEntriesByStatus) {
  const auto stats = jitkern::cache::stats(store());
  EXPECT_EQ(stats.entries, 3);
  EXPECT_EQ(stats.incomplete, 3);
  EXPECT_EQ(stats.compiles, 0);
  EXPECT_EQ(stats.used_day, 0);  // only published libraries are loaded
  EXPECT_EQ(jitkern::cache::stats(jitkern::store::Store::prebuilt(root + "/cache")).used_week, -1);  // not recorded there
}

}  // namespace
