// verify/ load checks: the readers of all_reduce_perf's and ib_write_bw's real output
// (tests/fixtures/verify/load, README there names the origin), nccl-tests sizes, and the GPU
// nearest each HCA in a size's published PCI layout.
#include "verify/load.hpp"

#include "exec/fixture_root.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace hpcbake;

namespace {

std::string load_fixture(const std::string& name) {
  return test::read(test::fixtures() / "verify" / "load" / name);
}

// The fixture with one row's first "#wrong" column set to `wrong`, and the footer as
// nccl-tests prints it then.
std::string with_wrong(std::string text, const std::string& row_start, int wrong) {
  const auto at = text.find(row_start);
  REQUIRE(at != std::string::npos);
  const auto eol = text.find('\n', at);
  std::string row = text.substr(at, eol - at);
  // size count type redop root time algbw busbw #wrong: the 9th column ends at its last digit.
  auto cols = row.find("      0    ");
  REQUIRE(cols != std::string::npos);
  row.replace(cols, 7, "      " + std::to_string(wrong));
  text.replace(at, eol - at, row);
  const std::string ok = "# Out of bounds values : 0 OK";
  text.replace(text.find(ok), ok.size(), "# Out of bounds values : " + std::to_string(wrong) + " FAILED");
  return text;
}

} // namespace

TEST_CASE("load: all_reduce_perf's real output (2 x 8 H100 under mpirun) is read row by row and its footer") {
  const auto out = verify::parse_all_reduce(load_fixture("all_reduce_perf_h100_16ranks.txt"));
  REQUIRE(out.avg_busbw.has_value());
  CHECK(*out.avg_busbw == doctest::Approx(70.742));
  REQUIRE(out.out_of_bounds.has_value());
  CHECK(*out.out_of_bounds == 0);
  CHECK(out.rows == 31); // 8 B to 8 GiB, factor 2
  CHECK(out.wrong == 0);
  REQUIRE(out.max_busbw.has_value());
  CHECK(*out.max_busbw == doctest::Approx(338.82));
  CHECK(out.failed_lines.empty());
}

TEST_CASE(
    "load: all_reduce_perf on one real H200 reads every row, and its bus bandwidth is 0 as one rank moves nothing") {
  // Captured by bench/gpu-health on a one-H200 machine (README there): nccl-tests 2.19.6, NCCL 2.28.3,
  // -b 8 -e 1G -f 4 -g 1. Rows print %g ("2e+06") where a figure outgrows its column.
  const auto out = verify::parse_all_reduce(load_fixture("all_reduce_perf_h200_1gpu.txt"));
  CHECK(out.rows == 14); // 8 B to 512 MiB, factor 4
  CHECK(out.wrong == 0);
  REQUIRE(out.out_of_bounds.has_value());
  CHECK(*out.out_of_bounds == 0);
  REQUIRE(out.avg_busbw.has_value());
  CHECK(*out.avg_busbw == 0); // "# Avg bus bandwidth    : 0 ": why nccl.all_reduce needs two GPUs
  REQUIRE(out.max_busbw.has_value());
  CHECK(*out.max_busbw == 0);
  CHECK(out.failed_lines.empty());
  // Azure's message size (check_nccl_allreduce 16G) on the same GPU: one row.
  const auto big = verify::parse_all_reduce(load_fixture("all_reduce_perf_h200_16G.txt"));
  CHECK(big.rows == 1);
  CHECK(big.wrong == 0);
  REQUIRE(big.avg_busbw.has_value());
  CHECK(*big.avg_busbw == 0);
}

TEST_CASE("load: wrong elements and an out-of-bounds footer in all_reduce_perf's output are seen") {
  const auto text = with_wrong(load_fixture("all_reduce_perf_h100_16ranks.txt"), "  8589934592    2147483648", 3);
  const auto out = verify::parse_all_reduce(text);
  CHECK(out.wrong == 3);
  REQUIRE(out.out_of_bounds.has_value());
  CHECK(*out.out_of_bounds == 3);
  REQUIRE(out.failed_lines.size() == 1);
  CHECK(out.failed_lines[0] == "# Out of bounds values : 3 FAILED");
}

