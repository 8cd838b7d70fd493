// The manifest loader (manifest::lint_manifests): YAML through the strict MapReader, the
// size/distro/component schemas and the cross-file rules.
//
// Input: up to three parts separated by NUL bytes, written as sizes/<name>.yaml,
// distros/<name>.yaml and components/<name>.yaml of a fresh manifest directory. Each part's
// first line is the file's stem (the loader checks it against the content); a stem that is
// not a plain name becomes "x". The seeds are real manifests from manifests/ and the hostile
// shapes of issue 20 (fuzz/make-text-seeds); fuzz/manifest.dict holds YAML tokens and the keys.
#include "fuzz_util.hpp"
#include "manifest/manifests.hpp"
#include "util/utf8.hpp"

#include <cmath>

using namespace hpcbake_fuzz;
namespace mf = hpcbake::manifest;

namespace {

std::string stem_of(std::string_view line) {
  if (line.empty() || line.size() > 64 || line.front() == '.') return "x";
  for (char c : line)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_')) return "x";
  return std::string(line);
}

void finite(const std::optional<double>& v, const mf::SizeManifest& s, const char* what) {
  check(!v || std::isfinite(*v), s.file + ": " + what + " loaded as " + std::to_string(*v));
}

void utf8(const std::string& text, const std::string& what) {
  check(!hpcbake::util::first_invalid_utf8(text), what + " is not valid UTF-8");
}

// What a loaded size holds: counts never wrapped to zero or below, text that JSON output takes.
void check_size(const mf::SizeManifest& s) {
  finite(s.checks.gpu_bw_h2d_gbs, s, "checks.gpu_bw_h2d_gbs");
  finite(s.checks.gpu_bw_p2p_gbs, s, "checks.gpu_bw_p2p_gbs");
  finite(s.checks.nccl_allreduce_gbs, s, "checks.nccl_allreduce_gbs");
  finite(s.checks.ib_write_bw_gdr_gbps, s, "checks.ib_write_bw_gdr_gbps");
  finite(s.checks.ib_write_bw_gbps, s, "checks.ib_write_bw_gbps");
  finite(s.checks.cpu_stream_mbs, s, "checks.cpu_stream_mbs");
  if (s.gpu) {
    check(s.gpu->count >= 1 && s.gpu->nvswitch_count >= 0, s.file + ": a GPU count loaded below its range");
    check(!s.checks.gpu_count || *s.checks.gpu_count == s.gpu->count, s.file + ": checks.gpu_count loaded unequal");
  }
  if (s.infiniband)
    check(s.infiniband->ports >= 1 && s.infiniband->rate_gbps >= 1, s.file + ": infiniband loaded below its range");
  utf8(s.size + s.family + s.source + s.notes, s.file + ": a loaded string");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path dir = scratch() / "manifests";
  static const char* const folders[] = {"sizes", "distros", "components"};
  std::error_code ec;
  fs::remove_all(dir, ec);
  for (const char* f : folders)
    fs::create_directories(dir / f);
  std::string_view rest = as_text(data, size);
  for (const char* f : folders) {
    const std::size_t nul = rest.find('\0');
    std::string_view part = rest.substr(0, nul);
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
    const std::size_t nl = part.find('\n');
    const std::string stem = stem_of(part.substr(0, nl));
    write_file(dir / f / (stem + ".yaml"), nl == std::string_view::npos ? std::string_view() : part.substr(nl + 1));
    if (nul == std::string_view::npos) break;
  }
  const auto result = mf::lint_manifests(dir);
  // Diagnostics quote excerpts (util::excerpt): valid UTF-8 and short whatever the input held.
  // 2048: the longest fixed text is a few hundred bytes, plus a few excerpts and paths.
  for (const auto& d : result.diagnostics) {
    check(!d.message.empty(), "a diagnostic without a message");
    utf8(d.str(), "a diagnostic");
    check(d.message.size() < 2048, "a diagnostic of " + std::to_string(d.message.size()) + " bytes");
  }
  // What loaded cleanly is what the planner and `verify` trust.
  for (const auto& s : result.manifests.sizes)
    check_size(s);
  for (const auto& d : result.manifests.distros)
    utf8(d.name + d.source + d.os_id + d.os_version_id, d.file + ": a loaded string");
  for (const auto& c : result.manifests.components)
    for (const auto& v : c.variants)
      utf8(c.description + v.version + v.notes, c.file + ": a loaded string");
  return 0;
}
