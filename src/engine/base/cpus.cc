#include "base/cpus.h"

#include <sched.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#include "base/fs_util.h"
#include "base/text.h"

namespace jitkern::cpus {
namespace {

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The lesser of two quotas, 0 meaning none.
int least_of(int a, int b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); }

// The quota of one cgroup directory (0: none or unreadable).
int quota_in(const std::string& dir, bool v2) {
  std::string text;
  double quota = -1, period = 0;
  if (v2) {
    if (!fs::read_file(dir + "/cpu.max", &text)) return 0;
    std::istringstream in(text);
    std::string q;
    in >> q >> period;
    if (q == "max" || !in) return 0;
    quota = std::atof(q.c_str());
  } else {
    std::string p;
    if (!fs::read_file(dir + "/cpu.cfs_quota_us", &text) || !fs::read_file(dir + "/cpu.cfs_period_us", &p)) return 0;
    quota = std::atof(text.c_str()), period = std::atof(p.c_str());
  }
  return quota > 0 && period > 0 ? std::max(1, static_cast<int>(std::ceil(quota / period))) : 0;
}

// The least quota from `mount` + `path` up to `mount` (only `mount` where the path is not there: a
// container that sees its own cgroup at the root while /proc names the host's path).
int least_quota(const std::string& mount, std::string path, bool v2) {
  if (!is_dir(mount)) return 0;
  if (!is_dir(mount + path)) path = "/";
  int least = 0;
  for (;;) {
    least = least_of(least, quota_in(path == "/" ? mount : mount + path, v2));
    if (path == "/" || path.empty()) return least;
    const auto slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

}  // namespace

int cgroup_quota(const std::string& proc_self_cgroup, const std::string& root) {
  int least = 0;
  const auto take = [&](int q) { least = least_of(least, q); };
  for (const auto& line : text::split_lines(proc_self_cgroup)) {  // "id:controllers:path"
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      take(least_quota(root, path, true));
      take(least_quota(root + "/unified", path, true));  // hybrid hierarchies
      continue;
    }
    std::vector<std::string> names;
    std::string name;
    for (std::istringstream in(controllers); std::getline(in, name, ',');) names.push_back(name);
    if (std::find(names.begin(), names.end(), "cpu") != names.end()) {
      take(least_quota(root + "/" + controllers, path, false));
      if (controllers != "cpu") take(least_quota(root + "/cpu", path, false));
    }
  }
  return least;
}

int usable() {
  static const int quota = [] {
    std::string cgroups;
    return fs::read_file("/proc/self/cgroup", &cgroups) ? cgroup_quota(cgroups) : 0;
  }();
  cpu_set_t set;
  CPU_ZERO(&set);
  const int n = std::max(1, sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(std::thread::hardware_concurrency()));
  return quota > 0 ? std::min(n, quota) : n;
}

}  // namespace jitkern::cpus
