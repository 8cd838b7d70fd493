#pragma once
// InfiniBand/RDMA ports from /sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,
// rate,link_layer} (Documentation/ABI/stable/sysfs-class-infiniband). Azure's
// accelerated-networking NIC shows up here too, with link layer Ethernet.
#include "util/hostfs.hpp"

#include <optional>
#include <string>
#include <vector>

namespace hpcbake::detect {

struct IbPort {
  std::string device; // mlx5_ib0, rxe0
  int port = 0;
  int state_code = 0;      // 4 = ACTIVE
  std::string state;       // ACTIVE
  int phys_state_code = 0; // 5 = LinkUp
  std::string phys_state;
  std::optional<double> rate_gbps; // 400 from "400 Gb/sec (4X NDR)"
  std::string rate_text;
  std::string link_layer; // InfiniBand | Ethernet
};

inline constexpr const char* ib_class_dir = "/sys/class/infiniband";

// "4: ACTIVE" -> {4, "ACTIVE"}
bool parse_coded_value(std::string_view text, int& code, std::string& name);
// "400 Gb/sec (4X NDR)" -> 400; "2.5 Gb/sec (1X SDR)" -> 2.5
std::optional<double> parse_rate_gbps(std::string_view text);

std::vector<IbPort> scan_ib_ports(const util::HostFs& host);

} // namespace hpcbake::detect
