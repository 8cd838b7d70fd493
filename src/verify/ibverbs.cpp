#include "verify/ibverbs.hpp"
#include "util/cleanup.hpp"

#include <fmt/format.h>

#include <infiniband/verbs.h>
#include <vector>

#include <arpa/inet.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

namespace hpcbake::verify::ibverbs {

// Exported functions only (the ones verbs.h does not inline). ibv_query_port here is the
// exported compat symbol, used only when the context is not an extended one.
struct Verbs::Api {
  ibv_device** (*get_device_list)(int*) = nullptr;
  void (*free_device_list)(ibv_device**) = nullptr;
  const char* (*get_device_name)(ibv_device*) = nullptr;
  ibv_context* (*open_device)(ibv_device*) = nullptr;
  int (*close_device)(ibv_context*) = nullptr;
  int (*query_device)(ibv_context*, ibv_device_attr*) = nullptr;
  int (*query_port_compat)(ibv_context*, uint8_t, ibv_port_attr*) = nullptr;
  int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*) = nullptr;
  ibv_pd* (*alloc_pd)(ibv_context*) = nullptr;
  int (*dealloc_pd)(ibv_pd*) = nullptr;
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int) = nullptr;
  int (*dereg_mr)(ibv_mr*) = nullptr;
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int) = nullptr;
  int (*destroy_cq)(ibv_cq*) = nullptr;
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*) = nullptr;
  int (*destroy_qp)(ibv_qp*) = nullptr;
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int) = nullptr;
  const char* (*wc_status_str)(ibv_wc_status) = nullptr; // optional
};

namespace {

// verbs.h's ___ibv_query_port: the extended context's query_port op when the provider
// has one (every rdma-core provider), else the exported compat entry point.
int query_port(const Verbs::Api& api, ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  std::memset(attr, 0, sizeof *attr);
  verbs_context* vctx = verbs_get_ctx(ctx);
  const std::size_t needed = sizeof(verbs_context) - offsetof(verbs_context, query_port);
  if (vctx && vctx->sz >= needed && vctx->query_port) return vctx->query_port(ctx, port, attr, sizeof *attr);
  return api.query_port_compat(ctx, port, attr);
}

// verbs.h's ibv_post_send and ibv_poll_cq: calls through the context's op table.
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  return qp->context->ops.post_send(qp, wr, bad);
}
int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  return cq->context->ops.poll_cq(cq, n, wc);
}

using util::Cleanup;

std::string gid_text(const ibv_gid& gid) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.raw, buf, sizeof buf);
  return buf;
}

bool gid_zero(const ibv_gid& gid) {
  for (auto b : gid.raw)
    if (b) return false;
  return true;
}

bool gid_ipv4_mapped(const ibv_gid& gid) {
  for (int i = 0; i < 10; ++i)
    if (gid.raw[i]) return false;
  return gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

} // namespace

std::optional<double> lane_gbps(int speed) {
  switch (speed) {
  case 1:
    return 2.5; // SDR
  case 2:
    return 5; // DDR
  case 4:
    return 10; // QDR
  case 8:
    return 10; // FDR10
  case 16:
    return 14; // FDR
  case 32:
    return 25; // EDR
  case 64:
    return 50; // HDR
  case 128:
    return 100; // NDR
  default:
    return std::nullopt;
  }
}

std::optional<int> width_lanes(int width) {
  switch (width) {
  case 1:
    return 1;
  case 2:
    return 4;
  case 4:
    return 8;
  case 8:
    return 12;
  case 16:
    return 2;
  default:
    return std::nullopt;
  }
}

std::optional<double> PortInfo::rate_gbps() const {
  auto l = lane_gbps(speed);
  auto w = width_lanes(width);
  if (!l || !w) return std::nullopt;
  return *l * *w;
}

std::string port_state_name(int state) {
  switch (state) {
  case 0:
    return "NOP";
  case 1:
    return "DOWN";
  case 2:
    return "INIT";
  case 3:
    return "ARMED";
  case 4:
    return "ACTIVE";
  case 5:
    return "ACTIVE_DEFER";
  default:
    return fmt::format("state {}", state);
  }
}

std::string phys_state_name(int phys_state) {
  switch (phys_state) {
  case 1:
    return "Sleep";
  case 2:
    return "Polling";
  case 3:
    return "Disabled";
  case 4:
    return "PortConfigurationTraining";
  case 5:
    return "LinkUp";
  case 6:
    return "LinkErrorRecovery";
  case 7:
    return "PhyTest";
  default:
    return fmt::format("phys_state {}", phys_state);
  }
}

