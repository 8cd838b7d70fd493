// The container engines' configs: hpcbake's edit of /etc/docker/daemon.json (a JSON object) and
// of /etc/containerd/config.toml (TOML read as statements). Hostile or broken files must give an
// error, never a crash. Properties: an edit that succeeds leaves a file in which the engine reads
// the runtime's binary, and editing the edited file again changes nothing.
#include "container/runtime.hpp"
#include "fuzz_util.hpp"

using namespace hpcbake_fuzz;
namespace ct = hpcbake::container;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = as_text(data, size);
  const ct::Runtime rt{};
  for (const auto engine : {ct::Engine::docker, ct::Engine::containerd}) {
    const bool docker = engine == ct::Engine::docker;
    auto edit = docker ? ct::edit_docker(text, rt, "fuzz") : ct::edit_containerd(text, rt, "fuzz");
    (void)(docker ? ct::docker_runtime(text, rt.name, "fuzz") : ct::containerd_runtime(text, rt.name, "fuzz"));
    if (!edit) continue;
    check(edit->changed == (edit->text != text), "changed does not say whether the text changed");
    auto binary =
        docker ? ct::docker_runtime(edit->text, rt.name, "fuzz") : ct::containerd_runtime(edit->text, rt.name, "fuzz");
    check(binary && *binary == rt.binary,
          std::string("after the edit ") + ct::engine_name(engine) + " does not read the runtime's binary");
    auto again = docker ? ct::edit_docker(edit->text, rt, "fuzz") : ct::edit_containerd(edit->text, rt, "fuzz");
    check(again && !again->changed,
          std::string("editing the edited ") + ct::engine_name(engine) + " config changed it again");
  }
  return 0;
}
