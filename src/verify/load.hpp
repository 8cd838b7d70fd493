#pragma once
// The load checks' readers of real program output (internal to verify/): NVIDIA nccl-tests'
// all_reduce_perf and perftest's ib_write_bw, as those programs print them.
#include "plan/plan.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::verify {

// all_reduce_perf's table and footer (NVIDIA/nccl-tests src/util.cu writeResultHeader/Footer):
// per-size rows ("size count type redop root time algbw busbw #wrong time algbw busbw #wrong"),
// "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth    : X".
struct AllReduceOutput {
  std::optional<double> avg_busbw;        // GB/s, the "Avg bus bandwidth" line
  std::optional<long long> out_of_bounds; // the "Out of bounds values" count
  int rows = 0;                           // per-size rows read
  long long wrong = 0;                    // sum of both "#wrong" columns over the rows
  std::optional<double> max_busbw;        // the largest busbw of any row (out-of-place or in-place)
  std::vector<std::string> failed_lines;  // lines that say FAILED
};
AllReduceOutput parse_all_reduce(std::string_view output);

// The "BW average[Gb/sec]" of ib_write_bw's result row for `bytes` ("#bytes #iterations BW
// peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]"); none when the table (in Gb/sec, --report_gbits)
// has no such row.
std::optional<double> parse_write_bw(std::string_view output, std::uint64_t bytes);

// nccl-tests' size argument ("16G", "512M", "8"; K, M, G, T are powers of 1024, as its parsesize
// reads them) in bytes; none when it is not one.
std::optional<std::uint64_t> nccl_size_bytes(std::string_view text);

// The GPU nearest each NIC in a size's PCI layout (its NCCL topology file, plan::PciTopologyEntry
// in file order): within a NUMA node the k-th NIC pairs with the k-th GPU, as the topology files
// list each PCIe switch's GPU next to its NIC. NIC bus id -> GPU bus id, both lower case.
struct PciPair {
  std::string nic, gpu;
  int numa = 0;
};
std::vector<PciPair> nearest_gpus(const std::vector<plan::PciTopologyEntry>& topology);

} // namespace hpcbake::verify