std::string width_name(int width) {
  auto l = width_lanes(width);
  return l ? fmt::format("{}X", *l) : fmt::format("width {}", width);
}

std::string speed_name(int speed) {
  switch (speed) {
  case 1:
    return "SDR";
  case 2:
    return "DDR";
  case 4:
    return "QDR";
  case 8:
    return "FDR10";
  case 16:
    return "FDR";
  case 32:
    return "EDR";
  case 64:
    return "HDR";
  case 128:
    return "NDR";
  default:
    return fmt::format("speed {}", speed);
  }
}

Verbs::Verbs(DynLib lib, std::unique_ptr<Api> api) : lib_(std::move(lib)), api_(std::move(api)) {}
Verbs::Verbs(Verbs&&) noexcept = default;
Verbs::~Verbs() = default;

namespace {

constexpr const char* install_hint =
    "the RDMA user-space stack is missing: install rdma-core's libibverbs "
    "(libibverbs1 on Debian/Ubuntu, libibverbs on RHEL) or DOCA-OFED (`hpcbake install`)";

} // namespace

// Every libibverbs entry point verify uses, looked up in `lib` into `a`.
Status Verbs::bind(DynLib& lib, Api& a) {
  // Every lookup first (optional ones too), so a too-old library is reported whole.
  const std::vector<Status> required = {lib.require(a.get_device_list, "ibv_get_device_list"),
                                        lib.require(a.free_device_list, "ibv_free_device_list"),
                                        lib.require(a.get_device_name, "ibv_get_device_name"),
                                        lib.require(a.open_device, "ibv_open_device"),
                                        lib.require(a.close_device, "ibv_close_device"),
                                        lib.require(a.query_device, "ibv_query_device"),
                                        lib.require(a.query_port_compat, "ibv_query_port"),
                                        lib.require(a.query_gid, "ibv_query_gid"),
                                        lib.require(a.alloc_pd, "ibv_alloc_pd"),
                                        lib.require(a.dealloc_pd, "ibv_dealloc_pd"),
                                        lib.require(a.reg_mr, "ibv_reg_mr"),
                                        lib.require(a.dereg_mr, "ibv_dereg_mr"),
                                        lib.require(a.create_cq, "ibv_create_cq"),
                                        lib.require(a.destroy_cq, "ibv_destroy_cq"),
                                        lib.require(a.create_qp, "ibv_create_qp"),
                                        lib.require(a.destroy_qp, "ibv_destroy_qp"),
                                        lib.require(a.modify_qp, "ibv_modify_qp")};
  lib.bind(a.wc_status_str, "ibv_wc_status_str");
  return all_found(required);
}

LibraryProbe Verbs::probe() {
  return probe_library(soname, install_hint, [](DynLib& lib) {
    Api a;
    return bind(lib, a);
  });
}

Result<Verbs> Verbs::load() {
  HPCBAKE_TRY_ASSIGN(auto lib, DynLib::open(soname, install_hint));
  auto a = std::make_unique<Api>();
  HPCBAKE_TRY(bind(lib, *a));
  return Verbs(std::move(lib), std::move(a));
}

Result<std::vector<PortInfo>> Verbs::ports() const {
  const Api& a = *api_;
  int n = 0;
  errno = 0;
  ibv_device** list = a.get_device_list(&n);
  if (!list)
    return fail(ErrorKind::smoke_test, fmt::format("ibv_get_device_list failed: {}", std::strerror(errno)),
                "the ib_uverbs kernel module must be loaded: `modprobe ib_uverbs`; `ibv_devices` lists the devices");
  std::vector<PortInfo> out;
  std::string error;
  for (int i = 0; i < n && error.empty(); ++i) {
    const std::string name = a.get_device_name(list[i]);
    ibv_context* ctx = a.open_device(list[i]);
    if (!ctx) {
      error = fmt::format("ibv_open_device({}) failed: {}", name, std::strerror(errno));
      break;
    }
    ibv_device_attr dattr{};
    if (int rc = a.query_device(ctx, &dattr); rc != 0) {
      error = fmt::format("ibv_query_device({}) failed: {}", name, std::strerror(rc));
    } else {
      for (int p = 1; p <= dattr.phys_port_cnt; ++p) {
        ibv_port_attr pattr{};
        if (int prc = query_port(a, ctx, static_cast<uint8_t>(p), &pattr); prc != 0) {
          error = fmt::format("ibv_query_port({}, {}) failed: {}", name, p, std::strerror(prc));
          break;
        }
        PortInfo info;
        info.device = name;
        info.port = p;
        info.state = pattr.state;
        info.phys_state = pattr.phys_state;
        info.width = pattr.active_width;
        info.speed = pattr.active_speed;
        info.link_layer = pattr.link_layer;
        info.lid = pattr.lid;
        out.push_back(std::move(info));
      }
    }
    a.close_device(ctx);
  }
  a.free_device_list(list);
  if (!error.empty())
    return fail(ErrorKind::smoke_test, error,
                "`ibv_devinfo -v` shows the same devices; check `dmesg` for mlx5/rxe errors");
  return out;
}

