// The prebuilt-modules reader (driver::extract_prebuilt, which reads the manifest with
// parse_prebuilt_manifest). Properties: a file that is refused says why; one that is accepted
// wrote exactly the module files its manifest lists, under the output directory and nowhere
// else, each a regular file of the listed size and SHA-256; its manifest survives to_json →
// parse_prebuilt_manifest unchanged.
#include "driver/prebuilt.hpp"
#include "fuzz_util.hpp"
#include "util/sha256.hpp"

#include <set>

using namespace hpcbake_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path& dir = scratch();
  const fs::path file = dir / "in.tar";
  const fs::path out = dir / "out";
  remove_tree(out);
  write_file(file, as_text(data, size));
  auto m = hpcbake::driver::extract_prebuilt(file, out);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    check(e.path() == file || e.path() == out, "something was written beside the output: " + e.path().string());
  if (!m) {
    check(!m.error().message.empty(), "a refusal without a message");
    remove_tree(out);
    return 0;
  }
  std::set<std::string> listed;
  for (const auto& p : m->packages)
    for (const auto& mod : p.modules) {
      const std::string rel = p.dkms_name + "/" + p.version + "/" + mod.file;
      listed.insert(rel);
      std::uint64_t bytes = 0;
      auto sha = hpcbake::util::sha256_file(out / rel, &bytes);
      check(sha && *sha == mod.sha256 && bytes == mod.size, rel + " is not what the manifest lists");
    }
  std::size_t files = 0;
  for (auto it = fs::recursive_directory_iterator(out, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    check(!it->is_symlink(ec), "a link was written: " + it->path().string());
    if (!it->is_regular_file(ec)) continue;
    ++files;
    check(listed.contains(it->path().lexically_relative(out).string()),
          "a file the manifest does not list: " + it->path().string());
  }
  check(files == listed.size(), "a listed module file is missing");
  const auto doc = hpcbake::driver::to_json(*m);
  auto again = hpcbake::driver::parse_prebuilt_manifest(doc.dump(), "again");
  check(again.has_value() && hpcbake::driver::to_json(*again) == doc, "a manifest changed in a round trip");
  remove_tree(out);
  return 0;
}
