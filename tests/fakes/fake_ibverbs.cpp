// A fake libibverbs.so.1: the exported functions hpcbake verify binds, plus the context op
// tables (post_send, poll_cq) and the extended verbs_context query_port that verbs.h's inline
// functions call, laid out by <infiniband/verbs.h> exactly as rdma-core's providers do.
// Ports come from FAKE_IB_PORTS; RDMA writes really copy between registered regions, after
// checking keys, access rights, QP states and the address (LID on InfiniBand, GRH with the
// port's GID on RoCE), and complete with an error status when those are wrong.
// FAKE_IB_WRITE_US makes each write take that long (a slow port, as soft-RoCE under TCG is).
#include "scenario.hpp"

#include <infiniband/verbs.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Port {
  std::string name;
  int state = IBV_PORT_ACTIVE;
  int phys = 5;
  int speed = 128; // NDR
  int width = 2;   // 4X
  int link_layer = IBV_LINK_LAYER_INFINIBAND;
};

int code(const std::string& s, std::initializer_list<std::pair<const char*, int>> table, int fallback) {
  for (const auto& [k, v] : table)
    if (s == k) return v;
  return fallback;
}

// FAKE_IB_PORTS="mlx5_ib0=ACTIVE/LinkUp/NDR/4X/IB;mlx5_an0=ACTIVE/LinkUp/EDR/4X/ETH"
std::vector<Port> ports() {
  std::vector<Port> out;
  const std::string spec =
      fake::env("FAKE_IB_PORTS", "mlx5_ib0=ACTIVE/LinkUp/NDR/4X/IB;mlx5_ib1=ACTIVE/LinkUp/NDR/4X/IB");
  for (const auto& item : fake::split(spec, ';')) {
    auto eq = item.find('=');
    Port p;
    p.name = item.substr(0, eq);
    auto f = fake::split(eq == std::string::npos ? std::string() : item.substr(eq + 1), '/');
    f.resize(5);
    p.state = code(f[0], {{"DOWN", 1}, {"INIT", 2}, {"ARMED", 3}, {"ACTIVE", 4}}, 4);
    p.phys = code(f[1], {{"Sleep", 1}, {"Polling", 2}, {"Disabled", 3}, {"LinkUp", 5}}, 5);
    p.speed =
        code(f[2], {{"SDR", 1}, {"DDR", 2}, {"QDR", 4}, {"FDR", 16}, {"EDR", 32}, {"HDR", 64}, {"NDR", 128}}, 128);
    p.width = code(f[3], {{"1X", 1}, {"4X", 2}, {"8X", 4}, {"12X", 8}, {"2X", 16}}, 2);
    p.link_layer = f[4] == "ETH" ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
    out.push_back(p);
  }
  return out;
}

struct Device {
  ibv_device dev;
  Port port;
  int index;
};

struct Context {
  verbs_context vctx; // ibv_context is its last member, as in rdma-core
  Device* device;
};

struct Qp {
  ibv_qp qp;
  uint32_t dest = 0;
  ibv_ah_attr ah{};
  int access = 0;
};

struct Cq {
  ibv_cq cq;
  std::deque<ibv_wc> wcs;
};

std::map<uint32_t, Qp*> qps;
std::map<uint32_t, ibv_mr*> mrs; // by lkey (== rkey)
std::map<ibv_mr*, int> mr_access;
uint32_t next_qpn = 0x100, next_key = 0x1000;

Device* device_of(ibv_context* ctx) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(ctx) - offsetof(Context, vctx) -
                                    offsetof(verbs_context, context))
      ->device;
}

void gid_of(const Device& d, int index, ibv_gid* gid) {
  std::memset(gid, 0, sizeof *gid);
  if (index == 0) { // link-local, from a made-up GUID/MAC
    gid->raw[0] = 0xfe;
    gid->raw[1] = 0x80;
    gid->raw[15] = static_cast<uint8_t>(d.index + 1);
  } else if (index == 1 && d.port.link_layer == IBV_LINK_LAYER_ETHERNET) { // ::ffff:10.0.0.N
    gid->raw[10] = gid->raw[11] = 0xff;
    gid->raw[12] = 10;
    gid->raw[15] = static_cast<uint8_t>(d.index + 1);
  }
}