namespace {

// Errors of one loopback run: "<device>:<port>: what", with a hint to check the port by hand
// unless a better one is given.
struct LoopbackError {
  const std::string& device;
  int port;
  std::unexpected<Error> operator()(std::string what, std::string hint = {}) const {
    return fail(ErrorKind::smoke_test, fmt::format("{}:{}: {}", device, port, what),
                hint.empty() ? fmt::format("`ibv_devinfo -d {}` and `ibstat {}`; try `ib_write_bw -d {}` by hand",
                                           device, device, device)
                             : hint);
  }
};

// How the QPs address each other: InfiniBand uses the port's LID; RoCE (Ethernet link layer,
// e.g. rxe) has no LIDs, so the address vector needs a GRH with a GID from the port's table.
struct Address {
  bool use_grh = false;
  ibv_gid gid{};
  int gid_index = -1;
};

Result<Address> choose_address(const Verbs::Api& a, ibv_context* ctx, int port, const ibv_port_attr& pattr,
                               const LoopbackOptions& o, const LoopbackError& err) {
  Address addr;
  addr.use_grh = pattr.link_layer == IBV_LINK_LAYER_ETHERNET || o.gid_index >= 0;
  addr.gid_index = o.gid_index;
  if (!addr.use_grh) return addr;
  if (addr.gid_index >= 0) {
    if (int rc = a.query_gid(ctx, static_cast<uint8_t>(port), addr.gid_index, &addr.gid); rc != 0 || gid_zero(addr.gid))
      return err(fmt::format("GID index {} is empty or unreadable", addr.gid_index));
    return addr;
  }
  // Prefer an IPv4-mapped GID (RoCE v2 over the interface's address), else the first non-zero.
  for (int i = 0; i < pattr.gid_tbl_len; ++i) {
    ibv_gid g{};
    if (a.query_gid(ctx, static_cast<uint8_t>(port), i, &g) != 0 || gid_zero(g)) continue;
    if (addr.gid_index < 0 || (gid_ipv4_mapped(g) && !gid_ipv4_mapped(addr.gid))) {
      addr.gid_index = i;
      addr.gid = g;
    }
  }
  if (addr.gid_index < 0)
    return err("the port has no GID (RoCE needs one for the address)",
               fmt::format("give the port's network interface an IP address; `ibv_devinfo -v -d {}` lists the GIDs",
                           err.device));
  return addr;
}

// Takes both QPs through INIT, RTR and RTS, each connected to the other.
Status connect_pair(const Verbs::Api& a, ibv_qp* const (&qps)[2], int port, const ibv_port_attr& pattr,
                    const Address& addr, const LoopbackError& err) {
  const bool use_grh = addr.use_grh;
  const ibv_gid& gid = addr.gid;
  const int gid_index = addr.gid_index;
  for (int i = 0; i < 2; ++i) {
    ibv_qp* qp = qps[i];
    ibv_qp* peer = qps[1 - i];
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = static_cast<uint8_t>(port);
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (int rc = a.modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS); rc)
      return err(fmt::format("ibv_modify_qp(INIT) failed: {}", std::strerror(rc)));
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = pattr.active_mtu;
    attr.dest_qp_num = peer->qp_num;
    attr.rq_psn = 0;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.ah_attr.dlid = pattr.lid;
    attr.ah_attr.sl = 0;
    attr.ah_attr.port_num = static_cast<uint8_t>(port);
    if (use_grh) {
      attr.ah_attr.is_global = 1;
      attr.ah_attr.grh.dgid = gid;
      attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
      attr.ah_attr.grh.hop_limit = 64;
    }
    if (int rc = a.modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        rc)
      return err(fmt::format("ibv_modify_qp(RTR) failed: {}", std::strerror(rc)));
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.sq_psn = 0;
    attr.max_rd_atomic = 1;
    if (int rc = a.modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                 IBV_QP_MAX_QP_RD_ATOMIC);
        rc)
      return err(fmt::format("ibv_modify_qp(RTS) failed: {}", std::strerror(rc)));
  }
  return {};
}