TEST_CASE("load: output without the footer has no average (a crash or a timeout mid-run)") {
  auto text = load_fixture("all_reduce_perf_h100_16ranks.txt");
  text.erase(text.find("# Out of bounds"));
  const auto out = verify::parse_all_reduce(text);
  CHECK_FALSE(out.avg_busbw.has_value());
  CHECK_FALSE(out.out_of_bounds.has_value());
  CHECK(out.rows == 31);
  CHECK(verify::parse_all_reduce("").rows == 0);
}

TEST_CASE("load: ib_write_bw's real client output in GPU memory gives the average of the row of its size") {
  const auto text = load_fixture("ib_write_bw_cuda_client.txt");
  const auto bw = verify::parse_write_bw(text, 65536);
  REQUIRE(bw.has_value());
  CHECK(*bw == doctest::Approx(181.46)); // the average, not the peak (0.00 with -D)
  CHECK_FALSE(verify::parse_write_bw(text, 8388608).has_value());
}

TEST_CASE("load: ib_write_bw's table in MB/sec (no --report_gbits) is not read as Gb/s") {
  auto text = load_fixture("ib_write_bw_cuda_client.txt");
  const std::string gb = "BW peak[Gb/sec]    BW average[Gb/sec]";
  text.replace(text.find(gb), gb.size(), "BW peak[MB/sec]    BW average[MB/sec]");
  CHECK_FALSE(verify::parse_write_bw(text, 65536).has_value());
}

TEST_CASE("load: nccl-tests sizes") {
  CHECK(verify::nccl_size_bytes("16G") == (16ull << 30));
  CHECK(verify::nccl_size_bytes("8G") == (8ull << 30));
  CHECK(verify::nccl_size_bytes("512M") == (512ull << 20));
  CHECK(verify::nccl_size_bytes("8") == 8u);
  CHECK_FALSE(verify::nccl_size_bytes("").has_value());
  CHECK_FALSE(verify::nccl_size_bytes("G").has_value());
  CHECK_FALSE(verify::nccl_size_bytes("16GB").has_value());
  CHECK_FALSE(verify::nccl_size_bytes("-1G").has_value());
}

TEST_CASE("load: each HCA pairs with the GPU of its PCIe switch in the ND H100 v5 topology file") {
  const auto xml = test::read(test::source_dir() / "manifests" / "files" / "nccl" / "ndv5-topo.xml");
  auto topo = plan::parse_nccl_topology(xml);
  REQUIRE(topo.has_value());
  const auto pairs = verify::nearest_gpus(*topo);
  REQUIRE(pairs.size() == 8);
  CHECK(pairs[0].nic == "0101:00:00.0");
  CHECK(pairs[0].gpu == "0001:00:00.0");
  CHECK(pairs[3].nic == "0104:00:00.0");
  CHECK(pairs[3].gpu == "0008:00:00.0"); // the file's fourth switch holds GPU 0008 beside NIC 0104
  CHECK(pairs[4].numa == 1);
  CHECK(pairs[7].gpu == "000c:00:00.0");
}

TEST_CASE("load: the load checks' programs are probes under a fixture root, and numactl is what it runs") {
  using exec::Reach;
  const auto root = test::scratch("load-judge");
  CHECK(exec::judge({"/opt/nccl-tests/build/all_reduce_perf", "-b", "16G"}, root).reach == Reach::probe);
  CHECK(exec::judge({"/opt/hpcx/ompi/bin/mpirun", "-np", "8", "/opt/nccl-tests/build/all_reduce_perf"}, root).reach ==
        Reach::probe);
  CHECK(exec::judge({"mpirun", "-np", "8", "some-tool"}, root).reach == Reach::machine);
  CHECK(exec::judge({"numactl", "-N", "0", "-m", "0", "/usr/bin/ib_write_bw", "-d", "mlx5_ib0"}, root).reach ==
        Reach::probe);
  CHECK(exec::judge({"numactl", "-N", "0", "-m", "0", "apt-get", "install", "x"}, root).reach == Reach::machine);
}
