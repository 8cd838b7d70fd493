#pragma once
// NVIDIA's Xid catalogue and Azure's set of Xids that fail a node, and the kernel log line the driver
// writes for each Xid. Data only: checks_kernel_log.cpp turns what the kernel log holds into checks.
//
// The catalogue is the "Xids" table of NVIDIA's "Analyzing Xid Errors with the Xid Catalog"
// (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, the catalogue for Ampere
// and newer GPUs; the page names no document version: the copy read lists Xids 1 to 172, its newest
// entries gated "CUDA 12.9; GPU driver R575"): per Xid its code, mnemonic, description and the
// "Resolution Bucket (Immediate Action)" as NVIDIA spells it. Each bucket maps to an action class
// through the page's "Guidance Classes" table (RESTART_BM "Restart bare metal", RESTART_VM "VM owning
// the affected GPU must be restarted", CONTACT_SUPPORT "contact your support organization", ...).
// Buckets that name a decision procedure (WORKFLOW_XID_45, WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR,
// WORKFLOW_NVLINK5_ERR, XID_154, CHECK_UVM) stay "follow NVIDIA's workflow"; Xids 162 to 172 have no
// bucket on the page ("unstated"). A code not in the table is "not in NVIDIA's catalogue": no meaning
// or action is made up for it.
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hpcbake::verify {

inline constexpr const char* kXidCatalogueUrl = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html";
inline constexpr const char* kAzureXidSource = "Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a "
                                               "customTests/azure_gpu_xid.nhc XID_EC";

// What NVIDIA's immediate-action bucket asks for.
enum class XidAction {
  none,            // IGNORE: "No Action required"
  restart_app,     // RESTART_APP: restart the application; no GPU reset or reboot needed
  reset_gpu,       // RESET_GPU
  reboot_node,     // RESTART_BM (bare metal), RESTART_VM (the VM owning the GPU)
  report,          // CONTACT_SUPPORT; CHECK_MECHANICALS (seating, connections: hardware)
  update_software, // UPDATE_SWFW: driver and firmware
  workflow,        // a decision procedure of NVIDIA's (WORKFLOW_*, XID_154, CHECK_UVM)
  unstated,        // the catalogue lists the Xid without a bucket
};
// "reboot the node", "reset the GPU", ...
const char* to_string(XidAction action);
// Whether NVIDIA's action takes the GPU or the node out of service: reset, reboot or support.
bool takes_node_out(XidAction action);

struct XidEntry {
  int code = 0;
  std::string_view mnemonic;    // ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS
  std::string_view description; // GPU has fallen off the bus
  std::string_view bucket;      // RESTART_BM (empty: none on the page)
  XidAction action = XidAction::unstated;
};

std::span<const XidEntry> xid_catalogue();
// nullptr: not in NVIDIA's catalogue.
const XidEntry* find_xid(int code);

// Azure's XID_EC: the Xids whose appearance in the kernel log makes check_gpu_xid fail the node
// (FaultCode NHC2001).
std::span<const int> azure_failing_xids();
bool azure_fails_node(int code);

// One Xid line of the NVIDIA driver: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., GPU has
// fallen off the bus." (older drivers: "NVRM: Xid (0000:03:00): 14, Channel 00000001").
struct XidLine {
  std::string bus; // "0000:3b:00" as the driver prints it (domain:bus:device)
  int code = 0;
  std::string detail; // what follows the code: "pid=..., GPU has fallen off the bus."
};
// nullopt when `message` is not an Xid line.
std::optional<XidLine> parse_xid_line(std::string_view message);

} // namespace hpcbake::verify