// The timed run: RDMA writes from QP 0 (src) into QP 1's buffer (dst), `depth` in flight,
// each signaled; bounded by max_seconds, failed by a completion error or a stall.
struct WriteJob {
  ibv_qp* qp;
  ibv_cq* cq;
  const void* src;
  std::uint32_t lkey;
  void* dst;
  std::uint32_t rkey;
  std::size_t msg;
  int depth;
};

struct WriteStats {
  int total = 0;
  bool time_limited = false;
  std::chrono::steady_clock::time_point start;
};

Result<WriteStats> run_writes(const Verbs::Api& a, const WriteJob& x, const LoopbackOptions& o, bool roce,
                              const LoopbackError& err) {
  using clock = std::chrono::steady_clock;
  int total = o.warmup + o.iterations;
  int posted = 0, done = 0;
  bool time_limited = false;
  clock::time_point start = clock::now(), last_progress = clock::now();
  ibv_wc wcs[16];
  while (done < total) {
    while (posted < total && posted - done < x.depth) {
      ibv_sge sge{};
      sge.addr = reinterpret_cast<uintptr_t>(x.src);
      sge.length = static_cast<uint32_t>(x.msg);
      sge.lkey = x.lkey;
      ibv_send_wr wr{};
      ibv_send_wr* bad = nullptr;
      wr.wr_id = static_cast<uint64_t>(posted);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(x.dst);
      wr.wr.rdma.rkey = x.rkey;
      if (int rc = post_send(x.qp, &wr, &bad); rc)
        return err(fmt::format("ibv_post_send failed: {}", std::strerror(rc)));
      ++posted;
    }
    const int got = poll_cq(x.cq, 16, wcs);
    if (got < 0) return err("ibv_poll_cq failed");
    for (int i = 0; i < got; ++i) {
      if (wcs[i].status != IBV_WC_SUCCESS)
        return err(fmt::format("RDMA write completed with status {} ({})",
                               a.wc_status_str ? a.wc_status_str(wcs[i].status) : "error",
                               static_cast<int>(wcs[i].status)));
      if (++done == o.warmup) start = clock::now();
    }
    const auto now = clock::now();
    // A bounded run: past max_seconds of timed writes, post no more and drain what is in flight.
    if (!time_limited && done >= o.warmup && posted < total &&
        std::chrono::duration<double>(now - start).count() > o.max_seconds) {
      total = posted;
      time_limited = true;
    }
    if (got > 0)
      last_progress = now;
    else if (std::chrono::duration<double>(now - last_progress).count() > o.completion_timeout_s)
      return err(fmt::format("no completion for {} s ({} of {} writes done)", o.completion_timeout_s, done, total),
                 roce ? "RoCE loopback needs the port's GID to be reachable: check the interface is up "
                        "(`ip link`), and `rdma link` shows the device ACTIVE"
                      : fmt::format("`ibstat {}`; the subnet manager must have brought the port up", err.device));
    if (got == 0) std::this_thread::yield();
  }
  return WriteStats{total, time_limited, start};
}

} // namespace