int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len) {
  if (port != 1 || len < offsetof(ibv_port_attr, link_layer) + 1) return EINVAL;
  const Device& d = *device_of(ctx);
  ibv_port_attr a{};
  a.state = static_cast<ibv_port_state>(d.port.state);
  a.phys_state = static_cast<uint8_t>(d.port.phys);
  a.active_speed = static_cast<uint8_t>(d.port.speed);
  a.active_width = static_cast<uint8_t>(d.port.width);
  a.link_layer = static_cast<uint8_t>(d.port.link_layer);
  a.active_mtu = IBV_MTU_4096;
  a.max_mtu = IBV_MTU_4096;
  a.gid_tbl_len = 2;
  a.lid = d.port.link_layer == IBV_LINK_LAYER_INFINIBAND ? static_cast<uint16_t>(d.index + 1) : 0;
  std::memcpy(attr, &a, std::min(len, sizeof a));
  return 0;
}

void complete(Qp& q, const ibv_send_wr& wr, ibv_wc_status status) {
  auto* cq = reinterpret_cast<Cq*>(q.qp.send_cq);
  ibv_wc wc{};
  wc.wr_id = wr.wr_id;
  wc.status = status;
  wc.opcode = IBV_WC_RDMA_WRITE;
  wc.qp_num = q.qp.qp_num;
  if (wr.send_flags & IBV_SEND_SIGNALED || status != IBV_WC_SUCCESS) cq->wcs.push_back(wc);
}

bool address_ok(const Qp& q) {
  const Device& d = *device_of(q.qp.context);
  if (d.port.link_layer == IBV_LINK_LAYER_INFINIBAND && !q.ah.is_global) return q.ah.dlid == d.index + 1;
  if (!q.ah.is_global) return false; // RoCE has no LIDs: the GRH is the address
  ibv_gid gid;
  gid_of(d, q.ah.grh.sgid_index, &gid);
  return std::memcmp(gid.raw, q.ah.grh.dgid.raw, 16) == 0 && gid.raw[0] | gid.raw[10];
}

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  auto& q = *qps.at(qp->qp_num);
  for (; wr; wr = wr->next) {
    if (q.qp.state != IBV_QPS_RTS || wr->opcode != IBV_WR_RDMA_WRITE || wr->num_sge != 1) {
      *bad = wr;
      return EINVAL;
    }
    const ibv_sge& sge = wr->sg_list[0];
    auto local = mrs.find(sge.lkey);
    auto remote = mrs.find(wr->wr.rdma.rkey);
    auto peer = qps.find(q.dest);
    if (local == mrs.end() || sge.addr < reinterpret_cast<uintptr_t>(local->second->addr) ||
        sge.addr + sge.length > reinterpret_cast<uintptr_t>(local->second->addr) + local->second->length) {
      complete(q, *wr, IBV_WC_LOC_PROT_ERR);
      continue;
    }
    if (peer == qps.end() || peer->second->qp.state < IBV_QPS_RTR || peer->second->dest != q.qp.qp_num ||
        !address_ok(q)) {
      complete(q, *wr, IBV_WC_RETRY_EXC_ERR); // nobody answers at that address
      continue;
    }
    const uintptr_t ra = wr->wr.rdma.remote_addr;
    if (remote == mrs.end() || !(mr_access[remote->second] & IBV_ACCESS_REMOTE_WRITE) ||
        !(peer->second->access & IBV_ACCESS_REMOTE_WRITE) || ra < reinterpret_cast<uintptr_t>(remote->second->addr) ||
        ra + sge.length > reinterpret_cast<uintptr_t>(remote->second->addr) + remote->second->length) {
      complete(q, *wr, IBV_WC_REM_ACCESS_ERR);
      continue;
    }
    if (const long us = fake::env_long("FAKE_IB_WRITE_US", 0); us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    std::memcpy(reinterpret_cast<void*>(ra), reinterpret_cast<void*>(sge.addr), sge.length);
    if (fake::env_long("FAKE_IB_CORRUPT", 0) && sge.length > 100) reinterpret_cast<unsigned char*>(ra)[100] ^= 0xff;
    complete(q, *wr, IBV_WC_SUCCESS);
  }
  return 0;
}

int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  auto& c = *reinterpret_cast<Cq*>(cq);
  int got = 0;
  while (got < n && !c.wcs.empty()) {
    wc[got++] = c.wcs.front();
    c.wcs.pop_front();
  }
  return got;
}

} // namespace

extern "C" {

ibv_device** ibv_get_device_list(int* n) {
  const auto ps = ports();
  auto** list = new ibv_device*[ps.size() + 1]();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    auto* d = new Device{};
    d->port = ps[i];
    d->index = static_cast<int>(i);
    std::snprintf(d->dev.name, sizeof d->dev.name, "%s", ps[i].name.c_str());
    d->dev.transport_type = IBV_TRANSPORT_IB;
    list[i] = &d->dev;
  }
  if (n) *n = static_cast<int>(ps.size());
  return list;
}

