#include "fetch/cache.hpp"

#include "fetch/sha256.hpp"
#include "util/atomic_file.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace hpcbake::fetch {

namespace fs = std::filesystem;
using util::sync_path;
using util::write_file_atomic;


Cache::Cache(fs::path dir) : dir_(std::move(dir)) {}

Status Cache::ensure_layout() const {
  for (const char* sub : {"sha256", "partial", "quarantine"}) {
    std::error_code ec;
    fs::create_directories(dir_ / sub, ec);
    if (ec)
      return fail(ErrorKind::internal, fmt::format("{}: cannot create cache directory: {}", (dir_ / sub).string(), ec.message()),
                  "pass --cache DIR on a writable file system");
  }
  return {};
}

bool Cache::has(const std::string& sha256) const {
  std::error_code ec;
  return fs::is_regular_file(entry(sha256), ec);
}

std::optional<PartialInfo> Cache::read_sidecar(const std::string& sha256) const {
  std::ifstream in(sidecar(sha256));
  if (!in) return std::nullopt;
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  PartialInfo p;
  p.url = j.value("url", "");
  p.url_digest = j.value("url_sha256", "");
  p.validator = j.value("validator", "");
  return p;
}

Status Cache::write_sidecar(const std::string& sha256, const PartialInfo& info) const {
  nlohmann::json j = {{"url", info.url}, {"url_sha256", info.url_digest}, {"validator", info.validator}};
  return write_file_atomic(sidecar(sha256), j.dump() + "\n");
}

Status Cache::publish(const std::string& sha256) const {
  const fs::path src = part(sha256);
  if (auto s = sync_path(src, O_RDONLY); !s) return s;
  if (::rename(src.c_str(), entry(sha256).c_str()) != 0)
    return fail(ErrorKind::internal, fmt::format("{}: cannot publish into the cache: {}", entry(sha256).string(), std::strerror(errno)));
  if (auto s = sync_path(dir_ / "sha256", O_RDONLY | O_DIRECTORY); !s) return s;
  std::error_code ec;
  fs::remove(sidecar(sha256), ec);
  return {};
}

fs::path Cache::quarantine(const std::string& sha256) const {
  for (int n = 0;; ++n) {
    fs::path dest = dir_ / "quarantine" / fmt::format("{}.{}", sha256, n);
    std::error_code ec;
    if (fs::exists(dest, ec)) continue;
    fs::rename(part(sha256), dest, ec);
    fs::remove(sidecar(sha256), ec);
    return dest;
  }
}

void Cache::drop_partial(const std::string& sha256) const {
  std::error_code ec;
  fs::remove(part(sha256), ec);
  fs::remove(sidecar(sha256), ec);
}

std::vector<CacheEntry> Cache::list() const {
  std::vector<CacheEntry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir_ / "sha256", ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    out.push_back({it->path().filename().string(), static_cast<std::uint64_t>(it->file_size())});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.sha256 < b.sha256; });
  return out;
}

std::vector<VerifyProblem> Cache::verify(int* verified) const {
  std::vector<VerifyProblem> problems;
  int good = 0;
  for (const auto& e : list()) {
    const fs::path path = entry(e.sha256);
    const std::string actual = sha256_file(path.string());
    if (actual == e.sha256) {
      ++good;
      continue;
    }
    const fs::path dest = dir_ / "quarantine" / (e.sha256 + ".corrupt");
    std::error_code ec;
    fs::rename(path, dest, ec);
    problems.push_back({e.sha256, actual, dest});
  }
  if (verified) *verified = good;
  return problems;
}

GcResult Cache::gc(const std::set<std::string>& keep) const {
  GcResult r;
  auto drop = [&](const fs::path& p) {
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    if (fs::remove(p, ec)) {
      r.freed += size == static_cast<std::uintmax_t>(-1) ? 0 : size;
      ++r.removed;
    }
  };
  for (const char* sub : {"partial", "quarantine"}) {
    std::error_code ec;
    for (fs::directory_iterator it(dir_ / sub, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file()) drop(it->path());
  }
  for (const auto& e : list())
    if (!keep.contains(e.sha256)) drop(entry(e.sha256));
  return r;
}

} // namespace hpcbake::fetch