Result<LoopbackResult> Verbs::write_loopback(const std::string& device, int port, const LoopbackOptions& o) const {
  const Api& a = *api_;
  Cleanup cleanup;
  const LoopbackError err{device, port};
  const std::size_t msg = o.message_bytes;
  const int depth = std::max(1, o.queue_depth);
  int n = 0;
  ibv_device** list = a.get_device_list(&n);
  if (!list) return err(fmt::format("ibv_get_device_list failed: {}", std::strerror(errno)));
  cleanup.add([&a, list] { a.free_device_list(list); });
  ibv_device* dev = nullptr;
  for (int i = 0; i < n; ++i)
    if (device == a.get_device_name(list[i])) dev = list[i];
  if (!dev) return err("no such RDMA device");
  ibv_context* ctx = a.open_device(dev);
  if (!ctx) return err(fmt::format("ibv_open_device failed: {}", std::strerror(errno)));
  cleanup.add([&a, ctx] { a.close_device(ctx); });
  ibv_port_attr pattr{};
  if (int rc = query_port(a, ctx, static_cast<uint8_t>(port), &pattr); rc != 0)
    return err(fmt::format("ibv_query_port failed: {}", std::strerror(rc)));
  if (pattr.state != IBV_PORT_ACTIVE) return err(fmt::format("port is {}, not ACTIVE", port_state_name(pattr.state)));

  const bool roce = pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
  HPCBAKE_TRY_ASSIGN(const Address addr, choose_address(a, ctx, port, pattr, o, err));

  ibv_pd* pd = a.alloc_pd(ctx);
  if (!pd) return err(fmt::format("ibv_alloc_pd failed: {}", std::strerror(errno)));
  cleanup.add([&a, pd] { a.dealloc_pd(pd); });
  const std::size_t align = 4096;
  const std::size_t alloc = (msg + align - 1) / align * align;
  auto* src = static_cast<unsigned char*>(std::aligned_alloc(align, alloc));
  auto* dst = static_cast<unsigned char*>(std::aligned_alloc(align, alloc));
  cleanup.add([src, dst] {
    std::free(src);
    std::free(dst);
  });
  if (!src || !dst) return err("out of memory for the RDMA buffers");
  for (std::size_t i = 0; i < msg; ++i)
    src[i] = static_cast<unsigned char>((i * 131 + 7) & 0xff);
  std::memset(dst, 0, msg);
  ibv_mr* smr = a.reg_mr(pd, src, msg, IBV_ACCESS_LOCAL_WRITE);
  if (!smr)
    return err(fmt::format("ibv_reg_mr failed: {}", std::strerror(errno)),
               "memory registration needs locked memory: raise `ulimit -l` (memlock) to unlimited");
  cleanup.add([&a, smr] { a.dereg_mr(smr); });
  ibv_mr* dmr = a.reg_mr(pd, dst, msg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!dmr)
    return err(fmt::format("ibv_reg_mr failed: {}", std::strerror(errno)),
               "memory registration needs locked memory: raise `ulimit -l` (memlock) to unlimited");
  cleanup.add([&a, dmr] { a.dereg_mr(dmr); });
  ibv_cq* cq = a.create_cq(ctx, depth * 2 + 2, nullptr, nullptr, 0);
  if (!cq) return err(fmt::format("ibv_create_cq failed: {}", std::strerror(errno)));
  cleanup.add([&a, cq] { a.destroy_cq(cq); });

  ibv_qp* qps[2] = {};
  for (auto& qp : qps) {
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = static_cast<uint32_t>(depth);
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp = a.create_qp(pd, &init);
    if (!qp) return err(fmt::format("ibv_create_qp failed: {}", std::strerror(errno)));
    cleanup.add([&a, qp] { a.destroy_qp(qp); });
  }
  HPCBAKE_TRY(connect_pair(a, qps, port, pattr, addr, err));
  const WriteJob job{qps[0], cq, src, smr->lkey, dst, dmr->rkey, msg, depth};
  HPCBAKE_TRY_ASSIGN(const WriteStats w, run_writes(a, job, o, roce, err));
  const int total = w.total;
  const bool time_limited = w.time_limited;
  const auto start = w.start;
  using clock = std::chrono::steady_clock;
  const bool use_grh = addr.use_grh;
  const int gid_index = addr.gid_index;
  const ibv_gid& gid = addr.gid;
  const double secs = std::chrono::duration<double>(clock::now() - start).count();
  LoopbackResult r;
  r.bytes = msg * static_cast<std::size_t>(total - o.warmup);
  r.seconds = secs;
  r.time_limited = time_limited;
  r.gbps = secs > 0 ? static_cast<double>(r.bytes) * 8 / secs / 1e9 : 0;
  r.data_ok = std::memcmp(src, dst, msg) == 0;
  r.addressing =
      use_grh ? fmt::format("GID index {} ({})", gid_index, gid_text(gid)) : fmt::format("LID {}", pattr.lid);
  return r;
}
} // namespace hpcbake::verify::ibverbs
