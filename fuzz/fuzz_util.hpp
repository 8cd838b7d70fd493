#pragma once
// Helpers shared by the fuzz targets (fuzz_<target>.cpp). Each target defines
// LLVMFuzzerTestOneInput; libFuzzer drives it in the clang build (HPCBAKE_FUZZ=ON), and
// replay_main.cpp drives it over saved inputs in the g++ builds (plain and ASan).
//
// A harness states a property with `check(cond, what)`: a broken property aborts, which
// libFuzzer records as a crash with the input that caused it, like a sanitizer report.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace hpcbake_fuzz {

namespace fs = std::filesystem;

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "hpcbake fuzz property violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline void check(bool ok, const std::string& what) {
  if (!ok) die(what);
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The process's own scratch directory, created on first use under $TMPDIR (or /tmp) and
// removed when the process exits normally. A crash leaves it, with the files of the input.
inline const fs::path& scratch() {
  static const fs::path dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/hpcbake-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) die("cannot create a scratch directory under " + tmpl);
    return fs::path(tmpl);
  }();
  static const struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup;
  return dir;
}

inline void write_file(const fs::path& path, std::string_view content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("cannot create " + path.string());
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n <= 0) die("cannot write " + path.string());
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

// Removes a tree that extraction may have left with read-only directories (archive modes),
// and checks that it is gone.
inline void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) {
    for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0700);
    ::chmod(p.c_str(), 0700);
    ec.clear();
    fs::remove_all(p, ec);
  }
  struct stat sb {};
  check(::lstat(p.c_str(), &sb) != 0, "could not remove " + p.string());
}

// Where archive extraction is confined, and how the harness proves it.
//
// Layout: <scratch>/a/b/c/d/run/out. `out` is the destination; extraction stages into
// `run/out.partial-XXXXXX` next to it. Four empty directories above `run` give a `..`
// escape room to land in, so one that climbs up to four levels is seen, and one that
// climbs further lands in the scratch directory, which is checked too. A name that is
// absolute cannot be caught that way: the archive seeds aim those at kAbsoluteCanary,
// which must never appear.
class Jail {
public:
  static constexpr const char* kAbsoluteCanary = "/tmp/hpcbake-fuzz-escape";

  Jail() : top_(scratch() / "jail"), run_(top_ / "a" / "b" / "c" / "d" / "run") {
    std::error_code ec;
    fs::create_directories(run_.parent_path(), ec);
    if (ec) die("cannot create " + run_.parent_path().string());
  }

  // A new, empty `run` directory for one input.
  const fs::path& begin() {
    std::error_code ec;
    if (!fs::create_directory(run_, ec) || ec) die("cannot create " + run_.string() + " (left over?)");
    return run_;
  }
  fs::path dest() const { return run_ / "out"; }

  // After one input: nothing outside `run`, `run` holds `out` alone when extraction
  // succeeded and nothing at all when it failed (no staging tree left), every symlink
  // in `out` stays inside it, no hard link reaches a file outside it. Then `run` is removed.
  void end(bool extracted, const std::vector<fs::path>& extra_inputs = {}) {
    std::error_code ec;
    // 1. Nothing outside `run`: the scratch dir holds the jail (and the input files).
    for (const auto& e : fs::directory_iterator(scratch(), ec)) {
      bool allowed = e.path() == top_;
      for (const auto& x : extra_inputs)
        allowed = allowed || e.path() == x;
      check(allowed, "extraction created " + e.path().string() + " outside its destination");
    }
    for (fs::path d = top_; d != run_.parent_path();) {
      fs::path next;
      for (const auto& e : fs::directory_iterator(d, ec)) {
        check(next.empty(), "extraction created " + e.path().string() + " outside its destination");
        next = e.path();
      }
      check(!next.empty(), "the jail's directory " + d.string() + " disappeared");
      d = next;
    }
    for (const auto& e : fs::directory_iterator(run_.parent_path(), ec))
      check(e.path() == run_, "extraction created " + e.path().string() + " outside its destination");
    struct stat sb {};
    check(::lstat(kAbsoluteCanary, &sb) != 0, std::string("extraction wrote ") + kAbsoluteCanary);
    // 2. `run` holds exactly what the outcome says.
    std::vector<fs::path> in_run;
    for (const auto& e : fs::directory_iterator(run_, ec))
      in_run.push_back(e.path());
    if (extracted) {
      check(in_run.size() == 1 && in_run.front() == dest(),
            "a successful extraction left something besides its destination in " + run_.string());
      check_inside(dest());
    } else {
      check(in_run.empty(), "a failed extraction left " + (in_run.empty() ? std::string() : in_run.front().string()));
    }
    // 3. Removed.
    remove_tree(run_);
  }

private:
  static void check_inside(const fs::path& out) {
    std::error_code ec;
    std::map<std::pair<dev_t, ino_t>, nlink_t> seen; // regular files: links found in `out`
    std::map<std::pair<dev_t, ino_t>, nlink_t> nlink;
    for (auto it = fs::recursive_directory_iterator(out, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      struct stat sb {};
      check(::lstat(it->path().c_str(), &sb) == 0, "cannot lstat " + it->path().string());
      if (S_ISLNK(sb.st_mode)) {
        const fs::path target = fs::read_symlink(it->path(), ec);
        check(!ec && !target.empty() && target.is_relative(), "symlink " + it->path().string() + " is absolute");
        const fs::path resolved = (it->path().parent_path() / target).lexically_normal();
        const auto rel = resolved.lexically_relative(out);
        check(!rel.empty() && *rel.begin() != "..",
              "symlink " + it->path().string() + " -> " + target.string() + " points outside the destination");
      } else if (S_ISREG(sb.st_mode)) {
        check((sb.st_mode & (S_ISUID | S_ISGID)) == 0, "setuid/setgid file " + it->path().string());
        const auto key = std::pair{sb.st_dev, sb.st_ino};
        ++seen[key];
        nlink[key] = sb.st_nlink;
      } else if (!S_ISDIR(sb.st_mode)) {
        die("device, FIFO or socket " + it->path().string() + " extracted without allow_devices");
      }
    }
    check(!ec, "cannot walk " + out.string() + ": " + ec.message());
    for (const auto& [key, n] : nlink)
      check(seen[key] == n, "a hard link in the destination shares its file with something outside it");
  }

  fs::path top_;
  fs::path run_;
};

} // namespace hpcbake_fuzz