void ibv_free_device_list(ibv_device** list) {
  for (auto** p = list; *p; ++p)
    delete reinterpret_cast<Device*>(*p);
  delete[] list;
}

const char* ibv_get_device_name(ibv_device* dev) {
  return dev->name;
}

ibv_context* ibv_open_device(ibv_device* dev) {
  auto* c = new Context{};
  c->device = new Device(*reinterpret_cast<Device*>(dev)); // the context outlives the list
  c->vctx.sz = sizeof(verbs_context);
  c->vctx.query_port = query_port;
  c->vctx.context.device = &c->device->dev;
  c->vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
  c->vctx.context.ops.post_send = post_send;
  c->vctx.context.ops.poll_cq = poll_cq;
  return &c->vctx.context;
}

int ibv_close_device(ibv_context* ctx) {
  auto* c = reinterpret_cast<Context*>(reinterpret_cast<char*>(ctx) - offsetof(Context, vctx) -
                                       offsetof(verbs_context, context));
  delete c->device;
  delete c;
  return 0;
}

int ibv_query_device(ibv_context*, ibv_device_attr* attr) {
  std::memset(attr, 0, sizeof *attr);
  attr->phys_port_cnt = 1;
  attr->max_qp_wr = 1024;
  return 0;
}

// The compat entry point verbs.h falls back to; never reached while contexts are extended.
int(ibv_query_port)(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* attr) {
  return query_port(ctx, port, reinterpret_cast<ibv_port_attr*>(attr), offsetof(ibv_port_attr, link_layer) + 1);
}

int ibv_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index < 0 || index >= 2) return EINVAL;
  gid_of(*device_of(ctx), index, gid);
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  auto* pd = new ibv_pd{};
  pd->context = ctx;
  return pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  delete pd;
  return 0;
}

ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) {
  auto* mr = new ibv_mr{};
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = length;
  mr->lkey = mr->rkey = next_key++;
  mrs[mr->lkey] = mr;
  mr_access[mr] = access;
  return mr;
}

int ibv_dereg_mr(ibv_mr* mr) {
  mrs.erase(mr->lkey);
  mr_access.erase(mr);
  delete mr;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void*, ibv_comp_channel*, int) {
  auto* c = new Cq{};
  c->cq.context = ctx;
  c->cq.cqe = cqe;
  return &c->cq;
}

int ibv_destroy_cq(ibv_cq* cq) {
  delete reinterpret_cast<Cq*>(cq);
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  if (init->qp_type != IBV_QPT_RC || !init->send_cq) {
    errno = EINVAL;
    return nullptr;
  }
  auto* q = new Qp{};
  q->qp.context = pd->context;
  q->qp.pd = pd;
  q->qp.send_cq = init->send_cq;
  q->qp.recv_cq = init->recv_cq;
  q->qp.qp_num = next_qpn++;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = init->qp_type;
  qps[q->qp.qp_num] = q;
  return &q->qp;
}

int ibv_destroy_qp(ibv_qp* qp) {
  auto it = qps.find(qp->qp_num);
  if (it == qps.end()) return EINVAL;
  delete it->second;
  qps.erase(it);
  return 0;
}

// RESET -> INIT -> RTR -> RTS, each with the attributes the spec requires.
int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  auto& q = *qps.at(qp->qp_num);
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  const auto want = attr->qp_state;
  const auto need = [&](int bits) { return (mask & bits) == bits; };
  if (want == IBV_QPS_INIT && q.qp.state == IBV_QPS_RESET &&
      need(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) && attr->port_num == 1) {
    q.access = static_cast<int>(attr->qp_access_flags);
  } else if (want == IBV_QPS_RTR && q.qp.state == IBV_QPS_INIT &&
             need(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                  IBV_QP_MIN_RNR_TIMER)) {
    q.dest = attr->dest_qp_num;
    q.ah = attr->ah_attr;
  } else if (want == IBV_QPS_RTS && q.qp.state == IBV_QPS_RTR &&
             need(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
  } else {
    return EINVAL;
  }
  q.qp.state = want;
  return 0;
}

const char* ibv_wc_status_str(ibv_wc_status status) {
  switch (status) {
  case IBV_WC_SUCCESS:
    return "success";
  case IBV_WC_LOC_PROT_ERR:
    return "local protection error";
  case IBV_WC_REM_ACCESS_ERR:
    return "remote access error";
  case IBV_WC_RETRY_EXC_ERR:
    return "transport retry counter exceeded";
  default:
    return "error";
  }
}

} // extern "C"
