#pragma once
// From module sources to an installed, checked module for every target kernel: the
// sources may be a directory, an archive (tar.*, zip) or a makeself `.run` (as NVIDIA
// ships); archives are extracted safely (archive/), registered with DKMS under
// <sourcetree>/NAME-VERSION, and built and installed for each kernel.
#include "driver/dkms.hpp"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace hpcbake::driver {

enum class SourceKind { directory, archive, makeself };
SourceKind source_kind(const std::filesystem::path& source);

struct BuildRequest {
  std::filesystem::path source;
  std::string subdir; // where the module sources are inside the source; empty: its root
                      // (or the single top-level directory of an archive)
  ModuleSpec spec;
  std::vector<std::string> kernels;
  std::filesystem::path work_dir; // scratch space for extraction; removed afterwards
  // Kernels whose modules come prebuilt (driver/prebuilt.hpp, checked by the caller): installed
  // with Dkms::install_prebuilt, compiling nothing; one whose install fails is built after all.
  struct Prebuilt {
    std::string arch;                         // DKMS's directory for the machine (x86_64)
    std::vector<std::filesystem::path> files; // the module files
    std::string from;                         // where they came from, for the note
  };
  std::map<std::string, Prebuilt> prebuilt;
  // Kernels built with DKMS although prebuilt modules were offered, and why: each build's note.
  std::map<std::string, std::string> not_prebuilt;
};

// Every kernel is attempted even after one fails, so the report covers them all; then a
// failure is rolled back (Dkms::roll_back: the logs kept, nothing of this version left
// half-installed). The Result is an error only when nothing could be attempted (bad source,
// extraction failed).
Result<std::vector<KernelBuild>> build_module(const BuildRequest& request, Dkms& dkms,
                                              const std::string& conf_template);

} // namespace hpcbake::driver
