// The program run inside the test container (tests/container/test_podman_cdi.py): what
// `nvidia-smi -L` does, through NVML only. It dlopens libnvidia-ml.so.1 (the one the CDI spec
// mounts into the container), calls nvmlInit_v2 and nvmlDeviceGetCount_v2, and prints one line per
// GPU in nvidia-smi -L's form, "GPU <i>: <name> (UUID: <uuid>)", so that verify counts them the
// same way for a real image. A GPU whose device node /dev/nvidia<i> is not a character device is
// not listed and makes the exit status 3: the real NVML needs the node to open the GPU, and a
// container gets it only from the spec's deviceNodes. Exit 2: NVML missing or failing.
// `--ls DIR...` instead lists each DIR's entries, one line each, "DIR/NAME c MAJOR:MINOR" for a
// character device ("DIR/NAME -" otherwise), sorted (the image has no ls; the RDMA test counts the
// /dev/infiniband nodes a CDI spec gave the container); exit 2 when a DIR cannot be read.
// Built static in libstdc++/libgcc: the image needs only Debian's libc6. Not NVIDIA code.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = void*;
using init_fn = nvmlReturn_t (*)();
using count_fn = nvmlReturn_t (*)(unsigned*);
using handle_fn = nvmlReturn_t (*)(unsigned, nvmlDevice_t*);
using text_fn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);

template <typename F> F bind(void* lib, const char* name) {
  F f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) std::fprintf(stderr, "nvml_probe: libnvidia-ml.so.1 has no %s\n", name);
  return f;
}

// /dev/nvidia<i>: a character device of major 195, minor i (NVIDIA's driver numbering).
bool node_present(unsigned index) {
  char path[32];
  std::snprintf(path, sizeof path, "/dev/nvidia%u", index);
  struct stat st {};
  return stat(path, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 195 && minor(st.st_rdev) == index;
}

// --ls DIR...: the entries of each DIR (no "." or ".."), sorted, with their device numbers.
int list_dirs(int argc, char** argv) {
  int status = 0;
  for (int a = 2; a < argc; ++a) {
    DIR* d = opendir(argv[a]);
    if (!d) {
      std::fprintf(stderr, "nvml_probe: cannot read %s: %s\n", argv[a], std::strerror(errno));
      status = 2;
      continue;
    }
    std::vector<std::string> names;
    while (const dirent* e = readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      const std::string path = std::string(argv[a]) + "/" + n;
      struct stat st {};
      if (lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode))
        std::printf("%s c %u:%u\n", path.c_str(), major(st.st_rdev), minor(st.st_rdev));
      else
        std::printf("%s -\n", path.c_str());
    }
  }
  return status;
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], "--ls") == 0) return list_dirs(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "-L") != 0) {
    std::fprintf(stderr, "usage: %s [-L] | --ls DIR...\n", argv[0]);
    return 2;
  }
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!lib) {
    std::fprintf(stderr, "nvml_probe: %s\n", dlerror());
    return 2;
  }
  auto init = bind<init_fn>(lib, "nvmlInit_v2");
  auto count = bind<count_fn>(lib, "nvmlDeviceGetCount_v2");
  auto handle = bind<handle_fn>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto name = bind<text_fn>(lib, "nvmlDeviceGetName");
  auto uuid = bind<text_fn>(lib, "nvmlDeviceGetUUID");
  if (!init || !count || !handle || !name || !uuid) return 2;
  unsigned n = 0;
  if (int rc = init(); rc != 0) {
    std::fprintf(stderr, "nvml_probe: nvmlInit_v2 returned %d\n", rc);
    return 2;
  }
  if (int rc = count(&n); rc != 0) {
    std::fprintf(stderr, "nvml_probe: nvmlDeviceGetCount_v2 returned %d\n", rc);
    return 2;
  }
  int status = 0;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    char model[96] = "", id[96] = "";
    if (handle(i, &dev) != 0 || name(dev, model, sizeof model) != 0 || uuid(dev, id, sizeof id) != 0) {
      std::fprintf(stderr, "nvml_probe: NVML cannot query GPU %u\n", i);
      status = 2;
    } else if (!node_present(i)) {
      std::fprintf(stderr, "nvml_probe: GPU %u: /dev/nvidia%u is not character device 195,%u\n", i, i, i);
      status = status ? status : 3;
    } else {
      std::printf("GPU %u: %s (UUID: %s)\n", i, model, id);
    }
  }
  std::fprintf(stderr, "nvml_probe: NVML reports %u GPUs\n", n);
  return status;
}
