#pragma once
// libibverbs (libibverbs.so.1, rdma-core), loaded at run time. Struct layouts come from
// <infiniband/verbs.h> (libibverbs-dev) inside ibverbs.cpp only; nothing links against
// the library. verbs.h implements ibv_post_send, ibv_poll_cq and ibv_query_port as inline
// functions over the context's op tables (and, for query_port, the extended verbs_context
// that sits in front of ibv_context), so those are reproduced there with the same ABI
// rules: real providers (mlx5, rxe) and the test suite's fake follow the same paths.
#include "verify/dynlib.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::verify::ibverbs {

inline constexpr const char* soname = "libibverbs.so.1";

struct PortInfo {
  std::string device; // mlx5_ib0, rxe0
  int port = 1;
  int state = 0;      // enum ibv_port_state: 4 = ACTIVE
  int phys_state = 0; // 5 = LinkUp
  int width = 0;      // active_width bits: 1 = 1X, 2 = 4X, 4 = 8X, 8 = 12X, 16 = 2X
  int speed = 0;      // active_speed bits: 1 SDR ... 32 EDR, 64 HDR, 128 NDR
  int link_layer = 0; // 1 = InfiniBand, 2 = Ethernet (RoCE)
  unsigned lid = 0;

  bool infiniband() const { return link_layer != 2; }
  // speed x width as the kernel prints it in sysfs "rate": 400 for NDR 4X; nullopt when unknown.
  std::optional<double> rate_gbps() const;
  std::string label() const { return device + ":" + std::to_string(port); }
};

// "ACTIVE", "LinkUp", "4X", "NDR", "InfiniBand" (the names ibstat and sysfs use).
std::string port_state_name(int state);
std::string phys_state_name(int phys_state);
std::string width_name(int width);
std::string speed_name(int speed);
std::optional<double> lane_gbps(int speed);
std::optional<int> width_lanes(int width);

struct LoopbackOptions {
  std::size_t message_bytes = 1 << 20;
  int iterations = 2000;   // timed RDMA writes, after `warmup`
  double max_seconds = 10; // the timed part stops posting after this long (slow ports, soft-RoCE)
  int warmup = 50;
  int queue_depth = 16;
  int gid_index = -1; // -1: first usable GID (RoCE); ignored on InfiniBand unless set
  double completion_timeout_s = 5;
};

struct LoopbackResult {
  double gbps = 0; // Gb/s, 1e9 bits per second
  double seconds = 0;
  std::size_t bytes = 0;
  bool time_limited = false; // stopped at max_seconds before `iterations` writes
  bool data_ok = false;
  std::string addressing; // "LID 12" or "GID index 1 (::ffff:10.0.0.4)"
};

class Verbs {
public:
  static Result<Verbs> load();
  // Loads the library and looks up every entry point verify uses, calling none (verify --libraries).
  static LibraryProbe probe();
  Verbs(Verbs&&) noexcept;
  Verbs& operator=(Verbs&&) = delete;
  Verbs(const Verbs&) = delete;
  ~Verbs();

  // Every port of every RDMA device; errors when the device list cannot be read.
  Result<std::vector<PortInfo>> ports() const;
  // RDMA write from one RC queue pair to another on the same port (a loopback through the
  // HCA), then the destination buffer compared with the source.
  Result<LoopbackResult> write_loopback(const std::string& device, int port, const LoopbackOptions& options) const;

  struct Api; // function pointers, defined in ibverbs.cpp

private:
  Verbs(DynLib lib, std::unique_ptr<Api> api);
  static Status bind(DynLib& lib, Api& a);
  DynLib lib_;
  std::unique_ptr<Api> api_;
};

} // namespace hpcbake::verify::ibverbs
